"""What a PBT/PB2 run gives back: its perturbations and the best trial's hyperparameter schedule.

Population Based Training (Jaderberg et al., 2017, arXiv:1711.09846; Ray's
``PopulationBasedTraining`` and ``PB2``) does not end with one config but with a schedule:
every ``perturbation_interval`` a trial of the bottom quantile copies (exploit) the
checkpoint of a trial of the top quantile and trains on with a perturbed copy of its
config (explore). With ``log_config=True`` (tuner always sets it) Ray logs each exploit:

* ``pbt_global.txt`` (:data:`tuner.experiment.layout.PBT_GLOBAL`): every perturbation of the population;
* ``pbt_policy_<trial id>.txt`` (:data:`tuner.experiment.layout.PBT_POLICY`): the perturbations a trial's
  weights went through, the cloned trial's policy included; what Ray's
  ``PopulationBasedTrainingReplay`` replays.

This module reads them into plain records (Ray's line format through
:func:`tuner.adapters.ray_internals.pbt_log_rows`; trial tags mapped to trial ids through the
experiment state): :func:`read_perturbations` for ``summary.json``'s ``perturbations``,
:func:`trial_schedule` and :func:`best_schedule` for ``best_schedule.yaml``
(:data:`tuner.experiment.layout.BEST_SCHEDULE`, written by :mod:`tuner.run.results`) and for
``tuner run --replay``. No Ray here.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from tuner.experiment.layout import PBT_GLOBAL, PBT_POLICY, PROGRESS_FILE, SPEC_SNAPSHOT
from tuner.spec.sections import POPULATION_SCHEDULERS

__all__ = ["is_pbt_experiment", "read_perturbations", "trial_schedule", "best_schedule",
           "policy_text", "initial_config"]

def _spec_scheduler_type(path: Path) -> str | None:
    """``scheduler.type`` of the experiment's ``spec.yaml`` (plain YAML read; None when unknown)."""
    import yaml

    try:
        data = yaml.safe_load((path / SPEC_SNAPSHOT).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    scheduler = data.get("scheduler") if isinstance(data, dict) else None
    return scheduler.get("type") if isinstance(scheduler, dict) else None


def is_pbt_experiment(experiment_path: str | os.PathLike) -> bool:
    """Whether the experiment ran PBT or PB2: its ``spec.yaml`` says so, or Ray logged a perturbation.

    Args:
        experiment_path: The experiment folder.
    """
    path = Path(experiment_path)
    return _spec_scheduler_type(path) in POPULATION_SCHEDULERS or (path / PBT_GLOBAL).is_file()


def _trials(path: Path) -> list[dict]:
    from tuner.adapters.state import read_state

    state = read_state(path)
    return state.trials if state is not None else []


def _tag_ids(trials: list[dict]) -> dict[str, str]:
    """PBT's tag of each trial -> its trial id."""
    from tuner.adapters.ray_internals import pbt_orig_tag

    out = {}
    for trial in trials:
        tag = pbt_orig_tag(trial)
        if tag:
            out[tag] = trial["trial_id"]
    return out


def initial_config(experiment_path: str | os.PathLike, trial_id: str) -> dict | None:
    """A trial's config as it started (before any perturbation), from the experiment state; None if unknown."""
    from tuner.adapters.ray_internals import saved_trial_initial_config

    for trial in _trials(Path(experiment_path)):
        if trial["trial_id"] == trial_id:
            return saved_trial_initial_config(trial)
    return None


def _times(path: Path, trials: list[dict], time_attr: str) -> dict[str, dict[int, Any]]:
    """Trial id -> training_iteration -> the value of ``time_attr`` then (from ``progress.csv``)."""
    out: dict[str, dict[int, Any]] = {}
    for trial in trials:
        folder = trial.get("relative_logdir") or trial.get("custom_dirname")
        if not folder:
            continue
        try:
            with open(path / folder / PROGRESS_FILE, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
        except OSError:
            continue
        times = out.setdefault(trial["trial_id"], {})
        for row in rows:
            try:
                times[int(float(row["training_iteration"]))] = float(row[time_attr])
            except (KeyError, TypeError, ValueError):
                continue
    return out


def read_perturbations(experiment_path: str | os.PathLike, time_attr: str = "training_iteration") -> list[dict]:
    """Every perturbation of a PBT/PB2 run, in the order Ray made them.

    Args:
        experiment_path: The experiment folder (with Ray's ``pbt_global.txt``).
        time_attr: The scheduler's ``time_attr``; ``time`` is its value in the trial's
            result at the perturbation.

    Returns:
        One dict per perturbation: ``iteration`` (the trial's ``training_iteration`` when it
        exploited), ``time`` (``time_attr`` then; None when the trial's ``progress.csv``
        lacks it), ``trial_id``, ``cloned_from`` (the trial whose checkpoint it copied),
        ``cloned_iteration`` (that checkpoint's ``training_iteration``), ``old_config``
        (the trial's own config before), ``cloned_config`` (the cloned trial's config, which
        PBT perturbed) and ``new_config`` (the config it trained on with, from
        ``cloned_iteration + 1``). A tag that the experiment state does not know stays as
        the id. Empty when nothing was perturbed (or the run was not PBT).
    """
    from tuner.adapters.ray_internals import pbt_log_rows, saved_trial_initial_config

    path = Path(experiment_path)
    try:
        rows = pbt_log_rows((path / PBT_GLOBAL).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []
    trials = _trials(path)
    ids = _tag_ids(trials)
    current = {t["trial_id"]: saved_trial_initial_config(t) for t in trials}
    times = _times(path, trials, time_attr) if rows else {}
    out = []
    for row in rows:
        trial_id = ids.get(row["trial_tag"], row["trial_tag"])
        cloned = ids.get(row["cloned_tag"], row["cloned_tag"])
        time = row["iteration"] if time_attr == "training_iteration" else \
            times.get(trial_id, {}).get(row["iteration"])
        out.append({"iteration": row["iteration"], "time": time, "trial_id": trial_id, "cloned_from": cloned,
                    "cloned_iteration": row["cloned_iteration"], "old_config": current.get(trial_id),
                    "cloned_config": row["cloned_config"], "new_config": row["new_config"]})
        current[trial_id] = row["new_config"]
    return out


def policy_text(experiment_path: str | os.PathLike, trial_id: str) -> str:
    """The text of a trial's policy file (Ray's ``pbt_policy_<trial id>.txt``); empty when it has none."""
    try:
        return (Path(experiment_path) / PBT_POLICY.format(trial_id)).read_text(encoding="utf-8")
    except OSError:
        return ""


def trial_schedule(experiment_path: str | os.PathLike, trial_id: str) -> list[dict]:
    """The hyperparameter schedule a trial's weights were trained with.

    Read from the trial's policy file as Ray's ``PopulationBasedTrainingReplay`` reads it:
    from the last line back, while each line's trial is the trial the next line cloned
    (earlier lines were overwritten by a later exploit). The first step's config is the
    config of the trial the chain starts from; a trial never perturbed has one step, its
    own config.

    Args:
        experiment_path: The experiment folder.
        trial_id: The trial.

    Returns:
        Steps, by iteration: ``from_iteration`` (the first ``training_iteration`` trained
        with the config: 1, then the cloned checkpoint's iteration + 1), ``trial_id`` (the
        trial that trained those iterations) and ``config``. A step may start after the
        trial's last iteration (an exploit at its very end). Empty when the trial is unknown.
    """
    from tuner.adapters.ray_internals import pbt_log_rows

    path = Path(experiment_path)
    trials = _trials(path)
    ids = _tag_ids(trials)
    rows = pbt_log_rows(policy_text(path, trial_id))
    chain: list[dict] = []
    for row in reversed(rows):  # PopulationBasedTrainingReplay._load_policy's walk
        if chain and row["trial_tag"] != chain[-1]["cloned_tag"]:
            break
        chain.append(row)
    chain.reverse()
    if not chain:
        start = initial_config(path, trial_id)
        return [] if start is None else [{"from_iteration": 1, "trial_id": trial_id, "config": start}]
    steps = [{"from_iteration": 1, "trial_id": ids.get(chain[0]["cloned_tag"], chain[0]["cloned_tag"]),
              "config": chain[0]["cloned_config"]}]
    for row in chain:
        steps.append({"from_iteration": row["cloned_iteration"] + 1,
                      "trial_id": ids.get(row["trial_tag"], row["trial_tag"]), "config": row["new_config"]})
    return steps


def best_schedule(experiment_path: str | os.PathLike, trial_id: str) -> dict:
    """The content of ``best_schedule.yaml`` for a trial (the best one).

    Returns:
        ``trial_id``, ``policy_file`` (Ray's file for the trial, or None when it was never
        perturbed), ``changed`` (the hyperparameters that change along the schedule) and
        ``schedule`` (:func:`trial_schedule`'s steps).
    """
    from tuner.core.params import flatten

    path = Path(experiment_path)
    steps = trial_schedule(path, trial_id)
    flat = [flatten(step["config"]) for step in steps]
    changed = sorted({k for a, b in zip(flat, flat[1:]) for k in set(a) | set(b) if a.get(k) != b.get(k)})
    policy = PBT_POLICY.format(trial_id)
    return {"trial_id": trial_id, "policy_file": policy if (path / policy).is_file() else None,
            "changed": changed, "schedule": steps}
