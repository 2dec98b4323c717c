"""Failure handling: stop early on a broken train function, and one run per experiment.

* :class:`ExperimentStopper`: when the very first trial fails before any trial has
  reported a result with an exception from the train function's code (a typo, a wrong
  key, a shape error; not a NaN metric, an out-of-memory or a dead process), the whole
  experiment stops at once instead of burning the budget on trials that will all fail
  the same way (the behaviour of SMAC3's ``abort_on_first_run_crash``). It is a Ray
  Tune ``Callback`` that sees the error and a ``Stopper`` that ends the experiment; it
  also applies the spec's ``stop`` criteria and the ``time_budget_s`` of the whole
  experiment, across resumes.
* :class:`ExperimentLock`: an exclusive ``flock`` on ``<experiment>/.tuner.lock``, so a
  second ``tuner run`` or ``tuner resume`` of the same folder is refused while one runs.
* :class:`StateSnapshots`, :func:`check_state`, :func:`restore_state_snapshot`: Ray Tune's
  experiment, searcher and scheduler states survive a driver killed mid-write; a resume never
  starts over.
* :func:`reopen_searcher`: a resume goes on creating trials, up to a ``num_samples``
  that may have grown.
* :func:`fall_back_to_existing_checkpoints`, :func:`drop_stale_staging`: a resume restores
  only checkpoints that exist, and never copies an earlier session's stale files over the
  experiment's.
"""

from __future__ import annotations

import fcntl
import operator
import os
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from ray.tune import Callback
from ray.tune.stopper import Stopper

from tuner.errors import ExperimentError, ExperimentLocked  # ExperimentLocked: imported from here too
from tuner.experiment.layout import (BASIC_VARIANT_STATE, BUDGET_SPENT, CALLBACK_STATE_GLOB, CORRUPT_SUFFIX,
                                     EXPERIMENT_STATE_GLOB, LOCK_FILE, SEARCH_GEN_STATE, SEARCHER_STATE,
                                     STATE_SNAPSHOT_DIR)
from tuner.spec import stop_operator
from tuner.spec.sections import Objective
from tuner.adapters.state import newest_state_file, parse_result_lines, parse_state, read_state

_COMPARE = {">=": operator.ge, "<=": operator.le}  # stop_operator's answers

__all__ = ["ExperimentStopper", "reopen_searcher", "time_budget_used", "ExperimentLock", "ExperimentLocked",
           "StateSnapshots", "check_state", "restore_state_snapshot", "PlacementGroupReleaser",
           "fall_back_to_existing_checkpoints", "drop_stale_staging"]


