"""The console during a run: the CLIReporter table, its progress line, a quiet Ray, a full disk kept off it.

* The table is Ray's classic ``CLIReporter``. Ray >= 2.7 ignores ``progress_reporter``
  under its new output engine (ray-project/ray#38202), so :func:`prepare_console` sets
  ``RAY_AIR_NEW_OUTPUT=0`` before Tune starts, unless the user set it.
* Ray's driver-side log lines go to ``<experiment>/tuner.log``; the console keeps
  nothing of Ray's (tuner prints its own summary of errors). Trial stdout/stderr go to each
  trial's folder (``log_to_file``).
* :class:`TableReporter`: the table's best trial follows :mod:`tuner.core.best` (as
  ``summary.json``), its folder line names the experiment folder, and
  :class:`ProgressLine` sums up the run in one line under each table.
* A full disk: :class:`DiskFullWatch` notices it wherever it surfaces in the driver and
  keeps its tracebacks (writer threads, Ray's logger callbacks, ``tuner.log`` itself) off
  the console; :class:`StopOnFullDisk` then ends the Tune run at once. The watch lives here
  because its job is what reaches the console and ``tuner.log`` (whose handler,
  :class:`log_to_file`'s, notes the full disks it meets); :mod:`tuner.run.loggers` asks it
  whether the disk is full, :mod:`tuner.run.engine` turns what it noticed into a
  :class:`~tuner.errors.DiskFullError`.

The loggers of a run (JSON, CSV, TensorBoard, W&B, MLflow) are :mod:`tuner.run.loggers`'.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from ray.tune import Callback, CLIReporter

from tuner.core.best import analysis_value, best as best_of, metric_value
from tuner.experiment.files import disk_full
from tuner.experiment.layout import RUN_RECORD
from tuner.core.params import flatten
from tuner.search.pareto import feasible
from tuner.adapters.ray_internals import CLIReporterHooks, experiment_fs_path
from tuner.spec import Spec
from tuner.spec.conditions import sampled_params

__all__ = ["prepare_console", "build_reporter", "log_to_file", "tensorboard_hint", "BestRule",
           "TableReporter", "ProgressLine", "progress_line", "best_trial", "last_value",
           "DiskFullWatch", "keep_off_console", "StopOnFullDisk"]

_QUIET_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air", "ray.data")


def prepare_console() -> None:
    """Select Ray's classic output (so the CLIReporter table shows) and quiet Ray.

    Sets ``RAY_AIR_NEW_OUTPUT=0``, ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`` (the
    loggers are passed explicitly by :func:`tuner.run.loggers.build_callbacks`) and
    ``TUNE_GLOBAL_CHECKPOINT_S=2`` unless already set.
    """
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Save the experiment state at least every 2 s (Ray's "auto" waits longer), so a
    # killed driver loses little and a resume does not rerun trials that had finished.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")


def build_reporter(spec: Spec) -> TableReporter | None:
    """Build the CLIReporter whose columns are the sampled parameters and the metrics.

    Returns:
        A :class:`TableReporter` (Ray's ``CLIReporter``) with ``parameter_columns`` = the
        varied parameters and ``metric_columns`` = ``reporting.cli.metric_columns``
        (default: every objective's metric, every constraint's, and ``training_iteration``),
        printing the progress line under
        each table unless ``reporting.cli.progress`` is false; or None when
        ``reporting.cli`` is false.
    """
    cli = spec.reporting.cli
    if not cli.enabled:
        return None
    names = list(cli.metric_columns or [*(o.metric for o in spec.objectives or []),
                                        *(c.metric for c in spec.constraints or [])])
    columns = {name: name for name in dict.fromkeys(names)}
    columns.setdefault("training_iteration", "iter")
    location = None
    if spec.remote_storage:
        from tuner.experiment.storage import display, join

        location = display(join(spec.storage, spec.name))
    return TableReporter(
        metric_columns=columns,
        parameter_columns=sampled_params(spec),
        max_report_frequency=cli.max_report_frequency,
        # Not sort_by_metric: Ray 2.60 then compares None with None and crashes when a
        # TERMINATED trial never reported the metric (e.g. after a first-trial abort).
        progress=ProgressLine(spec.metric, spec.mode, spec.time_budget_s, best=BestRule.of(spec)) if cli.progress
        else None,
        location=location,
        best=BestRule.of(spec),
    )


class BestRule:
    """Which trial the console calls the best, as ``summary.json`` does (:mod:`tuner.core.best`): by the
    spec's metric (the first objective), among the feasible trials (:mod:`tuner.search.pareto`) and, with
    several objectives, among the Pareto front's trials.

    Args:
        metric: The spec's metric, or None.
        mode: ``min`` or ``max``.
        objectives: The spec's objectives (two or more: the front is computed), or None.
        constraints: The spec's constraints, or None.
        scope: ``best.scope``: which reported values score a trial (:func:`tuner.core.best.scope_value`).
    """

    def __init__(self, metric: str | None, mode: str | None, objectives: list | None = None,
                 constraints: list | None = None, scope: str = "last"):
        self.metric, self.mode, self.scope = metric, mode, scope
        self.objectives = list(objectives or [])
        self.constraints = list(constraints or [])
        self._front: tuple[tuple, list] | None = None  # the last answer of front(), by the results it came from

    @classmethod
    def of(cls, spec: Spec) -> BestRule:
        """The spec's rule."""
        return cls(spec.metric, spec.mode, spec.objectives, spec.constraints, spec.best.scope)

    def front(self, trials: list) -> list | None:
        """The Pareto front of Ray ``Trial`` objects (their last results); None for one objective.

        The table and the progress line of one report ask for the same trials' front: it is
        computed once for them."""
        if len(self.objectives) < 2:
            return None
        key = tuple((t.trial_id, str(t.status), id(t.last_result)) for t in trials)
        if self._front is None or self._front[0] != key:
            from tuner.search.pareto import pareto_front

            self._front = (key, pareto_front(trials, self.objectives, result=lambda t: t.last_result,
                                             status=lambda t: t.status, constraints=self.constraints))
        return self._front[1]

    def best(self, trials: list):
        """The best of Ray ``Trial`` objects so far, or None."""
        front = self.front(trials)
        return best_trial(trials, self.metric, self.mode, self.constraints, front, self.scope)


class TableReporter(CLIReporterHooks, CLIReporter):
    """Ray's classic ``CLIReporter`` table, with tuner's best trial, folder and progress line.

    * ``Current best trial``: chosen by :mod:`tuner.core.best`'s rule, as ``summary.json``
      (Ray's own pick includes errored trials), and its value labelled ``last``: it is
      the trial's last reported value, which may go down as well as up while it runs.
    * Ray's ``Result logdir`` line names its staging folder under ``/tmp/ray``; here it
      is ``Experiment folder: <storage>/<name>``, where the results are.
    * The progress line (:class:`ProgressLine`) right under each table, from the same
      trials, so both name the same best trial.

    Args:
        progress: The progress line, or None for the table alone.
        location: The experiment's cloud URI, for display; None for a local folder
            (then read from the trials).
        best: Which trial is the best (the spec's :class:`BestRule`); None: by Ray's metric and
            mode (the scheduler's objective).
        **kwargs: Ray's ``CLIReporter`` arguments.
    """

    _LOGDIR = "Result logdir: "
    _BEST = "Current best trial: "

    def __init__(self, *, progress: ProgressLine | None = None, location: str | None = None,
                 best: BestRule | None = None, **kwargs):
        super().__init__(**kwargs)
        self.progress = progress
        self.location = location
        self.best = best
        self.parameter_names = list(kwargs.get("parameter_columns") or [])

    def setup(self, *args, **kwargs) -> None:
        """Ray's setup at the start of each session (a run or a resume); the clocks start.

        The first table comes one period (``max_report_frequency``) after the start, not at
        once with every trial PENDING: a run shorter than a period prints its table (and
        Ray's scheduler line in it) once, at the end.
        """
        super().setup(*args, **kwargs)
        self.restart_report_clock()  # Ray's CLIReporter starts it at 0: a table at once
        if self.progress is not None:
            self.progress.start()  # a resumed run counts its own seconds

    def table_best_trial(self, trials: list):
        rule = getattr(self, "best", None) or BestRule(self.reporter_metric, self.reporter_mode)
        if not rule.metric or not trials:
            return None, rule.metric
        return rule.best(trials), rule.metric

    def _folder(self, trials: list) -> str:
        if self.location:
            return self.location
        return experiment_fs_path(trials[0])

    def edit_table(self, text: str, trials: list, delim: str) -> str:
        lines, folder_shown = [], False
        for line in text.split(delim):
            if line.startswith(self._LOGDIR):
                if not folder_shown:
                    lines.append(f"Experiment folder: {self._folder(trials)}")
                    folder_shown = True
                continue
            if line.startswith(self._BEST):
                line = self._best_line(line, trials)
            lines.append(line)
        return delim.join(lines)

    def _best_line(self, line: str, trials: list) -> str:
        """Ray's ``Current best trial`` line with the value as ``last <metric>=<value>``."""
        from ray.tune.utils import unflattened_lookup

        trial, metric = self.table_best_trial(trials)
        if trial is None:
            return line
        value = unflattened_lookup(metric, trial.last_result, default=None)
        line = line.replace(f" with {metric}={value} and ", f" with {last_value(metric, value)} and ", 1)
        head, said, _ = line.partition(" and parameters=")
        if not said:
            return line
        config = flatten((trial.last_result or {}).get("config") or {})
        # Only the parameters the trial has (a conditional space leaves the inactive ones out).
        return f"{head} and parameters={ {name: config[name] for name in self.parameter_names if name in config} }"

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        """Print the table and, right under it, the progress line for the same trials."""
        text = self.table_text(trials, done, *sys_info)
        if self.progress is not None and trials:
            text += self.progress.line(trials, self.reporter_total_samples)
        self.print_text(text)


# --------------------------------------------------------------------------- progress line


def progress_line(done: int, total: int, errored: int = 0, used_s: float | None = None,
                  budget_s: float | None = None, metric: str | None = None, best: float | None = None,
                  best_trial: str | None = None, front: int | None = None) -> str:
    """The overall progress in one line.

    Example: ``Progress: 12/32 trials done | 310/900 s of time budget | best trial
    abc_00003, last val_accuracy=0.9712``.

    Args:
        done: Trials that ended (TERMINATED or ERROR).
        total: Trials the experiment will run.
        errored: Trials among ``done`` that ended in ERROR.
        used_s: Seconds of the time budget used (or run so far, without a budget).
        budget_s: The time budget, or None.
        metric: The spec's metric, or None.
        best: The last value of ``metric`` of the best trial so far, or None.
        best_trial: The best trial's id.
        front: Several objectives: the number of trials on the Pareto front so far; None otherwise.
    """
    parts = [f"{done}/{total} trials done" + (f" ({errored} errored)" if errored else "")]
    if used_s is not None:
        parts.append(f"{used_s:.0f}/{budget_s:g} s of time budget" if budget_s else f"{used_s:.0f} s elapsed")
    if front is not None:
        parts.append(f"Pareto front {front} trial{'s' if front != 1 else ''}")
    if metric:
        parts.append(f"best trial {best_trial}, {last_value(metric, best)}" if best is not None
                     else f"no {metric} reported yet")
    return "Progress: " + " | ".join(parts)


def last_value(metric: str, value: Any) -> str:
    """``last <metric>=<value>``: how the console shows the best trial's value (its last reported)."""
    shown = f"{value:.6g}" if isinstance(value, float) else value
    return f"last {metric}={shown}"


def best_trial(trials: list, metric: str | None, mode: str | None, constraints: list | None = None,
               front: list | None = None, scope: str = "last"):
    """The best of Ray ``Trial`` objects so far, by :mod:`tuner.core.best`'s rule (their last results).

    Args:
        trials: Ray ``Trial`` objects.
        metric: The metric, or None.
        mode: ``min`` or ``max``.
        constraints: The spec's constraints: only a feasible trial can be the best.
        front: Several objectives: the Pareto front's trials, the only ones that can be the best.
        scope: ``best.scope``; other than ``last``, a trial's score is Ray's running summary of its
            values (``Trial.metric_analysis``, :func:`tuner.core.best.analysis_value`).

    Returns:
        The trial, or None (no metric, or no feasible trial with a finite last value that did not error).
    """
    if not metric:
        return None
    on_front = None if front is None else {t.trial_id for t in front}
    def score(t: Any) -> Any:
        if scope == "last":
            return metric_value(t.last_result, metric)
        return analysis_value((t.metric_analysis or {}).get(metric), scope, mode)

    return best_of(trials, mode, value=score,
                   status=lambda t: t.status, trial_id=lambda t: t.trial_id,
                   feasible=(lambda t: feasible(t.last_result, constraints)) if constraints else None,
                   on_front=None if on_front is None else lambda t: t.trial_id in on_front)


class ProgressLine:
    """One line of overall progress, printed by :class:`TableReporter` under each table.

    Trials done / total, the time budget used (summed over a run and its resumes, as
    the :class:`~tuner.run.failures.ExperimentStopper` counts it) or the seconds elapsed in
    this session, and the best trial so far with its last value (:func:`best_trial`, the
    same trial as the table's ``Current best trial``).

    Args:
        metric: The spec's metric, or None.
        mode: ``min`` or ``max``.
        time_budget_s: The spec's time budget, or None (a resume reads the current one
            from ``tuner_run.json``).
        best: Which trial is the best (the spec's :class:`BestRule`); None: by ``metric`` alone.
            With several objectives the line also gives the size of the Pareto front.
    """

    def __init__(self, metric: str | None, mode: str | None, time_budget_s: float | None,
                 best: BestRule | None = None):
        self.metric = metric
        self.mode = mode
        self.time_budget_s = time_budget_s
        self.rule = best or BestRule(metric, mode)
        self._started = time.monotonic()

    def start(self) -> None:
        """Start counting the seconds elapsed (at the start of each session)."""
        self._started = time.monotonic()

    def line(self, trials: list, total: int = 0) -> str:
        """The progress line for these trials (Ray ``Trial`` objects), of ``total`` trials to run."""
        statuses = [str(t.status) for t in trials]
        done = sum(s in ("TERMINATED", "ERROR") for s in statuses)
        rule = getattr(self, "rule", None) or BestRule(self.metric, self.mode)  # a restored older one has none
        front = rule.front(trials)
        top = rule.best(trials)
        value = metric_value(top.last_result, self.metric) if top is not None else None
        used, budget = self._budget(trials)
        return progress_line(done, max(total, len(trials)), statuses.count("ERROR"), used, budget,
                             self.metric, value, top.trial_id if top is not None else None,
                             None if front is None else len(front))

    def _budget(self, trials: list) -> tuple[float, float | None]:
        elapsed = time.monotonic() - self._started
        folder = experiment_fs_path(trials[0])
        path = Path(folder) if folder is not None else None  # the experiment folder
        budget = self.time_budget_s
        if path is None or not path.is_dir():
            return elapsed, budget
        try:
            budget = json.loads((path / RUN_RECORD).read_text()).get("time_budget_s", budget)
        except (OSError, ValueError):
            pass
        if budget is None:
            return elapsed, None
        from tuner.run.failures import time_budget_used

        used = time_budget_used(path)
        return (elapsed if used is None else used), budget


class log_to_file:  # used as a context manager, like open()
    """Send Ray's driver-side log records to a file; keep only errors on the console.

    Args:
        path: The log file, e.g. ``<experiment>/tuner.log``; its folder must exist.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._handler: logging.Handler | None = None
        self._saved: list[tuple[logging.Handler, int]] = []

    def __enter__(self) -> log_to_file:
        self._handler = _LogFile(self.path, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._handler.setLevel(logging.INFO)
        for name in _QUIET_LOGGERS:
            log = logging.getLogger(name)
            for h in log.handlers:
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                    self._saved.append((h, h.level))
                    h.setLevel(logging.CRITICAL)
        logging.getLogger("ray").addHandler(self._handler)
        _DISK_FULL_LOG.addHandler(self._handler)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("ray").removeHandler(self._handler)
        _DISK_FULL_LOG.removeHandler(self._handler)
        if self._handler:
            try:
                self._handler.close()  # flushes: fails when tuner.log is on a full disk
            except OSError as err:
                if not _note_disk_full(err):
                    raise
        for h, level in self._saved:
            h.setLevel(level)


def tensorboard_hint(experiment_path: str | os.PathLike) -> str:
    """The command that shows the experiment's TensorBoard event files."""
    return f"tensorboard --logdir {experiment_path}"


# --------------------------------------------------------------------------- a full disk

# Tracebacks of writes that failed on a full disk: into tuner.log while a run holds it
# (log_to_file), else nowhere; never to the console (the NullHandler keeps Python's
# last-resort handler, which prints to stderr, away).
_DISK_FULL_LOG = logging.getLogger("tuner.disk_full")
_DISK_FULL_LOG.propagate = False
_DISK_FULL_LOG.addHandler(logging.NullHandler())

_previous_hooks: dict[str, Any] = {}
_disk_full_seen = False  # in this process: leftover writers may fail again until it exits


class DiskFullWatch:
    """Notice a full disk wherever it surfaces in the driver while a run or resume lasts.

    A full disk (``ENOSPC``, or ``EDQUOT`` for a used-up quota; :func:`tuner.experiment.files.disk_full`
    tells) fails many writers at once: trials persisting checkpoints, Ray's experiment-state
    sync, Ray's JSON/CSV/TensorBoard logger callbacks, tensorboardX's writer threads,
    ``tuner.log`` and tuner's own files. While the watch is active:

    * a thread that dies of a full disk (tensorboardX's event writers) and a full disk that
      Python can only report as "unraisable" (a writer flushed at exit) are logged to
      ``tuner.log`` when it can still be written, and dropped otherwise, instead of
      printing a traceback on the console;
    * ``tuner.log`` on the full disk drops its lines instead of printing
      ``--- Logging error ---`` on the console;
    * Ray's log records that carry a full disk's error (the experiment-state save), and
      trials that failed of one (:class:`StopOnFullDisk`), are noted.

    The first full disk noted is kept in :attr:`error` and :attr:`path`; the caller turns
    it into one :class:`~tuner.errors.DiskFullError`. Every other error keeps Python's and
    Ray's usual handling. The hooks are Python's ``threading.excepthook`` and
    ``sys.unraisablehook``; once a full disk was seen they stay in place after the watch
    (still only for full-disk errors), since writers left open on the full disk flush
    again when the interpreter exits.

    Attributes:
        error: The first full disk's ``OSError``, or None.
        path: The file (or folder) it could not write; None until an error names one.
        what: What was written into ``path`` when it is a folder, else ``""``.
    """

    active: ClassVar[DiskFullWatch | None] = None

    def __init__(self):
        self.error: OSError | None = None
        self.path: str | None = None
        self.what = ""
        self._outer: DiskFullWatch | None = None

    def __enter__(self) -> DiskFullWatch:
        self._outer, DiskFullWatch.active = DiskFullWatch.active, self
        _install_hooks()
        return self

    def __exit__(self, *exc) -> None:
        DiskFullWatch.active = self._outer
        if DiskFullWatch.active is None and not _disk_full_seen:
            _uninstall_hooks()

    def note(self, error: BaseException | None, path: str | os.PathLike | None = None, what: str = "") -> bool:
        """Note ``error`` if it is a full disk's.

        Args:
            error: Any exception.
            path: What could not be written, when the error does not name it.
            what: Says what was written into ``path``, e.g. ``"a checkpoint of trial X into "``.

        Returns:
            Whether ``error`` is a full disk's.
        """
        full = disk_full(error)
        if full is None:
            return False
        global _disk_full_seen
        _disk_full_seen = True
        if full.filename:
            path, what = full.filename, ""
        if self.error is None or (self.path is None and path):  # one that names its file is worth more
            self.error, self.path, self.what = full, (os.fspath(path) if path else None), what
        return True


def _note_disk_full(error: BaseException | None) -> bool:
    """Note a full disk on the active :class:`DiskFullWatch`; whether ``error`` is one."""
    watch = DiskFullWatch.active
    if watch is not None:
        return watch.note(error)
    return disk_full(error) is not None


def keep_off_console(error: BaseException | None, what: str) -> bool:
    """Log a full disk's traceback to ``tuner.log`` only (if it can be written), not on the console.

    Args:
        error: Any exception, or None.
        what: What failed, for the log line (``"the HParams experiment summary in /x"``).

    Returns:
        Whether ``error`` is a full disk's (noted on the active :class:`DiskFullWatch`); any other
        error is left to the caller.
    """
    if error is None or not _note_disk_full(error):
        return False
    _DISK_FULL_LOG.warning("the disk is full: %s failed", what,
                           exc_info=(type(error), error, error.__traceback__))
    return True


def _thread_hook(args) -> None:
    if (DiskFullWatch.active is not None or _disk_full_seen) and \
            keep_off_console(args.exc_value, f"thread {getattr(args.thread, 'name', '?')}"):
        return
    _previous_hooks["thread"](args)


def _unraisable_hook(unraisable) -> None:
    if (DiskFullWatch.active is not None or _disk_full_seen) and \
            keep_off_console(unraisable.exc_value, unraisable.err_msg or f"{unraisable.object!r}"):
        return
    _previous_hooks["unraisable"](unraisable)


def _install_hooks() -> None:
    if threading.excepthook is not _thread_hook:
        _previous_hooks["thread"], threading.excepthook = threading.excepthook, _thread_hook
    if sys.unraisablehook is not _unraisable_hook:
        _previous_hooks["unraisable"], sys.unraisablehook = sys.unraisablehook, _unraisable_hook


def _uninstall_hooks() -> None:
    if threading.excepthook is _thread_hook:
        threading.excepthook = _previous_hooks.pop("thread")
    if sys.unraisablehook is _unraisable_hook:
        sys.unraisablehook = _previous_hooks.pop("unraisable")


class _LogFile(logging.FileHandler):
    """``tuner.log``: notes the full disks in the records it gets; on a full disk itself,
    drops its lines quietly instead of printing ``--- Logging error ---``."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            _note_disk_full(record.exc_info[1])  # e.g. Ray's "Saving experiment state ... failed"
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # logging's name
        if not _note_disk_full(sys.exc_info()[1]):  # not named: the file that filled the disk matters more
            super().handleError(record)


class StopOnFullDisk(Callback):
    """End the Tune run at once when the :class:`DiskFullWatch` has noticed a full disk.

    It raises the full disk's error from Ray Tune's loop (the caller turns it into a
    :class:`~tuner.errors.DiskFullError`). Unlike a stop, that skips the final save Ray
    makes of the whole experiment, and that save would rewrite every file on the full
    disk and could cut some short. The experiment keeps its last state saved before the
    disk filled: finished trials finished, unfinished ones (the one that failed on the
    full disk included) resumable from their latest checkpoints, and no further trial
    starts only to fail on the same disk. A trial that failed of a full disk is noted
    with its folder. Ray keeps this callback in the experiment (``tuner.pkl``), so a
    resume has it too.
    """

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        watch = DiskFullWatch.active
        if watch is None:
            return
        if trial.pickled_error_file:
            from ray import cloudpickle

            try:
                with open(trial.pickled_error_file, "rb") as f:
                    error = cloudpickle.load(f)
            except Exception:  # noqa: BLE001 - no readable error: nothing to tell
                error = None
            watch.note(error, trial.path, f"a checkpoint of trial {trial.trial_id} into ")
        self._stop()

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        self._stop()

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        self._stop()

    @staticmethod
    def _stop() -> None:
        watch = DiskFullWatch.active
        if watch is not None and watch.error is not None:
            raise watch.error
