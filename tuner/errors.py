"""tuner's own errors: one base class, and what each kind means for the caller.

* :class:`TunerError`: the base of every error tuner raises on purpose. ``exit_code``
  is what the command line exits with when it reaches the top.
* :class:`TrialError`: trials failed in a way that ends the experiment (the first trial's
  bug under ``failure.abort_on_first_error``). Exit code 1, like a run whose trials errored.

Input errors (a bad spec, an unreachable storage, a locked folder) exit with 2; they
live beside the code that finds them (:class:`tuner.spec.SpecError`) for now.
"""

from __future__ import annotations

import os

__all__ = ["TunerError", "TrialError", "DiskFullError"]


class TunerError(Exception):
    """Base of the errors tuner raises on purpose (not bugs, not Ray's own errors).

    Attributes:
        exit_code: The command line's exit code for this error.
    """

    exit_code = 1


class TrialError(TunerError):
    """A trial's error ended the experiment; its traceback is chained as ``__cause__``.

    Raised by :func:`tuner.tune_model` where ``tuner run`` exits with code 1 and prints the
    train function's traceback: the very first trial failed with a bug in the train
    function before any trial reported a result, so the experiment stopped
    (``failure.abort_on_first_error``).

    Attributes:
        trial_id: The failed trial's id.
        path: Its folder (``error.txt``, ``stdout``, ``stderr`` inside).
        traceback: The train function's part of the traceback, as text.
        result: The :class:`~tuner.results.TuneResult` of the stopped experiment (its
            files are written).
    """

    exit_code = 1

    def __init__(self, message: str, *, trial_id: str | None = None, path: str | None = None,
                 traceback: str = "", result=None):
        super().__init__(message)
        self.trial_id = trial_id
        self.path = path
        self.traceback = traceback
        self.result = result


class DiskFullError(TunerError):
    """The disk holding the experiment is full (or the user's quota on it is used up).

    Raised by :func:`tuner.tune_model` (and ``tuner resume``) where ``tuner run`` prints
    the same message and exits with code 75: a write into the experiment failed with
    ``ENOSPC`` or ``EDQUOT``, so the experiment stopped at once. Nothing is lost: the
    state on disk is the last one Ray Tune saved, and once space is freed ``tuner resume``
    keeps the finished trials and continues the others from their latest checkpoints.
    The error that revealed the full disk is chained as ``__cause__``.

    Attributes:
        path: The file (or, for a trial's checkpoint, the trial folder) that could not be
            written.
        experiment: The experiment folder (or cloud URI), as ``tuner resume`` takes it.
        resume_command: ``tuner resume <experiment>``, the command that goes on; None when
            the disk filled before Ray Tune saved any state (then there is nothing to
            resume: remove the folder and run again).
        quota: Whether a disk quota (``EDQUOT``) rather than the disk itself is full.
    """

    exit_code = 75  # EX_TEMPFAIL: the run can go on once the condition is fixed

    def __init__(self, path: str, experiment: str, *, storage: str | None = None, quota: bool = False,
                 what: str = "", resumable: bool = True):
        """Build the message.

        Args:
            path: The file (or folder) that could not be written.
            experiment: The experiment folder or URI.
            storage: The folder whose filesystem is full; default ``path``'s folder.
            quota: ``EDQUOT`` rather than ``ENOSPC``.
            what: What was written into ``path`` when it is a folder, e.g.
                ``"a checkpoint of trial 1a2b3_00001 into "``.
            resumable: Whether Ray Tune had saved a state to resume from.
        """
        self.path = str(path)
        self.experiment = str(experiment)
        self.resume_command = f"tuner resume {experiment}" if resumable else None
        self.quota = quota
        where = storage or os.path.dirname(self.path)
        full = (f"the disk quota is used up: could not write {what}{self.path} (quota exceeded on the filesystem "
                f"of {where})" if quota else
                f"the disk is full: could not write {what}{self.path} (no space left on the filesystem of {where})")
        if resumable:
            then = ("The experiment stopped with its state saved: finished trials stay finished and the others go "
                    f"on from their latest checkpoints. Free some space there, then run:\n  {self.resume_command}")
        else:
            then = ("The experiment stopped before any trial state was saved, so there is nothing to resume. Free "
                    f"some space there, remove {self.experiment} and start the run again.")
        super().__init__(f"{full}. {then}")
