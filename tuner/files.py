"""Files tuner writes: one ``atomic_write`` for all of them, and ``flatten``, which names
nested config keys the way ``results.csv`` columns and TensorBoard's HParams do (no Ray here)."""

from __future__ import annotations

import os
from pathlib import Path

from typing import Any, Mapping

__all__ = ["atomic_write", "flatten"]


def flatten(d: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"opt": {"lr": 0.1}, "x": 1}`` -> ``{"opt/lr": 0.1, "x": 1}`` (nested keys joined by ``/``)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a file so that a reader (or a crash) never sees it half written: write a
    ``.tmp`` beside it, then rename over it (``os.replace`` is atomic on POSIX)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)
