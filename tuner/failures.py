"""Failure handling: stop early on a broken train function, and one run per experiment.

* :class:`FirstErrorAbort`: when the very first trial fails before any trial has
  reported a result with an exception from the train function's code (a typo, a wrong
  key, a shape error; not a NaN metric, an out-of-memory or a dead process), the whole
  experiment stops at
  once instead of burning the budget on trials that will all fail the same way (the
  behaviour of SMAC3's ``abort_on_first_run_crash``). It is a Ray Tune ``Callback``
  that sees the error and a ``Stopper`` that ends the experiment; it also applies the
  spec's ``stop`` criteria (metric >= threshold), which a Stopper replaces.
* :class:`ExperimentLock`: an exclusive ``flock`` on ``<experiment>/.tuner.lock``, so a
  second ``tuner run`` or ``tuner resume`` of the same folder is refused while one runs.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Mapping

from ray.tune import Callback
from ray.tune.stopper import Stopper

__all__ = ["FirstErrorAbort", "ExperimentLock", "ExperimentLocked"]


class FirstErrorAbort(Callback, Stopper):
    """Stop the experiment when the first trial errors before any result; apply ``stop``.

    Args:
        stop: The spec's stop criteria: a trial stops once ``result[key] >= value``.
        enabled: Whether a first-trial error aborts the experiment
            (``failure.abort_on_first_error``).

    Attributes:
        aborted_by: The trial that aborted the experiment, or None.
    """

    def __init__(self, stop: Mapping[str, float] | None, enabled: bool = True):
        self.stop = dict(stop or {})
        self.enabled = enabled
        self.any_result = False
        self.aborted_by = None

    # Callback side ------------------------------------------------------------
    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        self.any_result = True

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        if self.enabled and not self.any_result and self.aborted_by is None and _is_user_bug(trial):
            self.aborted_by = trial

    # Stopper side -------------------------------------------------------------
    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return any(key in result and result[key] >= value for key, value in self.stop.items())

    def stop_all(self) -> bool:
        return self.aborted_by is not None


# Errors that say something about a configuration or the machine, not a bug in the code.
_NOT_BUGS = ("NonFiniteMetricError", "OutOfMemoryBackoffError", "OutOfMemoryError", "RayActorError",
             "ActorDiedError", "NodeDiedError", "WorkerCrashedError", "ActorUnavailableError")


def _is_user_bug(trial) -> bool:
    """Whether a trial's error is an exception raised by the train function's code.

    NaN metrics, out-of-memory and dead processes or nodes depend on the sampled config
    or on the machine, so they never abort the experiment.
    """
    try:
        text = Path(trial.error_file).read_text(encoding="utf-8", errors="replace") if trial.error_file else ""
    except OSError:
        text = ""
    return not any(name in text for name in _NOT_BUGS)


class ExperimentLocked(RuntimeError):
    """Another ``tuner`` process is running this experiment."""


class ExperimentLock:
    """An exclusive, non-blocking lock on an experiment folder, held while a run lasts.

    The lock is ``fcntl.flock`` on ``<experiment>/.tuner.lock``: the kernel frees it
    when the process ends, even on SIGKILL, so a crashed run never leaves it stuck.

    Args:
        experiment_path: The experiment folder; created if missing.

    Raises:
        ExperimentLocked: On entry, when another process holds the lock.
    """

    def __init__(self, experiment_path: str | os.PathLike):
        self.path = Path(experiment_path) / ".tuner.lock"
        self._fd: int | None = None

    def __enter__(self) -> "ExperimentLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ExperimentLocked(f"the experiment folder {self.path.parent} is in use by pid {holder}; "
                                   "wait for that run to end (or stop it) and try again.") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
