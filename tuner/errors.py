"""tuner's own errors: one base class, and what each kind means for the caller.

* :class:`TunerError`: the base of every error tuner raises on purpose. ``exit_code``
  is what the command line exits with when it reaches the top.
* :class:`TrialError`: trials failed in a way that ends the experiment (the first trial's
  bug under ``failure.abort_on_first_error``). Exit code 1, like a run whose trials errored.

Input errors (a bad spec, an unreachable storage, a locked folder) exit with 2; they
live beside the code that finds them (:class:`tuner.spec.SpecError`) for now.
"""

from __future__ import annotations

__all__ = ["TunerError", "TrialError"]


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
