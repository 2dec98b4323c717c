"""The budget forecast (tuner.forecast) against real Ray runs: trial-iterations forecast
for ASHA and Hyperband against the sum over trials of their last ``training_iteration``.

Each configuration runs ``--trials`` trials of a toy train function (a loss curve that
falls with the epochs toward a level set by ``x``; it checkpoints every epoch, so that
Hyperband's paused trials resume where they stopped) on a local Ray with ``--num-cpus``
CPUs, for each seed.

    python benchmarks/forecast.py --trials 64 --seeds 3 --output docs/benchmarks.md

Writes a Markdown section (replacing its own in --output) and prints it. A benchmark,
not a test: nothing here asserts a count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADING = "Budget forecast against real runs (`benchmarks/forecast.py`)"


def curve(config):
    """A loss curve ``x + 1 / (epoch + 1)`` with a checkpoint each epoch (no sleep)."""
    from tuner import trial

    start = 0
    ckpt = trial.get_checkpoint()
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            start = json.load(f)["epoch"] + 1
    for epoch in range(start, int(config["epochs"])):
        folder = None
        if trial.is_main_process():
            folder = tempfile.mkdtemp()
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1)}, checkpoint_dir=folder)


def configs(max_t: int) -> list[tuple[str, dict]]:
    """The schedulers compared: ``(label, scheduler section)``."""
    return [
        (f"asha, max_t {max_t}, rf 3, 1 bracket", {"type": "asha", "max_t": max_t, "reduction_factor": 3}),
        (f"asha, max_t {max_t}, rf 3, 3 brackets", {"type": "asha", "max_t": max_t, "reduction_factor": 3,
                                                     "brackets": 3}),
        (f"asha, max_t {max_t}, rf 2, 1 bracket", {"type": "asha", "max_t": max_t, "reduction_factor": 2}),
        (f"hyperband, max_t {max_t}, rf 3", {"type": "hyperband", "max_t": max_t, "reduction_factor": 3}),
    ]


def run_once(scheduler: dict, trials: int, max_t: int, seed: int, storage: str, name: str) -> tuple[float, int, float]:
    """``(forecast expected, used trial-iterations, forecast max)`` of one run."""
    from tuner.engine import prepare, run_prepared
    from tuner.forecast import forecast

    spec = {
        "name": name, "trainable": "benchmarks.forecast:curve", "metric": "loss", "mode": "min",
        "num_samples": trials, "seed": seed, "scheduler": scheduler,
        "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": max_t},
        "reporting": {"cli": False, "tensorboard": False}, "storage": storage,
    }
    prepared = prepare(spec)
    fc = forecast(prepared.spec)
    result = run_prepared(prepared)
    used = int(result.dataframe["training_iteration"].sum())
    return float(fc.expected_total or 0), used, float(fc.max_total or 0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=64, help="trials per run (default 64)")
    parser.add_argument("--max-t", type=int, default=27, help="max_t and epochs (default 27)")
    parser.add_argument("--seeds", type=int, default=3, help="runs per scheduler, seeds 0..N-1 (default 3)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file whose section to replace")
    args = parser.parse_args(argv)

    import ray

    from benchmarks._common import load_average, machine_line, start_local_ray, write_section

    load_before = load_average()
    start_local_ray(args.num_cpus)
    rows = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as storage:
        for i, (label, scheduler) in enumerate(configs(args.max_t)):
            runs = [run_once(scheduler, args.trials, args.max_t, seed, storage, f"f{i}_{seed}")
                    for seed in range(args.seeds)]
            expected, top = runs[0][0], runs[0][2]
            used = [u for _, u, _ in runs]
            rows.append((label, expected, top, used))
            print(f"{label:36s} forecast {expected:8.1f} used {used}", flush=True)
    total = time.perf_counter() - began
    ray.shutdown()
    lines = [
        machine_line(load_before),
        f"Command: `python benchmarks/forecast.py --trials {args.trials} --max-t {args.max_t} --seeds {args.seeds} "
        f"--num-cpus {args.num_cpus}` ({total:.0f} s).",
        "",
        f"{args.trials} trials of a toy loss curve (`x + 1 / (epoch + 1)`, x uniform in [0, 1]), grace period 1, "
        "random search; used = the sum over trials of their last `training_iteration`, one figure per seed.",
        "",
        "| scheduler | max (trial-iterations) | forecast expected | used (per seed) | median used / forecast |",
        "|---|---|---|---|---|",
    ]
    for label, expected, top, used in rows:
        ratio = statistics.median(used) / expected if expected else float("nan")
        lines.append(f"| {label} | {top:.0f} | {expected:.1f} | {', '.join(map(str, used))} | {ratio:.2f} |")
    lines += [
        "",
        "Hyperband's count is Ray's bracket arithmetic, exact when no trial ends on its own. ASHA's is the "
        "expectation under the paper's rule (1/rf of the trials that reach a rung go on); Ray promotes "
        "asynchronously, a trial going on when it is in the top 1/rf of those that reached the rung before "
        "it, so the first trials at each rung always go on and the count runs above the forecast, the more "
        "so the fewer trials.",
    ]
    write_section(args.output, HEADING, "\n".join(lines))


if __name__ == "__main__":
    main()
