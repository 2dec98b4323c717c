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
import threading
from typing import Any
from collections.abc import Callable

from tuner import trial
from tuner.experiment.layout import PLACEMENT_GROUP_FILE, TIMEOUT_MARKER, trial_folder_name
from tuner.search.space import plain
from tuner.spec import Spec, implements, is_class_trainable
from tuner.spec.sections import POPULATION_SCHEDULERS

__all__ = ["build_trainable", "class_trainable", "checkpoint_config", "kept_checkpoints", "reuse_actors",
           "driver_request",
           "OutOfMemoryBackoffError", "TrialTimeoutError"]

logger = logging.getLogger("tuner")


class OutOfMemoryBackoffError(RuntimeError):
    """CUDA ran out of memory and the batch cannot be halved again."""


class TrialTimeoutError(TimeoutError):
    """The trial ran longer than ``trial_timeout_s``."""


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

    def __enter__(self) -> _Watchdog:
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
                    from tuner.experiment.storage import write_text

                    write_text(self._marker, f"tuner.run.trainable.TrialTimeoutError: {self.message}\n")
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


def _has(config: dict, dotted: str | None) -> bool:
    """Whether the config has the parameter (a conditional space leaves an inactive one out)."""
    if dotted is None:
        return False
    try:
        _get(config, dotted)
    except (KeyError, TypeError):
        return False
    return True


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
    logger.warning("CUDA out of memory with %s=%d; retrying from the last checkpoint with %s=%d",
                   param, old, param, new)
    _set(config, param, new)


def _options(spec: Spec, config: dict, distributed: bool, seed: int | None = None) -> trial.TrialOptions:
    res = spec.resources
    extra = {}
    if spec.oom_backoff and _has(config, spec.oom_backoff):
        extra[f"{spec.oom_backoff}_used"] = _get(config, spec.oom_backoff)
    return trial.TrialOptions(
        amp=spec.amp,
        cpu=res.cpu_per_worker if distributed else res.cpu,
        gpu=res.gpu_per_worker if distributed else (_assigned_gpus() if res.auto_gpu else float(res.gpu)),
        distributed=distributed,
        oom_param=spec.oom_backoff,
        extra_metrics=extra,
        metric=objective_metrics(spec),
        checkpoint_frequency=spec.checkpoint.frequency,
        seed=seed,
        seed_trials=spec.seed_trials,
    )


def _assigned_gpus() -> float:
    """The GPUs Ray gave this trial's process (``gpu: auto`` chose the share when Ray created the trial)."""
    try:
        import ray

        return float(ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0))
    except Exception:  # noqa: BLE001 - outside Ray (a plain call): no GPU share
        return 0.0


def _trial_seed(spec: Spec, config: dict, fixed: int | None, trial_id: str | None = None) -> int | None:
    """This trial's seed (:func:`tuner.search.seeds.seed_of_trial`), or ``fixed`` (a ``--replay`` gives the
    replayed trial's); None outside a trial. ``config`` is the trial's config as it started."""
    if fixed is not None:
        return fixed
    trial_id = trial_id or _current_trial_id()
    if trial_id is None:
        return None
    from tuner.search.seeds import seed_of_trial

    return seed_of_trial(spec.seed, trial_id, plain(config))


def _seed_process(options: trial.TrialOptions) -> None:
    """Seed ``random``, numpy and torch with this process's :func:`tuner.trial.rank_seed`
    (``seed_trials: true``), before the train function (or a class's ``setup``) runs."""
    if options.seed_trials and options.seed is not None:
        from tuner.search.seeds import seed_everything

        seed_everything(trial.rank_seed())


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


def _marker_path(name: str, experiment_path: str, trial_id: str | None = None) -> str | None:
    """Where a timed-out trial leaves its reason: ``<experiment>/<name>_<trial id>/trial_timeout.txt``
    (a folder path, or a cloud URI: :func:`tuner.experiment.storage.join`); None outside a trial."""
    from tuner.experiment.storage import join

    trial_id = trial_id or _current_trial_id()
    if trial_id is None:
        return None
    return join(experiment_path, trial_folder_name(name, trial_id), TIMEOUT_MARKER)


