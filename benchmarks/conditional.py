"""Benchmark: a conditional search space against the same space flattened (issue 16).

The toy (:func:`benchmarks.workloads.conditional_objective`) is a choice among four models,
each with its own parameters: ``model`` is a sub-space choice among ``linear`` (alpha,
l1_ratio), ``forest`` (trees, depth, max_features), ``cnn`` (channels, kernel, lr) and ``mlp``
(width, dropout, lr, optimizer, and ``momentum`` when optimizer = sgd or ``beta2`` when
optimizer = adam); ``warmup`` exists when model is cnn or mlp. A branch's loss is its floor
(linear 0.3, forest 0.2, cnn 0.1, mlp 0) plus the squared distance of its active parameters to
their targets, each scaled to [0, 1] over its range; sgd costs 0.04 more. The optimum, 0, sits in
``mlp``, the branch with the most parameters: at a random configuration it is no better than
``linear`` on average, so a searcher must find the branch, then tune its 5 parameters. Each
trial reports ``loss`` once per step for 9 steps: ``true + (1 - s)(true + 0.2 |z|)``,
``s = log t / log 9``, ``z`` one normal draw per configuration and seed (too high early, by an
error that shrinks and reorders configurations; the true value at step 9).

Two forms of the same space (:func:`benchmarks.workloads.conditional_space`):

* ``conditional``: as above; a trial's config holds only the branch taken (and its optimizer's
  parameter, and warmup for cnn and mlp): 3 to 7 parameters.
* ``flat``: ``model.name`` a plain choice and every parameter of every branch always sampled
  (15 parameters); the trainable reads only the branch taken and ignores the others.

Searchers, each run on both forms, as tuner specs through ``tune_model`` on one local Ray
session, 1 CPU a trial, 2 trials at a time:

* ``random``: random search, FIFO (every trial to step 9); the two forms differ only in their
  draws (the ignored parameters change nothing), so this pair is the control;
* ``tpe``: Optuna's TPE (univariate, 10 random start-up trials: tuner's defaults), FIFO;
* ``tpe+asha``: the same with ASHA (grace period 1, reduction factor 3), as the shipped
  ``search_spaces/mnist_optuna.yaml``;
* ``bohb``: BOHB (TuneBOHB) with its Hyperband (``HyperBandForBOHB``, reduction factor 3).

Budget: the same number of training iterations (reports) for every experiment, ``--budget``
(default 450). FIFO methods run ``budget // 9`` trials (50 at the default, 450 iterations).
ASHA and BOHB get more trials than the budget can use; each step a trial runs is appended to
a log shared by the experiment's trials, which numbers it; the step past the budget raises,
and ``failure.fail_fast`` ends the experiment there.

Regret: the true (full-fidelity, noiseless) loss of the configuration tuner returns, minus the
optimum 0. The configuration is tuner's best trial (``TuneResult.best_trial_id``: the lowest last
reported ``loss`` among the trials that did not error; the trial ended by the budget stop
errored), re-evaluated at full fidelity: a trial ASHA or BOHB stopped early reports a
low-fidelity value, and what a user would do with it is train that configuration to the end.
Figures: median and interquartile range over ``--seeds`` seeds.

Sanity: every trial appends the config its train function got to a log; the benchmark counts
the configs whose keys are not the ones the space allows (conditional: exactly the branch's
active parameters; flat: all 15), whose values lie outside their distribution, or that hold
a value that is not a plain Python one. Expected: 0.

    python benchmarks/conditional.py --seeds 5 --budget 450 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    ROOT, add_budget_options, budget_runs, have_matplotlib, machine_line, run_on_local_ray,
    write_section)
from benchmarks.workloads import (COND_BRANCHES, COND_MAX_T, COND_OPTIMUM, COND_RECORD_BYTES, COND_WARMUP,
                                  conditional_active_keys, conditional_space, conditional_true_value,
                                  read_budget_records)

HEADING = "Conditional search spaces: conditions against the flattened space (`benchmarks/conditional.py`)"
ASHA = {"type": "asha", "grace_period": 1, "reduction_factor": 3}
SEARCHERS: dict[str, tuple[dict, dict]] = {
    "random": ({"algorithm": "random"}, {"type": "fifo"}),
    "tpe": ({"algorithm": "optuna"}, {"type": "fifo"}),
    "tpe+asha": ({"algorithm": "optuna"}, ASHA),
    "bohb": ({"algorithm": "bohb"}, {"type": "bohb", "reduction_factor": 3}),
}
SPACES = ("conditional", "flat")
BEST_BRANCH = "mlp"


def spec_for(searcher: str, space: str, seed: int, budget: int, max_t: int, storage: Path) -> dict:
    """The tuner spec of one experiment (a dict, as ``tune_model`` takes it)."""
    from benchmarks.search_efficiency import pause_points

    search, scheduler = SEARCHERS[searcher]
    search, scheduler = dict(search), dict(scheduler)
    if scheduler["type"] == "fifo":
        samples = budget // max_t  # full-fidelity trials: the budget in whole trials
    else:
        scheduler["max_t"] = max_t
        samples = budget  # more than the budget can use: the budget ends the experiment
    name = f"{searcher.replace('+', '_')}_{space}_{seed}"
    return {
        "name": name,
        "trainable": "benchmarks.workloads:conditional_objective",
        "metric": "loss",
        "mode": "min",
        "num_samples": samples,
        "seed": seed,
        "stop": {"training_iteration": max_t},
        "param_space": {**conditional_space(flat=space == "flat"), "max_t": max_t, "seed": seed,
                        "budget_file": str(storage / f"{name}.steps"), "budget": budget,
                        "config_log": str(storage / f"{name}.configs"),
                        "checkpoint_at": pause_points(search, scheduler, max_t)},
        "search": search,
        "scheduler": scheduler,
        "resources": {"cpu": 1},
        "reporting": {"cli": False, "tensorboard": False},
        "failure": {"fail_fast": True},
        "checkpoint": {"num_to_keep": 1},
        "storage": str(storage),
    }


def run_one(searcher: str, space: str, seed: int, budget: int, max_t: int, storage: Path) -> dict:
    """Run one experiment; return its step log, the configs its trials got, its seconds, and tuner's best trial."""
    from tuner import tune_model

    spec = spec_for(searcher, space, seed, budget, max_t, storage)
    start = time.perf_counter()
    ray_error, best_id, best_config = None, None, None
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
        best_id = result.best_trial_id
        best_config = {k: result.best_config[k] for k in ("model", "warmup") if k in result.best_config} \
            if result.best_config else None
    seconds = time.perf_counter() - start
    records = [(trial_id, step, *values) for trial_id, step, values in
               read_budget_records(spec["param_space"]["budget_file"], COND_RECORD_BYTES)]
    configs = []
    try:
        with open(spec["param_space"]["config_log"], encoding="utf-8") as f:
            configs = [json.loads(line) for line in f if line.strip()]
    except OSError:
        pass
    return {"searcher": searcher, "space": space, "seed": seed, "seconds": seconds, "records": records,
            "configs": configs, "tuner_best": best_id, "tuner_best_config": best_config, "ray_error": ray_error}


