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
that parameter, and restart from the last checkpoint, down to ``min_batch_size``.
"""

from __future__ import annotations

import functools
import gc
import logging
from typing import Any, Callable

from tuner import trial
from tuner.space import plain
from tuner.spec import Spec

__all__ = ["build_trainable", "driver_request", "OutOfMemoryBackoffError"]

logger = logging.getLogger("tuner")


class OutOfMemoryBackoffError(RuntimeError):
    """CUDA ran out of memory and the batch cannot be halved again."""


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


def _single_process_trial(fn: Callable, spec: Spec, config: dict) -> Any:
    """Run the train function in this Tune trial, restarting it after a CUDA OOM."""
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


def _ddp_worker(fn: Callable, options: trial.TrialOptions, config: dict) -> Any:
    """The per-worker entry of a DDP trial (``train_loop_per_worker``)."""
    trial._configure(options)
    return fn(config)


def _ddp_trial(fn: Callable, spec: Spec, config: dict) -> None:
    """Drive one DDP trial: a Ray Train TorchTrainer run named after the trial id."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    res = spec.resources
    use_gpu = res.gpu_per_worker > 0
    ctx = tune.get_context()
    config = plain(config)
    while True:
        per_worker = {"CPU": float(res.cpu_per_worker)}
        if use_gpu:
            per_worker["GPU"] = float(res.gpu_per_worker)
        trainer = TorchTrainer(
            functools.partial(_ddp_worker, fn, _options(spec, config, distributed=True)),
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
                storage_path=ctx.get_trial_dir(),
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


def build_trainable(fn: Callable, spec: Spec) -> Callable[[dict], Any]:
    """Wrap a train function into the Tune function trainable for ``spec``.

    Args:
        fn: The user's train function, taking ``config``.
        spec: The validated spec (resources, amp, oom_backoff).

    Returns:
        A function of ``config`` named like ``fn`` (so the table shows
        ``train_<trial id>``): a single-process trial, or the driver of a DDP trial.
    """
    entry = _ddp_trial if spec.resources.distributed else _single_process_trial
    wrapped = functools.partial(entry, fn, spec)
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