def _single_process_trial(fn: Callable, spec: Spec, experiment_path: str, fixed_seed: int | None,
                          config: dict) -> Any:
    """Run the train function in this Tune trial, with a time limit and OOM back-off."""
    _guard_reports()
    try:
        with _Watchdog(spec.trial_timeout_s, _timeout_message(spec), _marker_path(_name(fn), experiment_path)):
            return _run_with_backoff(fn, spec, config, _trial_seed(spec, config, fixed_seed))
    except TrialTimeoutError as err:
        raise _timed_out(spec) from err


def _run_with_backoff(fn: Callable, spec: Spec, config: dict, seed: int | None = None) -> Any:
    """Run the train function, restarting it from its last checkpoint after a CUDA OOM.

    With ``seed_trials`` the process is seeded before each start, with the trial's seed.
    """
    config = plain(config)
    trial.configure(_options(spec, config, distributed=False, seed=seed))
    while True:
        _seed_process(trial.options())
        try:
            return fn(config)
        except Exception as err:  # only OOM is handled, the rest re-raised
            if not (spec.oom_backoff and _has(config, spec.oom_backoff) and _is_oom(err)):
                raise
            _back_off(config, spec.oom_backoff, spec.min_batch_size, err)
            trial.configure(_options(spec, config, distributed=False, seed=seed), keep_checkpoint=True)


def _ddp_worker(fn: Callable, options: trial.TrialOptions, trial_dir: str, config: dict) -> Any:
    """The per-worker entry of a DDP trial (``train_loop_per_worker``).

    Rank 0 records the id of the placement group that holds the trial's workers in the
    trial folder, so that :class:`PlacementGroupReleaser` can free it if Tune stops the
    trial (see there). With ``seed_trials`` each rank is seeded with the trial's seed plus
    its rank (:func:`tuner.trial.rank_seed`) before the train function runs.

    Raises:
        RuntimeError: The function returned without one ``tuner.trial.report`` on a fresh start (a
            ``ray.tune.report`` in a worker group reaches no one), so the trial fails with that reason.
    """
    trial.configure(options)
    _seed_process(options)
    if trial.rank() == 0:
        import ray

        from tuner.experiment.storage import join, read_text, write_text

        pg = ray.util.get_current_placement_group()
        if pg is not None:
            try:  # a restarted worker group adds its own group's id
                record = join(trial_dir, PLACEMENT_GROUP_FILE)
                write_text(record, (read_text(record) or "") + pg.id.hex() + "\n")
            except Exception:  # noqa: BLE001 - without the record the group is freed at session end
                pass
    out = fn(config)
    if trial.reports_made() == 0 and options.resume_checkpoint is None:
        # Else Ray Tune ends the experiment with its own error (a last result without the metric).
        raise RuntimeError("the train function returned without a result: inside a DDP worker group "
                           "(resources.workers), report with tuner.trial.report; ray.tune.report reaches no one "
                           "there (Ray only warns in the worker's log).")
    return out


def remove_placement_groups(ids: list[str]) -> int:
    """Remove the placement groups of these hex ids; returns how many were removed (not already gone)."""
    from ray.util.placement_group import remove_placement_group

    from tuner.adapters.ray_internals import placement_group

    removed = 0
    for pg_id in ids:
        try:
            remove_placement_group(placement_group(pg_id))
            removed += 1
        except Exception:  # noqa: BLE001 - already gone
            pass
    return removed


def release_placement_groups(trial_dir: str | os.PathLike) -> int:
    """Remove the placement groups a DDP trial recorded; returns how many were removed."""
    import ray

    from tuner.experiment.storage import join, read_text

    text = read_text(join(os.fspath(trial_dir), PLACEMENT_GROUP_FILE))
    if not text:
        return 0
    ids = [line.strip() for line in text.splitlines() if line.strip()]
    table = ray.util.placement_group_table()
    return remove_placement_groups([pg_id for pg_id in ids
                                    if table.get(pg_id, {}).get("state") in ("CREATED", "PENDING", "RESCHEDULING")])


def _ddp_trial(fn: Callable, spec: Spec, experiment_path: str, fixed_seed: int | None, config: dict, *,
               lean: bool = True) -> None:
    """Drive one DDP trial, with a time limit (``lean``: see :func:`_train_launcher`)."""
    try:
        with _Watchdog(spec.trial_timeout_s, _timeout_message(spec), _marker_path(_name(fn), experiment_path)):
            _drive_ddp(fn, spec, experiment_path, config, _trial_seed(spec, config, fixed_seed), lean=lean)
    except TrialTimeoutError as err:
        raise _timed_out(spec) from err


