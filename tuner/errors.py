"""tuner's own errors: one taxonomy, and the exit code each kind means for the caller.

Modelled on Hydra's ``hydra.errors``: every error tuner raises on purpose derives from
:class:`TunerError`, and the command line's one catch site (:func:`tuner.cli.main`) prints
its message as one paragraph (``tuner: error: <message>``; the traceback only with
``TUNER_DEBUG=1``) and exits with its ``exit_code``::

    TunerError                      exit 1
    +-- InputError                  exit 2   bad input; refused before anything starts
    |   +-- SpecError               (tuner.spec) the spec, or a --set/option that sets a spec field
    |   +-- StorageError            the storage URI cannot be reached, read or written
    |   +-- ExperimentError         the experiment folder cannot be resumed
    |   |   +-- ExperimentLocked    the experiment folder is in use by another run
    |   +-- ClusterError            the Ray cluster or its Jobs API (--address)
    |   +-- ReportError             (tuner.report) no experiment (or storage) folder to report on
    +-- TrialError                  exit 1   the first trial's bug ended the experiment
    +-- DiskFullError               exit 75  the disk holding the experiment is full

Any other exception is a bug (or Ray's own error): exit 1, its type and message, and
``tuner: set TUNER_DEBUG=1 to see the traceback.``; Ctrl-C exits 130.

Every one of them survives pickling (Ray carries exceptions between processes): a pickled
error comes back without calling its constructor, with the same message and attributes
(:meth:`TunerError.__reduce__`); the chained ``__cause__`` stays behind, as for any pickled
exception.
"""

from __future__ import annotations

import os

__all__ = ["TunerError", "InputError", "StorageError", "ExperimentError", "ExperimentLocked", "ClusterError",
           "TrialError", "DiskFullError"]


class TunerError(Exception):
    """Base of the errors tuner raises on purpose (not bugs, not Ray's own errors).

    Raised through its subclasses; :func:`tuner.cli.main` catches every one of them,
    prints ``tuner: error: <message>`` and exits with its ``exit_code``. Exit code 1
    (each subclass below says its own).

    Attributes:
        exit_code: The command line's exit code for this error.
    """

    exit_code = 1

    def __reduce__(self):
        """Pickle as the message and the attributes, without the constructor's arguments.

        ``BaseException`` pickles an error as its class called on ``self.args``, which for most
        of these classes is the built message, not what their constructors take (a
        :class:`DiskFullError` needs a path and an experiment, a
        :class:`~tuner.spec.SpecError` its issues). The error is rebuilt from its class, its
        ``args`` and its ``__dict__`` instead, the way ``copyreg`` rebuilds plain objects.
        """
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type[TunerError], args: tuple, state: dict) -> TunerError:
    """Unpickle a :class:`TunerError`: its class, with ``args`` and ``state`` set, no constructor called."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class InputError(TunerError):
    """Bad input: the command cannot go on as given, and nothing was started for it.

    The base of the input errors below; raised as itself for command-line options that
    exclude each other (``tuner resume --resume-errored --restart-errored``). The command
    line prints the one-paragraph message and exits with code 2.

    Args:
        message: What is wrong and what to do, one paragraph.
        where: What the message is about (a file, an option such as ``--address``); the
            message then reads ``<where>: <message>``, as a :class:`~tuner.spec.SpecError` does.

    Attributes:
        where: As given.
    """

    exit_code = 2

    def __init__(self, message: str = "", where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class StorageError(InputError, RuntimeError):
    """The storage URI cannot be reached, read or written (the message names the URI).

    Raised by :mod:`tuner.experiment.storage` (listing, opening, downloading or uploading a cloud
    folder), which :func:`tuner.run.prepare.prepare` and :func:`tuner.run.prepare.prepare_resume` call
    before anything starts, as do ``tuner report`` and ``tuner list`` for a cloud URI. A
    ``storage`` value that is malformed (no bucket, a relative ``file://`` path) is a
    :class:`~tuner.spec.SpecError` instead. Exit code 2 (also for an upload that fails
    during a run: the experiment's files are then in its local mirror). Also a
    ``RuntimeError``, as before.
    """


class ExperimentError(InputError):
    """The experiment folder cannot be resumed: it is not a tuner experiment, its state is
    missing or unreadable, or its trainable cannot be found by name.

    Raised by :func:`tuner.run.prepare.prepare_resume` and :func:`tuner.run.failures.check_state`
    before Ray starts (``tuner resume`` exits with code 2); nothing is written.
    """


class ExperimentLocked(ExperimentError, RuntimeError):
    """Another ``tuner`` process is running this experiment (its folder is locked).

    Raised by :class:`tuner.run.failures.ExperimentLock` on entry, where ``tuner run`` and
    ``tuner resume`` exit with code 2 before they write anything. Also a
    ``RuntimeError``, as before.
    """


class ClusterError(InputError):
    """The Ray cluster or its Jobs API cannot be used as given.

    Raised by :func:`tuner.run.prepare.prepare` (``--num-cpus``/``--num-gpus`` together with an
    address), :func:`tuner.run.prepare.check_cluster` (the cluster at ``--address`` cannot be
    reached), :func:`tuner.run.cluster.job_client` (``--address`` is not the dashboard's
    http(s) URL, or the Jobs API cannot be reached), :func:`tuner.run.cluster.submit_job` (a
    ``--working-dir`` that is not a folder) and :func:`tuner.run.cluster.stage_submitted_spec`
    (outside a job sent by ``tuner submit``). Exit code 2.
    """


class TrialError(TunerError):
    """A trial's error ended the experiment; its traceback is chained as ``__cause__``.

    Raised by :func:`tuner.tune_model` where ``tuner run`` exits with code 1 and prints the
    train function's traceback: the very first trial failed with a bug in the train
    function before any trial reported a result, so the experiment stopped
    (``failure.abort_on_first_error``). Exit code 1.

    Attributes:
        trial_id: The failed trial's id.
        path: Its folder (``error.txt``, ``stdout``, ``stderr`` inside).
        traceback: The train function's part of the traceback, as text.
        result: The :class:`~tuner.run.results.TuneResult` of the stopped experiment (its
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
