"""Benchmark: several objectives at once, on ZDT1 as a multi-fidelity problem (issue 15).

The problem is ZDT1 (Zitzler, Deb & Thiele, Evolutionary Computation 8(2), 2000) with 6
variables in [0, 1] and both objectives minimised, as a trainable that reports ``f1`` and
``f2`` once per step for 9 steps (:func:`benchmarks.workloads.zdt1_objective`): ``f1 = x1``
at every step; ``f2`` is ZDT1's with ``g`` replaced by
``g_t = g + (1 - s) * (bias * (g - 1) + noise * |z|)``, ``s = log t / log 9``, bias 1, noise 1,
``z`` one normal draw per configuration and seed. At step 9 the values are the true ZDT1; before,
``f2`` is too high by an error that shrinks with every step and reorders configurations.

Methods, each a tuner spec (``metric: [f1, f2]``, ``mode: [min, min]``) run by ``tune_model``
on one local Ray session, 1 CPU a trial, 2 trials at a time:

* ``random``: random search, FIFO (every trial to step 9);
* ``tpe``: Optuna's multi-objective TPE (``search: {algorithm: optuna}``; Ozaki et al. 2020), FIFO;
* ``nsga2``: Optuna's NSGA-II (``sampler: nsga2``, ``population_size: 10``; Deb et al. 2002), FIFO;
* ``random+asha[f1]``, ``tpe+asha[f1]``: ASHA (grace period 1, reduction factor 3, max_t 9)
  ranking by ``f1`` (``scheduler.metric: f1``, the default: the first objective);
* ``random+asha[f2]``, ``tpe+asha[f2]``: the same ranking by ``f2`` (``scheduler.metric: f2``).

Budget: the same number of training iterations (reports) for every method, ``--budget``
(default 300). FIFO methods run ``budget // 9`` trials (297 iterations at the default). ASHA
methods get more trials than the budget can use; each step a trial runs is appended to a log
shared by the experiment's trials, which numbers it; the step past the budget raises, and
``failure.fail_fast`` ends the experiment there. The iterations used are reported.

Score: the hypervolume of the front that tuner returns, re-evaluated at full fidelity. The
front is computed as tuner computes it (:func:`tuner.search.pareto.pareto_front` on each trial's last
reported ``f1``, ``f2``; a trial ended by the budget stop is an errored trial, not on it). A
trial that ASHA stopped early reports low-fidelity values; what a user would do with it is
train that configuration to the end, so each front trial counts with the true ZDT1 of its
configuration (the re-training is not charged to the budget; the table says how many front
trials needed it). The hypervolume (:func:`tuner.search.pareto.hypervolume`) is measured up to the
reference point (1.1, 11): the worst values of ZDT1's objective space (f1 <= 1, f2 <= 10) moved
10 % of their range further out, the margin of ``tuner.search.pareto.reference_point``, so every
configuration counts. The true front's hypervolume there is 1.1 x 11 - 1/3 = 11.7667; the
table gives the gap to it (lower is better) as median and interquartile range over seeds.

    python benchmarks/multiobjective.py --seeds 5 --budget 300 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (ROOT, add_budget_options, budget_runs, parse_budget_args, have_matplotlib, machine_line,
                                run_on_local_ray, write_section)
from benchmarks.workloads import (ZDT1_BIAS, ZDT1_MAX_HYPERVOLUME, ZDT1_MAX_T, ZDT1_N, ZDT1_NOISE, ZDT1_RECORD_BYTES,
                                  ZDT1_REFERENCE, read_budget_records)

HEADING = "Several objectives: ZDT1 at an equal budget (`benchmarks/multiobjective.py`)"
OBJECTIVES = (("f1", "min"), ("f2", "min"))
POPULATION = 10


def _asha(metric: str) -> dict:
    return {"type": "asha", "grace_period": 1, "reduction_factor": 3, "metric": metric}


RANDOM = {"algorithm": "random"}
TPE = {"algorithm": "optuna", "sampler": "tpe"}
METHODS: dict[str, tuple[dict, dict]] = {
    "random": (RANDOM, {"type": "fifo"}),
    "tpe": (TPE, {"type": "fifo"}),
    "nsga2": ({"algorithm": "optuna", "sampler": "nsga2", "population_size": POPULATION}, {"type": "fifo"}),
    "random+asha[f1]": (RANDOM, _asha("f1")),
    "tpe+asha[f1]": (TPE, _asha("f1")),
    "random+asha[f2]": (RANDOM, _asha("f2")),
    "tpe+asha[f2]": (TPE, _asha("f2")),
}
BASELINE = "random"


def spec_for(method: str, seed: int, budget: int, max_t: int, log: Path, storage: Path) -> dict:
    """The tuner spec of one experiment (a dict, as ``tune_model`` takes it)."""
    search, scheduler = METHODS[method]
    scheduler = dict(scheduler)
    if scheduler["type"] == "fifo":
        samples = budget // max_t  # full-fidelity trials: the budget in whole trials
    else:
        scheduler["max_t"] = max_t
        samples = budget  # more than the budget can use: the budget ends the experiment
    return {
        "name": f"{method.replace('+', '_').replace('[', '_').replace(']', '')}_{seed}",
        "trainable": "benchmarks.workloads:zdt1_objective",
        "metric": [m for m, _ in OBJECTIVES],
        "mode": [d for _, d in OBJECTIVES],
        "num_samples": samples,
        "seed": seed,
        "stop": {"training_iteration": max_t},
        "param_space": {**{f"x{i}": {"type": "uniform", "low": 0.0, "high": 1.0} for i in range(1, ZDT1_N + 1)},
                        "max_t": max_t, "seed": seed, "budget_file": str(log), "budget": budget},
        "search": dict(search),
        "scheduler": scheduler,
        "resources": {"cpu": 1},
        "reporting": {"cli": False, "tensorboard": False},
        "failure": {"fail_fast": True},
        "storage": str(storage),
    }


def run_one(method: str, seed: int, budget: int, max_t: int, storage: Path) -> dict:
    """Run one experiment; return its step log, its seconds and tuner's own front (trial ids)."""
    from tuner import tune_model

    log = storage / f"{method}_{seed}.steps"
    spec = spec_for(method, seed, budget, max_t, log, storage)
    start = time.perf_counter()
    ray_error, tuner_front = None, None
    try:
        result = tune_model(spec)
    except RuntimeError as err:
        # Ray 2.60 builds its ResultGrid over every trial, and one still PENDING (never started)
        # when fail_fast ended the experiment makes it raise (see search_efficiency.py). The step
        # log, which is what this benchmark scores, is complete.
        if "trial_dir_name" not in str(err):
            raise
        ray_error = str(err)
    else:
        front = getattr(result, "pareto_front", None)  # TuneResult.pareto_front (issue 15)
        if front is not None:
            tuner_front = sorted(str(t["trial_id"]) for t in front)
    seconds = time.perf_counter() - start
    records = [(trial_id, step, *values) for trial_id, step, values in read_budget_records(str(log), ZDT1_RECORD_BYTES)]
    return {"method": method, "seed": seed, "seconds": seconds, "records": records, "tuner_front": tuner_front,
            "ray_error": ray_error}


