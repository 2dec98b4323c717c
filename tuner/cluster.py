"""Cluster: start the embedded local Ray, or use the one already running.

The local Ray is started quietly: no dashboard, workers' output kept out of the
console (``log_to_driver=False``; trial output goes to each trial's folder), and
Ray's own logs stay in its session folder, linked from the experiment folder.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import ray

from tuner.resources import ClusterResources

__all__ = ["ray_session", "cluster_resources"]


def cluster_resources() -> ClusterResources:
    """Totals of the Ray cluster this process is connected to."""
    res = ray.cluster_resources()
    return ClusterResources(float(res.get("CPU", 0)), float(res.get("GPU", 0)), "the running Ray cluster")


@contextmanager
def ray_session(
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    python_path: list[str] | None = None,
    address: str | None = None,
) -> Iterator[str | None]:
    """Use the running Ray, or start an embedded local one for the duration.

    Args:
        num_cpus: CPUs of the local Ray (default: all of this machine's).
        num_gpus: GPUs of the local Ray (default: the ones Ray detects).
        python_path: Folders that the trial workers need on ``sys.path`` to import the
            train function (workers unpickle it by its module name); they are given
            to the workers through ``PYTHONPATH`` in the job's ``runtime_env``.
        address: A running cluster to connect to instead of starting one.

    Yields:
        Ray's session folder when this call started Ray, else None.
    """
    if ray.is_initialized():
        yield None
        return
    env = {}
    if python_path:
        parts = [*python_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    context = ray.init(
        address=address,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False if address is None else None,
        log_to_driver=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": env} if env else None,
    )
    try:
        yield context.address_info.get("session_dir")
    finally:
        ray.shutdown()


def link_ray_logs(session_dir: str | None, experiment_path: str | os.PathLike) -> None:
    """Link Ray's log folder into the experiment folder as ``ray_logs`` (best effort)."""
    if not session_dir:
        return
    link = Path(experiment_path) / "ray_logs"
    try:
        if not link.exists():
            link.symlink_to(Path(session_dir) / "logs", target_is_directory=True)
    except OSError:
        pass
