"""Offline experiment reports: an experiment folder's files -> a table, CSV, JSON or an HTML page.

Everything is read from files, so a report works on a finished, a running and an
interrupted experiment alike, and starts no Ray (this module never imports it):

* ``spec.yaml`` (the spec as run: metric, mode, scheduler and its rungs, the sampled
  parameters), ``tuner_run.json`` (start time), ``summary.json`` (when it describes the
  experiment as it is now);
* the newest readable ``experiment_state-*.json`` (or its copy in ``.tuner_state/``):
  every trial's id, status and folder, pending trials included;
* each trial folder's ``params.json`` (config) and ``result.json`` (one line per result).

The HTML page is one self-contained file: inline CSS, plots as base64 PNGs (matplotlib),
no script. The same plots are written as PNG files beside it. Parameter importances
are Optuna's fANOVA (``optuna.importance.FanovaImportanceEvaluator``) over a study
rebuilt from the trials.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from tuner.best import best_reported, has_result, is_finite_number, nan_to_none, ranked
from tuner.errors import InputError
from tuner.files import atomic_write
from tuner.layout import (ERROR_FILE, EXPERIMENT_STATE_GLOB, LOCK_FILE, PARAMS_FILE, RESULT_FILE, RESULTS_CSV,
                          RUN_RECORD, SPEC_SNAPSHOT, SUMMARY, trial_id_of_folder)
from tuner.params import PROGRESS_KEYS, RAY_RESULT_KEYS, distributions, flatten, nest
from tuner.rungs import merged_rungs
from tuner.spec import Spec, SpecError, load_spec
from tuner.state import ExperimentState, read_state

__all__ = ["Experiment", "ReportError", "load_experiment", "render", "write_html", "write_plots",
           "list_experiments", "render_list", "scheduler_rungs", "budget", "importances", "FORMATS"]

FORMATS = ("table", "csv", "json", "html")
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
        metric: The metric trials are compared by, or None.
        mode: ``min`` or ``max``, or None.
        status: ``running`` (a ``tuner`` process holds the folder's lock), ``finished``,
            ``finished with errors``, ``interrupted`` (Ctrl-C), ``aborted`` (the first
            trial's error stopped it), or ``stopped`` (the driver ended without writing
            ``summary.json``: killed, or a resume that did not finish).
        started: When the experiment started (``tuner_run.json``), ISO 8601, or None.
        summary: ``summary.json`` when it describes the experiment as it is now, else None.
        trials: One row per trial, best first (:mod:`tuner.best`): ``trial_id``,
            ``status`` (Ray's; a trial left RUNNING by a driver that is gone shows as
            UNFINISHED), ``iterations``,
            ``stopped_early`` (ended with fewer iterations than the longest trial),
            ``time_total_s``, ``config/<param>``, ``last_<metric>``, ``best_<metric>``
            and ``best`` (True for the best trial).
        history: One row per reported result: ``trial_id``, ``training_iteration``,
            ``time_total_s`` and every numeric metric.
        best_trial: Id of the best trial by :mod:`tuner.best`'s rule: the best last value
            of the metric among the trials that did not error, NaN and inf skipped (as
            ``summary.json``).
        params: The sampled parameters (``config/`` names without the prefix).
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
        folder = _trial_folders(self.path).get(self.best_trial)
        if folder is not None and (folder / PARAMS_FILE).is_file():
            try:
                return json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8"))
            except ValueError:
                pass
        row = self.trials[self.trials["trial_id"] == self.best_trial].iloc[0]
        return nest({k[len("config/"):]: _py(v) for k, v in row.items() if k.startswith("config/")})


# --------------------------------------------------------------------------- loading


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _state_trials(state: ExperimentState | None) -> list[dict]:
    return [{"trial_id": trial["trial_id"], "status": trial.get("status"),
             "folder": trial.get("relative_logdir") or trial.get("custom_dirname"),
             "config": trial.get("config") if isinstance(trial.get("config"), dict) else {}}
            for trial in (state.trials if state is not None else [])]


def _trial_folders(path: Path) -> dict[str, Path]:
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



def _py(value: Any) -> Any:
    """numpy/pandas scalars -> plain Python; NaN -> None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    return nan_to_none(value)


def _results(file: Path) -> list[dict]:
    """The trial's results, one dict per line of ``result.json``; a half-written last line is skipped."""
    rows: list[dict] = []
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict):
            rows.append(result)
    return rows


def _last_write(folder: Path) -> float:
    """The newest modification time of a trial folder's own files (0 when it has none)."""
    times = [f.stat().st_mtime for f in folder.iterdir() if f.is_file()]
    return max(times, default=0.0)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_running(path: Path) -> bool:
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