def score(records: list, budget: int, max_t: int, upto: int | None = None) -> dict:
    """The configuration tuner returns after ``upto`` iterations (default: the whole budget), re-evaluated.

    Args:
        records: The experiment's step log in the order the steps ran: ``(trial_id, step, loss,
            true_loss)``, the reported value and the configuration's true one.
        budget: The experiment's budget in iterations; a trial with a step past it ended on the
            budget stop (an errored trial: not a candidate).
        max_t: The last step (full fidelity).
        upto: Score the experiment as if it had stopped after this many iterations (a running
            trial counts with its latest value); the errored trials are only known at the end.

    Returns:
        ``best`` (trial id, the lowest last reported loss; ties to the smaller id, as
        :mod:`tuner.core.best`), ``regret`` (its true loss minus the optimum), ``best_step`` (its last
        step: below ``max_t`` when a scheduler stopped it early), ``trials``, ``iterations``.
    """
    end = budget if upto is None else min(upto, budget)
    stopped = {r[0] for r in records[budget:]} if upto is None else set()
    last: dict[str, tuple] = {}
    for r in records[:end]:
        last[r[0]] = r
    candidates = [t for t in last if t not in stopped]
    best = min(candidates, key=lambda t: (last[t][2], t)) if candidates else None
    return {"best": best, "regret": (last[best][3] - COND_OPTIMUM) if best else float("nan"),
            "best_step": last[best][1] if best else 0, "trials": len(last), "iterations": len(records[:end])}


