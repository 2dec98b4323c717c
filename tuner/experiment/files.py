"""Files tuner writes: one ``atomic_write`` for all of them, and :func:`disk_full`, the one
test for "the disk is full" (no Ray here). Their names are in :mod:`tuner.experiment.layout`."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tuner.experiment.layout import TMP_SUFFIX

__all__ = ["atomic_write", "disk_full", "DISK_FULL_ERRNOS"]

# A full filesystem, and a user's quota on it used up: both end a run that can go on once
# space is freed. Every other OSError is an ordinary error.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a file so that a reader (or a crash) never sees it half written: write a
    ``.tmp`` beside it, then rename over it (``os.replace`` is atomic on POSIX).

    Raises:
        OSError: When the file cannot be written; the file keeps its old content, the
            ``.tmp`` is removed (on a full disk it would only take more space), and the
            error's ``filename`` is ``path``.
    """
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename in (None, str(tmp)):
            err.filename = str(path)
        raise


def disk_full(error: BaseException | None) -> OSError | None:
    """The error that says a disk is full (``ENOSPC``) or a disk quota is used up (``EDQUOT``).

    Looks at ``error``, then at what it was raised from (``raise ... from``) and at the
    original error that Ray wraps (``RayTaskError.cause``), so a trial's failed checkpoint
    write counts as well as a failed write in this process.

    Args:
        error: Any exception, or None.

    Returns:
        The ``OSError`` with ``errno`` in :data:`DISK_FULL_ERRNOS`, or None when the disk
        has nothing to do with ``error``.
    """
    seen: set[int] = set()
    todo = [error]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return err
        cause = getattr(err, "cause", None)  # ray.exceptions.RayTaskError
        todo += [err.__cause__, cause if isinstance(cause, BaseException) else None]
    return None