def _is_experiment(path: Path) -> bool:
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
    path = Path(path).expanduser()
    if not path.exists():
        raise ReportError(f"{path} does not exist; give an experiment folder, e.g. runs/mnist-asha "
                          "(`tuner list runs` shows the experiments there).")
    if not _is_experiment(path):
        raise ReportError(f"{path} is not a tuner experiment folder (no {RUN_RECORD}, {SPEC_SNAPSHOT} or "
                          f"{EXPERIMENT_STATE_GLOB}); give the folder `tuner run` created, e.g. runs/mnist-asha "
                          "(`tuner list STORAGE` shows the experiments in a storage folder).")
    path = path.resolve()
    spec = None
    if (path / SPEC_SNAPSHOT).is_file():
        try:
            spec = load_spec(path / SPEC_SNAPSHOT)
        except SpecError:
            spec = None
    record = _read_json(path / RUN_RECORD) or {}
    state = read_state(path)
    state_mtime = state.mtime if state is not None else 0.0
    summary = _read_json(path / SUMMARY)
    if summary is not None and (path / SUMMARY).stat().st_mtime < state_mtime:
        summary = None  # written by an earlier session; a later resume has not finished
    running = _is_running(path)
    metric = spec.metric if spec else (summary or {}).get("metric")
    mode = spec.mode if spec else (summary or {}).get("mode")

    folders = _trial_folders(path)
    listed = _state_trials(state)
    known = {t["trial_id"] for t in listed}
    # A folder the state does not list is a trial newer than the state, unless its files are
    # older: then it is a trial the experiment dropped (`tuner resume --restart-errored`
    # starts an errored trial over as a new trial, in a new folder).
    ids = [t["trial_id"] for t in listed] + [t for t, folder in folders.items() if t not in known
                                             and not (state is not None and _last_write(folder) < state_mtime)]
    by_id = {t["trial_id"]: t for t in listed}
    csv_status: dict[str, str] = {}
    if summary is not None and (path / RESULTS_CSV).is_file():
        try:
            csv = pd.read_csv(path / RESULTS_CSV, dtype={"trial_id": str})
            csv_status = dict(zip(csv["trial_id"], csv["status"]))
        except (ValueError, KeyError, pd.errors.ParserError):
            pass

    rows, history = [], []
    for trial_id in ids:
        info = by_id.get(trial_id, {})
        folder = folders.get(trial_id) or (path / info["folder"] if info.get("folder") else None)
        results = _results(folder / RESULT_FILE) if folder is not None else []
        config = _read_json(folder / PARAMS_FILE) if folder is not None else None
        if not isinstance(config, dict):
            config = info.get("config") or (results[-1].get("config") if results else None) or {}
        per_iter: dict[Any, dict] = {}
        for r in results:  # a resumed trial may report an iteration again: the last one counts
            flat = flatten({k: v for k, v in r.items() if k not in _NOT_METRICS})
            row = {k: v for k, v in flat.items() if _numeric(v)}
            per_iter[row.get("training_iteration", len(per_iter) + 1)] = row
        trial_hist = [{"trial_id": trial_id, **row} for row in per_iter.values()]
        history.extend(trial_hist)
        status = info.get("status") or csv_status.get(trial_id)
        if status is None:
            if folder is not None and (folder / ERROR_FILE).is_file():
                status = "ERROR"
            elif results and results[-1].get("done"):
                status = "TERMINATED"
            else:
                status = "RUNNING" if results else "PENDING"
        if status in ("RUNNING", "PAUSED") and not running:
            status = "UNFINISHED"
        last = trial_hist[-1] if trial_hist else {}
        row = {"trial_id": trial_id, "status": status,
               "iterations": int(last.get("training_iteration", len(trial_hist)) or 0),
               "time_total_s": last.get("time_total_s")}
        row.update({f"config/{k}": v for k, v in flatten(config).items()})
        if metric:
            row[f"last_{metric}"] = last.get(metric, math.nan)
            row[f"best_{metric}"] = best_reported([h.get(metric) for h in trial_hist], mode)
        rows.append(row)

    trials = pd.DataFrame(rows, columns=None if rows else ["trial_id", "status", "iterations", "time_total_s"])
    if metric:
        for col in (f"last_{metric}", f"best_{metric}"):
            if col not in trials:
                trials[col] = pd.Series(dtype=float)
    ended = trials.loc[trials["status"] == "TERMINATED", "iterations"] if not trials.empty else pd.Series([])
    full = int(ended.max()) if not ended.empty else 0
    trials["stopped_early"] = (trials["status"] == "TERMINATED") & (trials["iterations"] < full)
    best_trial = None
    if metric and not trials.empty:
        col = f"last_{metric}"
        # tuner.best's rule, as summary.json and results.csv: errored trials and trials
        # without a finite value go last, and are never the best.
        trials = trials.loc[ranked(list(trials.index), mode, value=lambda i: trials.at[i, col],
                                   status=lambda i: trials.at[i, "status"],
                                   trial_id=lambda i: trials.at[i, "trial_id"])]
        if has_result(trials[col].iloc[0], trials["status"].iloc[0]):
            best_trial = trials["trial_id"].iloc[0]
    else:
        trials = trials.sort_values("trial_id", kind="stable") if not trials.empty else trials
    trials = trials.reset_index(drop=True)
    trials.insert(0, "best", trials["trial_id"] == best_trial)
    front = ["best", "trial_id", "status", "iterations", "stopped_early", "time_total_s"]
    config_cols = [c for c in trials.columns if c.startswith("config/")]
    rest = [c for c in trials.columns if c not in front and c not in config_cols]
    trials = trials[front + config_cols + rest]

    if spec is not None:
        params = [name for name, _ in distributions(spec.param_space)]
    else:  # no spec: the config keys that differ between trials
        params = [c[len("config/"):] for c in config_cols if trials[c].astype(str).nunique() > 1]
    if summary is not None and not running:
        if summary.get("aborted"):
            status = "aborted"
        elif summary.get("interrupted"):
            status = "interrupted"
        elif (summary.get("trials", {}).get("by_status", {}).get("ERROR", 0)
              or (trials["status"] == "ERROR").any()):
            status = "finished with errors"
        else:
            status = "finished"
    else:
        status = "running" if running else "stopped"
    hist = pd.DataFrame(history)
    if hist.empty:
        hist = pd.DataFrame(columns=["trial_id", "training_iteration"])
    return Experiment(path=path, name=path.name, spec=spec, metric=metric, mode=mode, status=status,
                      started=record.get("created"), summary=summary, trials=trials, history=hist,
                      best_trial=best_trial, params=params)