def _drive_ddp(fn: Callable, spec: Spec, experiment_path: str, config: dict, seed: int | None = None, *,
               lean: bool = True) -> None:
    """Drive one DDP trial: a Ray Train TorchTrainer run named after the trial id; every worker gets
    the trial's ``seed`` (:class:`tuner.trial.TrialOptions`)."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig
    from ray.tune.integration.ray_train import TuneReportCallback

    res = spec.resources
    use_gpu = res.gpu_per_worker > 0
    ctx = tune.get_context()
    # The trial's folder in the experiment (not the session's working dir), so the Train
    # run's checkpoints live with the experiment and survive the Ray session.
    from tuner.experiment.storage import join

    trial_dir = join(experiment_path, trial_folder_name(_name(fn), ctx.get_trial_id()))
    config = plain(config)
    run_name, resume_from = _train_run(trial_dir, ctx.get_trial_id(), experiment_path,
                                       trial_folder_name(_name(fn), ctx.get_trial_id()))
    if spec.scheduler.type in POPULATION_SCHEDULERS:  # PBT/PB2 clone a trial's Tune checkpoint
        from tuner.adapters.ray_internals import report_train_checkpoints
        from tuner.experiment.storage import filesystem, is_remote

        report_train_checkpoints(filesystem(experiment_path)[0] if is_remote(experiment_path) else None)
    trainer_cls = _train_launcher(lean)
    while True:
        per_worker = {"CPU": float(res.cpu_per_worker)}
        if use_gpu:
            per_worker["GPU"] = float(res.gpu_per_worker)
        trainer = trainer_cls(
            functools.partial(_ddp_worker, fn, dataclasses.replace(_options(spec, config, distributed=True, seed=seed),
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
                name=run_name,
                storage_path=trial_dir,
                callbacks=[TuneReportCallback()],  # type: ignore[list-item]  # a Train V2 UserCallback
                failure_config=ray.train.FailureConfig(max_failures=spec.failure.max_failures),
                checkpoint_config=ray.train.CheckpointConfig(**kept_checkpoints(spec)),
            ),
        )
        try:
            trainer.fit()
            return
        except Exception as err:  # only OOM is handled, the rest re-raised
            if not (spec.oom_backoff and _has(config, spec.oom_backoff) and _is_oom(err)):
                raise
            _back_off(config, spec.oom_backoff, spec.min_batch_size, err)
            resume_from = _newest_checkpoint(join(trial_dir, run_name)) or resume_from


#: ``TUNER_LEAN_DDP=0`` launches DDP trials with Ray Train's own defaults (see :func:`_train_launcher`).
LEAN_DDP_ENV = "TUNER_LEAN_DDP"


def _train_launcher(lean: bool) -> type:
    """The ``TorchTrainer`` class a DDP trial launches its worker group with, and its settings.

    By default Ray Train's ``TorchTrainer`` without the two controller callbacks tuner does
    not use, and on a one-node Ray without its requests to an autoscaler
    (:func:`tuner.adapters.ray_internals.lean_torch_trainer`), and with the controller
    settings of :func:`tuner.adapters.ray_internals.lean_train_env`, set in this process (the
    trial's driver), which Ray Train passes on to its controller and workers. Together they
    start 2 Python processes fewer per trial on any Ray (3 on one node, and the first trial
    of a one-node Ray 4), and see a finished worker group sooner:
    ``benchmarks/trial_startup.py`` measures each.

    Args:
        lean: False keeps Ray Train's defaults (``TUNER_LEAN_DDP=0`` where tuner runs,
            read by :func:`build_trainable`).
    """
    from ray.train.torch import TorchTrainer

    if not lean:
        return TorchTrainer
    import ray

    from tuner.adapters.ray_internals import lean_torch_trainer, lean_train_env

    single_node = sum(1 for node in ray.nodes() if node.get("Alive")) == 1
    os.environ.update(lean_train_env(single_node))
    return lean_torch_trainer(single_node)


def _train_run(trial_dir: str, trial_id: str, experiment_path: str, folder: str) -> tuple[str, str | None]:
    """The Ray Train run a DDP trial's driver starts, and the checkpoint its workers start from.

    The trial's newest run (:func:`tuner.experiment.layout.train_run_name`) goes on from its own latest
    checkpoint, as Ray Train restores a run of the same name (after a failure, a pause, a
    ``tuner resume``). But when Tune restores the trial from *another* trial's checkpoint (PBT
    or PB2 exploited it: the trial restarts with the new config from the top trial's
    checkpoint), that run's own checkpoints are stale: a fresh run (the next generation)
    starts, and every worker gets the top trial's checkpoint from
    :func:`tuner.trial.get_checkpoint` (``TrialOptions.resume_checkpoint``; Ray Train V2 has
    no ``resume_from_checkpoint``).

    Args:
        trial_dir: The trial's folder (path or URI).
        trial_id: Ray's trial id.
        experiment_path: The experiment folder (path or URI).
        folder: The name of the trial's folder in the experiment.

    Returns:
        ``(run name, checkpoint folder or URI to start from, or None)``.
    """
    from ray import tune

    from tuner.experiment.layout import train_run_generation, train_run_name
    from tuner.experiment.storage import join, list_names

    generations = [g for g in (train_run_generation(n, trial_id) for n in list_names(trial_dir)) if g is not None]
    newest = max(generations, default=0)
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return train_run_name(trial_id, newest), None
    trial_folder, name = checkpoint.path.rstrip("/").split("/")[-2:]
    if trial_folder == folder:
        return train_run_name(trial_id, newest), None  # its own: the run restores itself
    return train_run_name(trial_id, newest + 1), join(experiment_path, trial_folder, name)


def _newest_checkpoint(run_dir: str) -> str | None:
    """The newest ``checkpoint_<timestamp>`` folder of a Ray Train run (path or URI), or None.

    Ray Train uploads a checkpoint before ``ray.train.report`` returns, so after an
    out-of-memory error (raised by the train function, not a crash) the newest folder is
    whole.
    """
    from tuner.adapters.ray_internals import TRAIN_CHECKPOINT_DIR
    from tuner.experiment.storage import join, list_names

    names = sorted(n for n in list_names(run_dir) if TRAIN_CHECKPOINT_DIR.match(n))  # not the snapshot
    return join(run_dir, names[-1]) if names else None


def _name(trainable: Any) -> str:
    """The trainable's name, as Ray Tune names its trials (``<name>_<trial id>``)."""
    return getattr(trainable, "__name__", "trial")