class ExperimentStopper(Callback, Stopper):
    """End trials on the spec's ``stop``, and the experiment on a first error or the time budget.

    * ``stop``: a trial stops once ``result[key] >= value``, or ``<= value`` for the
      spec's objectives under ``mode: min`` (:func:`tuner.spec.stop_operator`); a
      Stopper replaces the dict form Ray Tune would otherwise take, which always
      tests ``>=``.
    * First-error abort: when the very first trial fails before any trial reported a
      result, with an exception from the train function's code, the experiment stops
      (SMAC3's ``abort_on_first_run_crash``).
    * ``time_budget_s``: the experiment stops once it has run that many seconds, summed
      over every session of it (a run and its resumes). Ray Tune's ``TimeoutStopper``
      works the same way; tuner keeps its own so that ``tuner resume`` can raise the
      budget: Ray restores the stopper from the experiment state, and this one then
      reads the current budget from the experiment's ``tuner_run.json``.

    Args:
        stop: The spec's stop criteria.
        enabled: Whether a first-trial error aborts the experiment
            (``failure.abort_on_first_error``).
        time_budget_s: Seconds of wall time for the whole experiment, or None.
        record_file: The experiment's ``tuner_run.json``, whose ``time_budget_s`` a
            restored stopper takes.
        objectives: The spec's objectives (:attr:`tuner.spec.Spec.objectives`), or None.

    Attributes:
        aborted_by: The trial that aborted the experiment, or None.
        used_s: Seconds of the time budget spent, in all sessions so far.
        budget_spent: Whether the time budget ended the experiment.
    """

    def __init__(self, stop: Mapping[str, float] | None, enabled: bool = True,
                 time_budget_s: float | None = None, record_file: str | os.PathLike | None = None,
                 objectives: Sequence[Objective] | None = None):
        self.stop = dict(stop or {})
        self._stop_rules = [(key, _COMPARE[stop_operator(key, objectives)], value)
                            for key, value in self.stop.items()]
        self.enabled = enabled
        self.time_budget_s = time_budget_s
        self.record_file = str(record_file) if record_file else None
        self.any_result = False
        self.aborted_by = None
        self.used_s = 0.0
        self.budget_spent = False
        self._paused = False
        self._last_check: float | None = None

    # Callback side ------------------------------------------------------------
    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        self.any_result = True

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        if self.enabled and not self.any_result and self.aborted_by is None and _is_user_bug(trial):
            self.aborted_by = trial

    def on_experiment_end(self, trials: list, **info) -> None:
        # Ray 2.60 builds the ResultGrid from every trial's folder, and raises ("Should not
        # access trial_fs_path without setting trial_dir_name") for a trial the searcher had
        # just created when a stop ended the experiment (seen in 4 of 150 benchmark runs).
        from tuner.adapters.ray_internals import name_trial_dir

        for trial in trials:
            name_trial_dir(trial)

    # Stopper side -------------------------------------------------------------
    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return any(key in result and reached(result[key], value) for key, reached, value in self._stop_rules)

    def stop_all(self) -> bool:
        import time

        now = time.time()
        if self._last_check is not None:  # like TimeoutStopper: the clock starts at the first check
            self.used_s += now - self._last_check
        self._last_check = now
        if self.time_budget_s is not None and self.used_s >= self.time_budget_s and not self.budget_spent:
            self.budget_spent = True
            if self.record_file:
                (Path(self.record_file).parent / BUDGET_SPENT).touch()
            self._paused = _pause_tune_run()
            if self._paused:
                # Ray ends the run as after Ctrl-C: unfinished trials stay resumable from their
                # checkpoints (a stop_all would mark them TERMINATED for good).
                return self.aborted_by is not None
        if self.budget_spent and self._paused:
            return self.aborted_by is not None
        return self.aborted_by is not None or self.budget_spent

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["aborted_by"] = None  # a Trial; only this session's driver needs it
        return state

    def __setstate__(self, state: dict) -> None:
        # A stopper saved before the rules existed tested >= for every key.
        state.setdefault("_stop_rules", [(key, operator.ge, value) for key, value in state.get("stop", {}).items()])
        self.__dict__.update(state)
        self._last_check = None
        self.budget_spent = False
        self._paused = False
        if self.record_file:
            import json

            try:
                self.time_budget_s = json.loads(Path(self.record_file).read_text()).get(
                    "time_budget_s", self.time_budget_s)
            except (OSError, ValueError):
                pass


def _pause_tune_run() -> bool:
    """End Ray Tune's run loop the way Ctrl-C does, leaving unfinished trials resumable.

    Ray Tune's run installs one handler for SIGINT and SIGUSR1 when it runs in the main
    thread (:func:`tuner.adapters.ray_internals.tune_run_catches_signals`); this sends SIGUSR1 to
    this process when that handler is in place.

    Returns:
        Whether the signal was sent.
    """
    import signal
    import threading

    from tuner.adapters.ray_internals import tune_run_catches_signals

    if not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread():
        return False
    if not tune_run_catches_signals():
        return False
    os.kill(os.getpid(), signal.SIGUSR1)
    return True


# Errors that say something about a configuration or the machine, not a bug in the code.
_NOT_BUGS = ("NonFiniteMetricError", "OutOfMemoryBackoffError", "OutOfMemoryError", "TrialTimeoutError",
             "RayActorError",
             "ActorDiedError", "NodeDiedError", "WorkerCrashedError", "ActorUnavailableError")


def _is_user_bug(trial) -> bool:
    """Whether a trial's error is an exception raised by the train function's code.

    NaN metrics, out-of-memory and dead processes or nodes depend on the sampled config
    or on the machine, so they never abort the experiment.
    """
    if _process_died(trial):
        return False
    try:
        text = Path(trial.error_file).read_text(encoding="utf-8", errors="replace") if trial.error_file else ""
    except OSError:
        text = ""
    return not any(name in text for name in _NOT_BUGS)


