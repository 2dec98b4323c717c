"""The Tune trainable built from a spec: a single-process trial, or a DDP group per trial.

* Single process: the train function runs inside the Tune trial's actor, with the
  resources of ``tune.with_resources``.
* DDP (``resources.workers``): the Tune trial launches a Ray Train ``TorchTrainer``
  (the Ray Train V2 pattern: a Tune function trainable that drives a Train run, whose
  results reach Tune through ``ray.tune.integration.ray_train.TuneReportCallback``).
  The Train run is named after the trial id and stored in the trial's folder, so a
  restarted trial resumes its worker group from the latest checkpoint. Backend: nccl
  on GPU, gloo on CPU. The trial's own actor only drives the run and asks for no CPU.

Both catch CUDA out-of-memory when the spec sets ``oom_backoff``: free the cache, halve
that parameter, and restart from the last checkpoint, down to ``min_batch_size``; and
both end a trial that runs longer than ``trial_timeout_s`` (hung or not).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import os
import re
import threading
from typing import Any, Callable

from tuner import trial
from tuner.space import plain
from tuner.spec import Spec

__all__ = ["build_trainable", "driver_request", "OutOfMemoryBackoffError", "TrialTimeoutError"]

logger = logging.getLogger("tuner")


class OutOfMemoryBackoffError(RuntimeError):
    """CUDA ran out of memory and the batch cannot be halved again."""


class TrialTimeoutError(TimeoutError):
    """The trial ran longer than ``trial_timeout_s``."""


TIMEOUT_MARKER = "trial_timeout.txt"


class _Watchdog:
    """End the trial after ``timeout_s`` seconds of wall time, hung or not.

    At the deadline a :class:`TrialTimeoutError` is raised in the thread that runs
    the train function (``PyThreadState_SetAsyncExc``), so the trial ends as ERROR
    with a clear message and Ray frees its resources. Code stuck in C that never
    returns to Python gets ``grace_s`` more seconds, then the process exits.
    """

    def __init__(self, timeout_s: float | None, message: str = "", marker: str | None = None,
                 grace_s: float = 10.0):
        self.timeout_s, self.message, self._marker, self.grace_s = timeout_s, message, marker, grace_s
        self._done = threading.Event()

    def __enter__(self) -> "_Watchdog":
        if self.timeout_s:
            self._thread = threading.current_thread()
            self._trial_id = _current_trial_id()
            threading.Thread(target=self._watch, name="tuner-trial-timeout", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()

    def _ours(self) -> bool:
        """Whether our trial still runs here: an actor reused for another trial is left alone."""
        return self._thread.is_alive() and _current_trial_id() == self._trial_id

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s) or not self._ours():
            return
        import ctypes

        logger.error("trial_timeout_s=%g s reached; ending the trial", self.timeout_s)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident),
                                                   ctypes.py_object(TrialTimeoutError))
        if not self._done.wait(self.grace_s) and self._ours():
            # Stuck outside Python: leave the reason beside the trial's error, then end
            # the process; Ray marks the trial ERROR and frees its resources.
            try:
                if self._marker:
                    from tuner.storage import write_text

                    write_text(self._marker, f"tuner.trainable.TrialTimeoutError: {self.message}\n")
            except Exception:  # noqa: BLE001 - the exit below matters more than the note
                pass
            os._exit(1)


def _is_oom(err: BaseException) -> bool:
    """Whether an error (or one it wraps, or a worker's error text) is a CUDA OOM."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__name__ == "OutOfMemoryError" or "OutOfMemoryError" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _get(config: dict, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def _set(config: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[last] = value


def _free_cuda_cache() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def _back_off(config: dict, param: str, min_batch: int, err: BaseException) -> None:
    """Halve ``config[param]`` in place, or raise when it would fall below ``min_batch``."""
    _free_cuda_cache()
    old = int(_get(config, param))
    new = old // 2
    if new < min_batch:
        raise OutOfMemoryBackoffError(
            f"CUDA out of memory with {param}={old}; halving it would go below min_batch_size={min_batch}, "
            f"so the trial stops here. Lower the model size or give the trial more GPU memory."
        ) from err
    logger.warning("CUDA out of memory with %s=%d; retrying from the last checkpoint with %s=%d", param, old, param, new)
    _set(config, param, new)


def _options(spec: Spec, config: dict, distributed: bool) -> trial.TrialOptions:
    res = spec.resources
    extra = {}
    if spec.oom_backoff:
        extra[f"{spec.oom_backoff}_used"] = _get(config, spec.oom_backoff)
    return trial.TrialOptions(
        amp=spec.amp,
        cpu=res.cpu_per_worker if distributed else res.cpu,
        gpu=res.gpu_per_worker if distributed else res.gpu,
        distributed=distributed,
        oom_param=spec.oom_backoff,
        extra_metrics=extra,
        metric=spec.metric,
        checkpoint_frequency=spec.checkpoint.frequency,
    )


def _timeout_message(spec: Spec) -> str:
    return (f"the trial ran longer than trial_timeout_s={spec.trial_timeout_s:g} s and was ended; "
            "raise trial_timeout_s, or look for a hang in the train function.") if spec.trial_timeout_s else ""


def _timed_out(spec: Spec) -> TrialTimeoutError:
    return TrialTimeoutError(_timeout_message(spec))


def _current_trial_id() -> str | None:
    if not trial.in_tune():
        return None
    try:
        from ray import tune

        return tune.get_context().get_trial_id()
    except Exception:  # noqa: BLE001 - outside a trial
        return None


def _marker_path(fn: Callable, experiment_path: str) -> str | None:
    """Where a timed-out trial leaves its reason: ``<experiment>/<trial dir>/trial_timeout.txt``
    (a folder path, or a cloud URI: :func:`tuner.storage.join`)."""
    from tuner.storage import join

    trial_id = _current_trial_id()
    if trial_id is None:
        return None
    return join(experiment_path, f"{getattr(fn, '__name__', 'trial')}_{trial_id}", TIMEOUT_MARKER)


def _single_process_trial(fn: Callable, spec: Spec, experiment_path: str, config: dict) -> Any:
    """Run the train function in this Tune trial, with a time limit and OOM back-off."""
    try:
        with _Watchdog(spec.trial_timeout_s, _timeout_message(spec), _marker_path(fn, experiment_path)):
            return _run_with_backoff(fn, spec, config)
    except TrialTimeoutError as err:
        raise _timed_out(spec) from err


def _run_with_backoff(fn: Callable, spec: Spec, config: dict) -> Any:
    """Run the train function, restarting it from its last checkpoint after a CUDA OOM."""
    config = plain(config)
    trial._configure(_options(spec, config, distributed=False))
    while True:
        try:
            return fn(config)
        except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
            if not (spec.oom_backoff and _is_oom(err)):
                raise
            latest = trial._latest_checkpoint
            _back_off(config, spec.oom_backoff, spec.min_batch_size, err)
            trial._configure(_options(spec, config, distributed=False))
            trial._latest_checkpoint = latest


PG_FILE = ".train_placement_group"


def _ddp_worker(fn: Callable, options: trial.TrialOptions, trial_dir: str, config: dict) -> Any:
    """The per-worker entry of a DDP trial (``train_loop_per_worker``).

    Rank 0 records the id of the placement group that holds the trial's workers in the
    trial folder, so that :class:`PlacementGroupReleaser` can free it if Tune stops the
    trial (see there).
    """
    trial._configure(options)
    if trial.rank() == 0:
        import ray

        from tuner.storage import join, read_text, write_text

        pg = ray.util.get_current_placement_group()
        if pg is not None:
            try:  # a restarted worker group adds its own group's id
                record = join(trial_dir, PG_FILE)
                write_text(record, (read_text(record) or "") + pg.id.hex() + "\n")
            except Exception:  # noqa: BLE001 - without the record the group is freed at session end
                pass
    return fn(config)


def release_placement_groups(trial_dir: str | os.PathLike) -> int:
    """Remove the placement groups a DDP trial recorded; returns how many were removed."""
    import ray
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    from tuner.storage import join, read_text

    text = read_text(join(os.fspath(trial_dir), PG_FILE))
    if not text:
        return 0
    ids = [line.strip() for line in text.splitlines() if line.strip()]
    table = ray.util.placement_group_table()
    removed = 0
    for pg_id in ids:
        if table.get(pg_id, {}).get("state") in ("CREATED", "PENDING", "RESCHEDULING"):
            try:
                remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id))))
                removed += 1
            except Exception:  # noqa: BLE001 - already gone
                pass
    return removed


