"""The pieces of a spec that both converters build the same way: the experiment's name from the
source's (:func:`spec_name`), literal text inside a command (:func:`literal`), the trainable
section (:func:`trainable_section`) and the number of trials when the source sets none
(:data:`DEFAULT_NUM_SAMPLES`).
"""

from __future__ import annotations

import re
from typing import Any

from tuner.convert.source import Source

#: ``num_samples`` when the source does not cap its trials (a W&B sweep without ``run_cap``
#: runs until it is stopped; a Katib Experiment without ``maxTrialCount`` likewise).
DEFAULT_NUM_SAMPLES = 20
#: The name when the source gives none (or nothing of it is left once sanitised).
DEFAULT_NAME = "converted"

_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def spec_name(source: Source, name: Any, path: tuple) -> str:
    """The spec's ``name`` from the source's: tuner's rule (letters, digits, ``.``, ``_``, ``-``).

    Every run of other characters becomes one ``-``; a name that changes is noted.

    Args:
        source: The source (for the note).
        name: The source's name, or None.
        path: Its key path in the source.

    Returns:
        The name; :data:`DEFAULT_NAME` when the source has none.
    """
    if not isinstance(name, str) or not name.strip():
        return DEFAULT_NAME
    clean = _NOT_IN_NAME.sub("-", name.strip()).strip("-.") or DEFAULT_NAME
    if clean != name:
        source.note(("name",), path, f"{name!r} is written {clean!r}: a tuner name holds only letters, digits, "
                    "'.', '_' and '-'.")
    return clean


def literal(text: str) -> str:
    """``text`` as literal text of a command argument: its braces doubled (``{`` -> ``{{``)."""
    return text.replace("{", "{{").replace("}", "}}")


def trainable_section(command: list[str] | None, metrics: str, trainable: str | None,
                      env: dict[str, str] | None = None) -> str | dict:
    """The spec's ``trainable``: ``--trainable``'s reference, or a command trial.

    Args:
        command: The command's arguments, placeholders in, or None when the source names none.
        metrics: The command's ``metrics`` (``json``, ``kv`` or a file).
        trainable: ``--trainable module:function``, or None.
        env: Environment variables for the command, or None.

    Returns:
        ``trainable`` itself, or ``{command: [...], metrics: ..., env: {...}}``.
    """
    if trainable:
        return trainable
    section: dict[str, Any] = {"command": command, "metrics": metrics}
    if env:
        section["env"] = env
    return section