# --------------------------------------------------------------------------- derived facts


def scheduler_rungs(spec: Spec | None) -> list[float]:
    """The milestones, in ``time_attr`` units, at which the spec's scheduler stops trials.

    The rungs ``tuner validate`` prints (:func:`tuner.rungs.bracket_rungs`), merged over
    brackets.

    Args:
        spec: The spec as run, or None.

    Returns:
        The sorted, distinct rungs below ``max_t``; empty for fifo, median and no spec.
    """
    return [] if spec is None else merged_rungs(spec)


def budget(exp: Experiment) -> dict[str, Any]:
    """What the experiment cost, against the same trials run without early stopping.

    Without early stopping, every trial that ended TERMINATED would have run as many
    iterations as the longest trial; errored and unfinished trials count as they are.
    The missing iterations are costed at the median seconds per iteration of all
    trials' iterations after their first (the first also pays for start-up), and the
    wall time is scaled by the same ratio as the trials' time (the same parallelism).

    Returns:
        ``trials``, ``full_iterations`` (the longest trial's), ``trial_iterations`` and
        ``trial_iterations_without_early_stopping``, ``trial_time_s`` and
        ``trial_time_s_without_early_stopping`` (summed over trials), ``wall_time_s`` and
        ``wall_time_s_without_early_stopping`` (None when unknown), ``stopped_early``
        (how many trials).
    """
    t = exp.trials
    full = int(t.loc[t["status"] == "TERMINATED", "iterations"].max()) if (t["status"] == "TERMINATED").any() else 0
    used_it = int(t["iterations"].sum()) if not t.empty else 0
    # Seconds per iteration: the median of the later iterations (the first one also pays
    # for the trial's start-up), else each trial's own average.
    h = exp.history
    later = h.loc[h["training_iteration"] > 1, "time_this_iter_s"] if "time_this_iter_s" in h else pd.Series([])
    rate = float(later.median()) if later.notna().any() else None
    full_it, used_s, full_s = 0, 0.0, 0.0
    for _, row in t.iterrows():
        iters = int(row["iterations"])
        secs = float(row["time_total_s"]) if is_finite_number(row["time_total_s"]) else 0.0
        target = full if row["status"] == "TERMINATED" else iters
        full_it += target
        used_s += secs
        if iters and target > iters:
            full_s += secs + (target - iters) * (rate if rate is not None else secs / iters)
        else:
            full_s += secs
    wall = (exp.summary or {}).get("wall_time_s")
    resumed = bool((_read_json(exp.path / RUN_RECORD) or {}).get("resumed"))
    if wall is None or resumed:  # summary.json's wall time is the last session's only
        wall = _results_span(exp)
    return {
        "trials": len(t),
        "stopped_early": int(t["stopped_early"].sum()) if not t.empty else 0,
        "full_iterations": full,
        "trial_iterations": used_it,
        "trial_iterations_without_early_stopping": full_it,
        "trial_time_s": round(used_s, 3),
        "trial_time_s_without_early_stopping": round(full_s, 3),
        "wall_time_s": None if wall is None else round(float(wall), 3),
        "wall_time_s_without_early_stopping": None if wall is None or not used_s else round(wall * full_s / used_s, 3),
    }


def _results_span(exp: Experiment) -> float | None:
    """Seconds from the first trial's start to the last result, from the results' timestamps."""
    h = exp.history
    if h.empty or "timestamp" not in h or "time_this_iter_s" not in h:
        return None
    starts = h.groupby("trial_id").apply(lambda g: (g["timestamp"] - g["time_this_iter_s"]).min(), include_groups=False)
    return float(h["timestamp"].max() - starts.min())


