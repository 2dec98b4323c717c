"""Trial-side helpers: the only calls a train function needs.

A train function takes one argument, ``config`` (a plain ``dict`` of the sampled
hyperparameters), and calls :func:`report` once per epoch::

    from tuner import trial

    def train(config):
        start = 0
        ckpt = trial.get_checkpoint()
        if ckpt:
            start = load(ckpt) + 1
        for epoch in range(start, config["epochs"]):
            ...
            trial.report({"val_loss": loss, "val_accuracy": acc})

The same code runs inside a Ray Tune trial (the calls wrap ``ray.tune.report`` and
``ray.tune.get_checkpoint``) and as a plain Python call outside Ray, where
:func:`report` only prints and records the metrics, which is handy for debugging a
train function before tuning it.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping

__all__ = ["report", "get_checkpoint", "in_tune", "local_reports"]

# Metrics reported while running outside Ray (plain Python call), oldest first.
_LOCAL_REPORTS: list[dict[str, Any]] = []


def in_tune() -> bool:
    """Whether the caller runs inside a Ray Tune trial.

    Returns:
        True inside a Tune function trainable, False in a plain Python process.
    """
    try:
        # The check Ray's own TuneReportCallback uses; asking get_context() for a
        # trial id instead logs a warning outside a trial.
        from ray.tune.trainable.trainable_fn_utils import _in_tune_session

        return bool(_in_tune_session())
    except Exception:  # noqa: BLE001 - no Ray, or Ray moved it: not in a trial
        return False


def report(metrics: Mapping[str, Any], checkpoint_dir: str | os.PathLike | None = None) -> None:
    """Report one result (usually one epoch) of the current trial.

    Inside Ray Tune this wraps ``ray.tune.report``: the scheduler (ASHA, Hyperband,
    ...) sees the result, and ``training_iteration`` grows by one per call. Outside
    Ray the metrics are printed and kept in :func:`local_reports`.

    Args:
        metrics: Metric name to value, e.g. ``{"val_loss": 0.31, "val_accuracy": 0.91}``.
            Values must be plain numbers (call ``.item()`` on tensors, so that no
            tensor or autograd graph is kept alive by a running sum).
        checkpoint_dir: Optional folder whose files form a checkpoint of this
            iteration. Ray copies it into the experiment's storage; the folder may be
            deleted after the call returns.

    Raises:
        TypeError: If a metric value is a tensor or another non-scalar type.
    """
    clean = {str(k): _scalar(k, v) for k, v in metrics.items()}
    if not in_tune():
        _LOCAL_REPORTS.append(clean)
        print(f"[tuner.trial] report {len(_LOCAL_REPORTS)}: {clean}", flush=True)
        return
    from ray import tune

    checkpoint = tune.Checkpoint.from_directory(os.fspath(checkpoint_dir)) if checkpoint_dir else None
    tune.report(clean, checkpoint=checkpoint)


def get_checkpoint() -> str | None:
    """Return the folder of the trial's latest checkpoint, or None.

    A trial has a checkpoint when it is resumed: after a failure, after a pause by a
    scheduler, or after ``tuner resume``.

    Returns:
        A local folder holding the files given to :func:`report` as
        ``checkpoint_dir``, or None when the trial starts from scratch.
    """
    if not in_tune():
        return None
    from ray import tune

    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return None
    if ckpt.filesystem is not None and ckpt.filesystem.type_name == "local":
        return ckpt.path
    return ckpt.to_directory(tempfile.mkdtemp(prefix="tuner-ckpt-"))


def local_reports() -> list[dict[str, Any]]:
    """Return the metrics reported so far outside Ray (a copy, oldest first)."""
    return list(_LOCAL_REPORTS)


def _scalar(name: Any, value: Any) -> Any:
    """Turn a metric value into a plain Python number or string."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        numel = getattr(value, "numel", None) or getattr(value, "size", None)
        size = numel() if callable(numel) else numel
        if size in (None, 1):
            if hasattr(value, "detach"):
                value = value.detach()
            return value.item()
    raise TypeError(
        f"metric {name!r} must be a number or a string, but got {type(value).__name__}: "
        f"{value!r:.80}"
    )