def build_trainable(fn: Callable, spec: Spec, experiment_path: str | os.PathLike, *,
                    trial_seed: int | None = None) -> Callable[[dict], Any] | type:
    """Wrap a train function or a class trainable into the Tune trainable for ``spec``.

    Args:
        fn: The user's train function, taking ``config``; or a ``ray.tune.Trainable``
            subclass (see :func:`class_trainable`).
        spec: The validated spec (resources, amp, oom_backoff, trial_timeout_s, metric,
            seed, seed_trials).
        experiment_path: The experiment folder (trial folders are ``<fn name>_<trial id>``),
            or its cloud URI (:mod:`tuner.experiment.storage`).
        trial_seed: The seed of every trial (``tuner.trial.seed()``) instead of each trial's
            own (:func:`tuner.search.seeds.seed_of_trial`): a ``--replay`` gives the replayed trial's.

    Returns:
        For a function, a function of ``config`` named like ``fn`` (so the table shows
        ``train_<trial id>``): a single-process trial, or the driver of a DDP trial. For
        a class, a subclass of it with the same name.
    """
    if is_class_trainable(fn):
        return class_trainable(fn, spec, os.fspath(experiment_path), trial_seed=trial_seed)
    from tuner.run.command import CommandTrial

    if isinstance(fn, CommandTrial):  # its files go into the experiment's own trial folder
        fn = fn.at(os.fspath(experiment_path))
    if spec.ray_train_ddp:
        entry: Callable = functools.partial(_ddp_trial, lean=os.environ.get(LEAN_DDP_ENV, "1") != "0")
    else:
        entry = _single_process_trial
    wrapped = functools.partial(entry, fn, spec, os.fspath(experiment_path), trial_seed)
    name = _name(fn)

    def trainable(config):
        return wrapped(config)

    trainable.__name__ = trainable.__qualname__ = name
    return trainable


def objective_metrics(spec: Spec) -> tuple[str, ...] | None:
    """The metrics whose NaN or inf fails a trial: every objective's; None without a metric."""
    return tuple(o.metric for o in spec.objectives or ()) or None