def importances(exp: Experiment) -> tuple[dict[str, float], str]:
    """Parameter importances of the metric: Optuna's fANOVA over the trials.

    The trials become an Optuna study (``optuna.trial.create_trial``): TERMINATED trials
    that ran to the end are COMPLETE with their last value, trials stopped early are
    PRUNED with their values by iteration, errored ones FAIL; Optuna's evaluators use
    the COMPLETE trials only, as for a study pruned by Optuna itself. With fewer than
    two such trials, every trial's value at the first iteration they all reached is used
    instead (the note says so). Parameter distributions are the observed ranges (log
    scale for the spec's log types), categorical for non-numbers.

    Returns:
        ``({param: importance}, note)``; the importances sum to 1, highest first, or
        are empty with the note saying why.
    """
    if not exp.metric or not exp.params:
        return {}, "no metric or no sampled parameter"
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t = exp.trials
    last = exp.last_col
    complete = t[(t["status"] == "TERMINATED") & ~t["stopped_early"] & t[last].map(is_finite_number)]
    values = dict(zip(complete["trial_id"], complete[last]))
    note = (f"fANOVA (Optuna) over the {len(complete)} trials that ran to the end; trials stopped early "
            "count as pruned")
    use_pruned = True
    if len(complete) < 2:
        ok = t[(t["status"] != "ERROR") & (t["iterations"] > 0)]
        level = int(ok["iterations"].min()) if not ok.empty else 0
        h = exp.history
        at = h[(h["training_iteration"] == level) & h["trial_id"].isin(ok["trial_id"])] if level else h.iloc[0:0]
        values = {tid: v for tid, v in zip(at["trial_id"], at.get(exp.metric, [])) if is_finite_number(v)}
        note = (f"fANOVA (Optuna) over the {exp.metric} of {len(values)} trials at iteration {level}, the "
                "last one every trial that reported reached: fewer than 2 trials ran to the end")
        use_pruned = False
    if len(values) < 2:
        return {}, f"needs at least 2 trials with a finite {exp.metric}"
    log_params = {name for name, d in distributions(exp.spec.param_space)
                  if "log" in d.type} if exp.spec else set()
    dists: dict[str, Any] = {}
    for name in exp.params:
        col = t.get(f"config/{name}")
        if col is None:
            continue
        vals = [v for v in col.tolist() if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if not vals:
            continue
        if all(_numeric(v) for v in vals):
            low, high = float(min(vals)), float(max(vals))
            if low < high:
                dists[name] = FloatDistribution(low, high, log=name in log_params and low > 0)
        elif len({str(v) for v in vals}) > 1:
            dists[name] = CategoricalDistribution(sorted({str(v) for v in vals}))
    if not dists:
        return {}, "no parameter varies between the trials"
    study = optuna.create_study(direction="minimize" if exp.mode == "min" else "maximize")
    h = exp.history
    for _, row in t.iterrows():
        params = {}
        for name, dist in dists.items():
            v = row[f"config/{name}"]
            params[name] = str(v) if isinstance(dist, CategoricalDistribution) else float(v)
        if row["trial_id"] in values:
            state, value = TrialState.COMPLETE, float(values[row["trial_id"]])
        elif use_pruned and row["stopped_early"]:
            state, value = TrialState.PRUNED, None
        elif row["status"] == "ERROR":
            state, value = TrialState.FAIL, None
        else:
            continue
        inter = {}
        if state == TrialState.PRUNED and exp.metric in h:
            g = h[(h["trial_id"] == row["trial_id"])]
            inter = {int(i): float(v) for i, v in zip(g["training_iteration"], g[exp.metric]) if is_finite_number(v)}
        try:
            study.add_trial(create_trial(state=state, value=value, params=params, distributions=dists,
                                         intermediate_values=inter))
        except ValueError:
            continue
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    result = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)
    return {k: float(v) for k, v in result.items()}, note


# --------------------------------------------------------------------------- text formats


def _fmt(v: Any) -> str:
    v = _py(v)
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _header(exp: Experiment) -> list[str]:
    t = exp.trials
    counts = t["status"].value_counts()
    by_status = ", ".join(f"{n} {s}" for s, n in counts.items()) or "none yet"
    lines = [f"Experiment {exp.name} ({exp.path}): {exp.status}"
             + (f", started {exp.started}" if exp.started else "")]
    metric = f"metric {exp.metric} ({exp.mode})" if exp.metric else "no metric"
    lines.append(f"{len(t)} trials ({by_status}); {metric}")
    if exp.best_trial is not None:
        value = t.loc[t["trial_id"] == exp.best_trial, exp.last_col].iloc[0]
        lines.append(f"Best trial {exp.best_trial} (*): {exp.metric}={_fmt(value)}")
    return lines