def _space_params() -> dict[str, dict]:
    """Every parameter of the space (``/``-joined name -> distribution), for the domain check."""
    out = {f"model/{k}": d for _, params in COND_BRANCHES.values() for k, (d, _) in params.items()}
    out["model/name"] = {"type": "choice", "values": list(COND_BRANCHES)}
    out["warmup"] = COND_WARMUP[0]
    return out


def _in_domain(d: dict, value: Any) -> bool:
    if d["type"] == "choice":
        return any(value == v and type(value) is type(v) for v in d["values"])
    if d["type"].endswith("randint"):
        return type(value) is int and d["low"] <= value < d["high"]
    return type(value) is float and d["low"] <= value <= d["high"]


def violations(config: dict, space: str) -> list[str]:
    """What is wrong with one config a trial got (empty: nothing).

    Conditional space: its keys must be exactly :func:`benchmarks.workloads.conditional_active_keys`
    (the branch's active parameters, written from the toy's definition, not from tuner's
    conditions); flat space: every parameter. Every value must be a plain Python value (a
    numpy scalar is logged as ``{"__numpy__": ...}``) inside its distribution.
    """
    from tuner.core.params import flatten

    params = _space_params()
    flat = flatten(config)
    problems = []
    try:
        want = conditional_active_keys(config) if space == "conditional" else set(params)
    except (KeyError, TypeError, AttributeError) as err:
        return [f"no branch ({err!r})"]
    if set(flat) != want:
        extra, missing = sorted(set(flat) - want), sorted(want - set(flat))
        problems.append(f"keys: extra {extra}, missing {missing}")
    for key, value in flat.items():
        if key in params and not _in_domain(params[key], value):
            problems.append(f"{key} = {value!r} outside {params[key]}")
    return problems


def check_configs(configs: list[dict], space: str) -> tuple[int, int, list[str]]:
    """``(trials checked, trials whose config violates the space, the first few problems)``. A trial
    that started more than once (paused and resumed by BOHB's Hyperband) must get the same config
    every time."""
    starts: dict[str, list[dict]] = {}
    for entry in configs:
        starts.setdefault(entry["trial_id"], []).append(entry["config"])
    bad, examples = 0, []
    for trial_id, got in starts.items():
        problems = violations(got[0], space)
        if any(config != got[0] for config in got[1:]):
            problems.append(f"resumed with another config: {got}")
        if problems:
            bad += 1
            if len(examples) < 3:
                examples.append(f"{trial_id}: {'; '.join(problems)}")
    return len(starts), bad, examples


def lower_share(a: list[float], b: list[float]) -> float:
    """The share of pairs (x from ``a``, y from ``b``) with x < y, ties counting half: the probability
    that a run of ``a`` ends lower than one of ``b`` (the Mann-Whitney U statistic over len(a) len(b));
    0.5 when neither tends lower."""
    pairs = [(x < y) + 0.5 * (x == y) for x in a for y in b]
    return sum(pairs) / len(pairs) if pairs else float("nan")


def _quartiles(xs) -> tuple[float, float, float]:
    import numpy as np

    q1, q2, q3 = np.percentile(np.asarray(xs, dtype=float), [25, 50, 75])
    return float(q2), float(q1), float(q3)


def _branch_of(run: dict, trial_id: str | None) -> str | None:
    for entry in run["configs"]:
        if entry["trial_id"] == trial_id:
            return entry["config"]["model"]["name"]
    return None


