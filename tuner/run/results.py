"""Results: Ray's ResultGrid -> ``TuneResult``, ``summary.json``, ``best_config.yaml``, ``results.csv``.

Files written into the experiment folder ``<storage>/<name>/``:

* ``summary.json``: ``metric``, ``mode``, ``best`` (``trial_id``, ``config``,
  ``metrics``, ``score`` under ``best.scope``, ``checkpoint``: its best checkpoint,
  ``checkpoint_metrics``: ``metric``, ``value``, ``training_iteration`` reported with it),
  ``scope``, ``checkpoint_score`` (``metric``, ``mode``), ``checkpoints`` (trial id -> its
  best checkpoint: ``checkpoint``, ``dir``, ``metrics``, ``config``; what ``tuner export``
  reads), ``trials`` (``total``, ``by_status`` keyed by Ray's trial statuses),
  ``errors`` (one entry per errored trial) and ``wall_time_s``.
* ``best_config.yaml``: the best trial's config, plain YAML.
* ``results.csv``: one row per trial, best first (:mod:`tuner.core.best`: errored trials and
  trials without a finite value last): ``trial_id``, ``status``, ``trial_seed`` (each
  trial's ``tuner.trial.seed()``, when the spec has a ``seed``: :mod:`tuner.search.seeds`),
  ``config/<param>`` (nested names joined by ``/``), then the last reported metrics; under
  a ``best.scope`` other than ``last``, the score (:func:`score_column`).
* Constraints: ``summary.json`` holds ``constraints``, ``results.csv`` a ``feasible`` column.
* Several objectives (:mod:`tuner.search.pareto`): ``summary.json`` holds ``objectives``, ``pareto_front``
  (``trial_id``, ``config``, ``objectives``, ``checkpoint`` per trial of the front, in trial
  order) and ``hypervolume`` (``reference``, ``value``); ``results.csv`` has a ``pareto`` column
  and lists the front first; ``pareto_configs.yaml`` holds the front's trials. The best trial
  (``best``, ``best_config.yaml``) is the front's best on the first objective.
* PBT/PB2 runs: ``summary.json`` also holds ``perturbations`` (:func:`tuner.search.schedule.read_perturbations`),
  and ``best_schedule.yaml`` holds the best trial's hyperparameter schedule
  (:func:`tuner.search.schedule.best_schedule`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from ray.tune import ResultGrid

from tuner.core.best import (ERROR, best as best_of, best_checkpoint as best_checkpoint_of, is_finite_number,
                             metric_value, nan_to_none, ranked, scope_value)
from tuner.experiment.files import atomic_write  # re-exported: tuner.run.results.atomic_write
from tuner.resources.gpu_packing import load_packing, packing_summary, trial_columns
from tuner.experiment.layout import (BEST_CONFIG, BEST_SCHEDULE, ERROR_FILE, PARETO_CONFIGS, PBT_GLOBAL, RESULTS_CSV,
                                     SUMMARY, TIMEOUT_MARKER, trial_id_of_folder)
from tuner.search.pareto import feasible as is_feasible, hypervolume, objective_values, pareto_front, reference_point
from tuner.core.params import RAY_RESULT_KEYS, flatten
from tuner.search.schedule import best_schedule, read_perturbations
from tuner.search.seeds import seed_of_trial
from tuner.search.space import plain
from tuner.spec import Spec
from tuner.spec.sections import POPULATION_SCHEDULERS

__all__ = ["TuneResult", "collect_results", "best_line", "atomic_write", "user_traceback"]

@dataclass
class TuneResult:
    """What a tuning run found.

    Attributes:
        best_config: Config of the best trial (plain Python values), or None without a
            metric or without a finished trial. With constraints, the best feasible trial;
            with several objectives, the Pareto front's best trial on the first objective
            (one end of the front; :attr:`pareto_front` holds every trade-off).
        best_metrics: Last reported metrics of the best trial (user metrics and
            ``training_iteration``).
        best_checkpoint: Folder (or cloud URI) of the best trial's best checkpoint by
            ``checkpoint.score`` (:attr:`tuner.spec.Spec.checkpoint_score`; its newest without a
            metric), or None. ``summary.json``'s ``best.checkpoint``; ``best.checkpoint_metrics``
            holds the score and iteration it was reported with.
        best_trial_id: Ray's id of the best trial, or None.
        experiment_path: The experiment folder, ``<storage>/<name>`` (for a cloud
            ``storage``, its local mirror).
        dataframe: One row per trial, the same table as ``results.csv``.
        summary: The content of ``summary.json``.
        aborted_error: The exception of the trial whose first error stopped the
            experiment (``failure.abort_on_first_error``), or None.
        best_schedule: A PBT/PB2 run: the best trial's hyperparameter schedule, as in
            ``best_schedule.yaml`` (:func:`tuner.search.schedule.best_schedule`: ``trial_id``,
            ``policy_file``, ``changed``, ``schedule`` of ``from_iteration``/``trial_id``/
            ``config`` steps); None for other schedulers or without a best trial.
    """

    best_config: dict[str, Any] | None
    best_metrics: dict[str, Any] | None
    best_checkpoint: str | None
    best_trial_id: str | None
    experiment_path: str
    dataframe: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)
    aborted_error: BaseException | None = field(default=None, repr=False)
    best_schedule: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def perturbations(self) -> list[dict[str, Any]]:
        """A PBT/PB2 run's perturbations, oldest first, as in ``summary.json``
        (:func:`tuner.search.schedule.read_perturbations`: ``iteration``, ``time``, ``trial_id``,
        ``cloned_from``, ``cloned_iteration``, ``old_config``, ``cloned_config``,
        ``new_config``); empty for other schedulers."""
        return list(self.summary.get("perturbations", []))

    @property
    def pareto_front(self) -> list[dict[str, Any]]:
        """Several objectives: the feasible trials that no other feasible trial dominates, in trial
        order, as in ``summary.json`` (:mod:`tuner.search.pareto`): ``trial_id``, ``config``,
        ``objectives`` (metric -> last value) and ``checkpoint`` (folder or URI, or None) each;
        empty for a single objective."""
        return list(self.summary.get("pareto_front", []))

    @property
    def errors(self) -> list[dict[str, str]]:
        """The errored trials: ``trial_id``, ``error`` (the last line of its error) and
        ``path`` (its folder, with ``error.txt``), as in ``summary.json``."""
        return list(self.summary.get("errors", []))

    @property
    def num_errors(self) -> int:
        """Number of trials that ended in ERROR."""
        return self.summary.get("trials", {}).get("by_status", {}).get("ERROR", 0)

    @property
    def aborted(self) -> dict[str, str] | None:
        """The first-trial error that stopped the experiment: ``trial_id``, ``traceback``, ``path``."""
        return self.summary.get("aborted")

    @property
    def interrupted(self) -> bool:
        """Whether the run was stopped by Ctrl-C (SIGINT) or SIGUSR1 before it ended."""
        return bool(self.summary.get("interrupted"))



def _user_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """A result's user metrics (flat, plain values) and its ``training_iteration``."""
    # Ray's keys are not metrics; results.csv keeps training_iteration of them.
    flat = flatten({k: v for k, v in metrics.items() if k not in RAY_RESULT_KEYS})
    flat["training_iteration"] = metrics.get("training_iteration")
    return plain(flat)


