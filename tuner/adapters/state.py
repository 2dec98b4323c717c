"""Ray Tune's experiment state (``experiment_state-*.json``), and a trial's ``result.json`` lines, read without Ray.

The one reader of that file: resuming (:mod:`tuner.run.failures`) and ``tuner report``
(:mod:`tuner.report`) both read the trials from it, and the state snapshots are kept
and restored by the same rules.

Ray writes the file in place, so a driver killed at the wrong moment can leave it
truncated; tuner keeps the last readable copy in ``.tuner_state/``
(:class:`tuner.run.failures.StateSnapshots`). The state read is the newest file of the
experiment folder when it parses, else the newest snapshot (what a resume restores),
else an older file of either folder (an earlier session's, e.g. of a cloud experiment,
which has no snapshots).

No Ray here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tuner.experiment.layout import EXPERIMENT_STATE_GLOB, STATE_SNAPSHOT_DIR

__all__ = ["ExperimentState", "state_files", "newest_state_file", "parse_state", "load_state_file", "read_state",
           "parse_result_lines"]


def state_files(folder: str | os.PathLike, glob: str = EXPERIMENT_STATE_GLOB) -> list[Path]:
    """The experiment state files in a folder (or Ray Tune's state files of another ``glob``), oldest first (the
    names sort by time)."""
    return sorted(Path(folder).glob(glob))


def newest_state_file(folder: str | os.PathLike, glob: str = EXPERIMENT_STATE_GLOB) -> Path | None:
    """The newest experiment state file in a folder (or state file of another ``glob``; readable or not), or None."""
    files = state_files(folder, glob)
    return files[-1] if files else None


def parse_state(text: str | bytes) -> dict | None:
    """An experiment state file's content from its text (or its UTF-8 bytes), or None when it is not a
    JSON object (truncated by a driver killed mid-write)."""
    try:
        data = json.loads(text)
    except ValueError:  # UnicodeDecodeError too
        return None
    return data if isinstance(data, dict) else None


def load_state_file(file: str | os.PathLike) -> dict | None:
    """An experiment state file's content, or None when it cannot be read or is not a JSON object
    (truncated by a driver killed mid-write)."""
    try:
        text = Path(file).read_bytes()
    except OSError:
        return None
    return parse_state(text)


@dataclass(frozen=True)
class ExperimentState:
    """One readable experiment state file.

    Attributes:
        file: The file read.
        data: Its content, as Ray saved it (``trial_data``, ``runner_data``, ...).
        mtime: Its modification time (seconds since the epoch).
    """

    file: Path
    data: dict
    mtime: float

    @property
    def trials(self) -> list[dict]:
        """Every trial with an id, as Ray saved it (``trial_id``, ``status``, ``config``,
        ``relative_logdir``, ...), in Ray's order; an entry that does not parse is skipped."""
        from tuner.adapters.ray_internals import saved_trials  # imports no Ray

        return [trial for trial in saved_trials(self.data) if trial.get("trial_id")]


def read_state(experiment_path: str | os.PathLike) -> ExperimentState | None:
    """The experiment's state: see the module's rule for which file.

    Args:
        experiment_path: The experiment folder.

    Returns:
        The state, or None when no file is readable.
    """
    path = Path(experiment_path)
    folders = (path, path / STATE_SNAPSHOT_DIR)
    newest = [f for f in map(newest_state_file, folders) if f is not None]
    older = [f for folder in folders for f in reversed(state_files(folder)[:-1])]
    for file in newest + older:
        data = load_state_file(file)
        try:
            mtime = file.stat().st_mtime
        except OSError:  # replaced or removed since it was read
            continue
        if data is not None:
            return ExperimentState(file, data, mtime)
    return None


def parse_result_lines(text: str) -> list[dict]:
    """A trial's results, one dict per line of its ``result.json`` (Ray Tune's ``JsonLogger`` format).

    A line that does not parse as a JSON object (a half-written last line) is skipped.

    Args:
        text: The file's text.

    Returns:
        The results, in the file's order.
    """
    rows: list[dict] = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
