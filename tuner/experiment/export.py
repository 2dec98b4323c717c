"""``tuner export``: a trial's best checkpoint as a self-contained folder.

The folder (:data:`tuner.experiment.layout.EXPORT_FILES`) holds the checkpoint's files
(:data:`~tuner.experiment.layout.EXPORT_MODEL_DIR`), the trial's config
(:data:`~tuner.experiment.layout.EXPORT_CONFIG`),
the metric reported with the checkpoint and its iteration (:data:`~tuner.experiment.layout.EXPORT_METRICS`),
the spec as run (:data:`~tuner.experiment.layout.EXPORT_SPEC`) and a short README
(:data:`~tuner.experiment.layout.EXPORT_README`). Which checkpoint is a trial's best is decided when the run
ends (:func:`tuner.core.best.best_checkpoint`, by ``checkpoint.score``) and recorded in ``summary.json``'s
``checkpoints``; this module reads that record and copies, without Ray. A cloud experiment
(``s3://...``) is read through its local mirror and its checkpoint copied from the bucket
(pyarrow, :mod:`tuner.experiment.storage`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import ExperimentError, InputError
from tuner.experiment.layout import (EXPORT_CONFIG, EXPORT_METRICS, EXPORT_MODEL_DIR, EXPORT_README, EXPORT_SPEC,
                                     SPEC_SNAPSHOT, SUMMARY, TMP_SUFFIX)

__all__ = ["Exported", "export"]


@dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote.

    Attributes:
        path: The export folder.
        trial_id: The trial whose checkpoint it holds.
        metric: The checkpoint score's metric (``checkpoint.score``), or None without one.
        value: The metric's value reported with the checkpoint, or None.
        training_iteration: The iteration the checkpoint was reported at, or None.
        source: The checkpoint copied (folder or URI, as ``summary.json`` records it).
    """

    path: Path
    trial_id: str
    metric: str | None
    value: Any
    training_iteration: int | None
    source: str


def export(experiment: str | os.PathLike, to: str | os.PathLike, trial_id: str | None = None) -> Exported:
    """Copy a trial's best checkpoint, with its config, metrics, the spec and a README, into a new folder.

    Args:
        experiment: The experiment folder, or its cloud URI (``s3://bucket/runs/name?...``).
        to: The export folder: it must not exist, or be empty. It is written whole or not at all
            (built beside it, then renamed).
        trial_id: The trial to export; None: the best trial (``summary.json``'s ``best``).

    Returns:
        What was written (:class:`Exported`).

    Raises:
        InputError: ``to`` exists and is not an empty folder (exit code 2; nothing written).
        ExperimentError: The experiment has no ``summary.json`` (not finished, or not tuner's), no
            best trial, no such trial, or the trial kept no checkpoint (exit code 2).
        StorageError: A cloud experiment cannot be read.
    """
    from tuner.experiment.storage import display, download, is_remote, join, mirror_dir

    target = Path(to).expanduser().absolute()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"{target} exists and is not an empty folder; give a new folder (or an empty one), so "
                         "that nothing in it is overwritten.", where="--to")
    experiment = os.fspath(experiment)
    remote = is_remote(experiment)
    folder = mirror_dir(experiment) if remote else Path(experiment)
    if remote:
        download(experiment, folder, top_level=True)
    summary = _summary(folder / SUMMARY, display(experiment))
    entries: dict[str, Any] = summary.get("checkpoints") or {}
    if trial_id is None:
        best = summary.get("best") or {}
        trial_id = best.get("trial_id")
        if trial_id is None:
            raise ExperimentError(f"{display(experiment)} has no best trial (no trial reported a finite "
                                  f"{summary.get('metric') or 'metric'}); name a trial with --trial ID.")
    entry = entries.get(trial_id)
    if entry is None:
        kept = ", ".join(sorted(entries)) or "(none)"
        raise ExperimentError(f"{display(experiment)}: trial {trial_id!r} has no checkpoint recorded in {SUMMARY} "
                              f"(a trial that saved none, or a {SUMMARY} of an older tuner); trials with one: {kept}.")
    if remote:
        source = join(experiment, *entry["dir"].split("/")) if entry.get("dir") else entry["checkpoint"]
    else:
        local = folder / entry["dir"] if entry.get("dir") else Path(entry["checkpoint"])
        source = str(local if local.is_dir() else Path(entry["checkpoint"]))
    staging = target.parent / f".{target.name}{TMP_SUFFIX}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        _copy_checkpoint(source, staging / EXPORT_MODEL_DIR, display(source))
        metrics = entry.get("metrics") or {}
        record = {"trial_id": trial_id, "metric": metrics.get("metric"), "value": metrics.get("value"),
                  "mode": _score_mode(summary, metrics.get("metric")),
                  "training_iteration": metrics.get("training_iteration"),
                  "best_trial": trial_id == (summary.get("best") or {}).get("trial_id"),
                  "scope": summary.get("scope", "last"), "experiment": display(experiment),
                  "checkpoint": entry.get("checkpoint")}
        (staging / EXPORT_CONFIG).write_text(yaml.safe_dump(entry.get("config") or {}, sort_keys=False))
        (staging / EXPORT_METRICS).write_text(json.dumps(record, indent=2) + "\n")
        if (folder / SPEC_SNAPSHOT).is_file():
            shutil.copyfile(folder / SPEC_SNAPSHOT, staging / EXPORT_SPEC)
        (staging / EXPORT_README).write_text(_readme(summary, record, (staging / EXPORT_SPEC).is_file()))
        if target.exists():
            target.rmdir()  # empty, checked above
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Exported(target, trial_id, record["metric"], record["value"], record["training_iteration"],
                    display(source))


