"""The budget forecast (tuner.search.forecast) against real Ray runs: trial-iterations forecast
for ASHA and Hyperband against the sum over trials of their last ``training_iteration``.

Each configuration runs ``--trials`` trials of a toy train function (a loss curve that
falls with the epochs toward a level set by ``x``; it checkpoints every epoch, so that
Hyperband's paused trials resume where they stopped) on a local Ray with ``--num-cpus``
CPUs, for each seed.

    python benchmarks/forecast.py --trials 64 --seeds 3 --main-job 3 --output docs/benchmarks.md

``--main-job N`` also runs the main job (search_spaces/mnist_asha.yaml) N times as it is.

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


def run_once(spec: dict, storage: str, name: str) -> tuple[object, int]:
    """``(forecast at the trials that fit the local Ray, used trial-iterations)`` of one run of ``spec``."""
    from tuner.run.engine import run_prepared
    from tuner.run.prepare import prepare
    from tuner.search.forecast import forecast, trials_at_once
    from tuner.search.space import grid_size

    prepared = prepare({**spec, "name": name, "storage": storage})
    trials = grid_size(prepared.spec) * prepared.spec.num_samples
    fc = forecast(prepared.spec, trials, trials_at_once(prepared.spec, prepared.cluster, trials))
    result = run_prepared(prepared)
    used = int(result.dataframe["training_iteration"].sum())
    return fc, used


def toy_spec(scheduler: dict, trials: int, max_t: int, seed: int) -> dict:
    """The toy experiment of one row: ``trials`` trials of :func:`curve` for ``max_t`` epochs."""
    return {
        "trainable": "benchmarks.forecast:curve", "metric": "loss", "mode": "min",
        "num_samples": trials, "seed": seed, "scheduler": scheduler,
        "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": max_t},
        "reporting": {"cli": False, "tensorboard": False},
    }


def main_job_spec() -> dict:
    """The main job (search_spaces/mnist_asha.yaml) as a new user runs it, without console table or TensorBoard."""
    from tuner.spec import parse_yaml

    spec, _ = parse_yaml((ROOT / "search_spaces" / "mnist_asha.yaml").read_text())
    return {**spec, "reporting": {"cli": False, "tensorboard": False}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=64, help="trials per run (default 64)")
    parser.add_argument("--max-t", type=int, default=27, help="max_t and epochs (default 27)")
    parser.add_argument("--seeds", type=int, default=3, help="runs per scheduler, seeds 0..N-1 (default 3)")
    parser.add_argument("--main-job", type=int, default=0, metavar="N",
                        help="also run search_spaces/mnist_asha.yaml N times, as it is (default 0: not)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file whose section to replace")
    args = parser.parse_args(argv)

    import ray

    from benchmarks._common import load_average, machine_line, start_local_ray, write_section

    load_before = load_average()
    start_local_ray(args.num_cpus)
    rows = []
    began = time.perf_counter()
    jobs = [(label, [toy_spec(scheduler, args.trials, args.max_t, seed) for seed in range(args.seeds)])
            for label, scheduler in configs(args.max_t) if args.seeds]  # --seeds 0: the main job alone
    if args.main_job:
        jobs.append(("main job (search_spaces/mnist_asha.yaml)", [main_job_spec()] * args.main_job))
    with tempfile.TemporaryDirectory() as storage:
        for i, (label, specs) in enumerate(jobs):
            runs = [run_once(spec, storage, f"f{i}_{k}") for k, spec in enumerate(specs)]
            fc, used = runs[0][0], [u for _, u in runs]
            rows.append((label, fc, used))
            print(f"{label:42s} forecast {fc.expected_total:8.1f} used {used}", flush=True)
    total = time.perf_counter() - began
    ray.shutdown()
    lines = [
        machine_line(load_before),
        f"Command: `python benchmarks/forecast.py --trials {args.trials} --max-t {args.max_t} --seeds {args.seeds} "
        f"{f'--main-job {args.main_job} ' if args.main_job else ''}--num-cpus {args.num_cpus}` ({total:.0f} s).",
        "",
        f"{args.trials} trials of a toy loss curve (`x + 1 / (epoch + 1)`, x uniform in [0, 1]), grace period 1, "
        "random search, one run per seed"
        + (f"; the main job {args.main_job} times as it is (its own seed, the spread from Ray's timing)"
           if args.main_job else "")
        + ". Used = the sum over trials of their last `training_iteration`. The forecast is `tuner validate`'s "
        "at the trials that fit the local Ray: for ASHA the median of its simulated runs, with their 10th to 90th "
        "percentile.",
        "",
        "| experiment | trials at once | max (trial-iterations) | forecast expected (10th-90th) | used (per run) "
        "| median used | forecast / median used |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, fc, used in rows:
        median = statistics.median(used)
        spread = "" if fc.expected_low is None else f" ({fc.expected_low:.0f}-{fc.expected_high:.0f})"
        ratio = fc.expected_total / median if median else float("nan")
        at_once = fc.at_once if fc.at_once is not None else "-"
        lines.append(f"| {label} | {at_once} | {fc.max_total:.0f} | {fc.expected_total:.1f}{spread} | "
                     f"{', '.join(map(str, used))} | {median:g} | {ratio:.2f} |")
    lines += [
        "",
        "Hyperband's count is Ray's bracket arithmetic, exact when no trial ends on its own. ASHA's is a seeded "
        "simulation of Ray's AsyncHyperBandScheduler (`tuner.search.forecast.simulate_asha`): a trial is compared at a "
        "rung with the trials recorded there before it, so the first trials at each rung go on, which the "
        "paper's rule (1/rf of the trials go on at each rung) leaves out.",
    ]
    write_section(args.output, HEADING, "\n".join(lines))


if __name__ == "__main__":
    main()