def _display_frame(exp: Experiment, top: int | None) -> pd.DataFrame:
    t = exp.trials.head(top) if top else exp.trials
    cols = ["trial_id", "status", "iterations"] + [f"config/{p}" for p in exp.params if f"config/{p}" in t]
    if exp.metric:
        cols += [exp.last_col, exp.best_col]
    out = pd.DataFrame({"": ["*" if b else "" for b in t["best"]]}, index=t.index)
    for c in cols:
        name = c[len("config/"):] if c.startswith("config/") else c
        if c == exp.last_col:
            name = f"{exp.metric} (last)"
        elif c == exp.best_col:
            name = f"{exp.metric} (best)"
        elif c == "iterations":
            name = "iter"
        out[name] = [_fmt(v) for v in t[c]]
    return out


def render(exp: Experiment, fmt: str = "table", top: int | None = None) -> str:
    """Render the trials as text.

    Args:
        exp: From :func:`load_experiment`.
        fmt: ``table`` (a header and the trials, best marked ``*``), ``csv`` (every
            column of :attr:`Experiment.trials`) or ``json`` (``experiment``: status,
            best trial and config, budget; ``trials``: one object per trial).
        top: Only the ``top`` best trials.

    Returns:
        The text, ending with a newline.
    """
    t = exp.trials.head(top) if top else exp.trials
    if fmt == "table":
        lines = _header(exp)
        if t.empty:
            lines.append("(no trials yet)")
        else:
            lines += ["", _display_frame(exp, top).to_string(index=False)]
        return "\n".join(lines) + "\n"
    if fmt == "csv":
        return t.to_csv(index=False)
    if fmt == "json":
        trials = json.loads(t.to_json(orient="records", double_precision=15))
        doc = {"experiment": _facts(exp), "trials": trials}
        return json.dumps(doc, indent=2, default=str) + "\n"
    raise ValueError(f"unknown format {fmt!r}; allowed: table, csv, json (html: write_html)")


def _facts(exp: Experiment) -> dict[str, Any]:
    best_value = None
    if exp.best_trial is not None:
        best_value = _py(exp.trials.loc[exp.trials["trial_id"] == exp.best_trial, exp.last_col].iloc[0])
    return {
        "name": exp.name, "path": str(exp.path), "status": exp.status, "started": exp.started,
        "metric": exp.metric, "mode": exp.mode,
        "trials": {"total": len(exp.trials), "by_status": {str(k): int(v) for k, v in
                                                           exp.trials["status"].value_counts().items()}},
        "best": None if exp.best_trial is None else {"trial_id": exp.best_trial, "value": best_value,
                                                    "config": exp.best_config},
        "budget": budget(exp),
    }


# --------------------------------------------------------------------------- plots


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    return buf.getvalue()


def _x_attr(exp: Experiment) -> str:
    attr = exp.spec.scheduler.time_attr if exp.spec else "training_iteration"
    return attr if attr in exp.history.columns else "training_iteration"


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(i / max(1, n - 1) * 0.9) for i in range(n)]


def _plot_curves(exp: Experiment):
    h, metric = exp.history, exp.metric
    if not metric or metric not in h:
        return None
    x = _x_attr(exp)
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    order = list(exp.trials["trial_id"])  # best first: darkest
    colors = dict(zip(order, _colors(len(order))))
    early = set(exp.trials.loc[exp.trials["stopped_early"], "trial_id"])
    stopped_label = False
    for trial_id in reversed(order):
        g = h[h["trial_id"] == trial_id].sort_values(x)
        g = g[g[metric].map(is_finite_number)]
        if g.empty:
            continue
        best = trial_id == exp.best_trial
        ax.plot(g[x], g[metric], color="crimson" if best else colors[trial_id], lw=2.6 if best else 1.2,
                alpha=1 if best else 0.8, marker="o" if len(g) < 30 else None, ms=3,
                label=f"best: {trial_id}" if best else None, zorder=3 if best else 2)
        if trial_id in early:
            ax.plot(g[x].iloc[-1], g[metric].iloc[-1], "x", color="black", ms=8, mew=2, zorder=4,
                    label=None if stopped_label else "stopped early")
            stopped_label = True
    rungs = scheduler_rungs(exp.spec)
    if rungs and x == (exp.spec.scheduler.time_attr if exp.spec else x):
        for i, r in enumerate(rungs):
            ax.axvline(r, color="grey", ls="--", lw=1, zorder=1,
                       label=f"{exp.spec.scheduler.type} rungs" if i == 0 else None)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(f"Learning curves: {metric} of {len(order)} trials ({exp.mode})")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return fig


def _param_values(exp: Experiment, name: str) -> tuple[list, bool, list | None]:
    """Values of a parameter per trial (in trials order), whether numeric, and category labels."""
    vals = [_py(v) for v in exp.trials[f"config/{name}"]]
    if all(v is None or _numeric(v) for v in vals):
        return vals, True, None
    labels = sorted({str(v) for v in vals})
    return [labels.index(str(v)) for v in vals], False, labels


def _log_param(exp: Experiment, name: str, vals: list) -> bool:
    if exp.spec:
        for n, d in distributions(exp.spec.param_space):
            if n == name:
                return "log" in d.type
    pos = [v for v in vals if v is not None and v > 0]
    return len(pos) == len(vals) and bool(pos) and max(pos) / min(pos) > 100


