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
* :class:`StateSnapshots`, :func:`check_state`, :func:`restore_state_snapshot`: the
  experiment state survives a driver killed mid-write; a resume never starts over.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Mapping

from ray.tune import Callback
from ray.tune.stopper import Stopper

__all__ = ["FirstErrorAbort", "ExperimentLock", "ExperimentLocked", "StateSnapshots", "check_state",
           "restore_state_snapshot", "PlacementGroupReleaser"]


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
_NOT_BUGS = ("NonFiniteMetricError", "OutOfMemoryBackoffError", "OutOfMemoryError", "TrialTimeoutError",
             "RayActorError",
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


class PlacementGroupReleaser(Callback):
    """Free a DDP trial's worker resources when the trial ends, however it ends.

    When Tune stops a DDP trial early (ASHA, ``stop``, an error), its driver actor is
    killed, and the placement group that Ray Train's controller made for the workers
    outlives it. Ray Train's own cleaner asks the State API (the dashboard) and gives up
    when several Ray instances run on the machine, so the CPUs/GPUs would stay reserved
    and the next trials wait forever. Rank 0 records the group's id in the trial folder;
    this callback, in the tuner process, removes it at the end of the trial.

    Args:
        experiment_path: The experiment folder.
    """

    def __init__(self, experiment_path: str | os.PathLike):
        self.path = Path(experiment_path)

    def _release(self, trial) -> None:
        from tuner.trainable import release_placement_groups

        release_placement_groups(self.path / trial.storage.trial_dir_name)

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        self._release(trial)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._release(trial)


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


# --------------------------------------------------------------------------- experiment state

_STATE_GLOB = "experiment_state-*.json"
_SNAPSHOT_DIR = ".tuner_state"


def _newest_state(path: Path) -> Path | None:
    files = sorted(path.glob(_STATE_GLOB))
    return files[-1] if files else None


def _readable(file: Path) -> bool:
    import json

    try:
        json.loads(file.read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


class StateSnapshots(Callback):
    """Keep the last readable copy of Ray Tune's experiment state, written atomically.

    Ray writes ``experiment_state-*.json`` in place (open, dump) and copies it into the
    experiment folder, so a driver killed at the wrong moment can leave it truncated.
    Every ``period_s`` seconds this callback copies the newest state file, when it
    parses, to ``<experiment>/.tuner_state/`` by write-then-rename; a resume falls back
    to that copy (:func:`restore_state_snapshot`) instead of starting over.

    Args:
        experiment_path: The experiment folder.
        period_s: Seconds between two snapshots.
    """

    def __init__(self, experiment_path: str | os.PathLike, period_s: float = 2.0):
        self.path = Path(experiment_path)
        self.period_s = period_s
        self._last = 0.0

    def _snapshot(self) -> None:
        newest = _newest_state(self.path)
        if newest is None or not _readable(newest):
            return
        from tuner.results import atomic_write

        folder = self.path / _SNAPSHOT_DIR
        folder.mkdir(exist_ok=True)
        atomic_write(folder / newest.name, newest.read_bytes())
        for old in folder.glob(_STATE_GLOB):
            if old.name != newest.name:
                old.unlink(missing_ok=True)

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        import time

        now = time.monotonic()
        if now - self._last >= self.period_s:
            self._last = now
            self._snapshot()

    def on_experiment_end(self, trials: list, **info) -> None:
        self._snapshot()

    def __getstate__(self) -> dict:
        return {"path": self.path, "period_s": self.period_s, "_last": 0.0}


def check_state(experiment_path: str | os.PathLike) -> None:
    """Refuse to resume an experiment whose state is unreadable and has no snapshot.

    Raises:
        SpecError: Naming the unreadable file; a resume never silently starts over.
    """
    from tuner.spec import SpecError, SpecIssue

    path = Path(experiment_path)
    newest = _newest_state(path)
    snapshot = _newest_state(path / _SNAPSHOT_DIR)
    if newest is None and snapshot is None:
        raise SpecError([SpecIssue("", f"no experiment state ({_STATE_GLOB}) in {path}: the run stopped before "
                                   "Ray Tune saved any; start it again with `tuner run`.")], str(path))
    if newest is not None and not _readable(newest) and (snapshot is None or not _readable(snapshot)):
        raise SpecError([SpecIssue("", f"the experiment state {newest.name} is truncated or unreadable and no "
                                   "earlier snapshot exists, so resuming would start over; refusing. Keep the "
                                   "results, and start a new experiment with `tuner run --name NEW`.")], str(path))


def restore_state_snapshot(experiment_path: str | os.PathLike) -> str | None:
    """Put the last good state snapshot in place when the newest state file is unreadable.

    The unreadable file is renamed ``*.corrupt`` (kept for inspection).

    Returns:
        The snapshot's file name when it was restored, else None.
    """
    path = Path(experiment_path)
    newest = _newest_state(path)
    snapshot = _newest_state(path / _SNAPSHOT_DIR)
    if newest is not None and _readable(newest):
        return None
    if snapshot is None or not _readable(snapshot):
        return None
    if newest is not None:
        os.replace(newest, newest.with_name(newest.name + ".corrupt"))
    from tuner.results import atomic_write

    atomic_write(path / snapshot.name, snapshot.read_bytes())
    return snapshot.name
