"""GPU packing: each trial's GPU share under ``resources.gpu: auto``, found from measurement.

Ray Tune asks the user for a fixed GPU fraction per trial (ray-project/ray#5902 and #20563 ask
for more). Under ``gpu: auto`` tuner chooses it, trial by trial, in the driver:

1. **Probe.** The experiment's first trial runs alone until its first result: nothing is known
   about its memory yet. (On a node with several GPUs it asks Ray for a whole GPU; on a one-GPU
   node for the starting level's share, and tuner holds every other trial back.) With
   ``gpu_auto.probe_share`` set, the first trials start that many to a GPU at once instead, unmeasured.
2. **Memory.** Every result of a trial on a GPU carries ``gpu_memory_reserved_bytes`` (the peak
   of torch's caching allocator, :func:`tuner.trial.report`); with the CUDA context
   (:data:`CUDA_CONTEXT_BYTES`) that is the trial's footprint. :class:`MemoryModel` keeps the
   largest footprint seen per *memory key* (the config's parameters that are not floats: batch
   size, widths, layer counts, model names; a learning rate does not change memory). A config
   not seen yet is expected at the smallest upper bound that a measured config of the same
   names and choices gives, scaled up linearly in each integer parameter that is larger (memory
   is taken to grow at most linearly in a batch size or a width). A config with no such
   measured neighbour (another model name, say) is a new probe: it asks Ray for a whole GPU.
3. **Share.** A trial asks Ray for ``max(1 / level, footprint x (1 + margin) / GPU memory)`` of a
   GPU, rounded up to Ray's 1e-4 steps. Ray never places trials whose shares add up to more than
   one GPU on a GPU (it fills one GPU's fractions before the next), so the expected peaks, with
   their margin, fit each GPU's memory, and on a node with several GPUs the trials spread over
   them ``level`` to a GPU. The GPU memory is each node's own, as the trials report it
   (``gpu_memory_total_bytes``; the smallest seen), or NVML's on this machine before any report.
4. **Throughput.** The *level* is the number of trials on each GPU; tuner lets ``level x GPUs``
   trials live (through the searcher's concurrency limit). It starts at ``start_per_gpu`` (half
   of what the CPUs allow) and doubles, up to what the CPUs, the memory and ``max_per_gpu``
   allow, while the experiment's aggregate iterations per second (results a second, over a
   window of ``2 x live trials`` results once every live trial has reported at this level) grows
   by at least ``min_gain``; when it stops growing tuner steps back to the better level and
   holds it for the rest of the experiment.
5. **Free memory.** On this machine, NVML's free memory is read before more trials are let in:
   none is, while no GPU has the largest expected footprint (with its margin) free. When a GPU
   reads as full and no trial of the experiment runs, one trial runs at a time with a whole GPU.
6. **Out of memory.** A trial that still runs out of GPU memory doubles the expectation of its
   memory key (and of the share it had); a retried trial (``failure.max_failures``) is asked
   for its new share before it is placed again, and ``oom_backoff`` halves its batch as usual.

Every decision is visible: each trial's share and its reason go to the console (level changes,
probes, memory-driven shares), to ``gpu_packing.json`` in the experiment folder (written on every
change, so a resume continues from it), and from there to ``results.csv`` (``gpu_share``,
``gpu_share_reason``) and ``summary.json`` (``gpu_packing``).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Mapping

from tuner.spec.sections import GpuAuto

__all__ = ["CUDA_CONTEXT_BYTES", "READER_ENV", "SHARE_STEP", "GpuMemory", "read_gpu_memory", "memory_key",
           "footprint", "MemoryModel", "Decision", "GpuPacker", "ladder", "start_level", "round_share",
           "resource_request", "request_for", "register", "unregister", "lookup", "fingerprint", "describe_auto",
           "load_packing", "packing_summary", "trial_columns", "packer_for", "cluster_shape", "level_share_of"]

logger = logging.getLogger("tuner")

#: What a process's CUDA context takes beside torch's caching allocator, in bytes: 621 MiB was measured
#: through NVML on an H200 (torch 2.11, CUDA 13); rounded up, as other GPUs and versions differ.
CUDA_CONTEXT_BYTES = 768 * 2**20
#: Ray's GPU fraction precision (a share is a multiple of it).
SHARE_STEP = 1e-4
#: ``module:function`` returning the GPUs' memory (a list of :class:`GpuMemory`) in place of NVML: for
#: GPUs NVML cannot read (e.g. MIG slices), and for tests with Ray's logical GPUs.
READER_ENV = "TUNER_GPU_MEMORY_READER"
#: Result keys (tuner.trial's GPU metrics) the packer learns from.
RESERVED_KEY = "gpu_memory_reserved_bytes"
PEAK_KEY = "gpu_memory_peak_bytes"
TOTAL_KEY = "gpu_memory_total_bytes"
#: Seconds between two reads of the GPUs' free memory (the driver's step runs many times a second).
READ_EVERY_S = 0.5


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory, in bytes."""

    total_bytes: int
    free_bytes: int