def _plot_params(exp: Experiment):
    if not exp.metric or not exp.params or exp.trials.empty:
        return None
    params = [p for p in exp.params if f"config/{p}" in exp.trials]
    n = len(params)
    if not n:
        return None
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = _figure(4.2 * cols, 3.4 * rows)
    y = [_py(v) for v in exp.trials[exp.last_col]]
    early = list(exp.trials["stopped_early"])
    best = list(exp.trials["best"])
    for i, name in enumerate(params):
        ax = fig.add_subplot(rows, cols, i + 1)
        xs, numeric, labels = _param_values(exp, name)
        for group, style in ((False, dict(color="tab:blue", s=30, label="ran to the end")),
                             (True, dict(facecolors="none", edgecolors="grey", s=30, label="stopped early"))):
            pts = [(x, v) for x, v, e, b in zip(xs, y, early, best) if e == group and not b and x is not None
                   and v is not None]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], **style)
        for x, v, b in zip(xs, y, best):
            if b and x is not None and v is not None:
                ax.scatter([x], [v], marker="*", s=180, color="crimson", zorder=3, label="best")
        if numeric and _log_param(exp, name, [v for v in xs if v is not None]):
            ax.set_xscale("log")
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0)
        ax.set_xlabel(name)
        ax.set_ylabel(f"{exp.metric} (last)")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    fig.suptitle(f"{exp.metric} (last reported) against each parameter")
    return fig


def _plot_parallel(exp: Experiment, top: int):
    if not exp.metric or not exp.params:
        return None
    t = exp.trials[[has_result(v, s) for v, s in zip(exp.trials[exp.last_col], exp.trials["status"])]].head(top)
    params = [p for p in exp.params if f"config/{p}" in t]
    if t.empty or not params:
        return None
    axes_cols: list[tuple[str, list[float], list[str]]] = []  # (label, values in [0, 1], tick labels low/high)
    for name in params:
        vals, numeric, labels = _param_values(exp, name)
        idx = [exp.trials.index.get_loc(i) for i in t.index]
        vals = [vals[i] for i in idx]
        if numeric:
            num = [float(v) if v is not None else math.nan for v in vals]
            log = _log_param(exp, name, [v for v in num if not math.isnan(v)])
            scaled = [math.log10(v) if log and v > 0 else v for v in num]
            lo, hi = min(scaled), max(scaled)
            norm = [(v - lo) / (hi - lo) if hi > lo else 0.5 for v in scaled]
            lo_v, hi_v = (10 ** lo, 10 ** hi) if log else (lo, hi)
            axes_cols.append((name, norm, [f"{lo_v:.3g}", f"{hi_v:.3g}"]))
        else:
            k = max(1, len(labels) - 1)
            axes_cols.append((name, [v / k if len(labels) > 1 else 0.5 for v in vals], [labels[0], labels[-1]]))
    m = [float(v) for v in t[exp.last_col]]
    lo, hi = min(m), max(m)
    axes_cols.append((f"{exp.metric} (last)", [(v - lo) / (hi - lo) if hi > lo else 0.5 for v in m],
                      [f"{lo:.4g}", f"{hi:.4g}"]))
    fig = _figure(max(6, 1.8 * len(axes_cols)), 4.5)
    ax = fig.add_subplot()
    xs = list(range(len(axes_cols)))
    colors = _colors(len(t))
    for j in reversed(range(len(t))):
        best = t["trial_id"].iloc[j] == exp.best_trial
        ax.plot(xs, [c[1][j] for c in axes_cols], color="crimson" if best else colors[j], lw=2.6 if best else 1.3,
                alpha=1 if best else 0.85, zorder=3 if best else 2, marker="o", ms=3)
    for x, (_label, _, ticks) in zip(xs, axes_cols):
        ax.axvline(x, color="black", lw=1, zorder=1)
        ax.text(x, -0.06, ticks[0], ha="center", va="top", fontsize=8)
        ax.text(x, 1.06, ticks[1], ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, [c[0] for c in axes_cols])
    ax.set_yticks([])
    ax.set_ylim(-0.18, 1.18)
    ax.set_xlim(-0.3, len(axes_cols) - 0.7)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"Parallel coordinates of the top {len(t)} trials (best in red; darker = better)")
    return fig


def _plot_importances(imp: dict[str, float], note: str):
    if not imp:
        return None
    names = list(imp)[::-1]
    fig = _figure(7, 0.5 * len(names) + 1.6)
    ax = fig.add_subplot()
    ax.barh(names, [imp[n] for n in names], color="tab:blue")
    for i, n in enumerate(names):
        ax.text(imp[n], i, f" {imp[n]:.2f}", va="center", fontsize=9)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel("importance (sums to 1)")
    ax.set_title("Parameter importances (fANOVA)")
    return fig