def _guard_reports() -> None:
    """Give a Ray Tune function trainable's results what ``tuner.trial.report`` gives its own.

    ``tuner.trial.report`` checks its own results and adds tuner's extra metrics
    (:func:`tuner.trial.leaving_result`); a Ray Tune function trainable that calls
    ``ray.tune.report`` (or returns a dict) goes through the trial's Ray session instead, so its
    ``report`` is wrapped here, in the trial's process
    (:func:`tuner.adapters.ray_internals.guard_session_report`), to do the same with the trial's options
    at the time of the report:

    * raise :class:`~tuner.trial.NonFiniteMetricError` for a non-finite tuned metric (any
      objective's) before the result reaches the driver (and the scheduler's rungs);
    * add the extra metrics of the trial's options (``<oom_backoff>_used``, the batch the
      function runs with).

    Ray's session object is per actor and reset between trials of a reused actor, so the
    guard is installed once and kept.
    """
    from tuner.adapters.ray_internals import guard_session_report

    guard_session_report(trial.leaving_result)


def class_trainable(cls: type, spec: Spec, experiment_path: str, *, trial_seed: int | None = None) -> type:
    """Subclass a ``ray.tune.Trainable`` so that it keeps the spec's promises.

    The subclass has the user's class name (trials are ``<name>_<trial id>``) and:

    * gives ``setup`` and ``reset_config`` plain Python values (no numpy scalars from
      BOHB), and keeps ``self.config`` plain;
    * ends a trial that runs longer than ``trial_timeout_s`` in all (``setup`` and every
      ``step`` count), with :class:`TrialTimeoutError`;
    * fails a trial whose ``step`` returns a NaN or infinite ``metric``
      (:class:`~tuner.trial.NonFiniteMetricError`), so the scheduler never sees it;
    * sets up :mod:`tuner.trial` (``amp``, ``device()``, ``seed()``) for the code in the class,
      and with ``seed_trials`` seeds ``random``, numpy and torch before ``setup`` (and before
      ``reset_config`` when Ray reuses the actor for another trial).

    Ray Tune itself calls ``save_checkpoint``/``load_checkpoint`` (every
    ``checkpoint.frequency`` iterations, see :func:`checkpoint_config`), ``reset_config``
    when it reuses the actor, and ``cleanup``.

    Args:
        cls: The user's ``ray.tune.Trainable`` subclass.
        spec: The validated spec.
        experiment_path: The experiment folder, or its cloud URI.
        trial_seed: As :func:`build_trainable`'s.

    Returns:
        The subclass, for ``tune.with_resources``.
    """
    metric, timeout_s = objective_metrics(spec), spec.trial_timeout_s
    name = cls.__name__

    def _tuner_configure(config: Any, trial_id: str | None) -> None:
        from tuner.adapters.ray_internals import trainable_config

        seed = _trial_seed(spec, trainable_config(config) or {}, trial_seed, trial_id)
        trial.configure(_options(spec, {}, distributed=False, seed=seed))
        _seed_process(trial.options())

    class _TunerTrainable(cls):
        def __init__(self, config=None, *args, **kwargs):
            from tuner.adapters.ray_internals import trial_id_in_config

            self._tuner_deadline = _deadline(timeout_s)
            self._tuner_trial_id = trial_id_in_config(config)
            _tuner_configure(config, self._tuner_trial_id)
            try:
                with self._tuner_watch("setup"):
                    super().__init__(plain(config or {}), *args, **kwargs)
            except TrialTimeoutError as err:
                raise _timed_out(spec) from err
            self.config = plain(self.config)

        def _tuner_watch(self, what: str) -> _Watchdog:
            remaining = None if self._tuner_deadline is None else max(self._tuner_deadline - _now(), 0.001)
            marker = _marker_path(name, experiment_path, self._tuner_trial_id) if self._tuner_trial_id else None
            return _Watchdog(remaining, _timeout_message(spec), marker)

        def step(self):
            try:
                with self._tuner_watch("step"):
                    result = super().step()
            except TrialTimeoutError as err:
                raise _timed_out(spec) from err
            if isinstance(result, dict):
                trial.check_finite(result, metric)
            return result

        def reset(self, new_config, *args, **kwargs):
            from tuner.adapters.ray_internals import trial_id_in_config

            self._tuner_deadline = _deadline(timeout_s)
            self._tuner_trial_id = trial_id_in_config(new_config) or self._tuner_trial_id
            _tuner_configure(new_config, self._tuner_trial_id)
            return super().reset(plain(new_config), *args, **kwargs)

    _TunerTrainable.__name__ = _TunerTrainable.__qualname__ = name
    _TunerTrainable.__doc__ = cls.__doc__
    return _TunerTrainable


