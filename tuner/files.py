"""Writing files: one ``atomic_write`` for every file tuner writes (no Ray here)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write"]


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
