"""Resources: what one trial asks of Ray, and how many trials fit at once.

A trial's request becomes ``ray.tune.with_resources(trainable, {"cpu": c, "gpu": g})``.
The fit count is what Ray's scheduler can run concurrently on the cluster's totals.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tuner.spec import Spec

__all__ = ["ClusterResources", "trial_request", "trials_that_fit", "local_resources", "describe_resources",
           "check_fits"]


@dataclass(frozen=True)
class ClusterResources:
    """Totals of a Ray cluster (or of the local Ray about to be started).

    Attributes:
        cpu: Logical CPUs.
        gpu: Logical GPUs.
        source: Where the figures come from, e.g. ``"this machine"``.
    """

    cpu: float
    gpu: float
    source: str = "this machine"


def local_resources(num_cpus: float | None = None, num_gpus: float | None = None) -> ClusterResources:
    """Resources the embedded local Ray will have, without starting it.

    Args:
        num_cpus: ``--num-cpus``; default: the CPUs of this machine (``os.cpu_count``).
        num_gpus: ``--num-gpus``; default: the GPUs in ``CUDA_VISIBLE_DEVICES``, else the
            NVIDIA GPUs the driver reports (0 without a driver), counted the way Ray counts
            them when it starts (NVML), without importing torch (1.3-1.8 s in the driver).

    Returns:
        The totals Ray will be given, as ``ray.init(num_cpus=..., num_gpus=...)``.
    """
    cpus = float(num_cpus) if num_cpus is not None else float(os.cpu_count() or 1)
    flags = " (--num-cpus/--num-gpus)" if num_cpus is not None or num_gpus is not None else ""
    if num_gpus is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            num_gpus = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
        else:
            num_gpus = _nvidia_gpus()
    return ClusterResources(cpus, float(num_gpus), "this machine" + flags)


def _nvidia_gpus() -> int:
    """NVIDIA GPUs on this machine through NVML, as Ray's own node start-up counts them."""
    try:
        from ray._private.accelerators import NvidiaGPUAcceleratorManager

        return int(NvidiaGPUAcceleratorManager.get_current_node_num_accelerators())
    except Exception:  # noqa: BLE001 - no NVML library or no driver: no GPUs
        return 0


def trial_request(spec: Spec) -> dict[str, float]:
    """What one whole trial takes, summed over its DDP workers: ``{"cpu": 2, "gpu": 0}``."""
    return spec.resources.total


def trials_that_fit(spec: Spec, cluster: ClusterResources) -> int:
    """How many trials Ray can run at once on ``cluster`` (before max_concurrent_trials).

    Returns:
        ``min(floor(cpus / cpu per trial), floor(gpus / gpu per trial))`` over the
        resources the trial asks for; 0 if even one trial cannot fit.
    """
    req = trial_request(spec)
    fits = []
    for key, have in (("cpu", cluster.cpu), ("gpu", cluster.gpu)):
        if req[key] > 0:
            fits.append(math.floor(have / req[key] + 1e-9))
    return min(fits) if fits else 0


def describe_resources(spec: Spec, cluster: ClusterResources) -> list[str]:
    """Plan lines for resources: per trial, the cluster, and trials at a time."""
    req = trial_request(spec)
    res = spec.resources
    fit = trials_that_fit(spec, cluster)
    at_once = fit
    if spec.max_concurrent_trials is not None:
        at_once = min(fit, spec.max_concurrent_trials)
    if res.distributed:
        backend = "nccl" if res.gpu_per_worker > 0 else "gloo"
        lines = [f"resources:  DDP, {res.workers} worker{'s' if res.workers != 1 else ''} x "
                 f"({res.cpu_per_worker:g} CPU, {res.gpu_per_worker:g} GPU), {res.placement_strategy}, {backend}; "
                 f"{req['cpu']:g} CPU, {req['gpu']:g} GPU per trial"]
    else:
        lines = [f"resources:  {req['cpu']:g} CPU, {req['gpu']:g} GPU per trial"]
    lines += [f"cluster:    {cluster.cpu:g} CPU, {cluster.gpu:g} GPU on {cluster.source}"]
    if fit == 0:
        lines.append("fit:        0 trials at a time: a trial asks for more than the cluster has")
    else:
        cap = f" (max_concurrent_trials {spec.max_concurrent_trials})" if at_once < fit else ""
        lines.append(f"fit:        {at_once} trial{'s' if at_once != 1 else ''} at a time{cap}")
    return lines


def check_fits(spec: Spec, cluster: ClusterResources) -> None:
    """Refuse a trial that can never be placed, instead of letting it queue forever.

    Raises:
        SpecError: Pointing at ``resources`` when one trial needs more CPUs or GPUs than
            the cluster has.
    """
    if trials_that_fit(spec, cluster) > 0:
        return
    req = trial_request(spec)
    key = "gpu" if req["gpu"] > cluster.gpu else "cpu"
    have = cluster.gpu if key == "gpu" else cluster.cpu
    field = f"{key}_per_worker" if spec.resources.distributed else key
    what = f"{spec.resources.workers} workers x {getattr(spec.resources, field):g}" \
        if spec.resources.distributed else f"{req[key]:g}"
    raise spec.error(
        f"resources.{field}",
        f"one trial asks for {what} {key.upper()}, but {cluster.source} has {have:g}; "
        f"lower resources.{field} or give Ray more (--num-{key}s, or a cluster with --address).",
    )
