"""Benchmark 3: search efficiency, what the schedulers and model-based searchers buy,
against Optuna's own loop.

Five tuner methods, each a tuner spec run by ``tune_model`` on one local Ray session:

* ``random+fifo`` (the baseline): random search, every trial runs to full fidelity;
* ``random+asha``: random search, ASHA (grace period 1, reduction factor 3);
* ``hyperband``: random search, synchronous Hyperband (reduction factor 3);
* ``bohb``: BOHB's model (TuneBOHB) with its Hyperband (reduction factor 3);
* ``optuna+asha``: Optuna's TPE with ASHA (grace period 1, reduction factor 3);

and two peers, Optuna's OWN loop without Ray or tuner (``benchmarks/peers.py``):
``optuna.create_study`` + ``study.optimize`` with ``TPESampler(seed=...)`` and
``HyperbandPruner`` (``peer-optuna+hyperband``) or the default ``MedianPruner``
(``peer-optuna+median``), each trial reporting every step with ``trial.report`` /
``trial.should_prune``;

on three analytic multi-fidelity objectives (``benchmarks/workloads.py``): MF-Hartmann
6-D (mf-prior-bench's generator, fidelity 1..100, optimum -3.32237), counting ones (the
BOHB paper's toy, 8 categorical + 8 continuous, budgets 9..729 samples as steps 1..81,
optimum -16) and Ray Tune's learning-curve toy (100 steps, optimum -9.949749).

Every method gets the same budget, counted in training iterations (one report = one
iteration; tuner's methods run 2 trials at a time on 2 CPUs, Optuna's loop one at a
time): ``--budget`` full-fidelity evaluations, i.e. ``budget x max_t`` iterations, every
step of every trial counted, stopped or pruned or not. For tuner's methods each step a
trial runs is appended to a log shared by the experiment's trials, which numbers it; the
step past the budget raises, and ``failure.fail_fast`` ends the experiment there. The
peers count their steps the same way and cut the trial that would run the step past the
budget.

Regret at budget b: the true (full-fidelity, noiseless) value of the configuration the
method would return had it stopped after b iterations, minus the optimum. For tuner's
methods that is the trial whose latest reported value is the best (as
``TuneResult.best_config``); for the peers it is Optuna's own answer, ``study.best_trial``:
the COMPLETED trial (all ``max_t`` steps run) with the best final value, and, before any
trial has completed, the trial with the best latest reported value (tuner's rule, as Optuna
has no answer yet). The peers' final regret by tuner's rule is given beside the tables.
Over ``--seeds`` seeds it is reported as the median with a 95 % bootstrap interval (seeds
resampled, 1,000 times), and the interquartile mean, as Syne Tune does. The regret
threshold of an objective is random search's IQM regret at the full budget; the budget a
method needs to reach it is given as a ratio to the budget random search needs.

    python benchmarks/search_efficiency.py --seeds 10 --budget 10 --output docs/benchmarks.md

``--save-runs`` keeps every run's step log; ``--load-runs`` re-renders from saved files
(several are merged), and with ``--run-missing`` also runs the (objective, method, seed)
experiments they lack, so a method can be added to a finished run without re-running it.

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

from benchmarks._common import (IMG, ROOT, have_matplotlib, iqm_bootstrap, load_average, machine_line, median_bootstrap,
                                run_on_local_ray, write_section)
from benchmarks.peers import PEERS, run_peer
from benchmarks.workloads import OBJECTIVES, read_budget_file

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
TARGET_METHODS = ("random+asha", "bohb")  # issue 7's target: ASHA and BOHB
ALL_METHODS = (*METHODS, *PEERS)


def pause_points(search: dict, scheduler: dict, max_t: int) -> list[int]:
    """Steps at which the scheduler may pause a trial (Hyperband's and BOHB's rungs),
    where the trial checkpoints so that it resumes instead of starting over."""
    if scheduler["type"] not in ("hyperband", "bohb"):
        return []
    from tuner.search.rungs import bracket_rungs
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


def optuna_regret_curve(steps: list[tuple[str, float, float]], completed: list[tuple[int, str]], optimum: float,
                        budget_steps: int) -> list[float]:
    """Regret after each of ``budget_steps`` iterations by Optuna's own answer, ``study.best_trial``.

    Args:
        steps: ``(trial, reported value, true value)`` in the order the steps ran.
        completed: ``(rank, trial)``: the 1-based rank of the last step of each trial that completed
            (ran all its steps; pruned and cut trials are absent).
        optimum: The objective's optimum.
        budget_steps: The budget, in iterations.

    Returns:
        From the first completed trial on, the true value of the completed trial with the best final
        value (the first of equals, as Optuna) minus the optimum; before it, :func:`regret_curve`'s
        (tuner's rule: the trial with the best latest reported value), as Optuna has no answer yet.
    """
    fallback = regret_curve(steps, optimum, budget_steps)
    done_at = {int(rank) for rank, _ in completed}
    best: tuple[float, float] | None = None  # (final value, true value)
    out = []
    for rank, (_, value, true_value) in enumerate(steps, start=1):
        if rank in done_at and (best is None or value < best[0]):
            best = (value, true_value)
        out.append(fallback[rank - 1] if best is None else best[1] - optimum)
    last = out[-1] if out else math.nan
    return out + [last] * (budget_steps - len(out))


def run_curve(run: dict, optimum: float, budget_steps: int) -> list[float]:
    """A run's regret curve by its method's own rule: Optuna's answer for a peer (a run with
    ``completed``), tuner's best-trial rule for tuner's methods."""
    if "completed" in run:
        return optuna_regret_curve(run["steps"], run["completed"], optimum, budget_steps)
    return regret_curve(run["steps"], optimum, budget_steps)


def budget_to_reach(curve, threshold: float, points) -> float:
    for b, r in zip(points, curve):
        if r <= threshold + 1e-12:
            return float(b)
    return math.inf


def _run_all(args, triples, on_run=None) -> tuple[list[dict], float]:
    """Run the (objective, method, seed) experiments: the peers in this process, without Ray, then
    tuner's methods on one local Ray, in the order given. ``on_run(run, seconds so far)`` is called as
    each ends. Returns the runs and the seconds it all took."""
    started = time.perf_counter()
    runs = []
    for objective, method, seed in triples:
        if method in PEERS:
            budget_steps = int(round(args.budget * OBJECTIVES[objective].max_t))
            r = run_peer(objective, method, seed, budget_steps)
            runs.append(r)
            if on_run:
                on_run(r, time.perf_counter() - started)
            print(f"{objective:14s} {method:22s} seed {seed}: {len(r['steps'])}/{budget_steps} steps, "
                  f"{r['trials']} trials, {r['seconds']:.1f} s", flush=True)

    def job(objective, method, seed):
        budget_steps = int(round(args.budget * OBJECTIVES[objective].max_t))

        def run(tmp: Path):
            r = run_one(objective, method, seed, budget_steps, tmp, args.cpu_per_trial)
            if on_run:
                on_run(r, time.perf_counter() - started)
            return r, (f"{objective:14s} {method:22s} seed {seed}: {len(r['steps'])}/{budget_steps} steps, "
                       f"{r['trials']} trials, {r['seconds']:.1f} s")
        return run

    on_ray = [t for t in triples if t[1] not in PEERS]
    if on_ray:
        runs += run_on_local_ray(args.num_cpus, "tuner-bench-search-", (job(*t) for t in on_ray))[0]
    return runs, time.perf_counter() - started


def _load(paths: list[Path]) -> dict:
    """Merge ``--save-runs`` files: their runs (the first of two runs of one objective, method and
    seed wins), seconds summed, the first file's load at the start, the last one's at the end, and
    each distinct code version. Raises SystemExit when their budgets differ."""
    merged: dict = {"runs": [], "total_s": 0.0, "versions": []}
    seen = set()
    for path in paths:
        saved = json.loads(Path(path).read_text())
        if merged.setdefault("budget", saved["budget"]) != saved["budget"]:
            raise SystemExit(f"{path}: budget {saved['budget']}, not {merged['budget']} as the files before it")
        for r in saved["runs"]:
            key = (r["objective"], r["method"], r["seed"])
            if key not in seen:
                seen.add(key)
                merged["runs"].append(r)
        merged["total_s"] += saved["total_s"]
        merged.setdefault("load_before", saved["load_before"])
        merged["load_after"] = saved.get("load_after")
        if saved.get("version") and saved["version"] not in merged["versions"]:
            merged["versions"].append(saved["version"])
    return merged


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per method and objective (default 10)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first seed (default 0): seeds first..first+seeds-1, to split a run into parts")
    parser.add_argument("--budget", type=float, default=10,
                        help="budget per experiment, in full-fidelity evaluations (x max_t iterations; default 10)")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES),
                        help=f"comma-separated, of: {', '.join(OBJECTIVES)}")
    parser.add_argument("--methods", default=",".join(ALL_METHODS),
                        help=f"comma-separated, of: {', '.join(ALL_METHODS)}")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--cpu-per-trial", type=float, default=1.0,
                        help="resources.cpu of a trial (default 1: 2 trials at a time on 2 CPUs)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    parser.add_argument("--img-dir", type=Path, default=IMG, help="folder for the plots (default docs/img)")
    parser.add_argument("--save-runs", type=Path, default=None, help="save every run's step log as JSON here")
    parser.add_argument("--load-runs", type=Path, nargs="+", default=None,
                        help="re-render the tables and plots from --save-runs files (merged) instead of running")
    parser.add_argument("--run-missing", action="store_true",
                        help="with --load-runs: also run the experiments the files lack (and --save-runs them all)")
    args = parser.parse_args(argv)
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for name, known in (("objective", OBJECTIVES), ("method", ALL_METHODS)):
        bad = [x for x in (objectives if name == "objective" else methods) if x not in known]
        if bad:
            parser.error(f"unknown {name}(s) {bad}; choose from {list(known)}")
    if "random+fifo" not in methods:
        parser.error("random+fifo is the baseline: keep it in --methods")
    if args.run_missing and not args.load_runs:
        parser.error("--run-missing goes with --load-runs")

    import numpy as np

    from benchmarks._common import code_version

    # Seed by seed: a run cut short has every method of its first seeds.
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    wanted = [(o, m, seed) for seed in seeds for o in objectives for m in methods]
    load_before = load_average()
    done: list[dict] = []

    def save(extra: list[dict], seconds: float, before, after, versions, base_s: float = 0.0) -> None:
        if args.save_runs:
            args.save_runs.write_text(json.dumps({"runs": extra, "total_s": base_s + seconds, "load_before": before,
                                                   "load_after": after, "version": " + ".join(versions),
                                                   "budget": args.budget}))

    if args.load_runs:
        saved = _load(args.load_runs)
        runs, total_s, load_before = saved["runs"], saved["total_s"], saved["load_before"]
        load_after, versions = saved["load_after"], saved["versions"]
        args.budget = saved["budget"]
        have = {(r["objective"], r["method"], r["seed"]) for r in runs}
        missing = [t for t in wanted if t not in have]
        if args.run_missing and missing:
            versions = versions + [v for v in [code_version()] if v not in versions]
            old, old_s, old_before = list(runs), total_s, load_before

            def progress(r, seconds):  # saved as each experiment ends: a run cut short keeps its seeds
                done.append(r)
                save(old + done, seconds, old_before, load_average(), versions, old_s)

            new_runs, new_s = _run_all(args, missing, progress)
            runs, total_s, load_after = runs + new_runs, total_s + new_s, load_average()
    else:
        versions = [code_version()]

        def progress(r, seconds):
            done.append(r)
            save(done, seconds, load_before, load_average(), versions)

        runs, total_s = _run_all(args, wanted, progress)
        load_after = load_average()
    save(runs, total_s, load_before, load_after, versions)
    runs = [r for r in runs if r["objective"] in objectives and r["method"] in methods and r["seed"] in seeds]
    # Only the seeds with every experiment (a run cut short, or saved runs that lack some), so that every
    # method is measured on the same seeds.
    have = {(r["objective"], r["method"], r["seed"]) for r in runs}
    complete = [seed for seed in seeds if all((o, m, seed) in have for o in objectives for m in methods)]
    if not complete:
        raise SystemExit("no seed has a run of every objective and method")
    partial = sorted({r["seed"] for r in runs} - set(complete))
    runs = [r for r in runs if r["seed"] in complete]

    # Curves on a grid of budget points (in iterations).
    tables, plots = [], []
    ratios: dict[tuple[str, str], float] = {}
    finals: dict[tuple[str, str], float] = {}  # median regret at the full budget
    tuner_rule: dict[tuple[str, str], list[float]] = {}  # a peer's final regrets by tuner's best-trial rule
    for objective in objectives:
        obj = OBJECTIVES[objective]
        budget_steps = int(round(args.budget * obj.max_t))
        points = np.unique(np.linspace(1, budget_steps, min(budget_steps, 400)).astype(int))
        agg = {}
        for method in methods:
            curves = []
            for r in runs:
                if r["objective"] == objective and r["method"] == method:
                    full = run_curve(r, obj.optimum, budget_steps)
                    curves.append([full[p - 1] for p in points])
                    if method in PEERS:
                        tuner_rule.setdefault((objective, method), [])
                        tuner_rule[(objective, method)].append(regret_curve(r["steps"], obj.optimum,
                                                                            budget_steps)[-1])
            curves = np.array(curves, dtype=float)
            agg[method] = (median_bootstrap(curves, reps=args.bootstrap), iqm_bootstrap(curves, reps=args.bootstrap),
                           curves)
        threshold = float(agg["random+fifo"][1][0][-1])
        base = budget_to_reach(agg["random+fifo"][1][0], threshold, points)
        rows = []
        for method in methods:
            (med, mlow, mhigh), (mid, low, high), curves = agg[method]
            need = budget_to_reach(mid, threshold, points)
            ratio = need / base if math.isfinite(need) else math.inf
            ratios[(objective, method)] = ratio
            finals[(objective, method)] = float(med[-1])
            seeds_ok = sum(math.isfinite(budget_to_reach(c, threshold, points)) for c in curves)
            mine = [r for r in runs if r["objective"] == objective and r["method"] == method]
            mean_trials = np.mean([r["trials"] for r in mine])
            mean_s = np.mean([r["seconds"] for r in mine])

            def at(frac, m=med, lo=mlow, hi=mhigh, points=points, budget_steps=budget_steps):
                i = int(np.searchsorted(points, max(1, int(frac * budget_steps)), side="left"))
                i = min(i, len(points) - 1)
                return f"{m[i]:.3g} [{lo[i]:.3g}, {hi[i]:.3g}]"

            rows.append(f"| {method} | {at(0.1)} | {at(1 / 3)} | **{at(1.0)}** | {at(1.0, mid, low, high)} | "
                        f"{mean_trials:.0f} | {mean_s:.1f} | "
                        f"{'never' if not math.isfinite(need) else f'{need:.0f}'} | "
                        f"{'—' if not math.isfinite(ratio) else f'{ratio:.2f}'} | {seeds_ok}/{len(curves)} |")
        tables.append((obj, budget_steps, threshold, base, rows))
        if have_matplotlib():
            plots.append(_plot(objective, obj, points, agg, threshold, args.img_dir))

    seeds_run = complete
    parts = (f" (run in {len(args.load_runs)} parts merged by --load-runs, some side by side; their times added)"
             if args.load_runs and len(args.load_runs) > 1 else "")
    lines = [
        machine_line(load_before, load_after, _same_tuner(versions)),
        f"Command: `python benchmarks/search_efficiency.py --seeds {args.seeds} --budget {args.budget:g}"
        f"{'' if args.first_seed == 0 else f' --first-seed {args.first_seed}'}"
        f"{'' if args.objectives == ','.join(OBJECTIVES) else f' --objectives {args.objectives}'}"
        f"{'' if args.methods == ','.join(ALL_METHODS) else f' --methods {args.methods}'}`; "
        f"{len(runs)} experiments ({len(seeds_run)} seed{'' if len(seeds_run) == 1 else 's'}) in "
        f"{total_s / 60:.1f} min"
        f"{parts}"
        ", tuner's methods on one local Ray "
        f"with {args.num_cpus} CPUs ({args.cpu_per_trial:g} CPU a trial), the peers in one process without Ray. "
        f"Budget: {args.budget:g} full-fidelity evaluations per experiment, counted in training iterations (every "
        "step of every trial, stopped, pruned or not); random+fifo spends it on full-fidelity trials only."
        + (f" Seeds {partial} lack some experiments and are left out." if partial else ""),
        "",
        "Methods: tuner's five (a spec each, run by `tune_model`) and two peers, Optuna's own loop without Ray or "
        "tuner (`benchmarks/peers.py`): `optuna.create_study` + `study.optimize` with `TPESampler(seed)` and "
        "`HyperbandPruner(min_resource=1, max_resource=max_t, reduction_factor=3)` (peer-optuna+hyperband) or the "
        "default `MedianPruner()` (peer-optuna+median), each trial calling `trial.report` and `trial.should_prune` "
        "at every step, one trial at a time; the trial that would run the step past the budget is cut there.",
        "",
        "Regret = true (full-fidelity, noiseless) value of the configuration the method would return at that budget "
        "minus the optimum: for tuner's methods the trial with the best latest reported value (tuner's best-trial "
        "rule); for the peers Optuna's own answer, `study.best_trial` (the best COMPLETED trial; before the first "
        "trial completes, tuner's rule). Figures: **median** over seeds [95 % bootstrap interval], and the IQM at the "
        "full budget. Threshold = random+fifo's IQM regret at the full budget; \"budget to threshold\" = iterations "
        "until a method's IQM regret first reaches it; ratio = that / random+fifo's. \"s / experiment\" is wall "
        "time on a machine shared with other work (load average above), and the peers' has no Ray in it: a "
        "rough figure, not a comparison.",
        "",
    ]
    for obj, budget_steps, threshold, _, rows in tables:
        lines += [
            f"**{obj.title}** (max_t {obj.max_t}, budget {budget_steps} iterations, optimum {obj.optimum:.6g}, "
            f"threshold {threshold:.3g}):",
            "",
            "| method | median regret at 10 % budget | at 33 % | at 100 % | IQM at 100 % | trials | s / experiment | "
            "budget to threshold (it.) | ratio to random | seeds reaching it |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    if tuner_rule:
        lines += ["The peers' median regret at the full budget by tuner's rule instead (the trial with the best "
                  "latest reported value, pruned trials included): " + "; ".join(
                      f"{m} on {OBJECTIVES[o].title} {float(np.median(v)):.3g}" for (o, m), v in tuner_rule.items())
                  + ".", ""]
    verdicts = []
    for method in TARGET_METHODS:
        if method not in methods:
            continue
        for objective in objectives:
            r = ratios[(objective, method)]
            verdicts.append(f"{method} on {OBJECTIVES[objective].title}: "
                            f"{'—' if not math.isfinite(r) else f'{r:.2f}'} "
                            f"({'met' if r <= TARGET_RATIO else 'NOT met'})")
    if verdicts:
        lines.append("Target (ASHA and BOHB reach the threshold with <= 1/3 of random search's budget): "
                     + "; ".join(verdicts) + ".")
    lines += _peer_target(objectives, [m for m in methods if m in METHODS], [m for m in methods if m in PEERS],
                          finals, tuner_rule)
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


def _same_tuner(versions: list[str]) -> str | None:
    """The code versions of merged runs, as one when their ``tuner/`` trees are the same (the parts of a
    run made while only ``benchmarks/`` changed): ``tuner 5c9ac3d``, else ``tuner a + tuner b``."""
    import subprocess

    def tree(version: str) -> str | None:
        sha = version.split()[1] if version.startswith("tuner ") and "uncommitted" not in version else None
        if not sha:
            return None
        proc = subprocess.run(["git", "rev-parse", f"{sha}:tuner"], cwd=ROOT, capture_output=True, text=True)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    if not versions:
        return None
    trees = {tree(v) for v in versions}
    if len(versions) > 1 and len(trees) == 1 and None not in trees:
        return f"{versions[0]} (tuner/ the same in every part)"
    return " + ".join(versions)


def _peer_target(objectives, tuner_methods, peers, finals, tuner_rule) -> list[str]:
    """Issue 18's target as Markdown lines: a table of each tuner method's median regret at the full budget
    against the best peer's on each objective, and which tuner methods are at or below it on every one.

    The bar is the lower of each peer's two figures, by Optuna's rule (``finals``) and by tuner's
    (``tuner_rule``: a list of final regrets per objective and peer), whichever favours the peer.
    """
    import numpy as np

    if not peers or not tuner_methods:
        return []
    out = ["", "Target (issue 18): tuner's best combination at or below the best peer's median regret at the full "
           "budget on every objective (yes = at or below; the peer's figure by Optuna's rule or tuner's, "
           "whichever is lower):", "",
           "| objective | best peer | " + " | ".join(tuner_methods) + " |",
           "|---|---|" + "---|" * len(tuner_methods)]
    wins = {m: 0 for m in tuner_methods}
    for o in objectives:
        figures = [(finals[(o, p)], p, "Optuna's rule") for p in peers]
        figures += [(float(np.median(tuner_rule[(o, p)])), p, "tuner's rule") for p in peers if (o, p) in tuner_rule]
        bar, peer, rule = min(figures)
        cells = []
        for m in tuner_methods:
            ok = finals[(o, m)] <= bar
            wins[m] += ok
            cells.append(f"{finals[(o, m)]:.3g} ({'yes' if ok else 'no'})")
        out.append(f"| {OBJECTIVES[o].title} | {peer} {bar:.3g} ({rule}) | " + " | ".join(cells) + " |")
    every = [m for m in tuner_methods if wins[m] == len(objectives)]
    most = max(wins.values())
    out += ["", ("Met by " + ", ".join(every) + "." if every else
                 "NOT met: no tuner method is at or below the best peer on every objective; the closest ("
                 + ", ".join(m for m in tuner_methods if wins[m] == most) + f") on {most} of {len(objectives)}.")]
    return out


def _plot(objective, obj, points, agg, threshold, img_dir: Path):
    """The median regret curves [95 % bootstrap band] of every method on one objective (the peers dashed)."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for method, ((mid, low, high), _, _) in agg.items():
        line, = ax.plot(points, np.maximum(mid, 1e-6), label=method, lw=1.6, ls="--" if method in PEERS else "-")
        ax.fill_between(points, np.maximum(low, 1e-6), np.maximum(high, 1e-6), color=line.get_color(), alpha=0.12)
    ax.axhline(max(threshold, 1e-6), color="grey", ls=":", lw=1, label="threshold (random+fifo's final IQM)")
    ax.set_yscale("log")
    ax.set_xlabel("budget used (training iterations)")
    ax.set_ylabel("regret (median, 95 % bootstrap CI)")
    ax.set_title(f"{obj.title}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = img_dir / f"search_efficiency_{objective}.png"
    fig.savefig(path)
    plt.close(fig)
    return obj.title, path


if __name__ == "__main__":
    main()
