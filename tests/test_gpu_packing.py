"""``resources.gpu: auto``: the packing policy (tuner.resources.gpu_packing) rule by rule, without Ray, on a fake clock
and simulated GPU memory; tests/test_gpu_auto.py runs it through the CLI on Ray's logical GPUs."""

from __future__ import annotations

import pytest

from tuner.resources.gpu_packing import (CUDA_CONTEXT_BYTES, GpuMemory, GpuPacker, MemoryModel, describe_auto, footprint, ladder,
                                         level_share_of, memory_key, read_gpu_memory, round_share, start_level)
from tuner.resources.sizing import ClusterResources
from tuner.spec.sections import GpuAuto

GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_packer(gpus: int = 1, cpus_per_gpu: float = 16, cpu: float = 2, gpus_per_node: int = 1,
                memory: list[GpuMemory] | None = None, reader=None, **auto) -> tuple[GpuPacker, Clock, list[str]]:
    clock, notes = Clock(), []
    memory = memory if memory is not None else [GpuMemory(16 * GIB, 16 * GIB)] * gpus
    packer = GpuPacker(GpuAuto(**auto), cpu, gpus, cpus_per_gpu, gpus_per_node, memory, "simulated",
                       reader=reader, ignore=("seed",), clock=clock, note=notes.append)
    return packer, clock, notes


def report(packer: GpuPacker, trial_id: str, config: dict, reserved: int | None = 1 * GIB, **extra) -> None:
    result = dict(extra)
    if reserved is not None:
        result["gpu_memory_reserved_bytes"] = reserved
    packer.result(trial_id, config, result)


def start(packer: GpuPacker, trial_id: str, config: dict):
    decision = packer.decide(config)
    packer.started(trial_id, config, decision.share)
    return decision


# --------------------------------------------------------------------------- pieces


def test_memory_key_keeps_what_can_change_memory():
    config = {"lr": 0.01, "batch_size": 64, "model": {"name": "resnet", "width": 32, "dropout": 0.1}, "seed": 3,
              "amp": True}
    assert memory_key(config, ignore=("seed",)) == (("amp", True), ("batch_size", 64), ("model.name", "resnet"),
                                                    ("model.width", 32))


def test_footprint_adds_the_cuda_context():
    assert footprint({"gpu_memory_reserved_bytes": GIB, "gpu_memory_peak_bytes": 10}) == GIB + CUDA_CONTEXT_BYTES
    assert footprint({"gpu_memory_peak_bytes": 10}) == 10 + CUDA_CONTEXT_BYTES
    assert footprint({"loss": 1.0}) is None


def test_memory_model_measures_scales_bounds_and_doubles_after_oom():
    model = MemoryModel()
    model.observe((("batch", 64), ("model", "a"), ("width", 32)), 100)
    assert model.expect((("batch", 64), ("model", "a"), ("width", 32))) == (100, "measured")
    assert model.expect((("batch", 128), ("model", "a"), ("width", 64))) == (400, "scaled x4 from the measured "
                                                                              "batch=64, width=32")
    assert model.expect((("batch", 32), ("model", "a"), ("width", 16))) == (100, "at most the measured batch=64, "
                                                                             "width=32")
    assert model.expect((("batch", 64), ("model", "b"), ("width", 32)))[0] is None, "another model: no bound"
    model.observe((("batch", 256), ("model", "a"), ("width", 16)), 150)  # a tighter bound for a small width
    assert model.expect((("batch", 128), ("model", "a"), ("width", 16)))[0] == 150
    assert model.raise_after_oom((("batch", 64), ("model", "a"), ("width", 32)), at_least=300) == 600
    assert not model.observe((("batch", 64), ("model", "a"), ("width", 32)), 200), "a raised expectation stays"


def test_levels_shares_and_the_cpu_bound():
    assert ladder(2, 12) == [2, 4, 8, 12] and ladder(4, 4) == [4] and ladder(8, 3) == [3]
    assert start_level(GpuAuto(), cpu_per_trial=2, cpus_per_gpu=16) == (4, 8)
    assert start_level(GpuAuto(max_per_gpu=6), 1, 16) == (3, 6)
    assert start_level(GpuAuto(start_per_gpu=2), 4, 16) == (2, 4)
    assert start_level(GpuAuto(), 32, 16) == (1, 1), "a trial that wants more CPUs than a GPU has: one at a time"
    assert level_share_of(3) * 3 <= 1 and level_share_of(4) == 0.25
    assert round_share(0.12341) == pytest.approx(0.1235) and round_share(3.0) == 1.0