def _nvml_memory() -> list[GpuMemory]:
    """Every NVIDIA GPU's memory through NVML (nvidia-ml-py), in device order.

    Raises:
        Exception: Whatever NVML raises without a driver or library (``pynvml.NVMLError``).
    """
    import pynvml

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append(GpuMemory(int(info.total), int(info.free)))
        return out
    finally:
        pynvml.nvmlShutdown()


def read_gpu_memory() -> tuple[list[GpuMemory] | None, str]:
    """This machine's GPUs' memory: from ``$TUNER_GPU_MEMORY_READER`` when set, else NVML.

    Returns:
        ``(gpus, source)``; ``gpus`` is None where the reader failed or found no GPU, and
        ``source`` says why (one clause, for the console note and the plan).
    """
    spec = os.environ.get(READER_ENV)
    try:
        if spec:
            import importlib

            module, _, name = spec.partition(":")
            reader: Callable[[], Iterable[GpuMemory]] = getattr(importlib.import_module(module), name)
            source = f"{READER_ENV}={spec}"
        else:
            reader, source = _nvml_memory, "NVML"
        gpus = [GpuMemory(int(g.total_bytes), int(g.free_bytes)) for g in reader()]
    except Exception as err:  # noqa: BLE001 - no NVML, no driver, a broken reader: pack from the trials' reports
        return None, f"the GPU memory could not be read ({type(err).__name__}: {str(err)[:120]})"
    if not gpus:
        return None, f"{source} found no GPU"
    return gpus, source


# --------------------------------------------------------------------------- memory


