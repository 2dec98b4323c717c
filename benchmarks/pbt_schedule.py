"""Benchmark: what PBT and PB2 buy when the best hyperparameter changes during training.

The objective is Ray Tune's PBT toy (``ray/tune/examples/pbt_function.py``), made
deterministic (:func:`benchmarks.workloads.schedule_objective`): the accuracy grows fastest
at a learning rate that itself depends on the accuracy (a triangle, 0.001 -> 0.01 ->
0.001), so no fixed learning rate follows it and a trial with one stalls. Four methods,
each a tuner spec run by ``tune_model`` on one local Ray session, with the same budget of
training iterations (``--population`` x ``--max-t``) and the same search space (``lr``
log-uniform in [1e-4, 2e-2]):

* ``random+fifo``: ``--population`` random learning rates, each trained ``--max-t`` steps;
* ``random+asha``: random learning rates under ASHA (grace period 5, reduction factor 3),
  as many trials as the budget allows (the step past the budget ends the experiment);
* ``pbt``: Population Based Training (Jaderberg et al. 2017; Ray's
  ``PopulationBasedTraining``), a population of ``--population``, perturbation interval 5,
  ``lr`` mutated log-uniformly;
* ``pb2``: PB2 (Parker-Holder et al., NeurIPS 2020; Ray's ``PB2``), the same population
  and interval, ``lr`` bounded by [1e-4, 2e-2].

Score: the accuracy of the trial tuner would return when the budget is spent (the best
last-reported accuracy), over ``--seeds`` seeds: median and range. The oracle schedule
(the best learning rate at every step) reaches about ``--max-t``.

    python benchmarks/pbt_schedule.py --seeds 5 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a result.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import load_average, local_ray, machine_line, write_section
from benchmarks.workloads import (
    SCHEDULE_LR_BOUNDS, read_budget_file, schedule_optimal_lr, schedule_step)

HEADING = "PBT and PB2: a schedule, not a configuration (`benchmarks/pbt_schedule.py`)"
LR = {"type": "loguniform", "low": SCHEDULE_LR_BOUNDS[0], "high": SCHEDULE_LR_BOUNDS[1]}
INTERVAL = 5
METHODS = ("random+fifo", "random+asha", "pbt", "pb2")


def spec_for(method: str, seed: int, population: int, max_t: int, log: Path, storage: Path) -> dict:
    """The tuner spec of one experiment (a dict, as ``tune_model`` takes it)."""
    budget = population * max_t
    scheduler: dict = {"type": "fifo"}
    samples = population
    if method == "random+asha":
        scheduler = {"type": "asha", "max_t": max_t, "grace_period": INTERVAL, "reduction_factor": 3}
        samples = budget  # more than the budget can use: the budget ends the experiment
    elif method == "pbt":
        scheduler = {"type": "pbt", "perturbation_interval": INTERVAL, "quantile_fraction": 0.25,
                     "resample_probability": 0.25, "mutations": {"lr": LR}}
    elif method == "pb2":
        scheduler = {"type": "pb2", "perturbation_interval": INTERVAL, "quantile_fraction": 0.25,
                     "bounds": {"lr": list(SCHEDULE_LR_BOUNDS)}}
    return {
        "name": f"{method.replace('+', '_')}_{seed}",
        "trainable": "benchmarks.workloads:schedule_objective",
        "metric": "accuracy",
        "mode": "max",
        "num_samples": samples,
        "seed": seed,
        "stop": {"training_iteration": max_t},
        "param_space": {"lr": LR, "max_t": max_t, "seed": seed, "budget_file": str(log), "budget": budget},
        "search": {"algorithm": "random"},
        "scheduler": scheduler,
        "resources": {"cpu": 1},
        "reporting": {"cli": False, "tensorboard": False},
        "failure": {"fail_fast": method == "random+asha"},
        "checkpoint": {"num_to_keep": 2},
        "storage": str(storage),
    }


def run_one(method: str, seed: int, population: int, max_t: int, storage: Path) -> dict:
    """Run one experiment; return its score, trials, steps and seconds."""
    from tuner import tune_model

    log = storage / f"{method}_{seed}.steps"
    spec = spec_for(method, seed, population, max_t, log, storage)
    start = time.perf_counter()
    ray_error = None
    try:
        tune_model(spec)
    except RuntimeError as err:  # the budget stop (fail_fast) with a trial never started: see search_efficiency.py
        if "trial_dir_name" not in str(err):
            raise
        ray_error = str(err)
    except Exception as err:
        if method != "random+asha":
            raise
        ray_error = f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - start
    steps = read_budget_file(str(log))[:population * max_t]
    last: dict[str, float] = {}
    for trial_id, _, _, accuracy in steps:
        last[trial_id] = accuracy
    return {"method": method, "seed": seed, "score": max(last.values(), default=0.0), "trials": len(last),
            "steps": len(steps), "seconds": seconds, "ray_error": ray_error}


def oracle(max_t: int) -> float:
    """The accuracy of the best schedule (the best learning rate at every step, noise at its mean)."""
    accuracy = 0.0
    for _ in range(max_t):
        accuracy = schedule_step(accuracy, schedule_optimal_lr(accuracy), 1.0)
    return accuracy


def best_fixed(max_t: int) -> tuple[float, float]:
    """The best fixed learning rate on a fine log grid, and its accuracy (noise at its mean)."""
    import numpy as np

    best = (0.0, 0.0)
    for lr in np.geomspace(*SCHEDULE_LR_BOUNDS, 400):
        accuracy = 0.0
        for _ in range(max_t):
            accuracy = schedule_step(accuracy, float(lr), 1.0)
        best = max(best, (accuracy, float(lr)))
    return best[1], best[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--population", type=int, default=8, help="PBT's population; the budget is population x max_t")
    parser.add_argument("--max-t", type=int, default=60, help="steps per trial (default 60)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {list(METHODS)}")

    from benchmarks._common import code_version

    load_before = load_average()
    started = time.perf_counter()
    runs = []
    with local_ray(args.num_cpus), tempfile.TemporaryDirectory(prefix="tuner-bench-pbt-") as tmp:
        for seed in range(args.seeds):
            for method in methods:
                r = run_one(method, seed, args.population, args.max_t, Path(tmp))
                runs.append(r)
                print(json.dumps(r), flush=True)
    total_s = time.perf_counter() - started

    fixed_lr, fixed_acc = best_fixed(args.max_t)
    rows = []
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        scores = [r["score"] for r in mine]
        rows.append(f"| {method} | {statistics.median(scores):.1f} | {min(scores):.1f} – {max(scores):.1f} | "
                    f"{statistics.median(r['trials'] for r in mine):.0f} | "
                    f"{statistics.median(r['steps'] for r in mine):.0f} | "
                    f"{statistics.median(r['seconds'] for r in mine):.1f} |")
    budget = args.population * args.max_t
    lines = [
        machine_line(load_before, None, code_version()),
        f"Command: `python benchmarks/pbt_schedule.py --seeds {args.seeds} --population {args.population} "
        f"--max-t {args.max_t}`; {len(runs)} experiments in {total_s / 60:.1f} min on one local Ray with "
        f"{args.num_cpus} CPUs (1 CPU a trial). Budget: {budget} training iterations per experiment "
        f"({args.population} x {args.max_t}); perturbation interval {INTERVAL}, quantile fraction 0.25.",
        "",
        f"Score: the best last-reported accuracy when the budget is spent (what tuner returns as the best "
        f"trial), over {args.seeds} seeds. For scale: the oracle schedule (the best learning rate at every "
        f"step) reaches {oracle(args.max_t):.1f}; the best fixed learning rate ({fixed_lr:.2g}, found on a "
        f"fine grid) reaches {fixed_acc:.1f} (both with the noise at its mean).",
        "",
        "| method | median score | range | trials | iterations used | s / experiment |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    lines += ["", "Every method stops at the budget: a PBT or PB2 clone that restarts from a checkpoint behind its "
              "own iteration trains those iterations again, so some of their trials end on the budget stop "
              "(BudgetExhausted in TuneResult.errors) before max_t."]
    crashed = [r for r in runs if r.get("ray_error")]
    if crashed:
        lines += ["", f"{len(crashed)} of {len(runs)} experiments ended on the budget stop with an error "
                  "(ASHA's, by design); their step logs are complete and are counted."]
    write_section(args.output, HEADING, "\n".join(lines))


if __name__ == "__main__":
    main()