def _plot_budget(b: dict[str, Any]):
    fig = _figure(8, 3.2)
    pairs = [("trial-iterations", b["trial_iterations"], b["trial_iterations_without_early_stopping"]),
             ("trial time (s)", b["trial_time_s"], b["trial_time_s_without_early_stopping"])]
    if b["wall_time_s"] is not None and b["wall_time_s_without_early_stopping"] is not None:
        pairs.append(("wall time (s)", b["wall_time_s"], b["wall_time_s_without_early_stopping"]))
    for i, (label, used, full) in enumerate(pairs):
        ax = fig.add_subplot(1, len(pairs), i + 1)
        bars = ax.bar(["used", "without\nearly stopping"], [used, full], color=["tab:green", "lightgrey"],
                      edgecolor="black")
        for bar, v in zip(bars, (used, full)):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{v:.4g}", ha="center", va="bottom",
                    fontsize=9)
        ax.set_title(label)
        ax.set_ylim(0, max(used, full, 1e-9) * 1.2)
    fig.suptitle(f"Budget of {b['trials']} trials ({b['stopped_early']} stopped early)")
    return fig


def _plots(exp: Experiment, top: int) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Render every plot to PNG bytes; also returns the facts shown beside them."""
    imp, note = importances(exp)
    b = budget(exp)
    figs = {
        "learning_curves": _plot_curves(exp),
        "metric_vs_params": _plot_params(exp),
        "parallel_coordinates": _plot_parallel(exp, top),
        "importances": _plot_importances(imp, note),
        "budget": _plot_budget(b) if not exp.trials.empty else None,
    }
    return {k: _png(f) for k, f in figs.items() if f is not None}, {"importances": imp, "note": note, "budget": b}


def write_plots(exp: Experiment, folder: str | os.PathLike, top: int = 10) -> dict[str, Path]:
    """Write the report's plots as PNG files (matplotlib), readable without a browser.

    Args:
        exp: From :func:`load_experiment`.
        folder: Where the PNGs go; created if missing.
        top: Trials in the parallel-coordinates plot.

    Returns:
        Plot name -> PNG file: ``learning_curves``, ``metric_vs_params``,
        ``parallel_coordinates``, ``importances``, ``budget`` (those that apply).
    """
    pngs, _ = _plots(exp, top)
    return _save_pngs(pngs, Path(folder))


def _save_pngs(pngs: dict[str, bytes], folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, data in pngs.items():
        atomic_write(folder / f"{name}.png", data)
        out[name] = folder / f"{name}.png"
    return out


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1100px;
color:#222;background:#fff;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.8em}.facts{color:#444}.facts b{color:#222}img{max-width:100%;height:auto;display:block;
margin:.5em 0}table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:right}th{background:#f3f3f3}tr.best td{background:#ffe9e9;font-weight:bold}
td.id,th.id,td.status{text-align:left}pre{background:#f6f8fa;padding:.8em;border:1px solid #ddd;
overflow-x:auto}.note{color:#666;font-size:.9em}
"""


def _img(pngs: dict[str, bytes], name: str, alt: str) -> str:
    if name not in pngs:
        return f'<p class="note">No {html.escape(alt)} plot: not enough data.</p>'
    data = base64.b64encode(pngs[name]).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _table_html(exp: Experiment, top: int | None) -> str:
    frame = _display_frame(exp, top)
    t = exp.trials.head(top) if top else exp.trials
    head = "".join(f'<th class="{"id" if c == "trial_id" else ""}">{html.escape(str(c))}</th>' for c in frame.columns)
    rows = []
    for (_, r), best in zip(frame.iterrows(), t["best"]):
        cells = "".join(f'<td class="{"id" if c == "trial_id" else "status" if c == "status" else ""}">'
                        f"{html.escape(str(v))}</td>" for c, v in r.items())
        rows.append(f'<tr class="{"best" if best else ""}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def write_html(exp: Experiment, output: str | os.PathLike | None = None,
               top: int | None = None) -> tuple[Path, dict[str, Path]]:
    """Write the experiment's report as one self-contained HTML file, and its plots as PNGs.

    The page holds: the status and the best trial, its config as YAML, the budget used
    against the same trials without early stopping, the learning curves of every trial
    with the scheduler's rungs and where trials were stopped, the metric against each
    parameter, parallel coordinates of the top trials, parameter importances, and the
    trials table. Plots are embedded as base64 PNGs; the page has no script and loads
    nothing else.

    Args:
        exp: From :func:`load_experiment`.
        output: The HTML file; default ``<experiment>/report.html``.
        top: Trials in the table and the parallel-coordinates plot (default: every
            trial in the table, the 10 best in the plot).

    Returns:
        ``(html_file, {plot name: PNG file})``; the PNGs are in ``<output stem>_plots/``
        beside the HTML file.
    """
    output = Path(output) if output is not None else exp.path / "report.html"
    pngs, facts = _plots(exp, top or 10)
    b = facts["budget"]
    e = html.escape
    best_cfg = exp.best_config
    best_yaml = yaml.safe_dump(best_cfg, sort_keys=False) if best_cfg is not None else "(no best trial yet)"
    header = _header(exp)

    def pct(used, full):
        return f" ({100 * (1 - used / full):.0f}% saved)" if full else ""

    wall = ("unknown" if b["wall_time_s"] is None else
            f"{b['wall_time_s']:.1f} s, against about {b['wall_time_s_without_early_stopping']:.1f} s"
            f"{pct(b['wall_time_s'], b['wall_time_s_without_early_stopping'])}")
    imp = facts["importances"]
    imp_rows = "".join(f"<tr><td class='id'>{e(k)}</td><td>{v:.3f}</td></tr>" for k, v in imp.items())
    imp_table = (f"<table><thead><tr><th class='id'>parameter</th><th>importance</th></tr></thead>"
                 f"<tbody>{imp_rows}</tbody></table>") if imp else ""
    rungs = scheduler_rungs(exp.spec)
    rung_note = (f"Dashed lines: the {exp.spec.scheduler.type} rungs at {', '.join(f'{r:g}' for r in rungs)} "
                 f"{_x_attr(exp)}; x: where a trial was stopped early." if rungs else
                 "x: where a trial was stopped early (ended with fewer iterations than the longest trial).")
    generated = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>tuner report: {e(exp.name)}</title>