def _ddp_trial(fn: Callable, spec: Spec, experiment_path: str, config: dict) -> None:
    """Drive one DDP trial, with a time limit."""
    try:
        with _Watchdog(spec.trial_timeout_s, _timeout_message(spec), _marker_path(fn, experiment_path)):
            _drive_ddp(fn, spec, experiment_path, config)
    except TrialTimeoutError as err:
        raise _timed_out(spec) from err


def _drive_ddp(fn: Callable, spec: Spec, experiment_path: str, config: dict) -> None:
    """Drive one DDP trial: a Ray Train TorchTrainer run named after the trial id."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    res = spec.resources
    use_gpu = res.gpu_per_worker > 0
    ctx = tune.get_context()
    # The trial's folder in the experiment (not the session's working dir), so the Train
    # run's checkpoints live with the experiment and survive the Ray session.
    from tuner.storage import join

    trial_dir = join(experiment_path, f"{getattr(fn, '__name__', 'trial')}_{ctx.get_trial_id()}")
    config = plain(config)
    resume_from = None
    while True:
        per_worker = {"CPU": float(res.cpu_per_worker)}
        if use_gpu:
            per_worker["GPU"] = float(res.gpu_per_worker)
        trainer = TorchTrainer(
            functools.partial(_ddp_worker, fn, dataclasses.replace(_options(spec, config, distributed=True),
                                                                   resume_checkpoint=resume_from), trial_dir),
            train_loop_config=config,
            scaling_config=ray.train.ScalingConfig(
                num_workers=res.workers,
                use_gpu=use_gpu,
                resources_per_worker=per_worker,
                placement_strategy=res.placement_strategy,
            ),
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            run_config=ray.train.RunConfig(
                name=ctx.get_trial_id(),
                storage_path=trial_dir,
                callbacks=[TuneReportCallback()],
                failure_config=ray.train.FailureConfig(max_failures=spec.failure.max_failures),
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=spec.checkpoint.num_to_keep),
            ),
        )
        try:
            trainer.fit()
            return
        except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
            if not (spec.oom_backoff and _is_oom(err)):
                raise
            _back_off(config, spec.oom_backoff, spec.min_batch_size, err)
            resume_from = _newest_checkpoint(join(trial_dir, ctx.get_trial_id())) or resume_from


def _newest_checkpoint(run_dir: str) -> str | None:
    """The newest ``checkpoint_<timestamp>`` folder of a Ray Train run (path or URI), or None.

    Ray Train uploads a checkpoint before ``ray.train.report`` returns, so after an
    out-of-memory error (raised by the train function, not a crash) the newest folder is
    whole.
    """
    from tuner.storage import join, list_names

    names = sorted(n for n in list_names(run_dir) if re.match(r"checkpoint_\d{4}-\d\d-\d\d_", n))  # not the snapshot
    return join(run_dir, names[-1]) if names else None


def build_trainable(fn: Callable, spec: Spec, experiment_path: str | os.PathLike) -> Callable[[dict], Any]:
    """Wrap a train function into the Tune function trainable for ``spec``.

    Args:
        fn: The user's train function, taking ``config``.
        spec: The validated spec (resources, amp, oom_backoff, trial_timeout_s).
        experiment_path: The experiment folder (trial folders are ``<fn name>_<trial id>``),
            or its cloud URI (:mod:`tuner.storage`).

    Returns:
        A function of ``config`` named like ``fn`` (so the table shows
        ``train_<trial id>``): a single-process trial, or the driver of a DDP trial.
    """
    entry = _ddp_trial if spec.resources.distributed else _single_process_trial
    wrapped = functools.partial(entry, fn, spec, os.fspath(experiment_path))
    name = getattr(fn, "__name__", "trial")

    def trainable(config):
        return wrapped(config)

    trainable.__name__ = trainable.__qualname__ = name
    return trainable


def driver_request(spec: Spec) -> dict[str, float]:
    """Resources of the Tune trial's own actor (``tune.with_resources``).

    A single-process trial asks for ``resources.cpu``/``gpu``. A DDP trial's actor only
    drives the Ray Train run, whose workers ask for their own resources, so it asks for
    no CPU (1 byte of memory keeps Ray's resource request non-empty).
    """
    if spec.resources.distributed:
        return {"cpu": 0, "memory": 1}
    return {"cpu": float(spec.resources.cpu), "gpu": float(spec.resources.gpu)}
