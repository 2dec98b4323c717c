"""Resources: what one trial asks of Ray, and how many trials fit at once.

A trial's request becomes ``ray.tune.with_resources(trainable, {"cpu": c, "gpu": g})``.
The fit count is what Ray's scheduler can run concurrently, node by node: a single-process
trial's actor lives on one node, and so do all the workers of a DDP trial with
``STRICT_PACK``; the workers of a ``PACK``/``SPREAD`` trial may share out over nodes, one
worker's bundle never.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tuner.spec import SYNCHRONOUS_HYPERBAND, Spec

__all__ = ["ClusterResources", "trial_request", "trials_that_fit", "local_resources", "describe_resources",
           "check_fits"]


@dataclass(frozen=True)
class ClusterResources:
    """Totals of a Ray cluster (or of the local Ray about to be started).

    Attributes:
        cpu: Logical CPUs.
        gpu: Logical GPUs.
        source: Where the figures come from, e.g. ``"this machine"``.
        nodes: ``(cpu, gpu)`` of each alive node; empty for one machine (the totals).
    """

    cpu: float
    gpu: float
    source: str = "this machine"
    nodes: tuple[tuple[float, float], ...] = ()

    @property
    def per_node(self) -> tuple[tuple[float, float], ...]:
        """``(cpu, gpu)`` of each node: :attr:`nodes`, or the totals as one node."""
        return self.nodes or ((self.cpu, self.gpu),)


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
        from tuner.adapters.ray_internals import nvidia_gpu_count

        return nvidia_gpu_count()
    except Exception:  # noqa: BLE001 - no NVML library or no driver: no GPUs
        return 0


def trial_request(spec: Spec) -> dict[str, float]:
    """What one whole trial takes, summed over its DDP workers: ``{"cpu": 2, "gpu": 0}``."""
    return spec.resources.total


def trials_that_fit(spec: Spec, cluster: ClusterResources) -> int:
    """How many trials Ray can run at once on ``cluster`` (before max_concurrent_trials).

    Returns:
        For one node, ``min(floor(cpus / cpu per trial), floor(gpus / gpu per trial))``
        over the resources the trial asks for. On a cluster, the same per node, summed,
        for what must lie on one node (a single-process trial, a ``STRICT_PACK`` DDP
        trial); for other DDP trials the workers' bundles that fit on the nodes, divided
        by the world size (``STRICT_SPREAD``: at most one bundle per node). 0 if even one
        trial cannot be placed.
    """
    res = spec.resources
    if res.auto_gpu:  # the CPUs of the GPU nodes, and no more than max_per_gpu on a GPU
        nodes = [(c, g) for c, g in cluster.per_node if g >= 1]
        return sum(min(_units((c, 0.0), (float(res.cpu), 0.0)) if res.cpu > 0 else res.auto.max_per_gpu * int(g),
                       res.auto.max_per_gpu * int(g)) for c, g in nodes)
    if not res.distributed or res.placement_strategy == "STRICT_PACK" or spec.command is not None:
        req = trial_request(spec)
        return sum(_units(node, (req["cpu"], req["gpu"])) for node in cluster.per_node)
    slots = [_units(node, (float(res.cpu_per_worker), float(res.gpu_per_worker))) for node in cluster.per_node]
    if res.placement_strategy == "STRICT_SPREAD":
        slots = [min(n, 1) for n in slots]
        return sum(slots) // res.workers if sum(slots) >= res.workers else 0
    return sum(slots) // res.workers


def _units(node: tuple[float, float], request: tuple[float, float]) -> int:
    """How many ``request``s of ``(cpu, gpu)`` one node holds (0 for an empty request)."""
    fits = [math.floor(have / want + 1e-9) for have, want in zip(node, request) if want > 0]
    return min(fits) if fits else 0


def describe_resources(spec: Spec, cluster: ClusterResources) -> list[str]:
    """Plan lines for resources: per trial, the cluster, and trials at a time."""
    req = trial_request(spec)
    res = spec.resources
    fit = trials_that_fit(spec, cluster)
    at_once = fit
    if spec.max_concurrent_trials is not None:
        at_once = min(fit, spec.max_concurrent_trials)
    if res.auto_gpu:
        lines = [f"resources:  {req['cpu']:g} CPU per trial, GPU share auto (found from measurement)"]
    elif res.distributed and spec.command is not None:
        lines = [f"resources:  torchrun, {res.workers} process{'es' if res.workers != 1 else ''} x "
                 f"({res.cpu_per_worker:g} CPU, {res.gpu_per_worker:g} GPU) on one node; "
                 f"{req['cpu']:g} CPU, {req['gpu']:g} GPU per trial"]
    elif res.distributed:
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
        most = " at most (gpu auto finds how many pay)" if res.auto_gpu else ""
        lines.append(f"fit:        {at_once} trial{'s' if at_once != 1 else ''} at a time{most}{cap}")
        if res.auto_gpu:
            from tuner.resources.gpu_packing import cluster_shape, describe_auto, read_gpu_memory

            gpus, cpus_per_gpu, _ = cluster_shape(cluster)
            memory, source = read_gpu_memory() if not cluster.nodes else (None, "each trial's report")
            lines += describe_auto(res.auto, float(res.cpu), gpus, cpus_per_gpu, memory, source)
        note = one_live_trial_note(spec, at_once)
        if note:
            lines.append(f"note:       {note}")
    return lines


def one_live_trial_note(spec: Spec, at_once: int) -> str | None:
    """Why a synchronous Hyperband would stop nothing with DDP trials one at a time, or None.

    tuner caps live DDP trials at the trials that fit (a driver must not hold a trial slot
    while its Train run waits for workers), and Ray's concurrency cap counts PAUSED
    trials as live. Ray's ``HyperBandScheduler``/``HyperBandForBOHB`` process a rung once
    every live trial of the bracket reached it and keep ``ceil(n / reduction_factor) >= 1``
    of them, so with one live trial no rung stops anyone. (An explicit
    ``max_concurrent_trials: 1`` is refused by the spec check instead.)

    Args:
        spec: The validated spec.
        at_once: Trials that run at once on the cluster.
    """
    sched = spec.scheduler.type
    if sched not in SYNCHRONOUS_HYPERBAND or not spec.resources.distributed or at_once != 1:
        return None
    return (f"scheduler {sched} will stop no trial early here: it compares a bracket's trials while they are "
            "live together, and only 1 DDP trial fits at a time (paused trials count); use scheduler asha, or "
            "run where 2 or more DDP trials fit.")


def check_fits(spec: Spec, cluster: ClusterResources) -> None:
    """Refuse a trial that can never be placed, instead of letting it queue forever.

    Raises:
        SpecError: Pointing at ``resources`` when one trial needs more CPUs or GPUs than
            the cluster has.
    """
    if spec.resources.auto_gpu and max((g for _, g in cluster.per_node), default=0) < 1:
        raise spec.error("resources.gpu", f"gpu: auto packs trials onto GPUs, but {cluster.source} has "
                         f"{cluster.gpu:g} GPU{'' if cluster.gpu == 1 else 's'} (no node has a whole one); run where "
                         "there is a GPU (or give Ray logical GPUs with --num-gpus), or set gpu to a number (0 for "
                         "CPU trials).")
    if trials_that_fit(spec, cluster) > 0:
        return
    req = trial_request(spec)
    whole = ClusterResources(cluster.cpu, cluster.gpu, cluster.source)
    if cluster.nodes and trials_that_fit(spec, whole) > 0:  # the totals would do; no node does
        big_cpu = max(n[0] for n in cluster.nodes)
        big_gpu = max(n[1] for n in cluster.nodes)
        res = spec.resources
        if res.distributed:
            ask = (f"its {res.workers} workers x ({res.cpu_per_worker:g} CPU, {res.gpu_per_worker:g} GPU) with "
                   f"placement_strategy {res.placement_strategy}")
            fix = ("use placement_strategy PACK or SPREAD (workers may then share out over nodes), fewer "
                   "workers, or bigger nodes")
            field = "resources.placement_strategy" if res.placement_strategy.startswith("STRICT") else \
                "resources.cpu_per_worker"
        else:
            ask = f"{req['cpu']:g} CPU, {req['gpu']:g} GPU on one node"
            fix = "lower resources.cpu/gpu, use DDP workers (resources.workers) to span nodes, or bigger nodes"
            field = "resources.gpu" if req["gpu"] > big_gpu else "resources.cpu"
        raise spec.error(field, f"one trial asks for {ask}, but no node of {cluster.source} can hold it "
                         f"(the largest has {big_cpu:g} CPU, {big_gpu:g} GPU; {cluster.cpu:g} CPU, "
                         f"{cluster.gpu:g} GPU in all); {fix}.")
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
