"""``resources.gpu: auto`` end to end: ``tuner run`` in a subprocess on Ray's logical GPUs, each trial reporting a
simulated GPU footprint (tests.trainables:gpu_footprint), the GPUs' memory from a simulated reader
(tests/gpu_readers.py in place of NVML). tests/test_gpu_packing.py checks the policy rule by rule."""

from __future__ import annotations

import json

import pandas as pd
import yaml

GIB = 2**30


def _spec(tmp_path, name: str, samples: int, epochs: int, **params) -> dict:
    return {"name": name, "trainable": "tests.trainables:gpu_footprint", "metric": "loss", "mode": "min",
            "num_samples": samples, "seed": 0, "storage": str(tmp_path / "runs"),
            "param_space": {"x": {"type": "uniform", "low": 0, "high": 1},
                            "batch_size": {"type": "choice", "values": [32, 64]},
                            "bytes_per_sample": 16 * 2**20, "gpu_bytes": 16 * GIB, "epochs": epochs,
                            "log": str(tmp_path / f"{name}.log"), **params},
            "search": {"algorithm": "random"}, "scheduler": {"type": "fifo"},
            "resources": {"cpu": 0.25, "gpu": "auto"}, "reporting": {"tensorboard": False}}


def _events(path) -> dict[str, dict[str, list[float]]]:
    """Each trial's ``start`` and ``report`` times from the trainable's log."""
    out: dict[str, dict[str, list[float]]] = {}
    for line in path.read_text().splitlines():
        event, t, trial_id = line.split()
        out.setdefault(trial_id, {}).setdefault(event, []).append(float(t))
    return out