# --------------------------------------------------------------------------- the policy


def test_the_first_trial_runs_alone_until_its_first_result():
    packer, clock, notes = make_packer()
    assert packer.allowed() == 1
    first = start(packer, "a", {"batch_size": 64, "lr": 0.1})
    assert first.probe and "probe" in first.reason
    assert first.share == pytest.approx(0.2499), "not the level's 0.25: Ray Tune must not reuse the probe's actor"
    assert packer.allowed() == 1, "nothing else starts before the probe reports"
    report(packer, "a", {"batch_size": 64, "lr": 0.1})
    assert packer.phase == "climb" and packer.level == 4
    assert packer.allowed() == 4, "level 4 on one GPU"
    assert any("after the probe" in n for n in notes)
    second = start(packer, "b", {"batch_size": 64, "lr": 0.2})
    assert not second.probe and second.share == 0.25 and second.reason.startswith("level 4 per GPU")


def test_a_config_with_no_measured_neighbour_is_probed_alone_with_a_whole_gpu():
    """After the probe, a config whose names or choices no trial has measured (another model name) is probed
    with a whole GPU, noted on the console, and booked as a whole GPU until it reports; then its memory counts."""
    packer, _, notes = make_packer()
    start(packer, "a", {"model": "small", "batch_size": 64})
    report(packer, "a", {"model": "small", "batch_size": 64})
    same = packer.decide({"model": "small", "batch_size": 32})
    assert not same.probe and same.share == 0.25, "bounded by the measured batch 64"
    other = start(packer, "b", {"model": "big", "batch_size": 64})
    assert other.probe and other.share == 1.0 and other.reason.startswith("probe: ") and "a whole GPU" in other.reason
    assert notes[-1] == f"gpu auto: trial b gets 1 of a GPU: {other.reason}."
    assert packer.decisions["b"]["probe"] is True
    report(packer, "b", {"model": "big", "batch_size": 64}, reserved=2 * GIB)
    again = packer.decide({"model": "big", "batch_size": 64})
    assert not again.probe and again.share < 1, "measured now"


def test_a_big_config_asks_for_its_memory_and_lowers_the_top_level():
    packer, clock, _ = make_packer()
    start(packer, "a", {"batch_size": 64})
    report(packer, "a", {"batch_size": 64}, reserved=3 * GIB)  # (3 GiB + context) x 1.25 of 16 GiB: 0.293
    assert packer.rungs == [3], "at most 3 such trials fit one GPU"
    big = start(packer, "b", {"batch_size": 128})  # scaled x2: 0.586 of the GPU
    assert big.share == round_share((6 * GIB + 2 * CUDA_CONTEXT_BYTES) * 1.25 / (16 * GIB))
    assert big.reason.startswith("memory: expected") and "scaled x2" in big.reason
    assert packer.allowed() == 2, "0.29 + 0.59 booked: one more level-3 share does not fit"


def test_the_level_rises_while_throughput_grows_and_holds_when_it_stops():
    packer, clock, notes = make_packer(cpus_per_gpu=32, cpu=2, start_per_gpu=2)  # top 16: [2, 4, 8, 16]
    cfg = {"batch_size": 64}
    start(packer, "t0", cfg)
    report(packer, "t0", cfg, reserved=0)  # a small footprint: the CPUs bound the level, not the memory
    assert packer.level == 2 and packer.rungs == [2, 4, 8, 16]

    def run_level(ids: list[str], rate: float) -> None:
        """Every live trial reports once (the window opens), then 2 x live results at ``rate`` results/s."""
        for i in ids:
            if i not in packer.live:
                start(packer, i, cfg)
        for i in ids:
            report(packer, i, cfg, reserved=0)
        n = 2 * len(packer.live)
        for k in range(n):
            clock.now += 1 / rate
            report(packer, ids[k % len(ids)], cfg, reserved=0)

    run_level(["t0", "t1"], rate=10)
    assert packer.level == 4 and packer.levels[-2]["results_per_s"] == pytest.approx(10)
    run_level(["t0", "t1", "t2", "t3"], rate=16)  # +60 %: keep going
    assert packer.level == 8
    run_level([f"t{i}" for i in range(8)], rate=16.4)  # +2.5 %: below min_gain 5 %, back to 4 and hold
    assert packer.level == 4 and packer.phase == "hold"
    assert "back to 4 and holding" in notes[-1]
    assert packer.allowed() == 4, "the 8 live trials finish; no new one until fewer than 4 live"
    for i in range(5):  # the level-8 trials (0.125 each) stay
        packer.ended(f"t{i}")
    assert len(packer.live) == 3 and packer.allowed() == 4