def _leaves(config: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key in sorted(config, key=str):
        value = config[key]
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _leaves(value, name + ".")
        else:
            yield name, value


def memory_key(config: Mapping[str, Any], ignore: Iterable[str] = ()) -> tuple[tuple[str, Any], ...]:
    """The config's parameters that can change a trial's memory: every leaf that is not a float.

    Args:
        config: The trial's config (nested mappings are flattened with dots).
        ignore: Names left out (e.g. a seed, which changes no memory).

    Returns:
        ``(("arch", "resnet18"), ("batch_size", 64), ("channels", 32))``, sorted by name.
    """
    skip = set(ignore)
    return tuple((k, v) for k, v in _leaves(config)
                 if k not in skip and not isinstance(v, float) and isinstance(v, (int, str, bool, type(None))))


def footprint(result: Mapping[str, Any]) -> int | None:
    """A result's GPU footprint in bytes: torch's reserved peak (else its allocated peak) plus the
    CUDA context (:data:`CUDA_CONTEXT_BYTES`); None when the result carries neither."""
    for key in (RESERVED_KEY, PEAK_KEY):
        value = result.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return int(value) + CUDA_CONTEXT_BYTES
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class MemoryModel:
    """Expected peak GPU footprint per memory key (:func:`memory_key`), from the trials' reports.

    An unseen key is bounded from a measured key with the same non-integer values (names,
    choices, flags) and the same integer names: the measured footprint times, for each integer
    parameter larger in the new config, the ratio new / measured (memory taken to grow at most
    linearly in a batch size or a width); the smallest such bound over the measured keys.
    """

    def __init__(self) -> None:
        self.peaks: dict[tuple, int] = {}

    def observe(self, key: tuple, nbytes: int) -> bool:
        """Record a footprint; True when it raised the key's expectation."""
        if nbytes > self.peaks.get(key, -1):
            self.peaks[key] = int(nbytes)
            return True
        return False

    def raise_after_oom(self, key: tuple, at_least: int) -> int:
        """A trial of ``key`` ran out of memory with ``at_least`` bytes booked: it needs more than that, so
        expect at least twice ``at_least`` (the expectation stays where an earlier out-of-memory already
        raised it higher); without ``at_least`` (the GPU's size unknown), double the expectation.

        Returns:
            The new expectation in bytes.
        """
        expected, _ = self.expect(key)
        new = max(expected or 0, 2 * int(at_least)) if at_least else 2 * max(expected or 0, 1)
        self.peaks[key] = new
        return new

    def expect(self, key: tuple) -> tuple[int | None, str]:
        """The expected footprint of a config of ``key``, in bytes, and how it was found.

        Returns:
            ``(bytes, "measured")``, ``(bytes, "scaled x2 from the measured batch_size=64")``,
            ``(bytes, "at most the measured batch_size=128")``, or ``(None, "no comparable config measured")``.
        """
        if key in self.peaks:
            return self.peaks[key], "measured"
        names = [k for k, _ in key]
        fixed = {k: v for k, v in key if not _is_int(v)}
        best: tuple[int, str] | None = None
        for seen, nbytes in self.peaks.items():
            if [k for k, _ in seen] != names or {k: v for k, v in seen if not _is_int(v)} != fixed:
                continue
            scale, larger, other = 1.0, list[str](), list[str]()
            for (name, new), (_, old) in zip(key, seen):
                if _is_int(new) and _is_int(old) and new != old:
                    (larger if new > old else other).append(f"{name}={old}")
                    if new > old:
                        scale *= new / max(old, 1)
            bound = int(math.ceil(nbytes * scale))
            how = (f"scaled x{scale:.3g} from the measured {', '.join(larger + other)}" if larger
                   else f"at most the measured {', '.join(other)}")
            if best is None or bound < best[0]:
                best = (bound, how)
        if best is None:
            return None, "no comparable config measured"
        return best

    def largest(self) -> int | None:
        """The largest expectation so far, in bytes (None before any report)."""
        return max(self.peaks.values()) if self.peaks else None


# --------------------------------------------------------------------------- levels and shares


def round_share(share: float) -> float:
    """A GPU share rounded up to Ray's precision (:data:`SHARE_STEP`), within (0, 1]."""
    steps = math.ceil(share / SHARE_STEP - 1e-6)
    return min(1.0, max(SHARE_STEP, steps * SHARE_STEP))


def level_share_of(level: int) -> float:
    """The GPU share of a trial at ``level`` trials per GPU: ``1 / level`` rounded *down* to Ray's
    precision, so that ``level`` of them fit one GPU (3 x 0.3333)."""
    return max(SHARE_STEP, math.floor((1 / level) / SHARE_STEP + 1e-6) * SHARE_STEP)


def ladder(start: int, top: int) -> list[int]:
    """The levels (trials per GPU) tried in turn: ``start``, doubling, then ``top``.

    >>> ladder(2, 12)
    [2, 4, 8, 12]
    """
    start = max(1, min(start, top))
    out = [start]
    while out[-1] < top:
        out.append(min(top, out[-1] * 2))
    return out


def start_level(auto: GpuAuto, cpu_per_trial: float, cpus_per_gpu: float) -> tuple[int, int]:
    """The starting and the highest level for a node's CPUs per GPU.

    Args:
        auto: ``resources.gpu_auto``.
        cpu_per_trial: ``resources.cpu``.
        cpus_per_gpu: CPUs per GPU on the (smallest) GPU node.

    Returns:
        ``(start, top)`` trials per GPU: ``top = min(max_per_gpu, what the CPUs allow)``, at least 1;
        ``start = start_per_gpu`` or half of ``top`` (rounded up).
    """
    by_cpu = math.floor(cpus_per_gpu / cpu_per_trial + 1e-9) if cpu_per_trial > 0 else auto.max_per_gpu
    top = max(1, min(auto.max_per_gpu, by_cpu))
    start = auto.start_per_gpu if auto.start_per_gpu is not None else max(1, math.ceil(top / 2))
    return min(start, top), top


@dataclass
class Decision:
    """One trial's GPU share and why.

    Attributes:
        share: The GPU fraction the trial asks Ray for, in (0, 1].
        reason: One clause, e.g. ``"level 4 per GPU"`` or ``"expected 9.1 GiB (measured) + 25 %"``.
        expected_bytes: The config's expected footprint in bytes, or None where unknown.
        probe: Whether the trial runs as a probe (memory unknown; booked a whole GPU until it reports).
    """

    share: float
    reason: str
    expected_bytes: int | None = None
    probe: bool = False


@dataclass
class _Live:
    key: tuple
    share: float
    booked: float  # the share tuner counts it for: max(share, its measured footprint's share); 1.0 while a probe
    results: int = 0
    started_level: int = 0
    seen_at_level: bool = False
    backed_off: bool = False


@dataclass
class _Window:
    level: int
    opened: float | None = None
    results: int = 0
    target: int = 0


def _gib(nbytes: float | None) -> str:
    return "?" if nbytes is None else f"{nbytes / 2**30:.2f} GiB"


@dataclass
class GpuPacker:
    """The policy of ``gpu: auto`` (the module docstring says it in full), for one experiment.

    Driven from the driver's Tune callback (:class:`PackingCallback`) and the trainable's resource
    request (:func:`resource_request`); pure Python, so each rule can be tested without Ray.

    Args:
        auto: ``resources.gpu_auto``.
        cpu_per_trial: ``resources.cpu``.
        gpus: GPUs of the cluster (Ray's logical ``GPU``).
        cpus_per_gpu: CPUs per GPU of the smallest GPU node (what bounds the trials on one GPU).
        gpus_per_node: The most GPUs on one node (several: the probe takes a whole GPU).
        gpu_memory: This machine's GPUs (:func:`read_gpu_memory`), or None (a cluster, or no NVML).
        memory_source: Where ``gpu_memory`` came from, or why there is none.
        reader: Reads the GPUs' free memory again before more trials are let in (None: never).
        ignore: Config names that change no memory (e.g. ``seed``).
        clock: Seconds (monotonic).
        note: Where a decision is told (the console); None: nowhere.
    """

    auto: GpuAuto
    cpu_per_trial: float
    gpus: int
    cpus_per_gpu: float
    gpus_per_node: int = 1
    gpu_memory: list[GpuMemory] | None = None
    memory_source: str = ""
    reader: Callable[[], tuple[list[GpuMemory] | None, str]] | None = None
    ignore: tuple[str, ...] = ()
    clock: Callable[[], float] = time.monotonic
    note: Callable[[str], None] | None = None
    memory: MemoryModel = field(default_factory=MemoryModel)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    levels: list[dict[str, Any]] = field(default_factory=list)
    total_bytes: int | None = None

    def __post_init__(self) -> None:
        self.start, self.top = start_level(self.auto, self.cpu_per_trial, self.cpus_per_gpu)
        self.rungs = ladder(self.start, self.top)
        self.level = self.start
        self.phase = "probe"  # probe -> climb -> hold
        self.best: tuple[int, float] | None = None  # (level, aggregate results/s) of the best window
        self.window = _Window(self.level)
        self.live: dict[str, _Live] = {}
        self.pending: dict[str, Decision] = {}  # config fingerprint -> decision, until the trial starts
        self.full_gpu_noted = False
        self._last_read: tuple[float, tuple[list[GpuMemory] | None, str]] | None = None
        self._created = self.clock()
        if self.gpu_memory:
            self.total_bytes = min(g.total_bytes for g in self.gpu_memory)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ shares

    def _mem_share(self, nbytes: int | None) -> float | None:
        if nbytes is None or not self.total_bytes:
            return None
        return nbytes * (1 + self.auto.margin) / self.total_bytes

    def decide(self, config: Mapping[str, Any]) -> Decision:
        """The share a new trial of ``config`` asks Ray for (called when Ray creates the trial).

        Returns:
            The :class:`Decision`; also kept until :meth:`started` binds it to the trial id.
        """
        with self._lock:
            key = memory_key(config, self.ignore)
            level_share = level_share_of(self.level)
            if self.phase == "probe" and self.auto.probe_share is not None:
                decision = Decision(round_share(self.auto.probe_share), f"probe_share {self.auto.probe_share:g}: "
                                    "no trial has reported its GPU memory yet", None)
            elif self.phase == "probe" and not self.live and not self.memory.peaks:
                # One step below the level's share: a different resource request, so that Ray Tune never hands
                # the probe's actor (reuse_actors) to the trials started after it, which would cancel the start
                # of their own actors and run them one by one on the probe's.
                share = 1.0 if self.gpus_per_node > 1 else max(SHARE_STEP, level_share - SHARE_STEP)
                decision = Decision(share, "probe: the first trial runs alone until its first result "
                                    "(its GPU memory is not known yet)", None, probe=True)
            elif self.full_gpu_noted and not self.live:
                decision = Decision(1.0, "the GPU's memory reads as full: one trial at a time, with a whole GPU",
                                    None, probe=True)
            else:
                expected, how = self.memory.expect(key)
                mem_share = self._mem_share(expected)
                if expected is None and self.memory.peaks:
                    decision = Decision(1.0, f"probe: {how} (new names or choices): a whole GPU until it reports",
                                        None, probe=True)
                elif mem_share is None:
                    decision = Decision(level_share, f"level {self.level} per GPU (GPU memory unknown: "
                                        f"{self.memory_source or 'no report carries it'})", expected)
                elif mem_share > 1 / self.level:
                    share = round_share(mem_share)
                    over = " (more than the GPU has: a whole GPU)" if mem_share > 1 else ""
                    decision = Decision(share, f"memory: expected {_gib(expected)} ({how}) + "
                                        f"{self.auto.margin:.0%} of {_gib(self.total_bytes)}{over}", expected)
                else:
                    decision = Decision(level_share, f"level {self.level} per GPU; expected {_gib(expected)} "
                                        f"({how}) + {self.auto.margin:.0%} fits", expected)
            self.pending[fingerprint(config)] = decision
            return decision

    def started(self, trial_id: str, config: Mapping[str, Any], share: float | None = None) -> Decision:
        """A trial started (or restarted): book it, and record its decision under its id.

        Args:
            trial_id: Ray's trial id.
            config: The trial's config.
            share: The GPU share Ray gave it (from its placement group factory); default the decision's.
        """
        with self._lock:
            decision = self.pending.pop(fingerprint(config), None)
            if decision is None:  # a restored or retried trial: its share stands
                old = self.decisions.get(trial_id)
                decision = Decision(share if share is not None else (old or {}).get("gpu_share", 1.0),
                                    (old or {}).get("reason", "restored with its earlier share"),
                                    (old or {}).get("expected_bytes"))
            if share is not None:
                decision.share = share
            key = memory_key(config, self.ignore)
            booked = 1.0 if decision.probe else max(decision.share, self._mem_share(decision.expected_bytes) or 0)
            self.live[trial_id] = _Live(key, decision.share, booked, started_level=self.level)
            self.decisions[trial_id] = {**self.decisions.get(trial_id, {}),
                                        "gpu_share": decision.share, "reason": decision.reason,
                                        "expected_bytes": decision.expected_bytes, "level": self.level,
                                        "probe": decision.probe or self.decisions.get(trial_id, {}).get("probe", False)}
            if self.note and (decision.probe or decision.reason.startswith("memory")):
                self.note(f"gpu auto: trial {trial_id} gets {decision.share:g} of a GPU: {decision.reason}.")
            return decision

    # ------------------------------------------------------------------ results

    def result(self, trial_id: str, config: Mapping[str, Any], result: Mapping[str, Any],
               used: Mapping[str, Any] | None = None) -> None:
        """Learn from one result: the footprint of the config's memory key, and the throughput window.

        Args:
            trial_id: The trial.
            config: Its config.
            result: The result (``gpu_memory_reserved_bytes``, ``gpu_memory_total_bytes``).
            used: Config values the trial actually trained with (``oom_backoff``'s halved batch).
        """
        with self._lock:
            now = self.clock()
            total = result.get(TOTAL_KEY)
            if isinstance(total, (int, float)) and total > 0 and not isinstance(total, bool):
                self.total_bytes = int(min(self.total_bytes or total, total))
            nbytes = footprint(result)
            live = self.live.get(trial_id)
            key = memory_key({**config, **(used or {})}, self.ignore)
            if nbytes is not None:
                self.memory.observe(key, nbytes)
            if used and live is not None and not live.backed_off:
                original = memory_key(config, self.ignore)
                if original != key:  # oom_backoff halved the batch in the trial: the original did not fit
                    live.backed_off = True
                    self.memory.raise_after_oom(original, int(live.share * (self.total_bytes or 0)))
            if live is not None:
                live.results += 1
                live.key = key
                measured = self._mem_share(self.memory.expect(key)[0])
                live.booked = max(live.share, measured or 0)
                live.seen_at_level = True
            if self.phase == "probe":
                self._leave_probe(now)
                return
            self._window_result(now)

    def _leave_probe(self, now: float) -> None:
        top = self.top
        largest = self._mem_share(self.memory.largest())
        if largest:
            top = max(1, min(top, math.floor(1 / largest)))
        self.rungs = ladder(self.start, top)
        self.level = self.rungs[0]
        self.phase = "climb" if len(self.rungs) > 1 else "hold"
        memory = (f"{_gib(self.memory.largest())} expected per trial of {_gib(self.total_bytes)}"
                  if self.memory.largest() is not None and self.total_bytes else "no GPU memory reported")
        self._set_level(self.level, now, f"after the probe: {memory}; trying {self.rungs} per GPU "
                        f"(most by CPUs {self.top}, max_per_gpu {self.auto.max_per_gpu})")

    def _set_level(self, level: int, now: float, why: str) -> None:
        self.level = level
        self.window = _Window(level)
        for live in self.live.values():
            live.seen_at_level = False
        entry = {"at_s": round(now - self._created, 3), "per_gpu": level, "phase": self.phase, "reason": why}
        self.levels.append(entry)
        if self.note:
            self.note(f"gpu auto: {level} trial{'s' if level != 1 else ''} per GPU ({self.phase}): {why}.")

    def _window_result(self, now: float) -> None:
        if self.phase != "climb":
            return
        win = self.window
        if win.opened is None:
            running = list(self.live.values())
            if len(running) >= self.level * self.gpus and all(t.seen_at_level for t in running):
                win.opened, win.results, win.target = now, 0, 2 * len(running)
            return
        win.results += 1
        if win.results < win.target or now <= win.opened:
            return
        rate = win.results / (now - win.opened)
        self.levels[-1]["results_per_s"] = round(rate, 4)
        i = self.rungs.index(self.level)
        if self.best is None or rate >= self.best[1] * (1 + self.auto.min_gain):
            gain = "" if self.best is None else f" (+{rate / self.best[1] - 1:.0%} over {self.best[0]} per GPU)"
            self.best = (self.level, rate)
            if i + 1 < len(self.rungs):
                self._set_level(self.rungs[i + 1], now, f"{rate:.2f} results/s at {self.level} per GPU{gain}; "
                                "trying more")
            else:
                self.phase = "hold"
                self._set_level(self.level, now, f"{rate:.2f} results/s{gain}; the most the CPUs, memory and "
                                "max_per_gpu allow")
        else:
            prev, prev_rate = self.best
            self.phase = "hold"
            self._set_level(prev, now, f"{rate:.2f} results/s at {self.level} per GPU is not {self.auto.min_gain:.0%} "
                            f"above {prev_rate:.2f} at {prev}: back to {prev} and holding")

    # ------------------------------------------------------------------ ends and errors

    def ended(self, trial_id: str) -> None:
        """A trial ended, errored or paused: its booking is released."""
        with self._lock:
            self.live.pop(trial_id, None)

    def out_of_memory(self, trial_id: str, config: Mapping[str, Any]) -> Decision:
        """A trial ran out of GPU memory: double its key's expectation; the share a retry asks for.

        Returns:
            The new :class:`Decision` for the trial (also recorded under its id).
        """
        with self._lock:
            live = self.live.pop(trial_id, None)
            key = live.key if live is not None else memory_key(config, self.ignore)
            had = self.decisions.get(trial_id, {}).get("gpu_share", 1 / self.level)
            booked_bytes = int(had * self.total_bytes) if self.total_bytes else 0
            new = self.memory.raise_after_oom(key, booked_bytes)
            share = round_share(max(self._mem_share(new) or 2 * had, 1 / self.level))
            reason = f"out of GPU memory at {had:g} of a GPU: expectation raised to {_gib(new)}"
            decision = Decision(share, reason, new)
            self.decisions[trial_id] = {**self.decisions.get(trial_id, {}), "gpu_share": share, "reason": reason,
                                        "expected_bytes": new, "level": self.level, "out_of_memory": True}
            self.pending[fingerprint(config)] = decision
            if self.note:
                self.note(f"gpu auto: trial {trial_id} ran out of GPU memory; {reason}; a retry asks for {share:g}.")
            return decision

    # ------------------------------------------------------------------ how many trials may live

    def allowed(self) -> int:
        """How many trials may live now (the searcher's concurrency limit): 1 in the probe, else
        ``level x GPUs`` less what the live trials' bookings already take beyond their level share,
        and no more than the live ones while no GPU has the largest expected footprint free."""
        with self._lock:
            live = len(self.live)
            if self.phase == "probe":
                if self.auto.probe_share is not None:
                    return max(1, math.floor(1 / round_share(self.auto.probe_share) + 1e-9) * self.gpus)
                return 1
            cap = self.level * self.gpus
            booked = sum(t.booked for t in self.live.values())
            room = self.gpus - booked
            per = 1 / self.level
            cap = min(cap, live + max(0, math.floor(room / per + 1e-9)))
            if self.reader is not None and cap > live:
                gpus, source = self._read()
                need = self.memory.largest()
                if gpus is not None and need is not None:
                    need = int(need * (1 + self.auto.margin))
                    if max(g.free_bytes for g in gpus) < need:
                        if not live:
                            if not self.full_gpu_noted and self.note:
                                free = max(g.free_bytes for g in gpus)
                                self.note(f"gpu auto: no GPU has {_gib(need)} free ({_gib(free)} at most, "
                                          f"{source}); running one trial at a time with a whole GPU.")
                            self.full_gpu_noted = True
                            return 1
                        return live
                    self.full_gpu_noted = False
            return max(1, cap)

    def _read(self) -> tuple[list[GpuMemory] | None, str]:
        """The reader's answer, read at most every :data:`READ_EVERY_S` seconds."""
        now = self.clock()
        if self._last_read is None or now - self._last_read[0] >= READ_EVERY_S:
            assert self.reader is not None
            self._last_read = (now, self.reader())
        return self._last_read[1]

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """What ``gpu_packing.json`` holds: settings, levels, the memory model and every decision."""
        return {"start_per_gpu": self.start, "top_per_gpu": self.top, "rungs": self.rungs, "level": self.level,
                "phase": self.phase, "best": self.best, "gpu_memory_bytes": self.total_bytes,
                "memory_source": self.memory_source, "margin": self.auto.margin,
                "levels": self.levels, "decisions": self.decisions,
                "memory": [{"key": dict(k), "expected_bytes": v} for k, v in self.memory.peaks.items()]}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved :meth:`state` (a resume): memory, level, phase and decisions."""
        for entry in state.get("memory", []):
            self.memory.observe(tuple(sorted(entry["key"].items())), int(entry["expected_bytes"]))
        self.decisions.update(state.get("decisions", {}))
        self.levels = list(state.get("levels", []))
        if state.get("phase") in ("climb", "hold") and self.memory.peaks:
            self.phase = state["phase"]
            self.rungs = list(state.get("rungs") or self.rungs)
            self.level = int(state.get("level", self.level))
            best = state.get("best")
            self.best = (int(best[0]), float(best[1])) if best else None
            self.window = _Window(self.level)
        self.total_bytes = self.total_bytes or state.get("gpu_memory_bytes")


def fingerprint(config: Mapping[str, Any]) -> str:
    """A config as one string (sorted JSON): how a decision made at a trial's creation finds the trial."""
    return json.dumps(config, sort_keys=True, default=str)


# --------------------------------------------------------------------------- Ray glue

_PACKERS: dict[str, GpuPacker] = {}


def lookup(key: str) -> GpuPacker | None:
    """The packer of experiment ``key``; the only one registered when ``key`` is not (a resumed
    experiment whose folder moved: its callback was pickled with the old key)."""
    packer = _PACKERS.get(key)
    if packer is None and len(_PACKERS) == 1:
        packer = next(iter(_PACKERS.values()))
    return packer


def register(key: str, packer: GpuPacker) -> None:
    """Make ``packer`` the one :func:`resource_request` consults for experiment ``key``."""
    _PACKERS[key] = packer


def unregister(key: str) -> None:
    """Forget experiment ``key``'s packer (after the run)."""
    _PACKERS.pop(key, None)


def resource_request(key: str, cpu: float, config: dict) -> Any:
    """The placement group factory of a new trial under ``gpu: auto`` (``tune.with_resources``'s callable).

    Ray 2.60 calls it in the driver when it creates a trial, on a copy of the trainable unpickled from
    its registry: so it finds the experiment's live :class:`GpuPacker` by ``key`` in this module. Bind
    ``key`` and ``cpu`` with ``functools.partial``.

    Returns:
        ``PlacementGroupFactory([{"CPU": cpu, "GPU": share}])``; a whole GPU where no packer is
        registered (another process).
    """
    from ray.tune import PlacementGroupFactory

    packer = lookup(key)
    share = packer.decide(config).share if packer is not None else 1.0
    return PlacementGroupFactory([{"CPU": float(cpu), "GPU": float(share)}])


def request_for(key: str, cpu: float) -> Callable[[dict], Any]:
    """:func:`resource_request` bound to one experiment (picklable: a partial of a module function)."""
    return functools.partial(resource_request, key, float(cpu))


def cluster_shape(cluster: Any) -> tuple[int, float, int]:
    """``(GPUs, CPUs per GPU on the leanest GPU node, most GPUs on one node)`` of a
    :class:`tuner.resources.sizing.ClusterResources`."""
    nodes = [(c, g) for c, g in cluster.per_node if g >= 1]
    gpus = int(sum(math.floor(g + 1e-9) for _, g in nodes))
    cpus_per_gpu = min((c / math.floor(g + 1e-9) for c, g in nodes), default=0.0)
    per_node = max((int(math.floor(g + 1e-9)) for _, g in nodes), default=0)
    return gpus, cpus_per_gpu, per_node


def packer_for(spec: Any, cluster: Any, note: Callable[[str], None] | None = None,
               read: bool | None = None) -> GpuPacker:
    """The :class:`GpuPacker` of a ``gpu: auto`` spec on ``cluster``.

    Args:
        spec: The validated spec (``resources.gpu: auto``).
        cluster: Its :class:`tuner.resources.sizing.ClusterResources`.
        note: Where decisions are told (the console); None: nowhere.
        read: Whether this machine's GPUs are the cluster's (NVML read here); default: a cluster of one node.
    """
    gpus, cpus_per_gpu, per_node = cluster_shape(cluster)
    read = len(cluster.nodes) <= 1 if read is None else read
    memory, source = read_gpu_memory() if read else (None, f"a cluster of {len(cluster.nodes)} nodes: the GPU "
                                                            "memory each trial reports")
    ignore = ("seed",)
    return GpuPacker(spec.resources.auto, float(spec.resources.cpu), gpus, cpus_per_gpu, per_node, memory, source,
                     reader=read_gpu_memory if read and memory is not None else None, ignore=ignore, note=note)


def describe_auto(auto: GpuAuto, cpu_per_trial: float, gpus: float, cpus_per_gpu: float,
                  gpu_memory: list[GpuMemory] | None, source: str) -> list[str]:
    """``tuner validate``'s plan lines for ``gpu: auto``: how it will pack, before anything starts."""
    start, top = start_level(auto, cpu_per_trial, cpus_per_gpu)
    memory = (f"{len(gpu_memory)} GPU(s) of {_gib(min(g.total_bytes for g in gpu_memory))} "
              f"({_gib(min(g.free_bytes for g in gpu_memory))} free at least; {source})" if gpu_memory
              else f"read from the trials' reports ({source})")
    return [
        f"gpu auto:   the first trial alone until its first result (probe); then {ladder(start, top)} trials "
        f"per GPU, raised while the aggregate iterations/s grows by {auto.min_gain:.0%} (at most {top}: "
        f"{cpus_per_gpu:g} CPUs per GPU / {cpu_per_trial:g} per trial, max_per_gpu {auto.max_per_gpu})",
        f"            each trial's share covers its config's measured GPU footprint + {auto.margin:.0%}; "
        f"GPU memory: {memory}",
    ]


# --------------------------------------------------------------------------- the experiment's record


def load_packing(path: str | os.PathLike) -> dict[str, Any] | None:
    """The experiment folder's ``gpu_packing.json``, or None (no ``gpu: auto``, or unreadable)."""
    from tuner.experiment.layout import GPU_PACKING

    try:
        return json.loads((Path(path) / GPU_PACKING).read_text())
    except (OSError, ValueError):
        return None


def packing_summary(packing: Mapping[str, Any]) -> dict[str, Any]:
    """``summary.json``'s ``gpu_packing``: the level held at the end, each level tried and why, the GPU memory
    and the memory learned per config, and each trial's share and reason."""
    keep = ("level", "phase", "rungs", "best", "gpu_memory_bytes", "memory_source", "margin", "levels", "memory")
    out = {k: packing.get(k) for k in keep}
    out["trials"] = {i: {"gpu_share": d.get("gpu_share"), "reason": d.get("reason")}
                     for i, d in packing.get("decisions", {}).items()}
    return out


def trial_columns(packing: Mapping[str, Any] | None, trial_id: str) -> dict[str, Any]:
    """``results.csv``'s ``gpu_share`` and ``gpu_share_reason`` of one trial (empty without a record)."""
    entry = (packing or {}).get("decisions", {}).get(trial_id)
    if not entry:
        return {}
    return {"gpu_share": entry.get("gpu_share"), "gpu_share_reason": entry.get("reason")}
