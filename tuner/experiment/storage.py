"""Where an experiment lives: a local folder, or a cloud URI reached through ``pyarrow.fs``.

``storage`` in a spec is a folder (local, or one every node shares), a ``file://`` URI,
or a cloud URI: ``s3://bucket/prefix``, ``gs://bucket/prefix`` (also ``gcs://``),
``abfs://``/``abfss://`` (Azure) or ``hdfs://``. A cloud URI may carry pyarrow's
options as a query, e.g. ``s3://runs?endpoint_override=http://minio:9000&region=us-east-1``
for MinIO; credentials come from the usual places (``AWS_*`` variables, instance roles,
``GOOGLE_APPLICATION_CREDENTIALS``), never from the spec.

With a cloud URI, Ray Tune itself keeps the experiment there (``RunConfig.storage_path``:
experiment state, trial results and checkpoints, uploaded from the node that made them).
tuner's own files (``spec.yaml``, ``tuner_run.json``, ``summary.json``, ``results.csv``,
``best_config.yaml``, ``tuner.log``) are written into a local *mirror* of the experiment
folder and uploaded beside Ray's; after a run (and before a resume or a report) the
experiment is downloaded into the mirror, checkpoints excepted, so that every reader in
tuner works on a local folder. The mirror lies under ``$TUNER_CACHE_DIR`` (default
``~/.cache/tuner``)/``storage/<scheme>/<bucket>/<prefix>/<name>``.

No Ray here (``tuner report`` uses this module and must not import Ray).
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from tuner.errors import StorageError  # defined with the other errors; imported from here too
from tuner.experiment.layout import CHECKPOINT_PREFIX, DOWNLOAD_SUFFIX, LOCK_FILE, TMP_SUFFIX

__all__ = ["REMOTE_SCHEMES", "CREDENTIALS_HINT", "is_remote", "join", "display", "parent_and_name", "mirror_dir",
           "experiments_mirror", "filesystem", "is_empty", "list_names", "write_text", "read_text",
           "download", "upload", "to_uri", "copy_tree", "delete_tree", "StorageError"]

#: What to check when a cloud URI cannot be reached: the end of each such error's message.
CREDENTIALS_HINT = ("Check the URI and the credentials of this machine (AWS_* variables, "
                    "GOOGLE_APPLICATION_CREDENTIALS, ...)")
#: URI schemes pyarrow.fs opens as a cloud or cluster filesystem (``FileSystem.from_uri``).
REMOTE_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme_of(location: str) -> str | None:
    """The URI scheme, lower case (``"s3"``), or None for a plain path."""
    m = _SCHEME.match(str(location))
    return m.group(1).lower() if m else None


def is_remote(location: str | os.PathLike) -> bool:
    """Whether ``location`` is a cloud URI (see :data:`REMOTE_SCHEMES`), not a local folder."""
    return scheme_of(os.fspath(location)) in REMOTE_SCHEMES


def _split(location: str) -> tuple[str, str]:
    """``"s3://b/p?x=1"`` -> ``("s3://b/p", "?x=1")``."""
    base, sep, query = location.partition("?")
    return base.rstrip("/") or base, (sep + query) if sep else ""


def join(location: str | os.PathLike, *parts: str) -> str:
    """Join path parts onto a folder or URI; a URI's query (pyarrow options) stays at the end.

    >>> join("s3://b/runs?region=x", "exp", "t1")
    's3://b/runs/exp/t1?region=x'
    """
    location = os.fspath(location)
    if not is_remote(location):
        return os.path.join(location, *parts)
    base, query = _split(location)
    return posixpath.join(base, *parts) + query


def display(location: str | os.PathLike) -> str:
    """A location without its query and user info (which may hold endpoints or keys): for
    messages and files. ``"s3://KEY:SECRET@b/runs?region=x"`` -> ``"s3://b/runs"``."""
    location = os.fspath(location)
    if not is_remote(location):
        return location
    base = _split(location)[0]
    scheme, rest = base.split("://", 1)
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


def to_uri(fs_path: str, location: str) -> str:
    """A pyarrow filesystem path (``"bucket/runs/exp/t1/checkpoint_000002"``) as a URI of
    ``location``'s scheme; a local path is returned unchanged."""
    if not is_remote(location) or _SCHEME.match(fs_path):
        return fs_path
    return f"{scheme_of(location)}://{fs_path.lstrip('/')}"


def parent_and_name(location: str) -> tuple[str, str]:
    """``"s3://b/runs/exp?x=1"`` -> ``("s3://b/runs?x=1", "exp")``: a spec's storage and name."""
    base, query = _split(location)
    return posixpath.dirname(base) + query, posixpath.basename(base)


