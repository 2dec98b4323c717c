"""Benchmark 3: search efficiency, what the schedulers and model-based searchers buy.

Five methods, each a tuner spec run by ``tune_model`` on one local Ray session:

* ``random+fifo`` (the baseline): random search, every trial runs to full fidelity;
* ``random+asha``: random search, ASHA (grace period 1, reduction factor 3);
* ``hyperband``: random search, synchronous Hyperband (reduction factor 3);
* ``bohb``: BOHB's model (TuneBOHB) with its Hyperband (reduction factor 3);
* ``optuna+asha``: Optuna's TPE with ASHA (grace period 1, reduction factor 3);

on three analytic multi-fidelity objectives (``benchmarks/workloads.py``): MF-Hartmann
6-D (mf-prior-bench's generator, fidelity 1..100, optimum -3.32237), counting ones (the
BOHB paper's toy, 8 categorical + 8 continuous, budgets 9..729 samples as steps 1..81,
optimum -16) and Ray Tune's learning-curve toy (100 steps, optimum -9.949749).

Every method gets the same budget, counted in training iterations (one report = one
iteration, 2 trials at a time on 2 CPUs): ``--budget`` full-fidelity evaluations, i.e.
``budget x max_t`` iterations. Each step a trial runs is appended to a log shared by the
experiment's trials, which numbers it; the step past the budget raises, and
``failure.fail_fast`` ends the experiment there.

Regret at budget b: the true (full-fidelity, noiseless) value of the configuration tuner
would return had the experiment stopped after b iterations (the trial whose latest
reported value is the best, as ``TuneResult.best_config``), minus the optimum. Over
``--seeds`` seeds it is reported as the interquartile mean with a 95 % bootstrap
interval (seeds resampled, 1,000 times), as Syne Tune does. The regret threshold of an
objective is random search's IQM regret at the full budget; the budget a method needs to
reach it is given as a ratio to the budget random search needs.

    python benchmarks/search_efficiency.py --seeds 10 --budget 10 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (  # noqa: E402
    IMG, ROOT, have_matplotlib, iqm_bootstrap, load_average, machine_line, run_on_local_ray, write_section)
from benchmarks.workloads import OBJECTIVES, read_budget_file  # noqa: E402

HEADING = "Search efficiency: what the schedulers buy (`benchmarks/search_efficiency.py`)"
TARGET_RATIO = 1 / 3
ASHA = {"type": "asha", "grace_period": 1, "reduction_factor": 3}
METHODS = {
    "random+fifo": ({"algorithm": "random"}, {"type": "fifo"}),
    "random+asha": ({"algorithm": "random"}, ASHA),
    "hyperband": ({"algorithm": "random"}, {"type": "hyperband", "reduction_factor": 3}),
    "bohb": ({"algorithm": "bohb"}, {"type": "bohb", "reduction_factor": 3}),
    "optuna+asha": ({"algorithm": "optuna"}, ASHA),
}
TARGET_METHODS = ("random+asha", "bohb")  # the target: ASHA and BOHB


def pause_points(search: dict, scheduler: dict, max_t: int) -> list[int]:
    """Steps at which the scheduler may pause a trial (Hyperband's and BOHB's rungs),
    where the trial checkpoints so that it resumes instead of starting over."""
    if scheduler["type"] not in ("hyperband", "bohb"):
        return []
    from tuner.rungs import bracket_rungs
    from tuner.spec import load_spec

    spec = load_spec({"trainable": "benchmarks.workloads:search_objective", "metric": "loss", "mode": "min",
                      "search": search, "scheduler": {**scheduler, "max_t": max_t}})
    return sorted({int(r) for bracket in bracket_rungs(spec) for r in bracket})


def run_one(objective: str, method: str, seed: int, budget_steps: int, storage: Path, cpu: float = 1.0) -> dict:
    """Run one experiment; return its budget log and timing."""
    from tuner import tune_model

    obj = OBJECTIVES[objective]
    search, scheduler = METHODS[method]
    scheduler = dict(scheduler)
    if scheduler["type"] != "fifo":
        scheduler["max_t"] = obj.max_t
    name = f"{objective}_{method.replace('+', '_')}_{seed}"
    log = storage / f"{name}.steps"
    spec = {
        "name": name,
        "trainable": "benchmarks.workloads:search_objective",
        "metric": "loss",
        "mode": "min",
        # More trials than the budget can ever use: the budget ends the experiment.
        "num_samples": budget_steps + 1,
        "seed": seed,
        "stop": {"training_iteration": obj.max_t},
        "param_space": {**obj.param_space, "objective": objective, "budget_file": str(log),
                        "budget": budget_steps, "seed": seed,
                        "checkpoint_at": pause_points(search, scheduler, obj.max_t)},
        "search": search,
        "scheduler": scheduler,
        "resources": {"cpu": cpu},
        "reporting": {"cli": False, "tensorboard": False},
        "failure": {"fail_fast": True},
        "checkpoint": {"num_to_keep": 1},
        "storage": str(storage),
    }
    start = time.perf_counter()
    ray_error = None
    try:
        tune_model(spec)
    except RuntimeError as err:
        # Ray 2.60 builds its ResultGrid over every trial, and one that was still PENDING
        # (never started, so without a folder) when fail_fast ended the experiment makes it
        # raise. Rare; the step log, which is all this benchmark reads, is complete.
        if "trial_dir_name" not in str(err):
            raise
        ray_error = str(err)
    seconds = time.perf_counter() - start
    steps = read_budget_file(str(log))[:budget_steps]
    trials = len({s[0] for s in steps})
    return {"objective": objective, "method": method, "seed": seed, "seconds": seconds, "trials": trials,
            "steps": [(s[0], s[2], s[3]) for s in steps], "ray_error": ray_error}


def regret_curve(steps: list[tuple[str, float, float]], optimum: float, budget_steps: int) -> list[float]:
    """Regret after each of ``budget_steps`` iterations (NaN before the first result)."""
    latest: dict[str, float] = {}
    true: dict[str, float] = {}
    best_id = None
    out = []
    for trial_id, value, true_value in steps:
        previous = latest.get(trial_id)
        latest[trial_id] = value
        true[trial_id] = true_value
        if best_id is None or value < latest[best_id]:
            best_id = trial_id
        elif trial_id == best_id and previous is not None and value > previous:
            best_id = min(latest, key=latest.get)  # the incumbent got worse: look again
        out.append(true[best_id] - optimum)
    last = out[-1] if out else math.nan
    out += [last] * (budget_steps - len(out))  # budget not spent (should not happen): flat
    return out


def budget_to_reach(curve, threshold: float, points) -> float:
    for b, r in zip(points, curve):
        if r <= threshold + 1e-12:
            return float(b)
    return math.inf


def _run_all(args, objectives, methods) -> tuple[list[dict], float]:
    """Every (objective, seed, method) experiment on one local Ray; returns the runs and the seconds."""
    def job(objective, method, seed):
        budget_steps = int(round(args.budget * OBJECTIVES[objective].max_t))

        def run(tmp: Path):
            r = run_one(objective, method, seed, budget_steps, tmp, args.cpu_per_trial)
            return r, (f"{objective:14s} {method:12s} seed {seed}: {len(r['steps'])}/{budget_steps} steps, "
                       f"{r['trials']} trials, {r['seconds']:.1f} s")
        return run

    return run_on_local_ray(args.num_cpus, "tuner-bench-search-", (job(o, m, seed) for o in objectives
                                                                   for seed in range(args.seeds) for m in methods))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per method and objective (default 10)")
    parser.add_argument("--budget", type=float, default=10,
                        help="budget per experiment, in full-fidelity evaluations (x max_t iterations; default 10)")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES), help=f"comma-separated, of: {', '.join(OBJECTIVES)}")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of: {', '.join(METHODS)}")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--cpu-per-trial", type=float, default=1.0,
                        help="resources.cpu of a trial (default 1: 2 trials at a time on 2 CPUs)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    parser.add_argument("--img-dir", type=Path, default=IMG, help="folder for the plots (default docs/img)")
    parser.add_argument("--save-runs", type=Path, default=None, help="save every run's step log as JSON here")
    parser.add_argument("--load-runs", type=Path, default=None,
                        help="re-render the tables and plots from a --save-runs file instead of running")
    args = parser.parse_args(argv)
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for name, known in (("objective", OBJECTIVES), ("method", METHODS)):
        bad = [x for x in (objectives if name == "objective" else methods) if x not in known]
        if bad:
            parser.error(f"unknown {name}(s) {bad}; choose from {list(known)}")
    if "random+fifo" not in methods:
        parser.error("random+fifo is the baseline: keep it in --methods")

    import numpy as np

    from benchmarks._common import code_version

    load_before = load_average()
    if args.load_runs:
        saved = json.loads(args.load_runs.read_text())
        runs, total_s, load_before = saved["runs"], saved["total_s"], saved["load_before"]
        load_after, version = saved.get("load_after"), saved.get("version")
        args.budget = saved["budget"]
        runs = [r for r in runs if r["objective"] in objectives and r["method"] in methods and r["seed"] < args.seeds]
    else:
        runs, total_s = _run_all(args, objectives, methods)
        load_after, version = load_average(), code_version()
        if args.save_runs:
            args.save_runs.write_text(json.dumps({"runs": runs, "total_s": total_s, "load_before": load_before,
                                                   "load_after": load_after, "version": version,
                                                   "budget": args.budget}))

    # Curves on a grid of budget points (in iterations).
    tables, plots = [], []
    ratios: dict[tuple[str, str], float] = {}
    for objective in objectives:
        obj = OBJECTIVES[objective]
        budget_steps = int(round(args.budget * obj.max_t))
        points = np.unique(np.linspace(1, budget_steps, min(budget_steps, 400)).astype(int))
        agg = {}
        for method in methods:
            curves = []
            for r in runs:
                if r["objective"] == objective and r["method"] == method:
                    full = regret_curve(r["steps"], obj.optimum, budget_steps)
                    curves.append([full[p - 1] for p in points])
            curves = np.array(curves, dtype=float)
            mid, low, high = iqm_bootstrap(curves, reps=args.bootstrap)
            agg[method] = (mid, low, high, curves)
        threshold = float(agg["random+fifo"][0][-1])
        base = budget_to_reach(agg["random+fifo"][0], threshold, points)
        rows = []
        for method in methods:
            mid, low, high, curves = agg[method]
            need = budget_to_reach(mid, threshold, points)
            ratio = need / base if math.isfinite(need) else math.inf
            ratios[(objective, method)] = ratio
            seeds_ok = sum(math.isfinite(budget_to_reach(c, threshold, points)) for c in curves)
            mine = [r for r in runs if r["objective"] == objective and r["method"] == method]
            mean_trials = np.mean([r["trials"] for r in mine])
            mean_s = np.mean([r["seconds"] for r in mine])

            def at(frac):
                i = int(np.searchsorted(points, max(1, int(frac * budget_steps)), side="left"))
                i = min(i, len(points) - 1)
                return f"{mid[i]:.3g} [{low[i]:.3g}, {high[i]:.3g}]"

            rows.append(f"| {method} | {at(0.1)} | {at(1 / 3)} | {at(1.0)} | {mean_trials:.0f} | {mean_s:.1f} | "
                        f"{'never' if not math.isfinite(need) else f'{need:.0f}'} | "
                        f"{'—' if not math.isfinite(ratio) else f'{ratio:.2f}'} | {seeds_ok}/{len(curves)} |")
        tables.append((obj, budget_steps, threshold, base, rows))
        if have_matplotlib():
            plots.append(_plot(objective, obj, points, agg, threshold, args.img_dir))

    lines = [
        machine_line(load_before, load_after, version),
        f"Command: `python benchmarks/search_efficiency.py --seeds {args.seeds} --budget {args.budget:g}"
        f"{'' if args.objectives == ','.join(OBJECTIVES) else f' --objectives {args.objectives}'}`; "
        f"{len(runs)} experiments in {total_s / 60:.1f} min on one local Ray with {args.num_cpus} CPUs "
        f"({args.cpu_per_trial:g} CPU a trial). Budget: {args.budget:g} full-fidelity evaluations per experiment, counted in "
        "training iterations; random+fifo spends it on full-fidelity trials only.",
        "",
        "Regret = true (full-fidelity, noiseless) value of the configuration tuner would return at that budget "
        "(the trial with the best latest reported value) minus the optimum. Figures: IQM over seeds "
        "[95 % bootstrap interval]. Threshold = random+fifo's IQM regret at the full budget; \"budget to "
        "threshold\" = iterations until a method's IQM regret first reaches it; ratio = that / random+fifo's.",
        "",
    ]
    for obj, budget_steps, threshold, base, rows in tables:
        lines += [
            f"**{obj.title}** (max_t {obj.max_t}, budget {budget_steps} iterations, optimum {obj.optimum:.6g}, "
            f"threshold {threshold:.3g}):",
            "",
            "| method | regret at 10 % budget | at 33 % | at 100 % | trials | s / experiment | "
            "budget to threshold (it.) | ratio to random | seeds reaching it |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    verdicts = []
    for method in TARGET_METHODS:
        if method not in methods:
            continue
        for objective in objectives:
            r = ratios[(objective, method)]
            verdicts.append(f"{method} on {OBJECTIVES[objective].title}: "
                            f"{'—' if not math.isfinite(r) else f'{r:.2f}'} "
                            f"({'met' if r <= TARGET_RATIO else 'NOT met'})")
    lines.append("Target (ASHA and BOHB reach the threshold with <= 1/3 of random search's budget): "
                 + "; ".join(verdicts) + ".")
    crashed = sum(1 for r in runs if r.get("ray_error"))
    if crashed:
        lines += ["", f"In {crashed} of {len(runs)} experiments Ray's `ResultGrid` raised after the budget stop "
                  "(`Should not access trial_fs_path without setting trial_dir_name`: a trial still PENDING, never "
                  "started, when `fail_fast` ended the experiment); their step logs are complete and are counted."]
    if plots:
        lines += ["", *[f"![{title}]({os.path.relpath(path, (args.output or ROOT / 'docs' / 'x').parent)})"
                        for title, path in plots]]
    elif not have_matplotlib():
        lines += ["", "(No plots: matplotlib is not installed; `pip install matplotlib` and run again.)"]
    write_section(args.output, HEADING, "\n".join(lines))


def _plot(objective, obj, points, agg, threshold, img_dir: Path):
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for method, (mid, low, high, _) in agg.items():
        line, = ax.plot(points, np.maximum(mid, 1e-6), label=method, lw=1.6)
        ax.fill_between(points, np.maximum(low, 1e-6), np.maximum(high, 1e-6), color=line.get_color(), alpha=0.18)
    ax.axhline(max(threshold, 1e-6), color="grey", ls="--", lw=1, label="threshold")
    ax.set_yscale("log")
    ax.set_xlabel("budget used (training iterations)")
    ax.set_ylabel("regret (IQM, 95 % bootstrap CI)")
    ax.set_title(f"{obj.title}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = img_dir / f"search_efficiency_{objective}.png"
    fig.savefig(path)
    plt.close(fig)
    return obj.title, path


if __name__ == "__main__":
    main()