def test_several_gpus_spread_and_the_probe_takes_a_whole_gpu():
    packer, clock, _ = make_packer(gpus=2, gpus_per_node=2, cpus_per_gpu=8, cpu=2)
    probe = start(packer, "a", {"b": 1})
    assert probe.share == 1.0, "Ray fills one GPU's fractions first: a whole GPU keeps the probe alone"
    report(packer, "a", {"b": 1})
    assert packer.level == 2
    assert packer.allowed() == 3, "the probe keeps its whole GPU: 2 trials on the other"
    packer.ended("a")
    assert packer.allowed() == 2 * packer.level


def test_free_memory_gates_new_trials_and_a_full_gpu_runs_one_at_a_time():
    free = {"bytes": 16 * GIB}

    def reader():
        return [GpuMemory(16 * GIB, free["bytes"])], "simulated"

    packer, clock, notes = make_packer(reader=reader)
    start(packer, "a", {"b": 1})
    report(packer, "a", {"b": 1}, reserved=2 * GIB)
    assert packer.allowed() == 4
    free["bytes"] = 1 * GIB  # another process took the GPU
    clock.now += 1
    assert packer.allowed() == 1, "no new trial while no GPU has the expected footprint free"
    packer.ended("a")
    clock.now += 1
    assert packer.allowed() == 1 and "one trial at a time with a whole GPU" in notes[-1]
    lone = start(packer, "b", {"b": 1})
    assert lone.share == 1.0 and "full" in lone.reason


def test_the_gpu_memory_is_the_smallest_the_trials_report():
    """On a cluster (no NVML read here), each node's GPU memory as the trials report it: the smallest seen
    sizes every share, and a larger one reported later does not raise it."""
    packer = GpuPacker(GpuAuto(), 2, 1, 16, 1, None, "a cluster of 2 nodes: the GPU memory each trial reports",
                       reader=None, ignore=("seed",), clock=Clock())
    assert packer.total_bytes is None
    start(packer, "a", {"b": 1})
    report(packer, "a", {"b": 1}, gpu_memory_total_bytes=80 * GIB)
    assert packer.total_bytes == 80 * GIB
    report(packer, "a", {"b": 1}, gpu_memory_total_bytes=40 * GIB)
    report(packer, "a", {"b": 1}, gpu_memory_total_bytes=141 * GIB)
    assert packer.total_bytes == 40 * GIB