def experiments_mirror(location: str) -> Path:
    """Download the top-level files of every experiment under a cloud storage URI into
    its mirror (for ``tuner list``); returns the mirror of ``location``.

    Raises:
        StorageError: The URI cannot be listed or read.
    """
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    mirror = mirror_dir(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except Exception as err:
        raise StorageError(f"cannot list {display(location)}: {err}") from err
    for info in infos:
        if info.type == pafs.FileType.Directory:
            name = posixpath.basename(info.path)
            download(join(location, name), mirror / name, top_level=True)
    return mirror


def mirror_dir(location: str) -> Path:
    """The local mirror of a cloud experiment folder (see the module docstring)."""
    parts = urlsplit(display(location))
    cache = Path(os.environ.get("TUNER_CACHE_DIR") or Path.home() / ".cache" / "tuner").expanduser()
    return (cache / "storage" / parts.scheme.lower() / (parts.netloc or "_") / parts.path.strip("/")).resolve()


def filesystem(location: str):
    """``(pyarrow.fs.FileSystem, path)`` for a URI (``pyarrow.fs.FileSystem.from_uri``).

    Raises:
        StorageError: pyarrow cannot open it (unknown scheme, no credentials, no network).
    """
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(location)
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ...
        raise StorageError(f"cannot open {display(location)}: {err}") from err


def is_empty(location: str) -> bool:
    """Whether a cloud folder is missing or holds nothing.

    Raises:
        StorageError: The bucket cannot be listed.
    """
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return True
        return not fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except Exception as err:
        raise StorageError(f"cannot list {display(location)}: {err}") from err


def write_text(location: str, text: str) -> None:
    """Write a small text file to a folder path or URI (a whole object on a cloud store)."""
    if not is_remote(location):
        from tuner.experiment.files import atomic_write

        atomic_write(location, text)
        return
    fs, path = filesystem(location)
    with fs.open_output_stream(path) as f:
        f.write(text.encode("utf-8"))


def read_text(location: str) -> str | None:
    """A small text file's content from a path or URI, or None if it does not exist."""
    try:
        if not is_remote(location):
            return Path(location).read_text(encoding="utf-8")
        fs, path = filesystem(location)
        with fs.open_input_stream(path) as f:
            return f.read().decode("utf-8")
    except (OSError, StorageError):
        return None


def list_names(location: str) -> list[str]:
    """The names in a folder (path or URI); empty if it does not exist or cannot be listed."""
    try:
        if not is_remote(location):
            return sorted(os.listdir(location))
        import pyarrow.fs as pafs

        fs, path = filesystem(location)
        return sorted(posixpath.basename(i.path) for i in
                      fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))
    except (OSError, StorageError):
        return []


def copy_tree(fs, source: str, destination: str) -> None:
    """Copy a folder within one pyarrow filesystem: hard links on a local disk (no extra space while the
    source lives, and the copy outlives the source's deletion), ``pyarrow.fs.copy_files`` elsewhere.

    Args:
        fs: The ``pyarrow.fs.FileSystem`` of both (a Ray checkpoint's ``filesystem``).
        source: The folder's path in ``fs``.
        destination: The new folder's path in ``fs`` (its parents are made).
    """
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        for folder, _, files in os.walk(source):
            target = os.path.join(destination, os.path.relpath(folder, source))
            os.makedirs(target, exist_ok=True)
            for name in files:
                try:
                    os.link(os.path.join(folder, name), os.path.join(target, name))
                except OSError:  # another device, or no hard links here: copy
                    shutil.copy2(os.path.join(folder, name), os.path.join(target, name))
        return
    pafs.copy_files(source, destination, source_filesystem=fs, destination_filesystem=fs)


def delete_tree(fs, path: str) -> None:
    """Delete a folder in a pyarrow filesystem; a folder already gone is fine."""
    import pyarrow.fs as pafs

    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def _is_checkpoint(rel: str) -> bool:
    return any(p.startswith(CHECKPOINT_PREFIX) for p in rel.split("/")[:-1])


def download(location: str, mirror: str | os.PathLike, checkpoints: bool = False, top_level: bool = False) -> int:
    """Copy a cloud experiment folder into its local mirror; returns the files copied.

    Files already in the mirror with the same size and modification time are kept (the
    mirror's copies get the cloud object's time). Checkpoints are skipped unless ``checkpoints``;
    ``top_level`` copies only the files directly in the folder.

    Raises:
        StorageError: The folder cannot be listed or read.
    """
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    mirror = Path(mirror)
    copied = 0
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=not top_level, allow_not_found=True))
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = posixpath.relpath(info.path, root)
            if not checkpoints and _is_checkpoint(rel):
                continue
            target = mirror / rel
            mtime = info.mtime.timestamp() if info.mtime is not None else None
            if mtime is not None and target.is_file() and target.stat().st_size == info.size \
                    and abs(target.stat().st_mtime - mtime) < 1e-3:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as src:
                data = src.read()
            tmp = target.with_name(target.name + DOWNLOAD_SUFFIX)
            tmp.write_bytes(data)
            os.replace(tmp, target)
            if mtime is not None:
                os.utime(target, (mtime, mtime))
            copied += 1
    except StorageError:
        raise
    except Exception as err:
        raise StorageError(f"cannot download {display(location)}: {err}") from err
    return copied


def upload(mirror: str | os.PathLike, location: str, names: tuple[str, ...] | None = None) -> int:
    """Copy top-level files of the mirror to the cloud folder; returns the files copied.

    Args:
        mirror: The local mirror.
        location: The experiment's URI.
        names: The files to copy (those that exist); default every top-level file but
            tuner's lock and temporary files.

    Raises:
        StorageError: A file cannot be written.
    """
    mirror = Path(mirror)
    fs, root = filesystem(location)
    files = [mirror / n for n in names] if names is not None else sorted(mirror.iterdir())
    copied = 0
    try:
        for file in files:
            if not file.is_file() or file.is_symlink() or file.name == LOCK_FILE or file.name.endswith(
                    (TMP_SUFFIX, DOWNLOAD_SUFFIX)):
                continue
            with fs.open_output_stream(posixpath.join(root, file.name)) as out:
                out.write(file.read_bytes())
            copied += 1
    except Exception as err:
        raise StorageError(f"cannot upload to {display(location)}: {err}") from err
    return copied