def test_gpu_auto_probes_packs_records_each_share_and_retries_an_oom_with_more(tmp_path, run_cli):
    """The first trial runs alone until its first result; every trial's share and reason reach results.csv,
    summary.json and gpu_packing.json; a trial that runs out of GPU memory (here: one below 0.25 of the GPU, once:
    the probe, which asks for 0.2499) is retried with a raised expectation and a larger share, and finishes. After
    the probe's first result the 4 trials run at once on the one logical GPU (README: "the trials then run 4 at
    once"; each waits after its first report until all 4 have started, or fails after 10 minutes). A `tuner
    resume` with 2 trials more goes on from gpu_packing.json without probing again."""
    together = tmp_path / "together"
    together.write_text("4")
    spec = _spec(tmp_path, "auto", samples=4, epochs=2, oom_share_below=0.25, oom_once_dir=str(tmp_path),
                 together_file=str(together))
    spec["failure"] = {"max_failures": 1}
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = run_cli("run", path, "--num-cpus", "2", "--num-gpus", "1", timeout=600,
                   env={"TUNER_GPU_MEMORY_READER": "tests.gpu_readers:roomy"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = tmp_path / "runs" / "auto"
    table = pd.read_csv(exp / "results.csv")
    assert list(table["status"]) == ["TERMINATED"] * 4
    assert table["gpu_share"].notna().all() and table["gpu_share_reason"].notna().all()
    packing = json.loads((exp / "gpu_packing.json").read_text())
    summary = json.loads((exp / "summary.json").read_text())
    assert set(summary["gpu_packing"]["trials"]) == set(table["trial_id"])
    probes = [i for i, d in packing["decisions"].items() if d.get("probe")]
    assert len(probes) == 1, packing["decisions"]
    events = _events(tmp_path / "auto.log")
    probe_id = next(i for i in events if i.endswith(probes[0].split("_")[-1]))
    first_report = min(events[probe_id]["report"])
    others = [min(e["start"]) for i, e in events.items() if i != probe_id]
    assert all(t > first_report for t in others), "a trial started before the probe's first result"
    # The probe ran out of memory once at 0.2499 of the GPU and was retried with a larger share.
    assert [i for i, d in packing["decisions"].items() if d.get("out_of_memory")] == probes
    probe_row = table[table["trial_id"] == probes[0]].iloc[0]
    assert probe_row["share_seen"] >= 0.5 and probe_row["gpu_share_reason"].startswith("out of GPU memory")
    assert (table["share_seen"] >= 0.25).all() and (table["share_seen"] == table["gpu_share"]).all()
    assert "tuner: note: gpu auto:" in proc.stderr
    # summary.json's gpu_packing has the levels tried and the memory learned, as gpu_packing.json has them. The
    # memory is kept per memory key, the config's values that are not floats (the batch size; x is a float).
    gpu = summary["gpu_packing"]
    assert gpu["levels"] == packing["levels"] and gpu["memory"] == packing["memory"] and packing["memory"]
    assert packing["levels"][0]["reason"].startswith("after the probe: ") and packing["levels"][0]["per_gpu"] == 4
    for entry in packing["memory"]:
        assert entry["key"]["batch_size"] in (32, 64) and not {"x", "oom_share_below"} & set(entry["key"]), entry
        assert entry["expected_bytes"] > 0
    assert len(list((tmp_path / "together.d").iterdir())) == 4, "the 4 trials ran at once"
    # `tuner resume` with 2 trials more (the budget may grow) goes on from gpu_packing.json: no new probe, the
    # new trials get their shares from the start, and the earlier decisions are kept. (They do not wait: their
    # share may be the probe's raised one, which fits one at a time.)
    together.unlink()
    spec["num_samples"] = 6
    more = tmp_path / "auto6.yaml"
    more.write_text(yaml.safe_dump(spec))
    resumed = run_cli("resume", exp, "--spec", more, "--num-cpus", "2", "--num-gpus", "1", timeout=600,
                      env={"TUNER_GPU_MEMORY_READER": "tests.gpu_readers:roomy"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads((exp / "gpu_packing.json").read_text())
    new = set(after["decisions"]) - set(packing["decisions"])
    assert len(new) == 2 and not [i for i, d in after["decisions"].items() if d.get("probe") and i not in probes], \
        after["decisions"]
    # each from what the first run learned (the level, or the memory measured for its batch size), not a whole GPU
    assert all(not after["decisions"][i]["probe"] and after["decisions"][i]["gpu_share"] < 1 and
               after["decisions"][i]["reason"].startswith(("level ", "memory: ")) for i in new), after["decisions"]
    assert {i: after["decisions"][i] for i in packing["decisions"]} == packing["decisions"]
    assert list(pd.read_csv(exp / "results.csv")["status"]) == ["TERMINATED"] * 6


def test_gpu_auto_on_a_full_gpu_runs_one_trial_at_a_time(tmp_path, run_cli):
    """A GPU whose memory reads as full (another process holds it): the trials still run, one at a time with a
    whole GPU, and the console says why."""
    spec = _spec(tmp_path, "full", samples=2, epochs=2)
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = run_cli("run", path, "--num-cpus", "2", "--num-gpus", "1", timeout=600,
                   env={"TUNER_GPU_MEMORY_READER": "tests.gpu_readers:full"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "running one trial at a time with a whole GPU" in proc.stderr
    spans = sorted((min(e["start"]), max(e["report"])) for e in _events(tmp_path / "full.log").values())
    assert len(spans) == 2 and all(a[1] < b[0] for a, b in zip(spans, spans[1:])), f"trials overlapped: {spans}"
    table = pd.read_csv(tmp_path / "runs" / "full" / "results.csv")
    assert (table["status"] == "TERMINATED").all()


def test_gpu_auto_plan_and_refusal_before_anything_starts(tmp_path, run_cli, make_spec):
    """`tuner validate` says how auto will pack (and that the GPU memory could not be read); on a machine
    without a GPU it refuses with exit 2, starting nothing."""
    spec = make_spec(file="s.yaml", resources={"cpu": 2, "gpu": "auto"})
    plan = run_cli("validate", spec, "--num-cpus", "16", "--num-gpus", "1",
                   env={"TUNER_GPU_MEMORY_READER": "tests.gpu_readers:broken", "RAY_TMPDIR": str(tmp_path / "ray")})
    assert plan.returncode == 0, plan.stderr
    assert "gpu auto:   the first trial alone until its first result (probe); then [4, 8] trials per GPU" in plan.stdout
    assert "could not be read (RuntimeError" in plan.stdout
    refused = run_cli("validate", spec, "--num-gpus", "0", env={"RAY_TMPDIR": str(tmp_path / "ray")})
    assert refused.returncode == 2 and "gpu: auto packs trials onto GPUs, but this machine" in \
        refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "ray").exists(), "Ray started"