def _results(grid: ResultGrid) -> list:
    """The grid's ``Result`` objects, in trial order (a ``ResultGrid`` indexes, but declares no iteration)."""
    return [grid[i] for i in range(len(grid))]


def _statuses(grid: ResultGrid) -> list[str]:
    """The trials' statuses, in the grid's order: Ray's Trial objects', else ERROR or TERMINATED."""
    from tuner.adapters.ray_internals import result_grid_trials

    trials = result_grid_trials(grid)  # a Result has no status; Ray's Trial objects do
    if trials is not None and len(trials) == len(grid):
        return [str(t.status) for t in trials]
    return ["ERROR" if r.error else "TERMINATED" for r in _results(grid)]


def _trial_ids(grid: ResultGrid) -> list[str]:
    """The trials' ids, in the grid's order.

    From Ray's Trial objects where the grid has them: a PBT trial that exploited at its
    last iteration ends with the cloned trial's checkpoint result as its last result, so
    its ``metrics["trial_id"]`` names the cloned trial.
    """
    from tuner.adapters.ray_internals import result_grid_trials

    trials = result_grid_trials(grid)
    if trials is not None and len(trials) == len(grid):
        return [str(t.trial_id) for t in trials]
    return [(r.metrics or {}).get("trial_id") or trial_id_of_folder(Path(r.path).name) for r in _results(grid)]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def user_traceback(error_file: Path, error: BaseException | None = None) -> str:
    """The user's part of a trial's traceback, from Ray's ``error.txt``.

    Keeps the frames outside Ray and ``tuner`` (with their source lines) and the final
    exception, under a ``Traceback (most recent call last):`` header.

    Args:
        error_file: The trial's ``error.txt``.
        error: The exception, used when the file is missing.

    Returns:
        The traceback text, or the exception's last line when no frame is the user's.
    """
    try:
        text = _ANSI.sub("", error_file.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return _last_line(error) if error is not None else ""
    lines = text.rstrip().splitlines()
    frames, keep = [], False
    for line in lines:
        if line.startswith("  File "):
            internal = "/site-packages/ray/" in line or f"{os.sep}tuner{os.sep}" in line
            keep = not internal
            if keep:
                frames.append(line)
        elif line.startswith("    ") and keep:
            if line.strip() and set(line.strip()) - {"^", "~"}:
                frames.append(line)
    tail = [line for line in lines if line and not line.startswith(" ")][-1:]
    if not frames:
        return tail[0] if tail else ""
    return "\n".join(["Traceback (most recent call last):", *frames, *tail])


def _conditional_columns(frame: pd.DataFrame, spec: Spec, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A conditional space's ``results.csv``: the ``config/`` columns in spec order (a parameter that
    the first trials lacked is not pushed to the end), blank where a trial lacks the parameter, and
    an integer parameter written as an integer (pandas' ``Int64``; a blank would make it a float)."""
    from tuner.spec.distributions import SubspaceChoice

    order: list[str] = []
    for name, value in flatten(spec.param_space).items():
        if isinstance(value, SubspaceChoice):
            order += list(dict.fromkeys(p.key for p in spec.space.params if p.key.startswith(name + "/")))
        else:
            order.append(name)
    rank = {f"config/{name}": i for i, name in enumerate(order)}
    config = sorted((c for c in frame.columns if c.startswith("config/")), key=lambda c: rank.get(c, len(rank)))
    others = [c for c in frame.columns if not c.startswith("config/")]
    lead = 3 if "trial_seed" in others[:3] else 2  # trial_id, status (trial_seed), then the config
    frame = frame[others[:lead] + config + others[lead:]]
    for column in config:
        values = [row[column] for row in rows if column in row]
        if len(values) < len(rows) and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[column] = frame[column].astype("Int64")
    return frame


def _last_line(error: BaseException) -> str:
    """An exception's last line (its type's name when it has no message)."""
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__


def collect_results(spec: Spec, grid: ResultGrid, experiment_path: str | os.PathLike, wall_time_s: float,
                    interrupted: bool = False, aborted_by: str | None = None,
                    location: str | None = None, trial_seed: int | None = None) -> TuneResult:
    """Build the TuneResult and write ``summary.json``, ``best_config.yaml`` and ``results.csv``.

    Args:
        spec: The spec that was run.
        grid: Ray's ``ResultGrid`` from ``Tuner.fit()``.
        experiment_path: The experiment folder.
        wall_time_s: Wall time of the run, in seconds.
        interrupted: Whether the run was stopped by a signal before it ended.
        aborted_by: The trial whose error stopped the experiment (first-trial abort).
        location: The experiment's cloud URI when ``experiment_path`` is its local mirror
            (already downloaded): trial and checkpoint paths are given as URIs of it.
        trial_seed: The seed every trial had (a ``--replay``'s), else None: each trial's own.

    Returns:
        The TuneResult. The best trial is the best by its score (its reported values of
        ``spec.metric`` under ``best.scope``, :mod:`tuner.core.best`) among the trials that did not
        error, skipping NaN and inf.
    """
    path = Path(experiment_path)
    statuses = _statuses(grid)
    ids = _trial_ids(grid)
    packing = load_packing(path) if spec.resources.auto_gpu else None
    rows = _trial_rows(spec, grid, ids, statuses, packing, trial_seed)
    errors, aborted, aborted_error = _errors(grid, ids, path, location, aborted_by)
    front = _front(spec, grid, statuses, ids)
    # Each trial's score under best.scope (tuner.core.best), in the grid's order: for the ranking and the best.
    scores = [_score(spec, result) for result in _results(grid)] if spec.metric else []
    rows = _ranked_rows(spec, grid, rows, front, scores)
    frame = pd.DataFrame(rows)
    if spec.conditional:
        frame = _conditional_columns(frame, spec, rows)
    kept = {i: _best_checkpoint(spec, r, path, location) for r, i in zip(_results(grid), ids)}
    best = _best_trial(spec, grid, statuses, scores, front, ids, location, kept)
    summary = _summary(spec, statuses, best, kept, errors, interrupted, aborted, wall_time_s, location, packing)
    if spec.multi_objective:
        summary.update(_front_summary(spec, grid, statuses, ids, front, location))
    schedule = _add_pbt(summary, spec, path, best.trial_id)
    _write_files(path, spec, summary, best.config, schedule, frame)
    return TuneResult(best.config, best.metrics, best.checkpoint, best.trial_id, str(path), frame, summary,
                      aborted_error, best_schedule=schedule)


@dataclass
class _BestTrial:
    """The best trial as ``summary.json`` and :class:`TuneResult` give it (every field None without one)."""

    config: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    checkpoint: str | None = None
    trial_id: str | None = None
    score: Any = None


def _reachable(trial_path: str, location: str | None) -> str:
    """A trial folder as the user can reach it: its URI in the cloud ``location``, else its path."""
    from tuner.experiment.storage import display, join

    return join(display(location), Path(trial_path).name) if location else str(trial_path)


def _trial_rows(spec: Spec, grid: ResultGrid, ids: list[str], statuses: list[str], packing: Any,
                trial_seed: int | None) -> list[dict[str, Any]]:
    """One ``results.csv`` row per trial, in the grid's order: id, status, seed, config, last metrics, GPU share."""
    rows = []
    for result, status, trial_id in zip(_results(grid), statuses, ids):
        metrics = result.metrics or {}
        row: dict[str, Any] = {"trial_id": trial_id, "status": status}
        if spec.seed is not None or trial_seed is not None:  # tuner.trial.seed() in the trial
            row["trial_seed"] = trial_seed if trial_seed is not None else \
                seed_of_trial(spec.seed, trial_id, plain(result.config or {}))
        row.update({f"config/{k}": v for k, v in flatten(plain(result.config or {})).items()})
        row.update(_user_metrics(metrics) if metrics else {})
        if packing is not None:  # gpu: auto: the share Ray gave the trial, and why
            row.update(trial_columns(packing, trial_id) or {"gpu_share": None, "gpu_share_reason": None})
        rows.append(row)
    return rows


def _errors(grid: ResultGrid, ids: list[str], path: Path, location: str | None,
            aborted_by: str | None) -> tuple[list[dict[str, str]], dict[str, str] | None, BaseException | None]:
    """``summary.json``'s ``errors`` (one per errored trial) and ``aborted``, and the aborting trial's exception."""
    errors = []
    aborted = aborted_error = None
    for result, trial_id in zip(_results(grid), ids):
        local = path / Path(result.path).name  # the trial folder (for a cloud experiment, its mirror)
        if result.error is not None:
            marker = local / TIMEOUT_MARKER  # written by a trial ended by trial_timeout_s
            text = marker.read_text().strip() if marker.is_file() else _last_line(result.error)
            errors.append({"trial_id": trial_id, "error": text, "path": _reachable(result.path, location)})
        if aborted_by is not None and trial_id == aborted_by:
            aborted = {"trial_id": aborted_by, "traceback": user_traceback(local / ERROR_FILE, result.error),
                       "path": _reachable(result.path, location)}
            aborted_error = result.error
    return errors, aborted, aborted_error


def _ranked_rows(spec: Spec, grid: ResultGrid, rows: list[dict[str, Any]], front: list[str],
                 scores: list[Any]) -> list[dict[str, Any]]:
    """The rows with ``feasible``, ``pareto`` and the score column where they apply, best first."""
    if spec.constraints:
        for row, result in zip(rows, _results(grid)):
            row["feasible"] = is_feasible(result.metrics, spec.constraints)
    if spec.multi_objective:
        for row in rows:
            row["pareto"] = row["trial_id"] in front
    if not spec.metric:
        return rows
    scored = spec.metric if spec.best.scope == "last" else score_column(spec)
    if spec.best.scope != "last":  # the score the trials are ranked by
        for row, score in zip(rows, scores):
            row[scored] = nan_to_none(score)
    # best first (the front first); errored, infeasible and trials without a finite value last
    return ranked(rows, spec.mode, value=lambda r: r.get(scored), status=lambda r: r["status"],
                  trial_id=lambda r: r["trial_id"], feasible=lambda r: bool(r.get("feasible", True)),
                  on_front=lambda r: bool(r.get("pareto", True)))


def _best_trial(spec: Spec, grid: ResultGrid, statuses: list[str], scores: list[Any], front: list[str],
                ids: list[str], location: str | None, kept: dict[str, dict[str, Any] | None]) -> _BestTrial:
    """The best trial (:func:`_best`): its config, last metrics, best checkpoint (else latest), id and score."""
    best = _best(spec, grid, statuses, scores, set(front) if spec.multi_objective else None, ids)
    if best is None:
        return _BestTrial()
    trial_id, score = next((i, v) for r, i, v in zip(_results(grid), ids, scores) if r is best)
    entry = kept.get(trial_id)
    checkpoint = entry["checkpoint"] if entry else _checkpoint(best, location)
    return _BestTrial(config=plain(best.config), metrics=_user_metrics(best.metrics), checkpoint=checkpoint,
                      trial_id=trial_id, score=score)


def _summary(spec: Spec, statuses: list[str], best: _BestTrial, kept: dict[str, dict[str, Any] | None],
             errors: list[dict[str, str]], interrupted: bool, aborted: dict[str, str] | None, wall_time_s: float,
             location: str | None, packing: Any) -> dict[str, Any]:
    """``summary.json`` but its Pareto front and PBT parts (:func:`_front_summary`, :func:`_add_pbt`)."""
    from tuner.experiment.storage import display

    by_status: dict[str, int] = {}
    for s in statuses:
        by_status[s] = by_status.get(s, 0) + 1
    summary: dict[str, Any] = {
        "name": spec.name,
        "metric": spec.metric,
        "mode": spec.mode,
        "best": None if best.trial_id is None else {
            "trial_id": best.trial_id,
            "config": best.config,
            "metrics": {k: nan_to_none(v) for k, v in (best.metrics or {}).items()},
            "checkpoint": best.checkpoint,
            "checkpoint_metrics": (kept.get(best.trial_id) or {}).get("metrics"),
            "score": nan_to_none(plain(best.score)),
        },
        "scope": spec.best.scope,
        "checkpoint_score": None if spec.checkpoint_score is None else dict(zip(("metric", "mode"),
                                                                                spec.checkpoint_score)),
        "checkpoints": {i: entry for i, entry in kept.items() if entry},
        "trials": {"total": len(statuses), "by_status": by_status},
        "errors": errors,
        "interrupted": interrupted,
        "aborted": aborted,
        "wall_time_s": round(wall_time_s, 3),
    }
    if location:
        summary["location"] = display(location)
    if packing is not None:
        summary["gpu_packing"] = packing_summary(packing)
    if spec.objectives:
        summary["objectives"] = [o.model_dump() for o in spec.objectives]
    if spec.constraints:
        summary["constraints"] = [c.model_dump(exclude_none=True) for c in spec.constraints]
    return summary


def _add_pbt(summary: dict[str, Any], spec: Spec, path: Path, best_id: str | None) -> dict[str, Any] | None:
    """A PBT/PB2 run: add ``perturbations`` to the summary and return the best trial's schedule; else None."""
    if not (spec.scheduler.type in POPULATION_SCHEDULERS or (path / PBT_GLOBAL).is_file()):
        return None
    summary["perturbations"] = plain(read_perturbations(path, getattr(spec.scheduler, "time_attr",
                                                                      "training_iteration")))
    return plain(best_schedule(path, best_id)) if best_id is not None else None


def _write_files(path: Path, spec: Spec, summary: dict[str, Any], best_config: dict[str, Any] | None,
                 schedule: dict[str, Any] | None, frame: pd.DataFrame) -> None:
    """Write summary.json, best_config.yaml, best_schedule.yaml, pareto_configs.yaml, results.csv (as apply)."""
    path.mkdir(parents=True, exist_ok=True)
    atomic_write(path / SUMMARY, json.dumps(summary, indent=2, default=str) + "\n")
    if best_config is not None:
        atomic_write(path / BEST_CONFIG, yaml.safe_dump(best_config, sort_keys=False))
    if schedule is not None:
        atomic_write(path / BEST_SCHEDULE, yaml.safe_dump(schedule, sort_keys=False))
    if spec.multi_objective:
        entries: list[dict[str, Any]] = summary["pareto_front"]
        front_configs = [{"trial_id": t["trial_id"], "objectives": t["objectives"], "config": t["config"]}
                         for t in entries]
        atomic_write(path / PARETO_CONFIGS, yaml.safe_dump(front_configs, sort_keys=False))
    atomic_write(path / RESULTS_CSV, frame.to_csv(index=False))


def _best(spec: Spec, grid: ResultGrid, statuses: list[str], scores: list[Any], front: set[str] | None = None,
          ids: list[str] | None = None):
    """The best trial's ``ray.tune.Result`` by :mod:`tuner.core.best`'s rule, or None.

    Like Ray's ``ResultGrid.get_best_result(scope=spec.best.scope, filter_nan_and_inf=True)``,
    but a trial that ended in ERROR, or that fails a constraint, is never the best: its last
    value is not a result. ``scores``: each trial's score (:func:`_score`), in the grid's order;
    ``front``: the Pareto front's trial ids (several objectives), the only candidates; ``ids``: the
    trials' ids in the grid's order.
    """
    if not spec.metric:
        return None
    ids = ids or _trial_ids(grid)
    pick = best_of(zip(_results(grid), statuses, ids, scores), spec.mode,
                   value=lambda c: c[3],
                   status=lambda c: ERROR if c[0].error is not None else c[1],
                   trial_id=lambda c: (c[0].metrics or {}).get("trial_id") or Path(c[0].path).name,
                   feasible=lambda c: is_feasible(c[0].metrics, spec.constraints),
                   on_front=None if front is None else lambda c: c[2] in front)
    return None if pick is None else pick[0]


def score_column(spec: Spec) -> str:
    """``results.csv``'s column of the trials' scores under a ``best.scope`` other than ``last``:
    ``<metric>@<scope>``, e.g. ``val_accuracy@last-5-avg``."""
    return f"{spec.metric}@{spec.best.scope}"


def _history(result: Any, metric: str) -> list[Any]:
    """A trial's reported values of ``metric``, oldest first (Ray's ``Result.metrics_dataframe``)."""
    frame = result.metrics_dataframe
    if frame is not None and metric in frame.columns:
        return [v for v in frame[metric].tolist() if v is not None]
    last = metric_value(result.metrics, metric)
    return [] if last is None else [last]


def _score(spec: Spec, result: Any) -> Any:
    """A trial's score (:func:`tuner.core.best.scope_value` under ``best.scope``): its last value for ``last``."""
    if spec.best.scope == "last":
        return metric_value(result.metrics, spec.metric)
    return scope_value(_history(result, spec.metric), spec.best.scope, spec.mode)


def _best_checkpoint(spec: Spec, result: Any, path: Path, location: str | None) -> dict[str, Any] | None:
    """A trial's best checkpoint by ``checkpoint.score`` (:func:`tuner.core.best.best_checkpoint`), or None.

    Among Ray's ``Result.best_checkpoints`` (the kept ones, with the metrics reported with each); a DDP
    trial's are Ray Train's, named by the ``checkpoint_path`` metric of its history.

    Returns:
        ``checkpoint`` (folder, or URI in the cloud ``location``), ``dir`` (its path in the experiment
        folder, ``/``-separated), ``metrics`` (``metric``, ``value``, ``training_iteration`` reported
        with it) and ``config`` (the trial's config the checkpoint was trained with, as reported with it).
    """
    from tuner.experiment.storage import display, to_uri

    pairs: list[tuple[str, Any]] = [(c.path, m) for c, m in result.best_checkpoints or []]
    frame = result.metrics_dataframe
    if not pairs and frame is not None and "checkpoint_path" in frame.columns:  # a DDP trial: Ray Train's
        pairs = [(row["checkpoint_path"], row) for row in frame.to_dict("records")
                 if isinstance(row.get("checkpoint_path"), str) and row["checkpoint_path"]]
    if not pairs and result.checkpoint is not None:
        pairs = [(result.checkpoint.path, result.metrics)]
    score = spec.checkpoint_score
    pick = best_checkpoint_of(pairs, *(score or (None, None)))
    if pick is None:
        return None
    where, metrics = pick
    trial_folder = Path(result.path).name
    rel = where.replace("\\", "/").split(f"/{trial_folder}/", 1)
    value = metric_value(metrics, score[0]) if score else None
    return {"checkpoint": to_uri(display(where), location) if location else where,
            "dir": f"{trial_folder}/{rel[1]}" if len(rel) == 2 else None,
            "metrics": {"metric": score[0] if score else None,
                        "value": plain(value) if is_finite_number(value) else None,
                        "training_iteration": plain((metrics or {}).get("training_iteration"))},
            # The config the checkpoint was trained with: a PBT/PB2 trial's changes at each exploit.
            "config": plain(config if isinstance(config := (metrics or {}).get("config"), dict) and config
                            else result.config or {})}


def _front(spec: Spec, grid: ResultGrid, statuses: list[str], ids: list[str]) -> list[str]:
    """The Pareto front's trial ids, in the grid's order (:func:`tuner.search.pareto.pareto_front`); [] for one
    objective."""
    if not spec.multi_objective:
        return []
    items = [(r, ERROR if r.error is not None else s, i) for r, s, i in zip(_results(grid), statuses, ids)]
    return [c[2] for c in pareto_front(items, spec.objectives or [], result=lambda c: c[0].metrics,
                                       status=lambda c: c[1], constraints=spec.constraints)]


def _checkpoint(result: Any, location: str | None) -> str | None:
    """A trial's latest checkpoint: its folder, or a URI in the experiment's cloud ``location``."""
    from tuner.experiment.storage import display, to_uri

    # A DDP trial's checkpoint is Ray Train's, passed on as the checkpoint_path metric.
    ckpt = result.checkpoint.path if result.checkpoint is not None else (result.metrics or {}).get("checkpoint_path")
    if location and ckpt:
        ckpt = to_uri(display(ckpt), location)
    return ckpt


def _front_summary(spec: Spec, grid: ResultGrid, statuses: list[str], ids: list[str], front: list[str],
                   location: str | None) -> dict[str, Any]:
    """``summary.json``'s ``pareto_front`` and ``hypervolume`` (over the feasible trials with a result)."""
    objectives = spec.objectives or []
    by_id = dict(zip(ids, _results(grid)))
    entries = []
    for trial_id in front:
        result = by_id[trial_id]
        entries.append({"trial_id": trial_id, "config": plain(result.config or {}),
                        "objectives": {o.metric: plain(metric_value(result.metrics, o.metric)) for o in objectives},
                        "checkpoint": _checkpoint(result, location)})
    volume = None
    if front:  # the feasible trials with a result (what the front dominates adds nothing to its volume)
        points = [v for r, status in zip(_results(grid), statuses)
                  if r.error is None and status != ERROR and is_feasible(r.metrics, spec.constraints)
                  for v in [objective_values(r.metrics, objectives)] if v is not None]
        reference = reference_point(points, objectives)
        volume = {"reference": reference, "value": hypervolume(points, objectives, reference)}
    return {"pareto_front": entries, "hypervolume": volume}


def best_line(spec: Spec, result: TuneResult) -> str:
    """The closing line: ``Best trial <id>: <metric>=<last value> config={...}``, under a ``best.scope``
    other than ``last`` with the score after the value (``(scope all: 0.95)``); with several objectives,
    the size of the Pareto front first."""
    if spec.multi_objective:
        front = result.pareto_front
        size = f"Pareto front: {len(front)} trial{'s' if len(front) != 1 else ''} ({PARETO_CONFIGS}). "
        if result.best_trial_id is None:
            return size + "No best trial: no feasible trial reported a finite value of every objective."
        values = ", ".join(f"{o.metric}={_shown((result.best_metrics or {}).get(o.metric))}"
                           for o in spec.objectives or [])
        return size + f"Best on {spec.metric}: trial {result.best_trial_id}: {values} config={result.best_config}"
    if result.best_trial_id is None:
        if spec.metric is None:
            return "No best trial: the spec sets no metric."
        if spec.constraints:
            return f"No best trial: no feasible trial reported a finite {spec.metric}."
        return f"No best trial: no trial reported a finite {spec.metric}."
    score = "" if spec.best.scope == "last" else \
        f" (scope {spec.best.scope}: {_shown((result.summary.get('best') or {}).get('score'))})"
    return (f"Best trial {result.best_trial_id}: {spec.metric}={_shown((result.best_metrics or {}).get(spec.metric))}"
            f"{score} config={result.best_config}")


def _shown(value: Any) -> Any:
    """A value as the closing line shows it: a float with 6 significant digits."""
    return f"{value:.6g}" if isinstance(value, float) else value

