"""Reading an experiment folder into an :class:`Experiment`: the report's data.

Everything comes from files, so a finished, a running and an interrupted experiment
read alike: ``spec.yaml`` (metric, mode, scheduler, the sampled parameters),
``tuner_run.json`` (start time), ``summary.json`` (when it describes the experiment as
it is now), the newest readable ``experiment_state-*.json`` (every trial's id, status
and folder, pending trials included), each trial folder's ``params.json`` and
``result.json`` (with the rows only ``progress.csv`` kept, see :func:`_progress_rows`),
and for a PBT/PB2 run Ray's perturbation logs (:mod:`tuner.search.schedule`). With several
objectives or constraints, each trial's feasibility and place on the Pareto front are
worked out here from its last result (:mod:`tuner.search.pareto`), so a running or interrupted
experiment reads like a finished one.
Also the small value helpers the other report modules share. No Ray,
no matplotlib.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tuner.search import pareto
from tuner.core.best import best_reported, is_candidate, nan_to_none, ranked, scope_value
from tuner.errors import InputError
from tuner.experiment.layout import (ERROR_FILE, EXPERIMENT_STATE_GLOB, LOCK_FILE, PARAMS_FILE, PROGRESS_FILE,
                                     RESULT_FILE, RESULTS_CSV, RUN_RECORD, SPEC_SNAPSHOT, SUMMARY, trial_id_of_folder)
from tuner.core.params import PROGRESS_KEYS, RAY_RESULT_KEYS, flatten, nest
from tuner.search.schedule import best_schedule, is_pbt_experiment, read_perturbations
from tuner.spec import Spec, SpecError, load_spec
from tuner.spec.conditions import param_distributions
from tuner.spec.sections import Constraint, Objective
from tuner.adapters.state import ExperimentState, parse_result_lines, read_state

__all__ = ["Experiment", "ReportError", "load_experiment", "is_experiment", "is_running", "trial_folders", "plain",
           "read_json", "is_numeric"]

_ENDED = ("TERMINATED", "ERROR")
# Keys Ray adds to every result that are not metrics (the x axes are kept apart).
_NOT_METRICS = RAY_RESULT_KEYS - PROGRESS_KEYS


class ReportError(InputError, ValueError):
    """The path is not an experiment folder (or a storage folder for ``tuner list``).

    Raised by :func:`load_experiment` and :func:`list_experiments`, before anything is
    written; ``tuner report`` and ``tuner list`` exit with code 2 (an
    :class:`~tuner.errors.InputError`, also a ``ValueError``).
    """


@dataclass
class Experiment:
    """An experiment as its files show it.

    Attributes:
        path: The experiment folder.
        name: The experiment name (the folder's name).
        spec: The spec as run (``spec.yaml``), or None when missing or unreadable.
        metric: The metric trials are compared by, or None; with several objectives, the
            first objective's (the trials are sorted by it).
        mode: ``min`` or ``max``, or None.
        status: ``running`` (a ``tuner`` process holds the folder's lock), ``finished``,
            ``finished with errors``, ``interrupted`` (Ctrl-C), ``aborted`` (the first
            trial's error stopped it), or ``stopped`` (the driver ended without writing
            ``summary.json``: killed, or a resume that did not finish).
        started: When the experiment started (``tuner_run.json``), ISO 8601, or None.
        summary: ``summary.json`` when it describes the experiment as it is now, else None.
        trials: One row per trial, best first (:mod:`tuner.core.best`): ``trial_id``,
            ``status`` (Ray's; a trial left RUNNING by a driver that is gone shows as
            UNFINISHED), ``iterations``,
            ``stopped_early`` (ended with fewer iterations than the longest trial),
            ``time_total_s``, ``config/<param>``, ``last_<metric>``, ``best_<metric>``
            and ``best`` (True for the best trial). With several objectives, ``last_`` and
            ``best_`` of each objective and ``pareto`` (on the Pareto front); with
            constraints, ``last_<metric>`` of each constrained metric and ``feasible``.
            The order is ``results.csv``'s: :mod:`tuner.core.best`'s rule on the first objective,
            infeasible trials among those without a result (by id), and with several
            objectives the trials on the front first.
        history: One row per reported result: ``trial_id``, ``training_iteration``,
            ``time_total_s`` and every numeric metric.
        best_trial: Id of the best trial by :mod:`tuner.core.best`'s rule: the best last value
            of the metric among the trials that did not error, NaN and inf skipped (as
            ``summary.json``); an infeasible trial is never the best, and with several
            objectives the best is the front's trial that is best on the first objective.
        params: The sampled parameters (``config/`` names without the prefix).
        pbt: Whether the run was PBT/PB2 (:func:`tuner.search.schedule.is_pbt_experiment`).
        perturbations: A PBT/PB2 run's perturbations (:func:`tuner.search.schedule.read_perturbations`);
            empty otherwise.
        schedule: A PBT/PB2 run: the best trial's schedule (:func:`tuner.search.schedule.best_schedule`),
            or None.
        created: The trial ids in the order the trials were created: the experiment state's
            trials by the number Ray's trial generator gave each
            (:func:`tuner.adapters.ray_internals.saved_trial_creation_index`), then the trials it does not
            list yet by the numeric suffix of their ids.
        objectives: The objectives (:class:`~tuner.spec.sections.Objective`): the spec's, else
            ``summary.json``'s; one for a single metric, empty without one.
        constraints: The constraints (:class:`~tuner.spec.sections.Constraint`), likewise; empty
            without any.
        scope: ``best.scope`` (the spec's, else ``summary.json``'s, else ``last``): which reported
            values score a trial (:func:`tuner.core.best.scope_value`); other than ``last``, ``trials`` has
            a ``score_<metric>`` column, the score the trials are ranked by.
    """

    path: Path
    name: str
    spec: Spec | None
    metric: str | None
    mode: str | None
    status: str
    started: str | None
    summary: dict | None
    trials: pd.DataFrame
    history: pd.DataFrame
    best_trial: str | None
    params: list[str] = field(default_factory=list)
    pbt: bool = False
    perturbations: list[dict] = field(default_factory=list)
    schedule: dict | None = None
    created: list[str] = field(default_factory=list)
    objectives: list[Objective] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    scope: str = "last"

    @property
    def multi_objective(self) -> bool:
        """Whether the experiment has two or more objectives (a Pareto front)."""
        return len(self.objectives) >= 2

    @property
    def front(self) -> list[str]:
        """The ids of the trials on the Pareto front, in :attr:`trials` order (empty with one objective)."""
        if "pareto" not in self.trials:
            return []
        return list(self.trials.loc[self.trials["pareto"].astype(bool), "trial_id"])

    @property
    def last_col(self) -> str | None:
        """Column of the last reported value of the metric in :attr:`trials`."""
        return f"last_{self.metric}" if self.metric else None

    @property
    def best_col(self) -> str | None:
        """Column of the best reported value of the metric in :attr:`trials`."""
        return f"best_{self.metric}" if self.metric else None

    @property
    def best_config(self) -> dict | None:
        """The best trial's config (nested, as the train function saw it), or None."""
        if self.best_trial is None:
            return None
        return self.config_of(self.best_trial)

    def active(self, name: str) -> pd.Series:
        """Which trials have the parameter ``name`` in their config (bool, in :attr:`trials` order).

        A conditional parameter (``when``, or a branch of a sub-space choice) is absent from the
        config of a trial where it is inactive; any other parameter is in every trial's config
        (but a trial whose config is not known yet).
        """
        col = self.trials.get(f"config/{name}")
        if col is None:
            return pd.Series(False, index=self.trials.index)
        return col.map(lambda v: plain(v) is not None).astype(bool)

    def _versions(self, name: str) -> list:
        """The spec's parameters (:class:`tuner.spec.conditions.Param`) under the config key ``name``:
        one, or one per branch that defines the key its own way (``optimizer/lr``, ``optimizer/lr@adam``)."""
        return self.spec.space.versions(name) if self.spec is not None else []

    def condition(self, name: str) -> str | None:
        """When the parameter ``name`` (a config key) is active, from the spec: ``optimizer = sgd``,
        ``model/name = cnn and layers in [2, 3]``; for a key that branches define each their own way,
        each version's condition joined by ``or``. None for an unconditional parameter or without a spec."""
        return self.spec.space.condition(name) if self.spec is not None else None

    def log_scale(self, name: str) -> bool | None:
        """Whether the spec samples the parameter ``name`` on a log scale (every version of the key,
        for a key that branches define each their own way); None without a spec or distribution."""
        dists = [p.dist for p in self._versions(name) if p.dist is not None]
        return all("log" in d.type for d in dists) if dists else None

    def param_type(self, name: str) -> str | None:
        """The spec's distribution type of the parameter ``name`` (``uniform``; ``uniform | loguniform``
        for a key whose versions differ); None without a spec."""
        types = [p.dist.type for p in self._versions(name) if p.dist is not None]
        return " | ".join(dict.fromkeys(types)) or None

    @property
    def conditional_keys(self) -> list[str]:
        """The config names (``/``-joined) that a trial lacks where they are inactive: with a spec,
        its parameters with a condition (a ``when``, or a branch of a sub-space choice: a branch's
        constants too); without one, the ``config/`` columns that some trials lack."""
        if self.spec is not None:
            return list(dict.fromkeys(p.key for p in self.spec.space.params if p.conditions))
        names = [c[len("config/"):] for c in self.trials.columns if c.startswith("config/")]
        return [n for n in names if not self.active(n).all() and self.active(n).any()]

    @property
    def conditional_params(self) -> list[str]:
        """The sampled parameters that some trials lack (:attr:`conditional_keys`), in :attr:`params` order."""
        keys = set(self.conditional_keys)
        return [p for p in self.params if p in keys]

    def config_of(self, trial_id: str) -> dict:
        """A trial's config (nested, as the train function saw it): its ``params.json``, else its row.

        Raises:
            IndexError: If no trial has the id.
        """
        folder = trial_folders(self.path).get(trial_id)
        if folder is not None and (folder / PARAMS_FILE).is_file():
            try:
                return json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8"))
            except ValueError:
                pass
        row = self.trials[self.trials["trial_id"] == trial_id].iloc[0]
        return nest({k[len("config/"):]: plain(v) for k, v in row.items() if k.startswith("config/")})


def read_json(path: Path) -> Any:
    """A JSON file's content, or None when the file is missing or unreadable or not JSON.

    Args:
        path: The file (``summary.json``, ``tuner_run.json``, a trial's ``params.json`` ...).

    Returns:
        The parsed value (a dict, a list, ...), or None; never raises for a bad file.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _state_trials(state: ExperimentState | None) -> list[dict]:
    """The saved trials, in the order Ray created them (:func:`tuner.adapters.ray_internals.saved_trial_creation_index`;
    the state's own order is not that one)."""
    from tuner.adapters.ray_internals import saved_trial_creation_index  # imports no Ray

    saved = state.trials if state is not None else []
    created = [saved_trial_creation_index(trial) for trial in saved]
    order = sorted(range(len(saved)), key=lambda i: (0, created[i]) if created[i] is not None else (1, i))
    return [{"trial_id": saved[i]["trial_id"], "status": saved[i].get("status"),
             "folder": saved[i].get("relative_logdir") or saved[i].get("custom_dirname"),
             "config": saved[i].get("config") if isinstance(saved[i].get("config"), dict) else {}}
            for i in order]


def trial_folders(path: Path) -> dict[str, Path]:
    """Trial id -> trial folder (``<trainable>_<trial_id>``: a folder with params.json or result.json)."""
    out = {}
    for folder in sorted(p for p in path.iterdir() if p.is_dir()):
        if not ((folder / RESULT_FILE).is_file() or (folder / PARAMS_FILE).is_file()):
            continue
        trial_id = None
        try:
            with open(folder / RESULT_FILE, encoding="utf-8") as f:
                trial_id = json.loads(f.readline()).get("trial_id")
        except (OSError, ValueError, AttributeError):
            pass
        out[trial_id or trial_id_of_folder(folder.name)] = folder
    return out



def plain(value: Any) -> Any:
    """numpy/pandas scalars -> plain Python; NaN -> None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    return nan_to_none(value)


def _results(file: Path) -> list[dict]:
    """The trial's results, one dict per line of ``result.json``; a half-written last line is skipped."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return parse_result_lines(text)


def _progress_rows(file: Path) -> list[dict]:
    """The numeric values of each row of a trial's ``progress.csv`` (nested names joined by ``/``).

    Ray restores a trial's ``result.json`` from its checkpoint's copy when PBT (or any pause)
    restarts it from a checkpoint, so the rows reported since that copy was made are lost
    from ``result.json``; ``progress.csv`` keeps them (Ray 2.60).
    """
    import csv

    rows: list[dict] = []
    try:
        with open(file, newline="", encoding="utf-8", errors="replace") as f:
            for raw in csv.DictReader(f):
                row = {}
                for key, text in raw.items():
                    try:
                        row[key] = int(text) if text.lstrip("-").isdigit() else float(text.replace("_", "x"))
                    except (TypeError, ValueError):
                        continue
                if "training_iteration" in row:
                    rows.append(row)
    except (OSError, csv.Error):
        pass
    return rows


def _last_write(folder: Path) -> float:
    """The newest modification time of a trial folder's own files (0 when it has none)."""
    times = [f.stat().st_mtime for f in folder.iterdir() if f.is_file()]
    return max(times, default=0.0)


def is_numeric(value: Any) -> bool:
    """Whether ``value`` is an int or a float (NaN and inf included), not a bool.

    Args:
        value: A reported value or a config value.

    Returns:
        True for a number a plot or an importance can use as one.
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_running(path: Path) -> bool:
    """Whether a tuner process holds the experiment's lock (``.tuner.lock``, an exclusive flock).

    Read from ``/proc/locks`` without touching the lock; where that file is missing, a
    shared non-blocking ``flock`` is tried and released at once.
    """
    lock = path / LOCK_FILE
    if not lock.is_file():
        return False
    try:
        inode = lock.stat().st_ino
        with open("/proc/locks", encoding="ascii") as f:
            return any(len(p) > 5 and p[1] == "FLOCK" and p[5].rsplit(":", 1)[-1] == str(inode)
                       for p in (line.split() for line in f))
    except OSError:
        pass
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _creation_key(trial_id: str) -> tuple:
    """Sort key of a trial the experiment state does not list: the numeric suffix Ray gives
    a trial id (``<experiment id>_<5-digit index>``, counting up), then the id; ids without one
    (a searcher's trials are named by Ray's random ids) last, by id."""
    tail = str(trial_id).rsplit("_", 1)[-1]
    return (0, int(tail), str(trial_id)) if tail.isdigit() else (1, 0, str(trial_id))


def _objectives_and_constraints(spec: Spec | None, summary: dict | None) -> tuple[list[Objective], list[Constraint]]:
    """The spec's objectives and constraints; without a readable spec, ``summary.json``'s
    (``objectives``, ``constraints``; else its ``metric`` and ``mode``)."""
    if spec is not None:
        return list(spec.objectives or []), list(spec.constraints or [])
    summary = summary or {}
    objectives: list[Objective] = []
    constraints: list[Constraint] = []
    try:
        objectives = [Objective(**o) for o in summary.get("objectives") or []]
        constraints = [Constraint(**c) for c in summary.get("constraints") or []]
    except (TypeError, ValueError):
        pass
    if not objectives and summary.get("metric") and summary.get("mode") in ("min", "max"):
        objectives = [Objective(metric=summary["metric"], mode=summary["mode"])]
    return objectives, constraints


def is_experiment(path: Path) -> bool:
    """Whether ``path`` is an experiment folder: it holds ``tuner_run.json``, ``spec.yaml`` or Ray's state."""
    return path.is_dir() and any((path / name).is_file() for name in (RUN_RECORD, SPEC_SNAPSHOT)) \
        or path.is_dir() and any(path.glob(EXPERIMENT_STATE_GLOB))


def load_experiment(path: str | os.PathLike) -> Experiment:
    """Read an experiment folder into an :class:`Experiment`.

    Args:
        path: The experiment folder, ``<storage>/<name>``.

    Returns:
        The experiment: its status, one row per trial (best first) and every result.

    Raises:
        ReportError: If ``path`` is not an experiment folder.
    """
    path = _experiment_folder(path)
    spec = _read_spec(path)
    record = read_json(path / RUN_RECORD) or {}
    state = read_state(path)
    summary = _current_summary(path, state)
    running = is_running(path)
    scoring = _scoring(spec, summary)
    folders = trial_folders(path)
    listed = _state_trials(state)
    ids = _trial_ids(listed, folders, state)
    rows, history, last_results = _read_trials(path, ids, listed, folders, _csv_statuses(path, summary),
                                               running, scoring)
    trials = _trials_frame(rows, scoring)
    _mark_feasible_and_front(trials, last_results, scoring)
    _mark_stopped_early(trials)
    trials, best_trial = _ranked(trials, scoring)
    pbt = is_pbt_experiment(path)
    return Experiment(path=path, name=path.name, spec=spec, metric=scoring.metric, mode=scoring.mode,
                      status=_experiment_status(summary, running, trials), started=record.get("created"),
                      summary=summary, trials=trials, history=_history_frame(history), best_trial=best_trial,
                      params=_sampled_params(spec, trials), pbt=pbt,
                      perturbations=_perturbations(path, spec) if pbt else [],
                      schedule=best_schedule(path, best_trial) if pbt and best_trial is not None else None,
                      created=ids, objectives=scoring.objectives, constraints=scoring.constraints,
                      scope=scoring.scope)


@dataclass(frozen=True)
class _Scoring:
    """What scores a trial, and so which columns its row has beyond its config (see :attr:`Experiment.trials`).

    Attributes:
        metric: The (first objective's) metric, or None.
        mode: ``min`` or ``max``, or None.
        scope: ``best.scope``.
        objectives: The objectives (one for a single metric, empty without one).
        constraints: The constraints.
        extra_best: With several objectives, the objectives' metrics other than ``metric``: each gets a
            ``best_`` column.
        extra_last: ``extra_best`` and each constrained metric other than ``metric``: each gets a ``last_`` column.
        modes: Objective metric -> its mode.
    """

    metric: str | None
    mode: str | None
    scope: str
    objectives: list[Objective]
    constraints: list[Constraint]
    extra_best: list[str]
    extra_last: list[str]
    modes: dict[str, str]

    @property
    def several(self) -> bool:
        """Whether there are two or more objectives (a Pareto front)."""
        return len(self.objectives) >= 2

    @property
    def score_col(self) -> str | None:
        """The column the trials are ranked by: ``last_<metric>``, or ``score_<metric>`` under another scope."""
        if not self.metric:
            return None
        return f"last_{self.metric}" if self.scope == "last" else f"score_{self.metric}"


def _experiment_folder(path: str | os.PathLike) -> Path:
    """The experiment folder, resolved; raises :class:`ReportError` if it is missing or not an experiment's."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ReportError(f"{path} does not exist; give an experiment folder, e.g. runs/mnist-asha "
                          "(`tuner list runs` shows the experiments there).")
    if not is_experiment(path):
        raise ReportError(f"{path} is not a tuner experiment folder (no {RUN_RECORD}, {SPEC_SNAPSHOT} or "
                          f"{EXPERIMENT_STATE_GLOB}); give the folder `tuner run` created, e.g. runs/mnist-asha "
                          "(`tuner list STORAGE` shows the experiments in a storage folder).")
    return path.resolve()


def _read_spec(path: Path) -> Spec | None:
    """The spec as run (``spec.yaml``), or None when missing or unreadable."""
    if not (path / SPEC_SNAPSHOT).is_file():
        return None
    try:
        return load_spec(path / SPEC_SNAPSHOT)
    except SpecError:
        return None


def _current_summary(path: Path, state: ExperimentState | None) -> dict | None:
    """``summary.json``, or None when missing or older than the experiment state (an earlier session's)."""
    state_mtime = state.mtime if state is not None else 0.0
    summary = read_json(path / SUMMARY)
    if summary is not None and (path / SUMMARY).stat().st_mtime < state_mtime:
        summary = None  # written by an earlier session; a later resume has not finished
    return summary


def _scoring(spec: Spec | None, summary: dict | None) -> _Scoring:
    """The metric, mode, scope, objectives and constraints: the spec's, else ``summary.json``'s."""
    metric = spec.metric if spec else (summary or {}).get("metric")
    mode = spec.mode if spec else (summary or {}).get("mode")
    scope = spec.best.scope if spec else (summary or {}).get("scope") or "last"
    objectives, constraints = _objectives_and_constraints(spec, summary)
    several = len(objectives) >= 2
    # The columns beyond the metric's: every objective's, and each constrained metric's last value.
    extra_best = [o.metric for o in objectives if o.metric != metric] if several else []
    extra_last = list(dict.fromkeys(extra_best + [c.metric for c in constraints if c.metric != metric]))
    return _Scoring(metric=metric, mode=mode, scope=scope, objectives=objectives, constraints=constraints,
                    extra_best=extra_best, extra_last=extra_last, modes={o.metric: o.mode for o in objectives})


def _trial_ids(listed: list[dict], folders: dict[str, Path], state: ExperimentState | None) -> list[str]:
    """The trial ids in creation order: the experiment state's, then the newer trial folders it does not list."""
    state_mtime = state.mtime if state is not None else 0.0
    known = {t["trial_id"] for t in listed}
    # A folder the state does not list is a trial newer than the state, unless its files are
    # older: then it is a trial the experiment dropped (`tuner resume --restart-errored`
    # starts an errored trial over as a new trial, in a new folder).
    return [t["trial_id"] for t in listed] + sorted((t for t, folder in folders.items() if t not in known and not (
        state is not None and _last_write(folder) < state_mtime)), key=_creation_key)


def _csv_statuses(path: Path, summary: dict | None) -> dict[str, str]:
    """Trial id -> status from ``results.csv``, when ``summary.json`` is current; else empty."""
    if summary is None or not (path / RESULTS_CSV).is_file():
        return {}
    try:
        csv = pd.read_csv(path / RESULTS_CSV, dtype={"trial_id": str})
        return dict(zip(csv["trial_id"], csv["status"]))
    except (ValueError, KeyError, pd.errors.ParserError):
        return {}


def _read_trials(path: Path, ids: list[str], listed: list[dict], folders: dict[str, Path],
                 csv_status: dict[str, str], running: bool,
                 scoring: _Scoring) -> tuple[list[dict], list[dict], dict[str, dict]]:
    """Each trial's row, every trial's results and each trial's last result (flat, for :mod:`tuner.search.pareto`)."""
    by_id = {t["trial_id"]: t for t in listed}
    rows, history = [], []
    last_results: dict[str, dict] = {}
    for trial_id in ids:
        info = by_id.get(trial_id, {})
        folder = folders.get(trial_id) or (path / info["folder"] if info.get("folder") else None)
        results = _results(folder / RESULT_FILE) if folder is not None else []
        trial_hist = [{"trial_id": trial_id, **row} for row in _per_iteration(folder, results).values()]
        history.extend(trial_hist)
        status = _trial_status(info.get("status") or csv_status.get(trial_id), folder, results, running)
        last_results[trial_id] = trial_hist[-1] if trial_hist else {}
        rows.append(_trial_row(trial_id, status, _trial_config(folder, info, results), trial_hist, scoring))
    return rows, history, last_results


def _trial_config(folder: Path | None, info: dict, results: list[dict]) -> dict:
    """A trial's config: its ``params.json``, else the experiment state's, else its last result's."""
    config = read_json(folder / PARAMS_FILE) if folder is not None else None
    if not isinstance(config, dict):
        config = info.get("config") or (results[-1].get("config") if results else None) or {}
    return config


def _per_iteration(folder: Path | None, results: list[dict]) -> dict[Any, dict]:
    """Iteration -> a trial's numeric metrics (flat) there; the rows ``result.json`` lost are ``progress.csv``'s."""
    per_iter: dict[Any, dict] = {}
    for r in results:  # a resumed trial may report an iteration again: the last one counts
        flat = flatten({k: v for k, v in r.items() if k not in _NOT_METRICS})
        row = {k: v for k, v in flat.items() if is_numeric(v)}
        per_iter[row.get("training_iteration", len(per_iter) + 1)] = row
    if folder is not None and results:  # rows that result.json lost on a restore (_progress_rows)
        lost = {r["training_iteration"]: r for r in _progress_rows(folder / PROGRESS_FILE)
                if r["training_iteration"] not in per_iter}
        if lost:
            for it, r in lost.items():
                per_iter[it] = {k: v for k, v in r.items() if k not in _NOT_METRICS and is_numeric(v)}
            per_iter = dict(sorted(per_iter.items(), key=lambda kv: kv[0]))
    return per_iter


def _trial_status(status: str | None, folder: Path | None, results: list[dict], running: bool) -> str:
    """A trial's status: the recorded one, else what its files show; RUNNING or PAUSED with no driver: UNFINISHED."""
    if status is None:
        if folder is not None and (folder / ERROR_FILE).is_file():
            status = "ERROR"
        elif results and results[-1].get("done"):
            status = "TERMINATED"
        else:
            status = "RUNNING" if results else "PENDING"
    if status in ("RUNNING", "PAUSED") and not running:
        status = "UNFINISHED"
    return status


def _trial_row(trial_id: str, status: str, config: dict, trial_hist: list[dict], scoring: _Scoring) -> dict:
    """A trial's row of :attr:`Experiment.trials` (without ``best``, ``stopped_early``, ``feasible``, ``pareto``)."""
    metric, mode = scoring.metric, scoring.mode
    last = trial_hist[-1] if trial_hist else {}
    row = {"trial_id": trial_id, "status": status,
           "iterations": int(last.get("training_iteration", len(trial_hist)) or 0),
           "time_total_s": last.get("time_total_s")}
    row.update({f"config/{k}": v for k, v in flatten(config).items()})
    if metric:
        row[f"last_{metric}"] = last.get(metric, math.nan)
        row[f"best_{metric}"] = best_reported([h.get(metric) for h in trial_hist], mode)
        if scoring.scope != "last":
            row[f"score_{metric}"] = scope_value([h[metric] for h in trial_hist if metric in h], scoring.scope, mode)
    for m in scoring.extra_last:
        row[f"last_{m}"] = last.get(m, math.nan)
        if m in scoring.extra_best:
            row[f"best_{m}"] = best_reported([h.get(m) for h in trial_hist], scoring.modes[m])
    return row


def _trials_frame(rows: list[dict], scoring: _Scoring) -> pd.DataFrame:
    """The rows as a frame: an inactive conditional parameter None, every metric column there even without a value."""
    trials = pd.DataFrame(rows, columns=None if rows else ["trial_id", "status", "iterations", "time_total_s"])
    for col in [c for c in trials.columns if c.startswith("config/")]:
        # A conditional parameter is absent from the config of a trial where it is inactive: its
        # column holds None there (not NaN, not a default), and integers stay integers.
        if any(col not in r for r in rows):
            trials[col] = pd.Series([r.get(col) for r in rows], index=trials.index, dtype=object)
    metric = scoring.metric
    if metric:
        for col in (f"last_{metric}", f"best_{metric}", *([f"score_{metric}"] if scoring.scope != "last" else []),
                    *(f"last_{m}" for m in scoring.extra_last),
                    *(f"best_{m}" for m in scoring.extra_best)):
            if col not in trials:
                trials[col] = pd.Series(dtype=float)
    return trials


def _mark_feasible_and_front(trials: pd.DataFrame, last_results: dict[str, dict], scoring: _Scoring) -> None:
    """Add ``feasible`` (with constraints) and ``pareto`` (with several objectives), from each trial's last result."""
    status_of = dict(zip(trials["trial_id"], trials["status"])) if not trials.empty else {}
    if scoring.constraints:
        trials["feasible"] = [pareto.feasible(last_results.get(t), scoring.constraints) for t in trials["trial_id"]]
    if scoring.several:
        on_front = set(pareto.pareto_front(list(trials["trial_id"]), scoring.objectives, result=last_results.get,
                                           status=status_of.get, constraints=scoring.constraints))
        trials["pareto"] = trials["trial_id"].isin(on_front)


def _mark_stopped_early(trials: pd.DataFrame) -> None:
    """Add ``stopped_early``: TERMINATED with fewer iterations than the longest TERMINATED trial."""
    ended = trials.loc[trials["status"] == "TERMINATED", "iterations"] if not trials.empty else pd.Series([])
    full = int(ended.max()) if not ended.empty else 0
    trials["stopped_early"] = (trials["status"] == "TERMINATED") & (trials["iterations"] < full)


def _ranked(trials: pd.DataFrame, scoring: _Scoring) -> tuple[pd.DataFrame, str | None]:
    """The trials best first (by id without a metric), with ``best`` and the columns in order; and the best's id."""
    best_trial = None
    if scoring.metric and not trials.empty:
        trials, best_trial = _ranked_by_score(trials, scoring)
    else:
        trials = trials.sort_values("trial_id", kind="stable") if not trials.empty else trials
    trials = trials.reset_index(drop=True)
    trials.insert(0, "best", trials["trial_id"] == best_trial)
    front = ["best", "trial_id", "status", "iterations", "stopped_early", "time_total_s"]
    config_cols = [c for c in trials.columns if c.startswith("config/")]
    rest = [c for c in trials.columns if c not in front and c not in config_cols]
    return trials[front + config_cols + rest], best_trial


def _ranked_by_score(trials: pd.DataFrame, scoring: _Scoring) -> tuple[pd.DataFrame, str | None]:
    """The trials by :mod:`tuner.core.best`'s rule on the score, and the best trial's id (None when none qualifies)."""
    col = scoring.score_col
    # tuner.core.best's rule, as summary.json and results.csv: errored trials and trials
    # without a finite value go last, and are never the best.
    # As results.csv: with constraints, infeasible trials among those without a result; with
    # several objectives, the front first (only its trials can be the best).
    feasible = (lambda i: bool(trials.at[i, "feasible"])) if scoring.constraints else None
    pareto_row = (lambda i: bool(trials.at[i, "pareto"])) if scoring.several else None
    trials = trials.loc[ranked(list(trials.index), scoring.mode, value=lambda i: trials.at[i, col],
                               status=lambda i: trials.at[i, "status"], trial_id=lambda i: trials.at[i, "trial_id"],
                               feasible=feasible, on_front=pareto_row)]
    first = trials.index[0]
    if is_candidate(trials.at[first, col], trials.at[first, "status"], feasible is None or feasible(first),
                    pareto_row is None or pareto_row(first)):
        return trials, trials.at[first, "trial_id"]
    return trials, None


def _sampled_params(spec: Spec | None, trials: pd.DataFrame) -> list[str]:
    """The sampled parameters: the spec's; without one, the config keys that differ between trials."""
    if spec is not None:
        return [name for name, _ in param_distributions(spec.param_space)]
    # (absent counts as a value: a conditional parameter may take one value where it is active)
    config_cols = [c for c in trials.columns if c.startswith("config/")]
    return [c[len("config/"):] for c in config_cols if trials[c].map(lambda v: repr(plain(v))).nunique() > 1]


def _experiment_status(summary: dict | None, running: bool, trials: pd.DataFrame) -> str:
    """``running``, ``stopped``, or from a current ``summary.json`` how the run ended (:attr:`Experiment.status`)."""
    if summary is None or running:
        return "running" if running else "stopped"
    if summary.get("aborted"):
        return "aborted"
    if summary.get("interrupted"):
        return "interrupted"
    if summary.get("trials", {}).get("by_status", {}).get("ERROR", 0) or (trials["status"] == "ERROR").any():
        return "finished with errors"
    return "finished"


def _history_frame(history: list[dict]) -> pd.DataFrame:
    """Every trial's results as a frame (with ``trial_id`` and ``training_iteration`` columns even when empty)."""
    hist = pd.DataFrame(history)
    if hist.empty:
        hist = pd.DataFrame(columns=["trial_id", "training_iteration"])
    return hist


def _perturbations(path: Path, spec: Spec | None) -> list[dict]:
    """A PBT/PB2 run's perturbations (:func:`tuner.search.schedule.read_perturbations`) in the spec's ``time_attr``."""
    return read_perturbations(path, spec.scheduler.time_attr if spec else "training_iteration")
