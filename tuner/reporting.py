"""Reporting: the CLIReporter table, TensorBoard event files and a quiet console.

* The table is Ray's classic ``CLIReporter``. Ray >= 2.7 ignores ``progress_reporter``
  under its new output engine (ray-project/ray#38202), so :func:`prepare_console` sets
  ``RAY_AIR_NEW_OUTPUT=0`` before Tune starts, unless the user set it.
* TensorBoard event files are written per trial by Ray's ``TBXLoggerCallback``
  (tensorboardX), beside the JSON and CSV logs that Ray's result analysis reads.
* Ray's driver-side log lines go to ``<experiment>/tuner.log``; the console keeps
  nothing of Ray's (tuner prints its own summary of errors). Trial stdout/stderr go to each
  trial's folder (``log_to_file``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ray.tune import CLIReporter
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

from tuner.space import sampled_params
from tuner.spec import Spec

__all__ = ["prepare_console", "build_reporter", "build_callbacks", "log_to_file", "tensorboard_hint"]

_QUIET_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air", "ray.data")


def prepare_console() -> None:
    """Select Ray's classic output (so the CLIReporter table shows) and quiet Ray.

    Sets ``RAY_AIR_NEW_OUTPUT=0``, ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`` (the
    loggers are passed explicitly by :func:`build_callbacks`) and
    ``TUNE_GLOBAL_CHECKPOINT_S=2`` unless already set.
    """
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Save the experiment state at least every 2 s (Ray's "auto" waits longer), so a
    # killed driver loses little and a resume does not rerun trials that had finished.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")


def build_reporter(spec: Spec) -> CLIReporter | None:
    """Build the CLIReporter whose columns are the sampled parameters and the metrics.

    Returns:
        A ``CLIReporter`` with ``parameter_columns`` = the varied parameters and
        ``metric_columns`` = ``reporting.cli.metric_columns`` (default: the metric and
        ``training_iteration``), or None when ``reporting.cli`` is false.
    """
    cli = spec.reporting.cli
    if not cli.enabled:
        return None
    names = list(cli.metric_columns or ([spec.metric] if spec.metric else []))
    columns = {name: name for name in names}
    columns.setdefault("training_iteration", "iter")
    return CLIReporter(
        metric_columns=columns,
        parameter_columns=sampled_params(spec),
        max_report_frequency=cli.max_report_frequency,
        # Not sort_by_metric: Ray 2.60 then compares None with None and crashes when a
        # TERMINATED trial never reported the metric (e.g. after a first-trial abort).
    )


def build_callbacks(spec: Spec) -> list:
    """Ray logger callbacks: JSON and CSV always, TensorBoard when ``reporting.tensorboard``."""
    callbacks: list = [JsonLoggerCallback(), CSVLoggerCallback()]
    if spec.reporting.tensorboard:
        callbacks.append(TBXLoggerCallback())
    return callbacks


class log_to_file:  # noqa: N801 - used as a context manager, like open()
    """Send Ray's driver-side log records to a file; keep only errors on the console.

    Args:
        path: The log file, e.g. ``<experiment>/tuner.log``; its folder must exist.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._handler: logging.Handler | None = None
        self._saved: list[tuple[logging.Handler, int]] = []

    def __enter__(self) -> "log_to_file":
        self._handler = logging.FileHandler(self.path, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._handler.setLevel(logging.INFO)
        for name in _QUIET_LOGGERS:
            log = logging.getLogger(name)
            for h in log.handlers:
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                    self._saved.append((h, h.level))
                    h.setLevel(logging.CRITICAL)
        logging.getLogger("ray").addHandler(self._handler)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("ray").removeHandler(self._handler)
        if self._handler:
            self._handler.close()
        for h, level in self._saved:
            h.setLevel(level)


def tensorboard_hint(experiment_path: str | os.PathLike) -> str:
    """The command that shows the experiment's TensorBoard event files."""
    return f"tensorboard --logdir {experiment_path}"