def test_a_reader_that_fails_is_said_and_packing_goes_on(monkeypatch):
    monkeypatch.setenv("TUNER_GPU_MEMORY_READER", "tests.gpu_readers:broken")
    gpus, source = read_gpu_memory()
    assert gpus is None and "could not be read" in source and "RuntimeError" in source
    monkeypatch.setenv("TUNER_GPU_MEMORY_READER", "tests.gpu_readers:roomy")
    gpus, source = read_gpu_memory()
    assert gpus == [GpuMemory(16 * GIB, 15 * GIB)] and "tests.gpu_readers:roomy" in source
    packer, _, _ = make_packer(memory=[])
    packer.gpu_memory, packer.total_bytes = None, None
    start(packer, "a", {"b": 1})
    report(packer, "a", {"b": 1}, reserved=GIB // 4)  # no gpu_memory_total_bytes: the GPU's size stays unknown
    decision = packer.decide({"b": 1})
    assert decision.share == 0.25 and "GPU memory unknown" in decision.reason
    report(packer, "a", {"b": 1}, reserved=GIB // 4, gpu_memory_total_bytes=8 * GIB)  # a trial tells it
    assert packer.total_bytes == 8 * GIB and packer.decide({"b": 1}).reason.startswith("level 4")


def test_out_of_memory_doubles_the_expectation_and_the_retry_asks_for_more():
    packer, clock, notes = make_packer()
    start(packer, "a", {"b": 1})
    report(packer, "a", {"b": 1}, reserved=GIB)
    start(packer, "b", {"b": 1})
    retry = packer.out_of_memory("b", {"b": 1})
    assert retry.share >= 0.5 and "out of GPU memory" in retry.reason
    assert packer.decisions["b"]["out_of_memory"] is True
    assert packer.memory.expect(memory_key({"b": 1}))[0] >= 2 * (GIB + CUDA_CONTEXT_BYTES)


def test_oom_backoff_in_the_trial_raises_the_original_batch():
    packer, _, _ = make_packer()
    cfg = {"batch_size": 256}
    start(packer, "a", cfg)
    packer.result("a", cfg, {"gpu_memory_reserved_bytes": GIB}, used={"batch_size": 128})
    original = packer.memory.expect(memory_key(cfg))[0]
    assert original is not None and original > GIB + CUDA_CONTEXT_BYTES, "batch 256 did not fit: raised"
    assert packer.memory.expect(memory_key({"batch_size": 128}))[1] == "measured"


def test_state_round_trips_for_a_resume():
    packer, clock, _ = make_packer()
    start(packer, "a", {"b": 1})
    report(packer, "a", {"b": 1})
    saved = packer.state()
    again, _, _ = make_packer()
    again.restore(saved)
    assert again.phase == "climb" and again.level == packer.level and again.memory.peaks == packer.memory.peaks
    assert again.decisions["a"]["gpu_share"] == pytest.approx(0.2499)
    assert again.allowed() == 4, "a resumed experiment does not probe again"


def test_the_plan_says_how_auto_will_pack():
    lines = describe_auto(GpuAuto(), 2, 1, 16, [GpuMemory(141 * GIB, 140 * GIB)], "NVML")
    assert "[4, 8] trials per GPU" in lines[0] and "16 CPUs per GPU / 2 per trial" in lines[0]
    assert "1 GPU(s) of 141.00 GiB" in lines[1] and "+ 25%" in lines[1]
    from tuner.resources.gpu_packing import cluster_shape

    cluster = ClusterResources(48, 4, "a cluster", nodes=((32, 2), (16, 2), (8, 0)))
    assert cluster_shape(cluster) == (4, 8.0, 2)


def test_a_configured_probe_share_starts_several_trials_unmeasured():
    packer, _, _ = make_packer(probe_share=0.25)
    assert packer.allowed() == 4
    first = start(packer, "a", {"b": 1})
    assert first.share == 0.25 and first.reason.startswith("probe_share 0.25") and not first.probe
    report(packer, "a", {"b": 1})
    assert packer.phase == "climb"


def test_nvml_is_read_only_where_the_cluster_is_this_machine(monkeypatch):
    """README: on a local Ray, the GPUs' free memory is read (NVML, here its stand-in reader) before more trials
    start; on a cluster of several nodes this machine's GPUs are not the trials', so nothing is read, in the plan
    either, and the trials' reports give the GPU memory."""
    from tuner.resources.gpu_packing import packer_for
    from tuner.resources.sizing import describe_resources
    from tuner.spec import load_spec

    calls = []
    monkeypatch.setattr("tests.gpu_readers.roomy", lambda: calls.append(1) or [GpuMemory(16 * 2**30, 15 * 2**30)])
    monkeypatch.setenv("TUNER_GPU_MEMORY_READER", "tests.gpu_readers:roomy")
    spec = load_spec({"trainable": "a.b:c", "resources": {"cpu": 1, "gpu": "auto"}})
    local = packer_for(spec, ClusterResources(4, 1))
    assert local.gpu_memory == [GpuMemory(16 * 2**30, 15 * 2**30)] and len(calls) == 1
    two_nodes = ClusterResources(8, 2, "the Ray cluster at h:6379 (2 nodes)", ((4, 1), (4, 1)))
    remote = packer_for(spec, two_nodes)
    assert remote.gpu_memory is None and remote.reader is None and len(calls) == 1
    assert remote.memory_source == "a cluster of 2 nodes: the GPU memory each trial reports"
    assert any("read from the trials' reports (each trial's report)" in line for line in describe_resources(spec, two_nodes))
    assert len(calls) == 1
