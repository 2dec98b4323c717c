"""Benchmark: a second experiment warm-started from a first, against a cold start (issue 17).

Objective: MF-Hartmann 6-D (:func:`benchmarks.workloads.mf_hartmann6`, mf-prior-bench's generator;
optimum -3.32237) with ``--max-t`` fidelity steps a trial (default 9), one report a step
(:func:`benchmarks.workloads.mfh6_objective`). For each seed and each method:

1. **first**: an experiment with ``--budget`` training iterations (default 270: 30 full trials'
   worth), seed ``s``;
2. **warm**: a second experiment with the same spec and budget, seed ``s + 1000``, and
   ``search.warm_start: [first]``;
3. **cold**: the same second experiment without ``warm_start``.

Methods (each a tuner spec run by ``tune_model`` on one local Ray session, 1 CPU a trial, 2 at a
time): ``tpe+asha`` (Optuna's TPE with ASHA, grace period 1, reduction factor 3: the earlier trials
are added to the study), ``bohb`` (BOHB with its Hyperband, reduction factor 3: the earlier trials
are told to its model at the budget each reached) and ``random+asha`` (random search with ASHA:
the earlier 3 best trials run again first).

Budget: each step a trial runs is appended to a log shared by the experiment's trials, which
numbers it; the step past the budget raises, and ``failure.fail_fast`` ends the experiment.

Regret after b iterations: the true (full-fidelity, noiseless) value of the trial tuner would
return had the experiment stopped there (the trial whose latest reported value is the best),
minus the optimum (:func:`benchmarks.search_efficiency.regret_curve`). The target of a seed is
the first experiment's regret at its whole budget; the figure is the number of its own
iterations the second experiment needs to reach it (warm against cold; "never" when the budget
ends first). Medians over ``--seeds`` seeds.

    python benchmarks/warm_start.py --seeds 5 --budget 270 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a result.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (add_budget_options, budget_runs, parse_budget_args, machine_line, median,
                                run_on_local_ray, write_section)
from benchmarks.search_efficiency import regret_curve
from benchmarks.workloads import OBJECTIVES, read_budget_file

HEADING = "Warm start: a second experiment from a first (`benchmarks/warm_start.py`)"
OPTIMUM = OBJECTIVES["mfh6"].optimum
ASHA = {"type": "asha", "grace_period": 1, "reduction_factor": 3}
METHODS = {
    "tpe+asha": ({"algorithm": "optuna"}, ASHA),
    "bohb": ({"algorithm": "bohb"}, {"type": "bohb", "reduction_factor": 3}),
    "random+asha": ({"algorithm": "random"}, ASHA),
}
ROLES = ("first", "warm", "cold")


def run_one(method: str, role: str, seed: int, args, storage: Path) -> dict:
    """One experiment: ``first`` (seed), or the second one ``warm`` (from ``first``) or ``cold`` (seed + 1000)."""
    from tuner import tune_model

    search, scheduler = METHODS[method]
    search = dict(search)
    name = f"{method.replace('+', '_')}_{seed}_{role}"
    log = storage / f"{name}.steps"
    if role == "warm":
        search["warm_start"] = [str(storage / f"{method.replace('+', '_')}_{seed}_first")]
    pause = []
    if scheduler["type"] == "bohb":
        from benchmarks.search_efficiency import pause_points

        pause = pause_points(search, scheduler, args.max_t)
    spec = {
        "name": name, "trainable": "benchmarks.workloads:mfh6_objective", "metric": "loss", "mode": "min",
        "num_samples": args.budget + 1,  # more trials than the budget can use: the budget ends the experiment
        "seed": seed if role == "first" else seed + 1000,
        "stop": {"training_iteration": args.max_t},
        "param_space": {**OBJECTIVES["mfh6"].param_space, "max_t": args.max_t, "budget_file": str(log),
                        "budget": args.budget, "checkpoint_at": pause},
        "search": search, "scheduler": {**scheduler, "max_t": args.max_t},
        "reporting": {"cli": False, "tensorboard": False}, "failure": {"fail_fast": True},
        "checkpoint": {"num_to_keep": 1}, "storage": str(storage),
    }
    start = time.perf_counter()
    ray_error = None
    try:
        tune_model(spec)
    except RuntimeError as err:  # Ray 2.60's ResultGrid over a PENDING trial (see search_efficiency.py)
        if "trial_dir_name" not in str(err):
            raise
        ray_error = str(err)
    steps = read_budget_file(str(log))[:args.budget]
    return {"method": method, "role": role, "seed": seed, "seconds": time.perf_counter() - start,
            "trials": len({s[0] for s in steps}), "steps": [(s[0], s[2], s[3]) for s in steps],
            "ray_error": ray_error}


def _run_all(args, methods) -> tuple[list[dict], float]:
    def job(method, seed, role):
        def run(tmp: Path):
            r = run_one(method, role, seed, args, tmp)
            return r, (f"{method:12s} seed {seed} {role:5s}: {len(r['steps'])}/{args.budget} steps, "
                       f"{r['trials']} trials, {r['seconds']:.1f} s")
        return run

    return run_on_local_ray(args.num_cpus, "tuner-bench-warm-",
                            (job(m, seed, role) for seed in range(args.seeds) for m in methods for role in ROLES))


def iterations_to(curve: list[float], target: float) -> float:
    """The first iteration (1-based) at which the regret is at most ``target``; inf if never."""
    for i, r in enumerate(curve, 1):
        if r <= target + 1e-12:
            return float(i)
    return math.inf


def _show(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.0f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_budget_options(parser, seeds=5, budget=270, max_t=9, methods=METHODS, per="method", logs="step log")
    args, methods = parse_budget_args(parser, argv, METHODS)
    runs, total_s, load_before, load_after, version = budget_runs(args, lambda: _run_all(args, methods))

    rows, summary = [], []
    for method in methods:
        warm_to, cold_to, first_reg, warm_reg, cold_reg = [], [], [], [], []
        for seed in range(args.seeds):
            got = {r["role"]: r for r in runs if r["method"] == method and r["seed"] == seed}
            if set(got) != set(ROLES):
                continue
            curves = {role: regret_curve(got[role]["steps"], OPTIMUM, args.budget) for role in ROLES}
            target = curves["first"][-1]
            w, c = iterations_to(curves["warm"], target), iterations_to(curves["cold"], target)
            warm_to.append(w)
            cold_to.append(c)
            first_reg.append(target)
            warm_reg.append(curves["warm"][-1])
            cold_reg.append(curves["cold"][-1])
            rows.append(f"| {method} | {seed} | {target:.4f} | {_show(w)} | {_show(c)} | {curves['warm'][-1]:.4f} | "
                        f"{curves['cold'][-1]:.4f} | {got['warm']['trials']} / {got['cold']['trials']} |")
        if not warm_to:
            continue
        mw, mc = median(warm_to), median(cold_to)
        fewer = sum(w < c for w, c in zip(warm_to, cold_to))
        ratio = f"{mw / mc:.2f}" if math.isfinite(mw) and math.isfinite(mc) and mc > 0 else "-"
        summary.append(f"| {method} | {median(first_reg):.4f} | {_show(mw)} | {_show(mc)} | {ratio} | "
                       f"{fewer}/{len(warm_to)} | {sum(math.isfinite(w) for w in warm_to)}/{len(warm_to)} | "
                       f"{sum(math.isfinite(c) for c in cold_to)}/{len(cold_to)} | {median(warm_reg):.4f} | "
                       f"{median(cold_reg):.4f} |")

    body = "\n".join([
        machine_line(load_before, load_after, version),
        f"Command: `python benchmarks/warm_start.py --seeds {args.seeds} --budget {args.budget} --max-t {args.max_t}`"
        f"; {len(runs)} experiments in {total_s / 60:.1f} min on one local Ray with {args.num_cpus} CPUs (1 CPU a "
        f"trial). Budget: {args.budget} training iterations per experiment ({args.budget // args.max_t} full trials' "
        "worth).",
        "",
        f"Problem: MF-Hartmann 6-D, {args.max_t} fidelity steps a trial, optimum {OPTIMUM}. Per seed, a first "
        "experiment (seed s), then a second one (seed s + 1000) warm-started from it (`search.warm_start: [first]`) "
        "and the same second one cold. Target: the first experiment's regret at its whole budget. \"Iterations to "
        "the target\": the second experiment's own iterations until the trial tuner would return has at most that "
        "regret (true full-fidelity value minus the optimum); \"never\": not within its budget.",
        "",
        "| method | target regret (median) | warm: iterations to it (median) | cold: iterations to it (median) | "
        "warm / cold | warm needed fewer | warm reached it | cold reached it | warm final regret | "
        "cold final regret |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *summary,
        "",
        "Per seed:",
        "",
        "| method | seed | target regret | warm: iterations to it | cold: iterations to it | warm final regret | "
        "cold final regret | trials warm / cold |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])
    write_section(args.output, HEADING, body)


if __name__ == "__main__":
    main()