def score(records: list, budget: int, max_t: int, upto: int | None = None) -> dict:
    """The front tuner returns after ``upto`` iterations (default: the whole budget), re-evaluated.

    Args:
        records: The experiment's step log in the order the steps ran: ``(trial_id, step, f1, f2,
            true_f1, true_f2)``, the reported values and the configuration's true ZDT1.
        budget: The experiment's budget in iterations; a trial with a step past it ended on the
            budget stop (an errored trial: not on the front).
        max_t: The last step (full fidelity).
        upto: Score the experiment as if it had stopped after this many iterations (a running
            trial counts with its latest values); the errored trials are only known at the end.

    Returns:
        ``hypervolume`` (the front's true values up to :data:`ZDT1_REFERENCE`), ``gap`` (to the
        true front's), ``front`` (trial ids), ``below_max_t`` (front trials whose last report was
        before ``max_t``: the ones a user trains again), ``trials``, ``iterations``.
    """
    from tuner.search.pareto import hypervolume, pareto_front

    end = budget if upto is None else min(upto, budget)
    stopped = {r[0] for r in records[budget:]} if upto is None else set()
    last: dict[str, tuple] = {}
    for r in records[:end]:
        last[r[0]] = r
    front = pareto_front(list(last), OBJECTIVES, result=lambda t: {"f1": last[t][2], "f2": last[t][3]},
                         status=lambda t: "ERROR" if t in stopped else "TERMINATED")
    hv = hypervolume([last[t][4:6] for t in front], OBJECTIVES, ZDT1_REFERENCE)
    return {"hypervolume": hv, "gap": ZDT1_MAX_HYPERVOLUME - hv, "front": sorted(front),
            "below_max_t": sum(1 for t in front if last[t][1] < max_t), "trials": len(last),
            "iterations": len(records[:end])}