def _summary(path: Path, experiment: str) -> dict[str, Any]:
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExperimentError(f"{experiment} has no {SUMMARY}: it is not a tuner experiment, or its run has not "
                              "ended (a run writes it when it ends; `tuner resume` finishes a stopped one).") from None
    except (OSError, ValueError) as err:
        raise ExperimentError(f"{experiment}: cannot read {SUMMARY}: {err}") from None
    if not isinstance(summary, dict):
        raise ExperimentError(f"{experiment}: {SUMMARY} is not a JSON object.")
    return summary


def _score_mode(summary: dict[str, Any], metric: str | None) -> str | None:
    """The mode of the checkpoint score (``summary.json``'s ``checkpoint_score``)."""
    score = summary.get("checkpoint_score") or {}
    return score.get("mode") if metric is not None and score.get("metric") == metric else None


def _copy_checkpoint(source: str, destination: Path, shown: str) -> None:
    """Copy a checkpoint folder (local path or URI) to a new local folder."""
    from tuner.experiment.storage import filesystem, is_remote

    if not is_remote(source):
        if not Path(source).is_dir():
            raise ExperimentError(f"the checkpoint {shown} is gone (deleted or moved); nothing was exported.")
        shutil.copytree(source, destination, symlinks=True)
        return
    import pyarrow.fs as pafs

    fs, path = filesystem(source)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise ExperimentError(f"the checkpoint {shown} is gone (deleted or moved); nothing was exported.")
    destination.mkdir(parents=True)
    pafs.copy_files(path, str(destination), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


def _readme(summary: dict[str, Any], record: dict[str, Any], has_spec: bool = True) -> str:
    """The export's README (Markdown); ``has_spec``: the experiment's spec was copied."""
    name = summary.get("name") or "experiment"
    at = f"iteration {record['training_iteration']}" if record["training_iteration"] is not None else "its end"
    score = (f", where {record['metric']} = {record['value']} ({record['mode'] or 'its score'}: the best of the "
             f"trial's kept checkpoints)" if record["metric"] else "")
    which = "the best trial" if record["best_trial"] else "a trial"
    lines = [
        f"# {name}: trial {record['trial_id']}",
        "",
        f"Exported by `tuner export` from {record['experiment']}: {which} (scope {record['scope']}), "
        f"its checkpoint at {at}{score}.",
        "",
        f"- `{EXPORT_MODEL_DIR}/`: the checkpoint's files, as the train function saved them "
        f"(`ray.tune.Checkpoint.from_directory(\"{EXPORT_MODEL_DIR}\")` opens it).",
        f"- `{EXPORT_CONFIG}`: the trial's config: the hyperparameters the model was trained with.",
        f"- `{EXPORT_METRICS}`: the metric reported with the checkpoint, its iteration, the trial and the scope.",
        *([f"- `{EXPORT_SPEC}`: the spec the experiment ran."] if has_spec else []),
        f"- `{EXPORT_README}`: this file.",
        "",
    ]
    return "\n".join(lines)