def _now() -> float:
    import time

    return time.monotonic()


def _deadline(timeout_s: float | None) -> float | None:
    return None if not timeout_s else _now() + timeout_s


def checkpoint_config(trainable: Any, spec: Spec):
    """Ray Tune's ``CheckpointConfig`` for the spec's ``checkpoint`` section.

    ``num_to_keep`` applies to every trainable. A class trainable that implements
    ``save_checkpoint`` is also checkpointed by Ray every ``checkpoint.frequency``
    iterations and at its end (Ray's ``checkpoint_frequency``, ``checkpoint_at_end``); one
    that does not is never checkpointed. A function trainable passes its checkpoints to
    ``report`` itself, and :func:`tuner.trial.report` keeps every
    ``checkpoint.frequency``-th of them.
    """
    from ray import tune

    if is_class_trainable(trainable):
        if implements(trainable, "save_checkpoint"):
            return tune.CheckpointConfig(**kept_checkpoints(spec), checkpoint_frequency=spec.checkpoint.frequency,
                                         checkpoint_at_end=True)
        # Ray checkpoints class trainables at their end by default; without save_checkpoint it would raise.
        return tune.CheckpointConfig(**kept_checkpoints(spec), checkpoint_at_end=False)
    return tune.CheckpointConfig(**kept_checkpoints(spec))


def kept_checkpoints(spec: Spec) -> dict[str, Any]:
    """Which checkpoints a trial keeps, as keyword arguments of Ray's ``CheckpointConfig`` (Tune's for a
    trial, Ray Train's for a DDP trial's rank-0 checkpoints): the best ``checkpoint.num_to_keep`` by
    :attr:`tuner.spec.Spec.checkpoint_score` (``num_to_keep``, ``checkpoint_score_attribute``,
    ``checkpoint_score_order``). Ray keeps the newest checkpoint besides them, for resume and retries.
    """
    score = spec.checkpoint_score
    kwargs: dict[str, Any] = {"num_to_keep": spec.checkpoint.num_to_keep}
    if score is not None:
        kwargs.update(checkpoint_score_attribute=score[0], checkpoint_score_order=score[1])
    return kwargs


def reuse_actors(trainable: Any, spec: Spec) -> bool:
    """Whether Ray Tune may reuse a trial's actor for the next trial (``TuneConfig.reuse_actors``).

    On for function trainables (0.25 s instead of 1.33 s a trivial trial here;
    ``TUNER_REUSE_ACTORS=0`` turns it off, benchmarks/trial_startup.py compares both) and
    for class trainables that implement ``reset_config``. Off for DDP trials: Ray cannot
    reset a driver actor whose Train run was stopped ("reuse requires reset_config()"),
    and the next trial would hang. Off for a class trainable under ``pbt``/``pb2``: with
    Ray 2.60, a trial that PBT exploited and restarted on another trial's cached actor was
    sometimes ended (TERMINATED, short of its ``stop``) after one result: 1 run in 15 of
    ``test_pbt_exploits_a_class_trainable`` under a load of three such runs at once, 0 in 18
    without reuse.
    """
    if os.environ.get("TUNER_REUSE_ACTORS", "1") == "0" or spec.ray_train_ddp:
        return False
    if is_class_trainable(trainable):
        return implements(trainable, "reset_config") and spec.scheduler.type not in POPULATION_SCHEDULERS
    return True


def driver_request(spec: Spec) -> dict[str, float]:
    """Resources of the Tune trial's own actor (``tune.with_resources``).

    A single-process trial asks for ``resources.cpu``/``gpu``. A DDP trial's actor only
    drives the Ray Train run, whose workers ask for their own resources, so it asks for
    no CPU (1 byte of memory keeps Ray's resource request non-empty). A command trial under
    ``torchrun`` asks for all its workers' resources: its processes run inside this one.
    """
    if spec.ray_train_ddp:
        return {"cpu": 0, "memory": 1}
    return dict(spec.resources.total)
