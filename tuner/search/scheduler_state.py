"""The scheduler's state across ``tuner resume``: saved with the experiment, restored before any trial runs.

Ray Tune 2.60 saves the searcher with the experiment but not the scheduler
(``TuneController.__getstate__`` drops ``_scheduler_alg``), so a resumed ASHA starts with
empty rungs, a resumed Hyperband with new brackets, a resumed PBT with no population.
tuner keeps it:

* **Saved through a Ray callback.** :class:`SchedulerStateCallback` holds the scheduler and
  returns its state from ``Callback.get_state``, which Ray calls in the same
  ``TuneController.save_to_dir`` that writes the experiment state, and writes atomically
  (``callback-states-*.pkl``). The scheduler's state is therefore taken at the same moment
  as the trials' statuses that a resume restores, after Ctrl-C and after SIGKILL alike.
  The callback and the scheduler are pickled together in Ray's ``tuner.pkl``, so on
  ``Tuner.restore`` the callback still holds the very scheduler the restored run uses.
* **Restored whole, not rebuilt.** The state is the scheduler's own attributes (Ray's
  ASHA rungs, Hyperband brackets with their paused trials, the median rule's history,
  PBT's population), pickled with each ``Trial`` replaced by its id. Rebuilding from the
  trials' recorded results was the other way, and it was rejected: ASHA's cutoffs depend on
  the order in which results arrived, Hyperband's brackets on which trials were live
  together and which it paused, and PBT's population on which checkpoints it cloned;
  none of that is in ``result.json``.
* **Applied before any trial runs.** Ray restores callbacks before it re-adds the trials
  (``TuneController.resume``), and re-adds them all, the PAUSED ones as PENDING. The
  :class:`KeepsState` mixin of tuner's schedulers holds back those re-adds, and on the
  first call that has the controller (the next trial to add, or ``choose_trial_to_run``)
  puts the saved attributes back, with the ids mapped to the restored trials, pauses
  again the trials that were PAUSED, and adds the trials the saved state did not know
  (``restart_errored`` gives a trial a new id) as Ray would have.
* **The statuses it saw are the truth.** Ray 2.60 saves a trial's status only when it marks
  the trial to be saved, and ``TuneController._schedule_trial_stop`` does not mark a trial
  that has no actor: a PAUSED trial that Hyperband stops for good is TERMINATED in the run
  but PAUSED in the experiment state, and a resume would run it again (outside its
  bracket). Such a trial, TERMINATED when the scheduler's state was taken, stays TERMINATED.

What is lost: a PBT checkpoint that was still being saved when the state was taken
(the trial is not cloned until its next perturbation point). A state that cannot be
restored (a folder from an older tuner, or one that does not match the trials) is said
on the console, and the scheduler starts afresh: see :func:`saved_state_note`.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
from pathlib import Path
from typing import Any

from ray import cloudpickle
from ray.tune import Callback

from tuner.adapters import ray_internals

__all__ = ["KeepsState", "SchedulerStateCallback", "dump_scheduler", "load_scheduler", "saved_state_note",
           "console_note", "STATE_KEY"]

logger = logging.getLogger(__name__)

#: The key of tuner's scheduler state in the callback's saved state (and its format version).
STATE_KEY = "tuner_scheduler_state"
_FORMAT = 1


class _TrialsById(cloudpickle.CloudPickler):
    """Pickle a scheduler's attributes with each ``Trial`` replaced by its id, and a checkpoint still
    being saved (Ray's ``_FutureTrainingResult``) by None."""

    def persistent_id(self, obj: Any) -> Any:
        if ray_internals.is_trial(obj):
            return ("trial", obj.trial_id)
        if ray_internals.is_checkpoint_in_flight(obj):
            return ("in_flight", None)
        return None


class _TrialsFromIds(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, trials: dict[str, Any]):
        super().__init__(file)
        self.trials = trials

    def persistent_load(self, pid: Any) -> Any:
        kind, value = pid
        if kind == "trial":
            try:
                return self.trials[value]
            except KeyError:
                raise pickle.UnpicklingError(f"the saved scheduler state names trial {value}, which the "
                                             "experiment state does not hold") from None
        return None


def _attributes(scheduler: Any) -> dict:
    return {k: v for k, v in vars(scheduler).items() if not k.startswith("_tuner_")}


def dump_scheduler(scheduler: Any, trials: list) -> dict:
    """The state of a scheduler, as saved with the experiment.

    Args:
        scheduler: One of tuner's schedulers (:mod:`tuner.search.algorithms`).
        trials: Every trial of the run (Ray's ``Trial`` objects), as the controller holds them.

    Returns:
        ``{"format": 1, "scheduler": <class name>, "attributes": <bytes>, "trials": [ids],
        "paused": [ids], "terminated": [ids]}``: the pickled attributes, every trial id, and the
        ids of the PAUSED and of the TERMINATED trials.
    """
    buffer = io.BytesIO()
    _TrialsById(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(_attributes(scheduler))
    return {"format": _FORMAT, "scheduler": type(scheduler).__name__, "attributes": buffer.getvalue(),
            "trials": [t.trial_id for t in trials], "paused": [t.trial_id for t in trials if t.status == "PAUSED"],
            "terminated": [t.trial_id for t in trials if t.status == "TERMINATED"]}


def load_scheduler(state: dict, trials: dict[str, Any]) -> dict:
    """The attributes of a saved scheduler, with its trials mapped to ``trials``.

    Args:
        state: From :func:`dump_scheduler`.
        trials: The restored trials by id.

    Returns:
        The scheduler's attributes (for ``vars(scheduler).update``).

    Raises:
        pickle.UnpicklingError: If the state names a trial that ``trials`` lacks.
        ValueError: If the state is of another format.
    """
    if state.get("format") != _FORMAT:
        raise ValueError(f"scheduler state format {state.get('format')!r}, expected {_FORMAT}")
    return _TrialsFromIds(io.BytesIO(state["attributes"]), trials).load()


class KeepsState:
    """Mixin before one of Ray's schedulers: restores the state a :class:`SchedulerStateCallback` saved.

    See the module's docstring for when. The state arrives through :meth:`restore_later`
    (from the callback's ``set_state``), before Ray re-adds the restored trials.
    """

    _tuner_saved: dict | None = None
    _tuner_held: list | None = None

    def restore_later(self, state: dict) -> None:
        """Keep a saved state, to be restored on the next call that has the controller."""
        self._tuner_saved = state
        self._tuner_held = []

    def on_trial_add(self, tune_controller, trial) -> None:
        saved = self._tuner_saved
        if saved is not None and trial.trial_id in saved["trials"]:
            self._tuner_held.append(trial)
            return
        if saved is not None:
            self._restore(tune_controller)
        super().on_trial_add(tune_controller, trial)  # type: ignore[misc]  # a mixin before Ray's scheduler

    def choose_trial_to_run(self, tune_controller, *args, **kwargs):
        if self._tuner_saved is not None:
            self._restore(tune_controller)
        return super().choose_trial_to_run(tune_controller, *args, **kwargs)

    def _restore(self, tune_controller) -> None:
        saved, held = self._tuner_saved, self._tuner_held or []
        self._tuner_saved = self._tuner_held = None
        trials = {t.trial_id: t for t in ray_internals.controller_trials(tune_controller)}
        try:
            attributes = load_scheduler(saved, trials)
        except Exception as err:  # noqa: BLE001 - any unreadable state: start afresh, and say so
            console_note(f"the {type(self).__name__.strip('_')} scheduler's saved state could not be restored ({err}); "
                 "it starts afresh, so trials it would have stopped early may run longer.")
            for trial in held:
                super().on_trial_add(tune_controller, trial)  # type: ignore[misc]
            return
        vars(self).update(attributes)
        known = set(saved["trials"])
        for trial in ray_internals.controller_trials(tune_controller):
            if trial.trial_id not in known:  # e.g. a trial restarted under a new id
                super().on_trial_add(tune_controller, trial)  # type: ignore[misc]
        for status in ("PAUSED", "TERMINATED"):
            for trial_id in saved[status.lower()]:
                trial = trials.get(trial_id)
                if trial is not None and trial.status == "PENDING":
                    ray_internals.controller_set_status(tune_controller, trial, status)
        logger.info("restored the %s scheduler's state: %d trials, %d paused", type(self).__name__,
                    len(known), len(saved["paused"]))


def console_note(message: str) -> None:
    """A tuner note on the console (stderr, as ``tuner: note: <message>``) and in the log, during a run.

    Args:
        message: One sentence or paragraph, without the ``tuner: note:`` prefix.
    """
    import sys

    logger.warning(message)
    print(f"tuner: note: {message}", file=sys.stderr, flush=True)


class SchedulerStateCallback(Callback):
    """Save the scheduler's state with the experiment, and hand it back on a resume.

    Args:
        scheduler: The run's scheduler, one of tuner's :class:`KeepsState` schedulers; the
            same object that ``TuneConfig(scheduler=...)`` gets.
    """

    def __init__(self, scheduler: KeepsState):
        self.scheduler = scheduler
        self._trials: list | None = None

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        self._trials = trials  # the controller's own list: every trial, as it grows

    def get_state(self) -> dict | None:
        if self._trials is None:
            return None
        return {STATE_KEY: dump_scheduler(self.scheduler, self._trials)}

    def set_state(self, state: dict) -> None:
        if STATE_KEY in state:
            self.scheduler.restore_later(state[STATE_KEY])

    def __getstate__(self) -> dict:
        return {"scheduler": self.scheduler, "_trials": None}


def saved_state_note(experiment_path: str | os.PathLike, scheduler_type: str) -> str | None:
    """What a resume says when the experiment holds no saved scheduler state, else None.

    Args:
        experiment_path: The experiment folder (a local one, or a cloud experiment's mirror).
        scheduler_type: The spec's ``scheduler.type``.

    Returns:
        A one-sentence note, or None when the state is there (or the scheduler keeps none: fifo).
    """
    if scheduler_type == "fifo":
        return None
    from tuner.experiment.layout import CALLBACK_STATE_GLOB

    files = sorted(Path(experiment_path).glob(CALLBACK_STATE_GLOB))
    try:
        states = cloudpickle.loads(files[-1].read_bytes()) if files else {}
    except Exception:  # noqa: BLE001 - unreadable: the same as absent
        states = {}
    if any(isinstance(s, dict) and STATE_KEY in s for s in (states or {}).values()):
        return None
    return (f"this experiment holds no saved state of its {scheduler_type} scheduler (it was started by an "
            f"older tuner, or stopped before its first save), so the scheduler starts afresh: trials it would "
            f"have stopped early may run longer.")
