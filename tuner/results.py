"""Results: Ray's ResultGrid -> ``TuneResult``, ``summary.json``, ``best_config.yaml``, ``results.csv``.

Files written into the experiment folder ``<storage>/<name>/``:

* ``summary.json``: ``metric``, ``mode``, ``best`` (``trial_id``, ``config``,
  ``metrics``), ``trials`` (``total``, ``by_status`` keyed by Ray's trial statuses),
  ``errors`` (one entry per errored trial) and ``wall_time_s``.
* ``best_config.yaml``: the best trial's config, plain YAML.
* ``results.csv``: one row per trial, best first (:mod:`tuner.best`: errored trials and
  trials without a finite value last): ``trial_id``, ``status``, ``config/<param>``
  (nested names joined by ``/``), then the last reported metrics.
* PBT/PB2 runs: ``summary.json`` also holds ``perturbations`` (:func:`tuner.schedule.read_perturbations`),
  and ``best_schedule.yaml`` holds the best trial's hyperparameter schedule
  (:func:`tuner.schedule.best_schedule`).
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

from tuner.best import ERROR, best as best_of, metric_value, nan_to_none, ranked
from tuner.files import atomic_write  # re-exported: tuner.results.atomic_write
from tuner.layout import (BEST_CONFIG, BEST_SCHEDULE, ERROR_FILE, PBT_GLOBAL, RESULTS_CSV, SUMMARY, TIMEOUT_MARKER,
                          trial_id_of_folder)
from tuner.params import RAY_RESULT_KEYS, flatten
from tuner.schedule import best_schedule, read_perturbations
from tuner.space import plain
from tuner.spec import Spec
from tuner.spec.sections import POPULATION_SCHEDULERS

__all__ = ["TuneResult", "collect_results", "best_line", "atomic_write", "user_traceback"]

@dataclass
class TuneResult:
    """What a tuning run found.

    Attributes:
        best_config: Config of the best trial (plain Python values), or None without a
            metric or without a finished trial.
        best_metrics: Last reported metrics of the best trial (user metrics and
            ``training_iteration``).
        best_checkpoint: Folder (or cloud URI) of the best trial's latest checkpoint, or None.
        best_trial_id: Ray's id of the best trial, or None.
        experiment_path: The experiment folder, ``<storage>/<name>`` (for a cloud
            ``storage``, its local mirror).
        dataframe: One row per trial, the same table as ``results.csv``.
        summary: The content of ``summary.json``.
        aborted_error: The exception of the trial whose first error stopped the
            experiment (``failure.abort_on_first_error``), or None.
        best_schedule: A PBT/PB2 run: the best trial's hyperparameter schedule, as in
            ``best_schedule.yaml`` (:func:`tuner.schedule.best_schedule`: ``trial_id``,
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
        (:func:`tuner.schedule.read_perturbations`: ``iteration``, ``time``, ``trial_id``,
        ``cloned_from``, ``cloned_iteration``, ``old_config``, ``cloned_config``,
        ``new_config``); empty for other schedulers."""
        return list(self.summary.get("perturbations", []))

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
    # Ray's keys are not metrics; results.csv keeps training_iteration of them.
    flat = flatten({k: v for k, v in metrics.items() if k not in RAY_RESULT_KEYS})
    flat["training_iteration"] = metrics.get("training_iteration")
    return plain(flat)


def _results(grid: ResultGrid) -> list:
    """The grid's ``Result`` objects, in trial order (a ``ResultGrid`` indexes, but declares no iteration)."""
    return [grid[i] for i in range(len(grid))]


def _statuses(grid: ResultGrid) -> list[str]:
    from tuner.ray_internals import result_grid_trials

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
    from tuner.ray_internals import result_grid_trials

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


def _last_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__


def collect_results(spec: Spec, grid: ResultGrid, experiment_path: str | os.PathLike, wall_time_s: float,
                    interrupted: bool = False, aborted_by: str | None = None,
                    location: str | None = None) -> TuneResult:
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

    Returns:
        The TuneResult. The best trial is the best by the last reported value of
        ``spec.metric`` among the trials that did not error, skipping NaN and inf.
    """
    from tuner.storage import display, join, to_uri

    path = Path(experiment_path)
    statuses = _statuses(grid)
    ids = _trial_ids(grid)

    def where(trial_path: str) -> str:  # a trial folder as the user can reach it
        return join(display(location), Path(trial_path).name) if location else str(trial_path)

    rows, errors = [], []
    aborted = aborted_error = None
    for result, status, trial_id in zip(_results(grid), statuses, ids):
        metrics = result.metrics or {}
        row = {"trial_id": trial_id, "status": status}
        row.update({f"config/{k}": v for k, v in flatten(plain(result.config or {})).items()})
        row.update(_user_metrics(metrics) if metrics else {})
        rows.append(row)
        local = path / Path(result.path).name  # the trial folder (for a cloud experiment, its mirror)
        if result.error is not None:
            marker = local / TIMEOUT_MARKER  # written by a trial ended by trial_timeout_s
            text = marker.read_text().strip() if marker.is_file() else _last_line(result.error)
            errors.append({"trial_id": trial_id, "error": text, "path": where(result.path)})
        if aborted_by is not None and trial_id == aborted_by:
            aborted = {"trial_id": aborted_by, "traceback": user_traceback(local / ERROR_FILE, result.error),
                       "path": where(result.path)}
            aborted_error = result.error
    if spec.metric:  # best first; errored trials and trials without a finite value last
        rows = ranked(rows, spec.mode, value=lambda r: r.get(spec.metric), status=lambda r: r["status"],
                      trial_id=lambda r: r["trial_id"])
    frame = pd.DataFrame(rows)

    best_config = best_metrics = best_ckpt = best_id = None
    best = _best(spec, grid, statuses)
    if best is not None:
        best_config = plain(best.config)
        best_metrics = _user_metrics(best.metrics)
        best_id = next(i for r, i in zip(_results(grid), ids) if r is best)
        # A DDP trial's checkpoint is Ray Train's, passed on as the checkpoint_path metric.
        best_ckpt = best.checkpoint.path if best.checkpoint is not None else best.metrics.get("checkpoint_path")
        if location and best_ckpt:
            best_ckpt = to_uri(display(best_ckpt), location)

    by_status: dict[str, int] = {}
    for s in statuses:
        by_status[s] = by_status.get(s, 0) + 1
    summary = {
        "name": spec.name,
        "metric": spec.metric,
        "mode": spec.mode,
        "best": None if best_id is None else {
            "trial_id": best_id,
            "config": best_config,
            "metrics": {k: nan_to_none(v) for k, v in (best_metrics or {}).items()},
            "checkpoint": best_ckpt,
        },
        "trials": {"total": len(statuses), "by_status": by_status},
        "errors": errors,
        "interrupted": interrupted,
        "aborted": aborted,
        "wall_time_s": round(wall_time_s, 3),
    }
    if location:
        summary["location"] = display(location)
    schedule = None
    pbt = spec.scheduler.type in POPULATION_SCHEDULERS or (path / PBT_GLOBAL).is_file()
    if pbt:
        summary["perturbations"] = plain(read_perturbations(path, getattr(spec.scheduler, "time_attr",
                                                                          "training_iteration")))
        if best_id is not None:
            schedule = plain(best_schedule(path, best_id))
    path.mkdir(parents=True, exist_ok=True)
    atomic_write(path / SUMMARY, json.dumps(summary, indent=2, default=str) + "\n")
    if best_config is not None:
        atomic_write(path / BEST_CONFIG, yaml.safe_dump(best_config, sort_keys=False))
    if schedule is not None:
        atomic_write(path / BEST_SCHEDULE, yaml.safe_dump(schedule, sort_keys=False))
    atomic_write(path / RESULTS_CSV, frame.to_csv(index=False))
    return TuneResult(best_config, best_metrics, best_ckpt, best_id, str(path), frame, summary, aborted_error,
                      best_schedule=schedule)


def _best(spec: Spec, grid: ResultGrid, statuses: list[str]):
    """The best trial's ``ray.tune.Result`` by :mod:`tuner.best`'s rule, or None.

    Like Ray's ``ResultGrid.get_best_result(scope="last", filter_nan_and_inf=True)``,
    but a trial that ended in ERROR is never the best: its last value is not a result.
    """
    if not spec.metric:
        return None
    pick = best_of(zip(_results(grid), statuses), spec.mode, value=lambda c: metric_value(c[0].metrics, spec.metric),
                   status=lambda c: ERROR if c[0].error is not None else c[1],
                   trial_id=lambda c: (c[0].metrics or {}).get("trial_id") or Path(c[0].path).name)
    return None if pick is None else pick[0]


def best_line(spec: Spec, result: TuneResult) -> str:
    """The closing line: ``Best trial <id>: <metric>=<value> config={...}``."""
    if result.best_trial_id is None:
        if spec.metric is None:
            return "No best trial: the spec sets no metric."
        return f"No best trial: no trial reported a finite {spec.metric}."
    value = (result.best_metrics or {}).get(spec.metric)
    shown = f"{value:.6g}" if isinstance(value, float) else value
    return f"Best trial {result.best_trial_id}: {spec.metric}={shown} config={result.best_config}"