<style>{_CSS}</style></head>
<body>
<h1>Experiment {e(exp.name)}</h1>
<p class="facts">{'<br>'.join(e(line) for line in header)}</p>
<h2>Best config</h2>
<pre>{e(best_yaml)}</pre>
<h2>Budget</h2>
<p class="facts"><b>Trial-iterations:</b> {b['trial_iterations']} used, against
{b['trial_iterations_without_early_stopping']} without early stopping\
{pct(b['trial_iterations'], b['trial_iterations_without_early_stopping'])}
({b['stopped_early']} of {b['trials']} trials stopped early; the longest ran {b['full_iterations']}).<br>
<b>Trial time:</b> {b['trial_time_s']:.1f} s used, against about {b['trial_time_s_without_early_stopping']:.1f} s\
{pct(b['trial_time_s'], b['trial_time_s_without_early_stopping'])}.<br>
<b>Wall time:</b> {wall}.</p>
{_img(pngs, "budget", "budget")}
<p class="note">Without early stopping, every trial that ended TERMINATED would have run as many iterations as
the longest trial; the missing iterations are costed at the median seconds per iteration, the wall time scaled
alike (same parallelism).</p>
<h2>Learning curves</h2>
{_img(pngs, "learning_curves", "learning curves")}
<p class="note">{e(rung_note)}</p>
<h2>{e(str(exp.metric))} against each parameter</h2>
{_img(pngs, "metric_vs_params", "metric against parameters")}
<h2>Parallel coordinates of the top trials</h2>
{_img(pngs, "parallel_coordinates", "parallel coordinates")}
<h2>Parameter importances</h2>
{_img(pngs, "importances", "parameter importances")}
{imp_table}
<p class="note">{e(facts['note'])}.</p>
<h2>Trials</h2>
{_table_html(exp, top)}
<p class="note">Sorted by the last reported {e(str(exp.metric))}; the best trial is marked * and highlighted.
Generated by tuner on {e(generated)} from {e(str(exp.path))}.</p>
</body></html>
"""
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(output, page)
    files = _save_pngs(pngs, output.with_name(output.stem + "_plots"))
    return output, files


# --------------------------------------------------------------------------- listing


def list_experiments(storage: str | os.PathLike = "runs") -> pd.DataFrame:
    """One row per experiment in a storage folder, oldest first.

    Args:
        storage: The parent folder of the experiments (a spec's ``storage``).

    Returns:
        Columns ``name``, ``status``, ``trials`` (count, with the errored ones),
        ``best`` (``metric=value``), ``started`` and ``path``.

    Raises:
        ReportError: If ``storage`` is not a folder.
    """
    root = Path(storage).expanduser()
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder; give the storage folder that holds the experiments "
                          "(a spec's `storage:`, `runs` by default).")
    rows = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not _is_experiment(folder):
            continue
        exp = load_experiment(folder)
        t = exp.trials
        errored = int((t["status"] == "ERROR").sum())
        trials = f"{len(t)}" + (f" ({errored} errored)" if errored else "")
        best = "-"
        if exp.best_trial is not None:
            best = f"{exp.metric}={_fmt(t.loc[t['trial_id'] == exp.best_trial, exp.last_col].iloc[0])}"
        rows.append({"name": exp.name, "status": exp.status, "trials": trials, "best": best,
                     "started": exp.started or "-", "path": str(exp.path)})
    frame = pd.DataFrame(rows, columns=["name", "status", "trials", "best", "started", "path"])
    return frame.sort_values(["started", "name"], kind="stable").reset_index(drop=True)


def render_list(frame: pd.DataFrame) -> str:
    """The table ``tuner list`` prints: one line per experiment (without the path column)."""
    if frame.empty:
        return "(no experiments)\n"
    return frame.drop(columns=["path"]).to_string(index=False) + "\n"