def _run_all(args, searchers, spaces) -> tuple[list[dict], float]:
    def job(searcher, space, seed):
        def run(tmp: Path):
            r = run_one(searcher, space, seed, args.budget, args.max_t, tmp)
            s = score(r["records"], args.budget, args.max_t)
            n, bad, _ = check_configs(r["configs"], space)
            return r, (f"{searcher:9s} {space:11s} seed {seed}: {s['iterations']}/{args.budget} iterations, "
                       f"{s['trials']} trials, regret {s['regret']:.4f} ({_branch_of(r, s['best'])}), "
                       f"{bad}/{n} trials off the space, {r['seconds']:.1f} s")
        return run

    jobs = (job(searcher, space, seed) for seed in range(args.seeds) for searcher in searchers for space in spaces)
    return run_on_local_ray(args.num_cpus, "tuner-bench-cond-", jobs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_budget_options(parser, seeds=5, budget=450, max_t=COND_MAX_T, methods=SEARCHERS, per="method and space",
                       logs="logs")
    parser.add_argument("--spaces", default=",".join(SPACES), help="comma-separated, of: conditional, flat")
    args = parser.parse_args(argv)
    searchers = [m.strip() for m in args.methods.split(",") if m.strip()]
    spaces = [s.strip() for s in args.spaces.split(",") if s.strip()]
    unknown = [m for m in searchers if m not in SEARCHERS] + [s for s in spaces if s not in SPACES]
    if unknown:
        parser.error(f"unknown method(s) or space(s) {unknown}; choose from {list(SEARCHERS)} and {list(SPACES)}")
    if args.budget < args.max_t:
        parser.error(f"--budget {args.budget} is less than one full trial ({args.max_t} iterations)")

    runs, total_s, load_before, load_after, version = budget_runs(args, lambda: _run_all(args, searchers, spaces))
    runs = [r for r in runs if r["searcher"] in searchers and r["space"] in spaces]

    import numpy as np

    points = np.unique(np.linspace(args.max_t, args.budget, 30).astype(int))
    rows, curves = [], {}
    medians: dict[tuple[str, str], float] = {}
    regrets: dict[tuple[str, str], list[float]] = {}
    checked = bad_total = mismatched = compared = 0
    examples: list[str] = []
    for searcher in searchers:
        for space in spaces:
            mine = [r for r in runs if r["searcher"] == searcher and r["space"] == space]
            if not mine:
                continue
            scores = [score(r["records"], args.budget, args.max_t) for r in mine]
            for r, s in zip(mine, scores):
                if r.get("tuner_best") is not None:
                    compared += 1
                    true_best = conditional_true_value(r["tuner_best_config"]) - COND_OPTIMUM
                    if r["tuner_best"] != s["best"] or abs(true_best - s["regret"]) > 1e-9:
                        mismatched += 1
                n, bad, ex = check_configs(r["configs"], space)
                checked, bad_total = checked + n, bad_total + bad
                examples += [f"{searcher} {space} seed {r['seed']}: {e}" for e in ex]
            reg, reg_lo, reg_hi = _quartiles([s["regret"] for s in scores])
            third, third_lo, third_hi = _quartiles(
                [score(r["records"], args.budget, args.max_t, upto=args.budget // 3)["regret"] for r in mine])
            medians[(searcher, space)] = reg
            regrets[(searcher, space)] = [s["regret"] for s in scores]
            curves[(searcher, space)] = np.array([[score(r["records"], args.budget, args.max_t, upto=int(p))["regret"]
                                                   for p in points] for r in mine])
            share = [np.mean([e["config"]["model"]["name"] == BEST_BRANCH
                              for e in {e["trial_id"]: e for e in r["configs"]}.values()]) for r in mine]
            in_best = sum(_branch_of(r, s["best"]) == BEST_BRANCH for r, s in zip(mine, scores))
            rows.append(
                f"| {searcher} | {space} | {reg:.3f} [{reg_lo:.3f}, {reg_hi:.3f}] | "
                f"{third:.3f} [{third_lo:.3f}, {third_hi:.3f}] | {in_best}/{len(mine)} | "
                f"{100 * float(np.median(share)):.0f} % | "
                f"{np.median([s['trials'] for s in scores]):.0f} | "
                f"{np.median([s['iterations'] for s in scores]):.0f} | "
                f"{np.median([r['seconds'] for r in mine]):.1f} |")

    ratios = []
    for searcher in searchers:
        if (searcher, "conditional") in medians and (searcher, "flat") in medians:
            c, f = medians[(searcher, "conditional")], medians[(searcher, "flat")]
            p = lower_share(regrets[(searcher, "conditional")], regrets[(searcher, "flat")])
            ratios.append(f"{searcher} {c:.3f} against {f:.3f}" + (f" ({c / f:.2f} x" if f > 0 else " (")
                          + f"; conditional lower in {100 * p:.0f} % of the pairs of seeds)")
    dims = len(_space_params())
    lines = [
        machine_line(load_before, load_after, version),
        f"Command: `python benchmarks/conditional.py --seeds {args.seeds} --budget {args.budget}"
        f"{'' if args.max_t == COND_MAX_T else f' --max-t {args.max_t}'}"
        f"{'' if searchers == list(SEARCHERS) else f' --methods {args.methods}'}"
        f"{'' if spaces == list(SPACES) else f' --spaces {args.spaces}'}`; {len(runs)} experiments in "
        f"{total_s / 60:.1f} min on one local Ray with {args.num_cpus} CPUs (1 CPU a trial). Budget: "
        f"{args.budget} training iterations per experiment; FIFO methods run {args.budget // args.max_t} "
        f"full-fidelity trials ({args.budget // args.max_t * args.max_t} iterations), ASHA and BOHB stop at "
        "the budget.",
        "",
        "Problem: a sub-space choice `model` among linear (2 parameters, floor 0.3), forest (3, floor 0.2), "
        "cnn (3, floor 0.1) and mlp (width, dropout, lr, optimizer, and momentum when sgd or beta2 when adam; "
        "floor 0), with warmup when model is cnn or mlp; a branch's loss is its floor plus the squared distance "
        "of its active parameters to their targets, each scaled to [0, 1] (sgd +0.04); optimum 0, in mlp. "
        f"{args.max_t} steps a trial, reporting true + (1 - s)(true + 0.2 |z|), s = log t / log {args.max_t}. "
        "*conditional*: a trial's config holds the branch taken, 3 to 7 parameters; *flat*: `model.name` a "
        f"plain choice and all {dims} parameters always sampled, the trainable ignoring the other branches'. "
        "Regret: the true loss of tuner's best trial (lowest last reported loss; the budget-stopped trial "
        "errored), re-evaluated at full fidelity, minus 0. Figures: median [interquartile range] over "
        f"{args.seeds} seeds; \"best in mlp\" = seeds whose returned configuration is in the optimum's branch; "
        "\"mlp trials\" = the median share of an experiment's trials that sampled mlp.",
        "",
        "| searcher | space | regret at the budget | regret at 1/3 of the budget | best in mlp | mlp trials | "
        "trials | iterations used | s / experiment |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Median regret, conditional against flat: " + "; ".join(ratios) + ". Random search draws the "
        "branch's parameters from the same distributions in both forms (the flat form's others change nothing), "
        "so its pair differs by chance only: the spread between runs at this number of seeds.",
        "",
        f"Conditions respected: {bad_total} of {checked} trials got a config that violates the space "
        "(keys other than the branch's active parameters, or all parameters when flat; a value outside its "
        "distribution or not a plain Python value; a resumed trial with another config)."
        + (" First: " + " | ".join(examples) if examples else ""),
    ]
    if compared:
        lines += ["", f"Cross-check: in {compared - mismatched} of {compared} experiments the best trial scored "
                  "here is `TuneResult.best_trial_id`, and the true loss of `TuneResult.best_config` is its regret."]
    crashed = sum(1 for r in runs if r.get("ray_error"))
    if crashed:
        lines += ["", f"In {crashed} of {len(runs)} experiments Ray's `ResultGrid` raised after the budget stop "
                  "(a trial still PENDING when `fail_fast` ended the experiment); their step logs are complete "
                  "and are scored."]
    if have_matplotlib() and curves:
        path = _plot(points, curves, args.img_dir)
        lines += ["", f"![Conditional against flat: regret]"
                  f"({os.path.relpath(path, (args.output or ROOT / 'docs' / 'x').parent)})"]
    write_section(args.output, HEADING, "\n".join(lines))


def _plot(points, curves: dict, img_dir: Path) -> Path:
    """One panel per searcher: the median regret against the budget used, conditional (solid) and
    flat (dashed), each with its interquartile band."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    searchers = list(dict.fromkeys(searcher for searcher, _ in curves))
    cols = min(2, len(searchers))
    rows = (len(searchers) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.7 * rows + 0.4), dpi=110, sharex=True, sharey=True,
                             squeeze=False)
    for ax, searcher in zip(axes.flat, searchers):
        for space, color, style in (("conditional", "tab:blue", "-"), ("flat", "tab:orange", "--")):
            curve = curves.get((searcher, space))
            if curve is None:
                continue
            q1, q2, q3 = np.percentile(curve, [25, 50, 75], axis=0)
            ax.plot(points, np.maximum(q2, 1e-3), color=color, ls=style, lw=1.6, label=space)
            ax.fill_between(points, np.maximum(q1, 1e-3), np.maximum(q3, 1e-3), color=color, alpha=0.15)
        ax.set_title(searcher, fontsize=10)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.25)
    for ax in axes.flat[len(searchers):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("budget used (training iterations)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("regret (median, IQR)", fontsize=8)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Conditional toy: the space with conditions against it flattened", fontsize=10)
    fig.tight_layout()
    path = img_dir / "conditional_toy.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