def _process_died(trial) -> bool:
    """Whether the trial's process died (Ray's ``RayActorError``, e.g. ``os._exit`` or a kill).

    Read from the pickled error Ray keeps beside ``error.txt``: Ray 2.60's text for a
    dead process ("The actor died unexpectedly ...") names no exception class.
    """
    from ray import cloudpickle
    from ray.exceptions import RayActorError

    try:
        with open(trial.pickled_error_file, "rb") as f:
            return isinstance(cloudpickle.load(f), RayActorError)
    except Exception:  # noqa: BLE001 - no pickle, or a user exception class the driver cannot import
        return False


class PlacementGroupReleaser(Callback):
    """Free a DDP trial's worker resources when the trial ends, however it ends.

    When Tune stops a DDP trial early (ASHA, ``stop``, an error), its driver actor is
    killed, and the placement group that Ray Train's controller made for the workers
    outlives it. Ray Train's own cleaner asks the State API (the dashboard) and gives up
    when several Ray instances run on the machine, so the CPUs/GPUs would stay reserved
    and the next trials wait forever. Rank 0 records the group's id in the trial folder;
    this callback, in the tuner process, removes it at the end of the trial, and when the
    trial is PAUSED (Hyperband, PBT/PB2: the driver actor is stopped, and the restarted
    trial's new worker group would otherwise wait for the CPUs the old group still holds).

    That record can miss a group: removing it makes Ray Train's controller, while it still
    lives, restart the worker group in a new placement group (the trial's ``max_failures``
    allow it), and that controller then dies with the trial's actor before rank 0 records
    anything. Under load that group kept the CPUs and the next DDP trial waited for them for
    good. So every ``SWEEP_S`` seconds this callback also removes each placement group of the
    run whose creator actor is dead (:func:`tuner.adapters.ray_internals.orphaned_placement_groups`):
    a live trial's groups have a live controller, and Tune's own groups are the driver's.

    Args:
        experiment_path: The experiment folder, or its cloud URI.
    """

    #: Seconds between two sweeps for placement groups whose creator actor is dead.
    SWEEP_S = 2.0

    def __init__(self, experiment_path: str | os.PathLike):
        self.path = os.fspath(experiment_path)

    def _sweep(self) -> None:
        import time

        from tuner.adapters.ray_internals import orphaned_placement_groups
        from tuner.run.trainable import remove_placement_groups

        now = time.monotonic()
        if 0 <= now - getattr(self, "_swept", float("-inf")) < self.SWEEP_S:  # (a resumed run has another clock)
            return
        self._swept = now
        remove_placement_groups(orphaned_placement_groups())

    def _release(self, trial) -> None:
        from tuner.adapters.ray_internals import trial_dir_name
        from tuner.experiment.storage import join
        from tuner.run.trainable import release_placement_groups

        release_placement_groups(join(self.path, trial_dir_name(trial)))

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        self._release(trial)

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        self._sweep()
        paused = getattr(self, "_paused", None)
        if paused is None:
            paused = self._paused = set[str]()
        for trial in trials:
            if trial.status == "PAUSED":
                if trial.trial_id not in paused:
                    paused.add(trial.trial_id)
                    self._release(trial)
            else:
                paused.discard(trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._release(trial)


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
        self.path = Path(experiment_path) / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> ExperimentLock:
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

def _pickle_whole(data: bytes) -> bool:
    """Whether pickled bytes load (a file cut short by a kill does not)."""
    import pickle

    try:
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - truncated, or unreadable for any other reason: not whole
        return False
    return True


def _json_whole(data: bytes) -> bool:
    return parse_state(data) is not None


#: Ray Tune's state files in the experiment folder, each kind as (the glob of its files, whether its bytes are
#: whole): the experiment state (JSON) and the searcher's and the callbacks' states (pickles, whatever their
#: suffix; tuner's scheduler state is in the callbacks'). Ray writes each of them whole into its staging folder
#: but copies them into the experiment folder in place (``pyarrow.fs.copy_files``), so a driver killed during
#: the copy can leave any of them cut short.
STATE_KINDS: tuple[tuple[str, Any], ...] = (
    (EXPERIMENT_STATE_GLOB, _json_whole),
    (BASIC_VARIANT_STATE.format("*"), _pickle_whole),
    (SEARCH_GEN_STATE.format("*"), _pickle_whole),
    (SEARCHER_STATE.format("*"), _pickle_whole),
    (CALLBACK_STATE_GLOB, _pickle_whole),
)


def _whole(file: Path | None, whole: Any) -> bool:
    if file is None:
        return False
    try:
        return bool(whole(file.read_bytes()))
    except OSError:
        return False


def _monotonic() -> float:
    """Seconds of ``time.monotonic``: :class:`StateSnapshots`' clock (a test sets this one, not the process's)."""
    import time

    return time.monotonic()


class StateSnapshots(Callback):
    """Keep the last whole copy of each of Ray Tune's state files, written atomically.

    Ray copies its experiment state (``experiment_state-*.json``), its searcher's state and its
    callbacks' state (tuner's scheduler state among them) into the experiment folder in place
    (:data:`STATE_KINDS`), so a driver killed at the wrong moment can leave any of them
    truncated. This callback copies the newest file of each kind, when it is whole (it parses,
    or unpickles), to ``<experiment>/.tuner_state/`` by write-then-rename; a resume falls back
    to those copies (:func:`restore_state_snapshot`) instead of starting over or failing.

    The experiment state holds every trial (about 10 kB each under Ray 2.60), so reading,
    checking and copying the files costs time in proportion to the trials: a file is copied
    only when it changed since its last copy (its name, size or modification time), and the
    files are looked at at most every ``max(period_s, 19 x the seconds the last look took)``,
    Ray's own rule for how often it saves them (``TUNE_GLOBAL_CHECKPOINT_S=auto``: about 5 % of
    the driver's time). Each file is read once, and the bytes that were whole are the bytes
    copied.

    A look waits for a new save: once the period is over, each step only checks the size and
    modification time of the files the last look found, and looks when one changed. Ray saves in
    the same step, before the callbacks, but its syncer writes the files into the experiment
    folder from a thread; with its period and this one both 2 s, a look at a fixed rate could
    land just before every write and always copy the save before (seen: a run held for 15
    minutes whose snapshot never caught up). So the period is 1 s, half tuner's
    ``TUNE_GLOBAL_CHECKPOINT_S``: every save is copied within a step of landing.

    Args:
        experiment_path: The experiment folder.
        period_s: Seconds between two snapshots, at least.
    """

    def __init__(self, experiment_path: str | os.PathLike, period_s: float = 1.0):
        self.path = Path(experiment_path)
        self.period_s = period_s
        self._last = 0.0
        self._wait_s = period_s
        self._copied: dict[str, tuple] = {}  # glob -> (name, size, mtime_ns) of the file last copied
        self._found: dict[str, Path] = {}  # glob -> the newest file the last look found

    def _changed(self) -> bool:
        """Whether a file the last look found changed since (or it never looked): a few ``stat`` calls,
        not a listing of the folder (which grows with the trials)."""
        if not self._found:
            return True
        for glob, path in self._found.items():
            try:
                st = path.stat()
            except OSError:
                return True
            if (path.name, st.st_size, st.st_mtime_ns) != self._copied.get(glob):
                return True
        return False

    def _snapshot(self) -> None:
        for glob, whole in STATE_KINDS:
            self._snapshot_one(glob, whole)

    def _snapshot_one(self, glob: str, whole: Any) -> None:
        newest = newest_state_file(self.path, glob)
        if newest is None:
            return
        self._found[glob] = newest
        try:
            st = newest.stat()  # before the read: a file rewritten in between is copied again next time
            key = (newest.name, st.st_size, st.st_mtime_ns)
            if key == self._copied.get(glob):
                return
            data = newest.read_bytes()
        except OSError:
            return
        if not whole(data):
            return
        from tuner.run.results import atomic_write

        folder = self.path / STATE_SNAPSHOT_DIR
        folder.mkdir(exist_ok=True)
        atomic_write(folder / newest.name, data)
        self._copied[glob] = key
        for old in folder.glob(glob):
            if old.name != newest.name:
                old.unlink(missing_ok=True)

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        now = _monotonic()
        if now - self._last >= self._wait_s and self._changed():
            self._snapshot()
            self._last = _monotonic()
            self._wait_s = max(self.period_s, 19 * (self._last - now))

    def on_experiment_end(self, trials: list, **info) -> None:
        self._snapshot()

    def __getstate__(self) -> dict:
        return {"path": self.path, "period_s": self.period_s}

    def __setstate__(self, state: dict) -> None:
        # Also a snapshotter pickled by an earlier tuner (in tuner.pkl), which kept "_last" too.
        self.path, self.period_s = Path(state["path"]), state["period_s"]
        self._last, self._wait_s, self._copied, self._found = 0.0, self.period_s, {}, {}


def check_state(experiment_path: str | os.PathLike) -> None:
    """Refuse to resume an experiment whose state is unreadable and has no snapshot.

    Raises:
        ExperimentError: Naming the unreadable file; a resume never silently starts over.
    """
    path = Path(experiment_path)
    newest = newest_state_file(path)
    snapshot = newest_state_file(path / STATE_SNAPSHOT_DIR)
    if newest is None and snapshot is None:
        raise ExperimentError(f"no experiment state ({EXPERIMENT_STATE_GLOB}) in {path}: the run stopped before "
                              "Ray Tune saved any; start it again with `tuner run`.", str(path))
    if newest is not None and not _whole(newest, _json_whole) and not _whole(snapshot, _json_whole):
        raise ExperimentError(f"the experiment state {newest.name} is truncated or unreadable and no "
                              "earlier snapshot exists, so resuming would start over; refusing. Keep the "
                              "results, and start a new experiment with `tuner run --name NEW`.", str(path))


def restore_state_snapshot(experiment_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Put the last whole snapshot in place of each of Ray Tune's state files that is cut short.

    For each kind of :data:`STATE_KINDS` whose newest file in the experiment folder is not
    whole, that file is renamed ``*.corrupt`` (kept for inspection) and its snapshot, when one
    is whole, is copied in its place (write, then rename). A searcher or callback state with no
    snapshot is only set aside: Ray then restores that searcher or scheduler from an older file
    of its kind, or starts it afresh. (An experiment state with no snapshot is refused earlier,
    by :func:`check_state`.)

    Returns:
        The names of the files restored from their snapshots, and of those set aside with none.
    """
    from tuner.run.results import atomic_write

    path = Path(experiment_path)
    restored: list[str] = []
    set_aside: list[str] = []
    for glob, whole in STATE_KINDS:
        newest = newest_state_file(path, glob)
        if newest is not None and _whole(newest, whole):
            continue
        snapshot = newest_state_file(path / STATE_SNAPSHOT_DIR, glob)
        if snapshot is None or not _whole(snapshot, whole):
            if newest is not None and glob != EXPERIMENT_STATE_GLOB:
                os.replace(newest, newest.with_name(newest.name + CORRUPT_SUFFIX))
                set_aside.append(newest.name)
            continue
        if newest is not None:
            os.replace(newest, newest.with_name(newest.name + CORRUPT_SUFFIX))
        atomic_write(path / snapshot.name, snapshot.read_bytes())
        restored.append(snapshot.name)
    return restored, set_aside


def fall_back_to_existing_checkpoints(experiment_path: str | os.PathLike,
                                      location: str | os.PathLike | None = None) -> list[str]:
    """Point each unfinished trial whose recorded checkpoint is gone at its newest checkpoint that exists.

    Ray deletes a trial's older checkpoints as soon as it registers a new one
    (``checkpoint.num_to_keep``) but saves the experiment state only every few seconds, so a
    driver killed in between leaves a state whose trial restores a checkpoint that no longer
    exists, and that trial errors on the resume ("Could not recover from checkpoint as it does
    not exist on storage anymore"). Before the restore, each trial that is not TERMINATED and
    whose latest recorded checkpoint is missing is pointed at its newest checkpoint folder that
    exists and whose result is known (recorded in the state, or a line of its ``result.json``
    that names it, for the iteration count it goes on from); with none, it starts over. The
    recorded checkpoints that are gone are forgotten. The state file is rewritten (write, then
    rename).

    Args:
        experiment_path: The experiment folder (a cloud experiment's local mirror), whose newest
            state Ray restores.
        location: Where the trials' folders are (the cloud URI); default ``experiment_path``.

    Returns:
        One sentence for each trial pointed elsewhere (empty when none).
    """
    import json

    from tuner.experiment.layout import RESULT_FILE
    from tuner.adapters.ray_internals import (RESULT_CHECKPOINT_KEY, TUNE_CHECKPOINT_DIR, SavedCheckpoints,
                                              saved_trial_entries)
    from tuner.experiment.storage import join, list_names, read_text

    state = read_state(experiment_path)
    if state is None:
        return []
    where = os.fspath(location if location is not None else experiment_path)
    notes = []
    for item in saved_trial_entries(state.data):
        try:
            trial = json.loads(item[0])
        except (TypeError, ValueError, IndexError):
            continue
        if trial.get("status") == "TERMINATED" or not trial.get("relative_logdir"):
            continue
        folder = join(where, trial["relative_logdir"])
        present = {n for n in list_names(folder) if TUNE_CHECKPOINT_DIR.match(n)}
        saved = SavedCheckpoints(item)
        gone = saved.latest
        if gone is None or saved.latest_exists(present):
            continue
        known = saved.known()
        for row in parse_result_lines(read_text(join(folder, RESULT_FILE)) or ""):
            if row.get(RESULT_CHECKPOINT_KEY) in present:
                known.setdefault(row[RESULT_CHECKPOINT_KEY], row)
        usable = sorted(present & set(known))
        chosen = usable[-1] if usable else None
        saved.point_at(chosen, present, known.get(chosen) if chosen else None)
        lost = f"trial {trial.get('trial_id')}: its checkpoint {gone}, which the experiment state names, is gone"
        if chosen is None:
            notes.append(f"{lost}, and no other checkpoint of it is left, so it starts over.")
        else:
            iteration = known[chosen].get("training_iteration")
            notes.append(f"{lost}; it goes on from {chosen}" + (f" (iteration {iteration})" if iteration else "")
                         + ", its newest checkpoint that exists.")
    if notes:
        from tuner.experiment.files import atomic_write

        atomic_write(state.file, json.dumps(state.data))
    return notes


def drop_stale_staging(experiment_path: str | os.PathLike) -> None:
    """Remove what an earlier run or resume of the experiment left in this Ray session's staging folder.

    Ray Tune stages the experiment's files (each trial's ``result.json``, ``progress.csv``, ...)
    in the Ray session's folder and copies the staging folder whole to the experiment folder
    every few seconds (:func:`tuner.adapters.ray_internals.experiment_staging_path`). A resume in the
    Ray session that ran the experiment before reuses that folder: had another process resumed
    the experiment in between (``tuner resume``, in its own Ray), the old copies would replace
    the newer files in the experiment folder (an errored trial's ``result.json`` lost the rows
    that resume wrote). Without them, the resume stages afresh: Ray copies the experiment's
    state back, and each trial's results as it opens them
    (:class:`tuner.adapters.ray_internals.StagedResultFileHooks`). Call with Ray running, before
    ``Tuner.restore``.

    Args:
        experiment_path: The experiment folder (a cloud experiment's local mirror).
    """
    import shutil

    from tuner.adapters.ray_internals import experiment_staging_path

    state = read_state(experiment_path)
    if state is None:
        return
    try:
        staging = experiment_staging_path(state.data, Path(experiment_path).name)
    except Exception:  # noqa: BLE001 - a state this Ray cannot read: the restore itself will say so
        return
    if staging is not None and os.path.isdir(staging):
        shutil.rmtree(staging, ignore_errors=True)


def reopen_searcher(experiment_path: str | os.PathLike, old: int, new: int, points: list | None = None) -> None:
    """Let a resumed experiment's searcher go on creating trials, up to ``new`` samples.

    Ray Tune marks the searcher finished whenever a Stopper ends the experiment (the
    time budget, the first-error abort), and ``Tuner.restore`` restores it as it was and
    never adds configurations again: a resume would create no new trial, and a larger
    ``num_samples`` would be ignored. This edits the saved searcher state before the
    restore (write, then rename):

    * ``grid``/``random`` (``BasicVariantGenerator``, ``basic-variant-state-*.json``):
      reopened; for a larger ``num_samples``, one more trial iterator for the extra
      samples, numbered after the existing trials and drawing from the same random
      state, so no configuration repeats.
    * Searchers (Optuna, BOHB; ``SearchGenerator``, ``search_gen_state-*.json``): the
      total becomes ``new``, and the searcher is reopened while trials are left; it
      goes on suggesting from what it has learnt.

    A reopened searcher with nothing left closes itself at its next suggestion. The
    concurrency limit's count of live trials drops the trials the experiment state says
    have finished: Ray may save it before it hears of their end, and the stale entries
    would hold trial slots forever (the resumed run waited for them and hung).

    Args:
        experiment_path: The experiment folder.
        old: ``num_samples`` the experiment ran with (repeats of the grid for grid search).
        new: ``num_samples`` to reach, ``>= old``.
        points: For a conditional space's grid or random search, the extra samples' conditional
            parameters (:func:`tuner.search.space.presets` from ``old``); the new trial iterator runs them.
    """
    from ray import cloudpickle

    from tuner.adapters import ray_internals

    path = Path(experiment_path)
    for template in (BASIC_VARIANT_STATE, SEARCH_GEN_STATE):
        files = sorted(path.glob(template.format("*")))
        if files:
            break
    else:
        return  # stopped before Ray saved a searcher state: the restore starts it afresh
    newest = files[-1]  # the file Ray's _load_newest_checkpoint restores
    state = cloudpickle.loads(newest.read_bytes())
    saved = read_state(path)
    trials = saved.trials if saved is not None else []
    ended = {t["trial_id"] for t in trials if t.get("status") in ("TERMINATED", "ERROR")}
    if template == BASIC_VARIANT_STATE:
        ray_internals.reopen_basic_variant_state(state, ended, old, new, points)
    else:
        ray_internals.reopen_search_generator_state(state, ended, new)
        _remind_bohb_of_live_trials(path, {t["trial_id"]: t for t in trials
                                           if t.get("status") not in ("TERMINATED", "ERROR", None)})
    ray_internals.save_searcher_state(state, str(path), newest.name)


def _remind_bohb_of_live_trials(path: Path, live: dict[str, dict]) -> None:
    """Give a saved TuneBOHB back the trials it forgot that the experiment will resume.

    Ray 2.60's synchronous Hyperband can stop a trial while it is being paused: the
    searcher hears that the trial completed (``TuneBOHB.on_trial_complete`` drops its
    config), but the pause's save lands afterwards and leaves it PAUSED. A resume then
    runs the trial, and its first result at a rung fails in ``TuneBOHB.to_wrapper`` with a
    KeyError. Each unfinished trial of the experiment state that the saved searcher lacks
    gets its config back (the searched parameters, flattened as TuneBOHB keeps them).

    Args:
        path: The experiment folder.
        live: The experiment state's unfinished trials (PENDING, RUNNING, PAUSED), by id.
    """
    from ray import cloudpickle
    from tuner.adapters import ray_internals
    from tuner.core.params import flatten

    files = sorted(path.glob(SEARCHER_STATE.format("*")))
    if not files:
        return
    state = cloudpickle.loads(files[-1].read_bytes())
    bohb = ray_internals.bohb_state(state)
    if bohb is None:
        return  # not TuneBOHB
    known, names, paused = bohb
    missing = {tid: trial for tid, trial in live.items() if tid not in known}
    if not missing:
        return
    for tid, trial in missing.items():
        known[tid] = {k: v for k, v in flatten(trial.get("config") or {}).items() if k in names}
        if trial.get("status") == "PAUSED":
            paused.add(tid)
    ray_internals.save_searcher_state(state, str(path), files[-1].name)




def time_budget_used(experiment_path: str | os.PathLike) -> float | None:
    """Seconds of ``time_budget_s`` an experiment has spent, from its state (:func:`tuner.adapters.state.read_state`).

    Returns:
        The :class:`ExperimentStopper`'s ``used_s`` as Ray last saved it (at most
        ``TUNE_GLOBAL_CHECKPOINT_S`` behind), or None when no state holds one.
    """
    from tuner.adapters.ray_internals import saved_stopper

    state = read_state(experiment_path)
    if state is None:
        return None
    try:  # tuner's own experiment folder, written by this user's run: trusted
        stopper = saved_stopper(state.data)
    except Exception:  # noqa: BLE001 - an older or foreign state: no budget to report
        return None
    return getattr(stopper, "used_s", None)