def _quartiles(xs) -> tuple[float, float, float]:
    import numpy as np

    q1, q2, q3 = np.percentile(np.asarray(xs, dtype=float), [25, 50, 75])
    return float(q2), float(q1), float(q3)


def _run_all(args, methods) -> tuple[list[dict], float]:
    def job(method, seed):
        def run(tmp: Path):
            r = run_one(method, seed, args.budget, args.max_t, tmp)
            s = score(r["records"], args.budget, args.max_t)
            return r, (f"{method:16s} seed {seed}: {s['iterations']}/{args.budget} iterations, {s['trials']} "
                       f"trials, front {len(s['front'])}, hypervolume {s['hypervolume']:.4f}, {r['seconds']:.1f} s")
        return run

    jobs = (job(m, seed) for seed in range(args.seeds) for m in methods)
    return run_on_local_ray(args.num_cpus, "tuner-bench-mo-", jobs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_budget_options(parser, seeds=5, budget=300, max_t=ZDT1_MAX_T, methods=METHODS, per="method",
                       logs="step log")
    args, methods = parse_budget_args(parser, argv, METHODS)

    runs, total_s, load_before, load_after, version = budget_runs(args, lambda: _run_all(args, methods))
    runs = [r for r in runs if r["method"] in methods]

    import numpy as np

    points = np.unique(np.linspace(args.max_t, args.budget, 30).astype(int))
    rows, curves = [], {}
    medians: dict[str, float] = {}
    mismatched = 0
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        scores = [score(r["records"], args.budget, args.max_t) for r in mine]
        for r, s in zip(mine, scores):
            if r.get("tuner_front") is not None and r["tuner_front"] != s["front"]:
                mismatched += 1
        gap, gap_lo, gap_hi = _quartiles([s["gap"] for s in scores])
        hv, hv_lo, hv_hi = _quartiles([s["hypervolume"] for s in scores])
        third, third_lo, third_hi = _quartiles(
            [score(r["records"], args.budget, args.max_t, upto=args.budget // 3)["gap"] for r in mine])
        medians[method] = gap
        curves[method] = np.array([[score(r["records"], args.budget, args.max_t, upto=int(p))["gap"]
                                    for p in points] for r in mine])
        rows.append(
            f"| {method} | {gap:.3f} [{gap_lo:.3f}, {gap_hi:.3f}] | {hv:.3f} [{hv_lo:.3f}, {hv_hi:.3f}] | "
            f"{third:.3f} [{third_lo:.3f}, {third_hi:.3f}] | "
            f"{np.median([s['trials'] for s in scores]):.0f} | "
            f"{np.median([s['iterations'] for s in scores]):.0f} | "
            f"{np.median([len(s['front']) for s in scores]):.0f} | "
            f"{np.median([s['below_max_t'] for s in scores]):.0f} | "
            f"{np.median([r['seconds'] for r in mine]):.1f} |")

    ranked = sorted(medians, key=medians.get)
    base = medians.get(BASELINE)
    lines = [
        machine_line(load_before, load_after, version),
        f"Command: `python benchmarks/multiobjective.py --seeds {args.seeds} --budget {args.budget}"
        f"{'' if args.max_t == ZDT1_MAX_T else f' --max-t {args.max_t}'}"
        f"{'' if methods == list(METHODS) else f' --methods {args.methods}'}`; {len(runs)} experiments in "
        f"{total_s / 60:.1f} min on one local Ray with {args.num_cpus} CPUs (1 CPU a trial). Budget: "
        f"{args.budget} training iterations per experiment; FIFO methods run {args.budget // args.max_t} "
        f"full-fidelity trials ({args.budget // args.max_t * args.max_t} iterations), ASHA methods stop at "
        f"the budget.",
        "",
        f"Problem: ZDT1, {ZDT1_N} variables, {args.max_t} steps a trial; f1 = x1 at every step, f2 from "
        f"g_t = g + (1 - s)({ZDT1_BIAS:g} (g - 1) + {ZDT1_NOISE:g} |z|), s = log t / log {args.max_t} (the true "
        "ZDT1 at the last step). Score: the hypervolume of the front tuner returns (each trial's last reported "
        "f1, f2; trials ended by the budget stop are errored and left out), with each front trial's "
        "configuration re-evaluated at full fidelity (its true ZDT1), reference point "
        f"({ZDT1_REFERENCE[0]:g}, {ZDT1_REFERENCE[1]:g}); gap = the true front's hypervolume there "
        f"({ZDT1_MAX_HYPERVOLUME:.4f}) minus it, lower is better. Figures: median [interquartile range] over "
        f"{args.seeds} seeds; \"front below max_t\" = front trials stopped early by ASHA (their re-training is "
        "not charged to the budget).",
        "",
        "| method | gap at the budget | hypervolume | gap at 1/3 of the budget | trials | iterations used | "
        "front size | front below max_t | s / experiment |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Ranking by median gap: " + ", ".join(
            f"{m} ({medians[m]:.3f}" + (f", {medians[m] / base:.2f} x random's)" if base else ")") for m in ranked)
        + ".",
    ]
    checked = sum(1 for r in runs if r.get("tuner_front") is not None)
    if checked:
        lines += ["", f"Cross-check: in {checked - mismatched} of {checked} experiments the front scored here is "
                  "`TuneResult.pareto_front` (the same trial ids)."]
    crashed = sum(1 for r in runs if r.get("ray_error"))
    if crashed:
        lines += ["", f"In {crashed} of {len(runs)} experiments Ray's `ResultGrid` raised after the budget stop "
                  "(a trial still PENDING when `fail_fast` ended the experiment); their step logs are complete "
                  "and are scored."]
    if have_matplotlib():
        path = _plot(points, curves, args.img_dir)
        lines += ["", f"![ZDT1 hypervolume gap]({os.path.relpath(path, (args.output or ROOT / 'docs' / 'x').parent)})"]
    write_section(args.output, HEADING, "\n".join(lines))


def _plot(points, curves: dict, img_dir: Path) -> Path:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for method, curve in curves.items():
        q1, q2, q3 = np.percentile(curve, [25, 50, 75], axis=0)
        line, = ax.plot(points, np.maximum(q2, 1e-4), label=method, lw=1.6,
                        ls="-" if "asha" not in method else "--")
        ax.fill_between(points, np.maximum(q1, 1e-4), np.maximum(q3, 1e-4), color=line.get_color(), alpha=0.15)
    ax.set_yscale("log")
    ax.set_xlabel("budget used (training iterations)")
    ax.set_ylabel("hypervolume gap to the true front\n(median, interquartile range)")
    ax.set_title("ZDT1, 6 variables, 9 fidelity steps")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = img_dir / "multiobjective_zdt1.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
