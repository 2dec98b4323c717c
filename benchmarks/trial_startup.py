"""Per-trial start-up cost: single-process trials against DDP trials (Ray Train), with and
without actor reuse.

Each configuration runs N trials of a train function that does no work and reports once,
2 trials at a time where they fit, on a local Ray with ``--num-cpus`` CPUs. Wall time
divided by the number of trials (and by the trials that can run at once) is the
start-up cost a trial pays before its first result.

    python benchmarks/trial_startup.py --trials 8 --num-cpus 2 --output docs/benchmarks.md

Writes a Markdown table (appended under its own heading in --output) and prints it.
This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def noop(config):
    """A train function that does no work: one report."""
    from tuner import trial

    trial.report({"loss": float(config.get("x", 0.0))})


def run_once(resources: dict, trials: int, reuse: bool, storage: str, name: str) -> float:
    """Wall seconds of one tune_model run of ``trials`` no-op trials."""
    from tuner.engine import prepare, run_prepared

    spec = {
        "name": name,
        "trainable": "benchmarks.trial_startup:noop",
        "num_samples": trials,
        "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}},
        "resources": resources,
        "reporting": {"cli": False, "tensorboard": False},
        "storage": storage,
    }
    prepared = prepare(spec)
    os.environ["TUNER_REUSE_ACTORS"] = "1" if reuse else "0"
    start = time.perf_counter()
    run_prepared(prepared)
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="trials per configuration (default 8)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration; the median is kept")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to append the table to")
    parser.add_argument("--skip-ddp", action="store_true", help="single-process trials only (a quick check)")
    args = parser.parse_args(argv)

    import ray

    from benchmarks._common import start_local_ray

    start_local_ray(args.num_cpus)
    configs = [
        ("single process, 1 CPU", {"cpu": 1}, False),
        ("single process, 1 CPU", {"cpu": 1}, True),
        ("DDP, 1 worker x 1 CPU (gloo)", {"workers": 1, "cpu_per_worker": 1}, False),
        ("DDP, 1 worker x 1 CPU (gloo)", {"workers": 1, "cpu_per_worker": 1}, True),
        ("DDP, 2 workers x 1 CPU (gloo)", {"workers": 2, "cpu_per_worker": 1}, True),
    ]
    if args.skip_ddp:
        configs = [c for c in configs if "workers" not in c[1]]
    rows = []
    with tempfile.TemporaryDirectory() as storage:
        for i, (label, resources, reuse) in enumerate(configs):
            times = [run_once(resources, args.trials, reuse, storage, f"b{i}_{r}") for r in range(args.repeats)]
            wall = statistics.median(times)
            total_cpu = resources.get("cpu", resources.get("workers", 1) * resources.get("cpu_per_worker", 1))
            at_once = max(1, int(args.num_cpus // total_cpu))
            rows.append((label, "on" if reuse else "off", args.trials, at_once, wall, wall / args.trials,
                         wall * at_once / args.trials))
            print(f"{label:32s} reuse={'on ' if reuse else 'off'} wall={wall:7.2f} s "
                  f"per trial={wall / args.trials:6.2f} s", flush=True)
    ray.shutdown()

    import ray as _ray
    import torch

    lines = [
        "## Per-trial start-up cost (`benchmarks/trial_startup.py`)",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, no GPU; "
        f"Python {platform.python_version()}, Ray {_ray.__version__}, torch {torch.__version__}. "
        f"Command: `python benchmarks/trial_startup.py --trials {args.trials} --num-cpus {args.num_cpus}`.",
        "",
        "| trial | actor reuse | trials | at once | wall (s) | wall / trial (s) | start-up per trial (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, reuse, n, at_once, wall, per, startup in rows:
        lines.append(f"| {label} | {reuse} | {n} | {at_once} | {wall:.1f} | {per:.2f} | {startup:.2f} |")
    lines.append("")
    lines.append("Start-up per trial = wall x trials at once / trials: the seconds one trial slot spends "
                 "before its first result, for a train function that does no work.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with args.output.open("a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
