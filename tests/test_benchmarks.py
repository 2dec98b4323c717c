"""The benchmarks run at a tiny size and write their figures (no time is asserted)."""

import argparse
import importlib
import importlib.util
import json
import math
import re
import subprocess
import sys

import pytest

from tests.fixtures.paths import ROOT


def _bench(*args, timeout=600):
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _bench_main(ray_local, script, *args):
    """Run ``benchmarks/<script>.py``'s ``main`` in this process, on the session's Ray (``ray_local``), which it
    leaves running (benchmarks/_common.py: local_ray): the script's own Ray start would cost more than its runs."""
    module = importlib.import_module(f"benchmarks.{script}")
    assert ray_local.is_initialized()
    module.main([str(a) for a in args])


def _table_rows(text, first_cell):
    return [line for line in text.splitlines() if line.startswith(f"| {first_cell}")]


def _numbers(row):
    return [float(x) for x in re.findall(r"(?<![\w.])-?\d+\.\d+", row)]


def test_trial_startup_benchmark_writes_its_table(tmp_path):
    out = tmp_path / "bench.md"
    _bench("benchmarks/trial_startup.py", "--trials", "2", "--skip-ddp", "--output", out, timeout=300)
    text = out.read_text()
    assert "## Per-trial start-up cost" in text
    rows = [line for line in text.splitlines() if line.startswith("| single process")]
    assert len(rows) == 2 and {"| on |" in r for r in rows} == {True, False}


# --------------------------------------------------------------------------- pieces, no Ray


def test_proc_cpu_names_each_kind_of_process():
    """benchmarks/proc_cpu.py --by-kind: Ray's daemons by script or binary (the raylet's command line names the
    agents' scripts, and is still the raylet), a worker by its actor's class, the tuner CLI however started."""
    from benchmarks.proc_cpu import kind_of

    venv = "/v/lib/python3.11/site-packages/ray"
    assert kind_of(f"{venv}/core/src/ray/raylet/raylet --dashboard_agent_command=python {venv}/dashboard/agent.py") \
        == "Ray: raylet"
    assert kind_of(f"/v/bin/python -u {venv}/dashboard/agent.py --node-ip-address=1") == "Ray: dashboard agent"
    assert kind_of(f"/v/bin/python -u {venv}/_private/log_monitor.py --session-dir=/tmp") == "Ray: log monitor"
    assert kind_of("ray::ImplicitFunc.train") == "ray::ImplicitFunc" == kind_of("ray::ImplicitFunc")
    assert kind_of("/v/bin/python -m tuner run spec.yaml") == "tuner CLI" == kind_of("/v/bin/python /v/bin/tuner run")
    assert kind_of("/v/bin/python -m pytest -x") == "python -m pytest"
    assert kind_of("/v/bin/python benchmarks/overhead.py --trials 2") == "python overhead.py"
    assert kind_of("") == "?"


def test_objectives_match_their_published_optima():
    from benchmarks.workloads import HARTMANN6_OPTIMUM_X, OBJECTIVES, mf_hartmann6

    assert mf_hartmann6(HARTMANN6_OPTIMUM_X, 100) == pytest.approx(-3.32237, abs=1e-5)
    # Lower fidelities only add bias and noise upwards (mf-prior-bench's generator).
    assert all(mf_hartmann6(HARTMANN6_OPTIMUM_X, z) > -3.32237 for z in (1, 3, 9, 27, 81))
    mfh = OBJECTIVES["mfh6"]
    assert mfh.true_value(dict(zip([f"X_{i}" for i in range(6)], HARTMANN6_OPTIMUM_X))) == pytest.approx(
        mfh.optimum, abs=1e-5)
    ones = OBJECTIVES["counting_ones"]
    best = {**{f"c_{i}": 1 for i in range(8)}, **{f"x_{i}": 1.0 for i in range(8)}}
    assert ones.true_value(best) == ones.optimum == -16
    half = {**{f"c_{i}": 0 for i in range(8)}, **{f"x_{i}": 0.5 for i in range(8)}}
    values = ones.values(half, seed=0)
    assert values(81) == pytest.approx(-4.0, abs=0.2) and values(1) == ones.values(half, seed=0)(1)
    lc = OBJECTIVES["lc_toy"]
    assert lc.optimum == pytest.approx(1 / 19.9 - 10)
    assert lc.values({"width": 20.0, "height": -100.0}, 0)(100) == pytest.approx(lc.optimum)


def test_regret_follows_the_trial_tuner_would_return():
    from benchmarks.search_efficiency import budget_to_reach, regret_curve

    # (trial, reported value, true full-fidelity value); optimum 0.
    steps = [("a", 5.0, 4.0), ("b", 3.0, 2.0), ("a", 2.5, 1.0), ("b", 6.0, 2.0), ("c", 7.0, 0.5)]
    assert regret_curve(steps, 0.0, 6) == [4.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    assert budget_to_reach([4.0, 2.0, 1.0], 2.0, [10, 20, 30]) == 20
    assert math.isinf(budget_to_reach([4.0, 3.0], 1.0, [10, 20]))


def test_optuna_regret_follows_optunas_best_completed_trial():
    from benchmarks.search_efficiency import optuna_regret_curve, regret_curve

    # (trial, reported value, true value); optimum 0. "a" completes at step 2 (final 5.0), "b" is
    # pruned at 1.0 (Optuna never returns it), "c" completes at step 5 with a better final value.
    steps = [("a", 6.0, 4.0), ("a", 5.0, 4.0), ("b", 1.0, 3.0), ("c", 8.0, 2.0), ("c", 4.0, 2.0)]
    assert optuna_regret_curve(steps, [(2, "a"), (5, "c")], 0.0, 6) == [4.0, 4.0, 4.0, 4.0, 2.0, 2.0]
    # Tuner's rule takes the pruned trial's latest value; before a trial completes, both agree.
    assert regret_curve(steps, 0.0, 5)[2] == 3.0
    assert optuna_regret_curve(steps, [(5, "c")], 0.0, 5)[:4] == regret_curve(steps, 0.0, 5)[:4]


def test_optuna_peer_spends_the_budget_exactly_and_prunes():
    """Optuna's own loop (no Ray): every step counted, pruned or not, and the study cut at the budget."""
    from collections import Counter

    from benchmarks.peers import PEERS, run_peer
    from benchmarks.search_efficiency import optuna_regret_curve

    for peer in PEERS:
        run = run_peer("lc_toy", peer, seed=0, budget_steps=1050)  # 10.5 full trials
        steps, completed = run["steps"], run["completed"]
        assert len(steps) == 1050 and run["trials"] == len({s[0] for s in steps})
        per_trial = Counter(s[0] for s in steps)
        assert {per_trial[t] for _, t in completed} == {100}  # a completed trial ran every step
        assert len(completed) < run["trials"] - 1  # some were pruned early
        assert all(steps[rank - 1][0] == t for rank, t in completed)
        # Trials run one at a time: each trial's steps are contiguous, and only the last may be cut short.
        order = [t for i, (t, _, _) in enumerate(steps) if i == 0 or steps[i - 1][0] != t]
        assert len(order) == len(per_trial)
        best = min((steps[rank - 1][1], steps[rank - 1][2]) for rank, _ in completed)
        assert optuna_regret_curve(steps, completed, -1.0, 1050)[-1] == best[1] + 1.0
    # The same seed, the same study (HyperbandPruner's brackets hash the study's name).
    again = run_peer("lc_toy", "peer-optuna+hyperband", seed=0, budget_steps=1050)
    assert again["steps"] == run_peer("lc_toy", "peer-optuna+hyperband", seed=0, budget_steps=1050)["steps"]


def test_iqm_and_sections(tmp_path):
    import numpy as np

    from benchmarks._common import iqm, iqm_bootstrap, write_section

    a = np.array([[1.0], [2.0], [3.0], [4.0], [100.0], [0.0], [2.0], [3.0]])
    assert float(iqm(a)[0]) == pytest.approx(np.mean(np.sort(a[:, 0])[2:6]))
    mid, low, high = iqm_bootstrap(a, reps=200)
    assert low[0] <= mid[0] <= high[0]
    doc = tmp_path / "b.md"
    doc.write_text("# Benchmarks\n\n## One\n\nold\n\n## Two\n\nkept\n")
    write_section(doc, "One", "new")
    write_section(doc, "Three", "added")
    text = doc.read_text()
    assert "old" not in text and "new" in text and "kept" in text and text.index("Two") < text.index("Three")


# --------------------------------------------------------------------------- each benchmark, tiny


@pytest.mark.slow
def test_overhead_benchmark_writes_ratios_and_validate_time(tmp_path):
    out = tmp_path / "bench.md"
    _bench("benchmarks/overhead.py", "--trials", "4", "--results", "2", "--pairs", "1", "--workloads",
           "random + ASHA", "--validate-repeats", "1", "--output", out)
    text = out.read_text()
    assert "## Overhead against raw Ray Tune" in text and "Machine: " in text
    rows = _table_rows(text, "random + ASHA")
    assert len(rows) == 2 and all(len(_numbers(r)) >= 3 for r in rows)
    assert re.search(r"`tuner validate` .*median \d+\.\d+ s", text)
    assert "started **no** Ray" in text


@pytest.mark.slow
def test_command_overhead_benchmark_writes_both_kinds_of_trial(ray_local, tmp_path):
    """benchmarks/command_overhead.py --quick on the session's Ray: a function trial and a command trial of the
    same workload, each row with its figures from Ray's results and the workload's stamps, and the processes'
    start-ups alone."""
    out = tmp_path / "bench.md"
    _bench_main(ray_local, "command_overhead", "--quick", "--output", out)
    text = out.read_text()
    assert "## Command trials against function trials" in text and "Machine: " in text
    for variant in ("function", "command"):
        (row,) = _table_rows(text, f"{variant} |")
        assert len(_numbers(row)) == 9 and not re.search(r"\bnan\b", row), row
    processes = [r for r in text.splitlines() if r.startswith("| `python") or r.startswith("| a command trial")]
    assert len(processes) == 3 and all(len(_numbers(r)) >= 3 for r in processes)


@pytest.mark.slow
def test_scale_benchmark_writes_ratio_rss_folder_and_report_time(tmp_path):
    out = tmp_path / "bench.md"
    # Side B (benchmarks/raw_ray.py) runs in the overhead test; here tuner's side only, one size.
    _bench("benchmarks/scale.py", "--trials", "4", "--report-repeats", "1", "--reports", "table", "--skip-raw",
           "--output", out, "--save-runs", tmp_path / "runs.json")
    text = out.read_text()
    assert "## Bookkeeping at scale" in text and "Machine: " in text and "### 4 trials" in text
    (row,) = _table_rows(text, "A: tuner run")
    assert len(_numbers(row)) >= 5
    assert re.search(r"`tuner report` on experiment A: median \d+\.\d+ s", text)
    folder = json.loads((tmp_path / "runs.json").read_text())["runs"][0]["a"]["folder"]
    parts, total = folder["parts"], folder["total"]
    assert folder["trial_folders"] == 4 and parts["trial folders"][1] >= 4 * 3  # params, result, progress
    assert parts[next(p for p in parts if p.startswith("Ray's experiment state"))][1] == 1
    ray_state = [parts[p][1] for p in parts if p.startswith("Ray's")]  # the experiment, searcher, callback states
    assert parts[next(p for p in parts if p.startswith("tuner's copies"))][1] == sum(ray_state) >= 2
    assert [sum(v[i] for k, v in parts.items() if k != "trial folders") for i in (0, 1)] == total


def _scale_run(n, wall, rss_mib, folder_mib, report_s, b=True):
    from benchmarks.scale import PARTS, RAY_STATE, TRIALS

    def side(w):
        parts = {p: [0, 0] for p in PARTS}
        parts[TRIALS] = [int(folder_mib * 2**20 * 0.2), 5 * n]
        parts[RAY_STATE] = [int(folder_mib * 2**20 * 0.8), 1]
        return {"load": 0.5, "wall_s": w, "fit_s": w - 5, "cpu_s": n * 0.02, "maxrss_kb": rss_mib * 1024,
                "folder": {"parts": parts, "trial_folders": n, "other_names": [], "disk_bytes": 4096 * 5 * n,
                           "total": [int(folder_mib * 2**20), 5 * n + 1]}}

    return {"trials": n, "ideal_s": n / 2, "a": side(wall), "b": side(wall * 1.01) if b else None,
            "reports": {"table": [report_s] * 3, "json": [report_s * 2] * 3, "html": [report_s * 4]}}


def test_scale_growth_table_names_how_each_figure_grows():
    """The growth table from two sizes (no run): ratio, exponent, and flat / linear / superlinear."""
    from benchmarks.scale import growth_kind, render

    assert growth_kind(5.0, 5.0)[1] == "linear" and growth_kind(1.1, 5.0)[1] == "flat"
    assert growth_kind(25.0, 5.0) == (pytest.approx(2.0), "superlinear")
    assert growth_kind(2.0, 5.0)[1] == "sublinear"
    data = {"runs": [_scale_run(200, 110.0, 450, 2.0, 0.8), _scale_run(1000, 540.0, 460, 10.0, 0.8 * 25)],
            "num_cpus": 2, "load_before": 0.3, "load_after": 0.4, "version": "tuner abc", "total_s": 1300.0}
    text = render(data)
    assert "### 200 trials (ideal 100 s)" in text and "### 1,000 trials (ideal 500 s)" in text
    assert "### Growth from 200 to 1,000 trials (5 x)" in text

    def grows(label):
        (row,) = [r for r in text.splitlines() if r.startswith(f"| {label} |")]
        return row.split(" | ")[5]

    assert grows("wall (s)") == "linear" and grows("driver peak RSS (MiB)") == "flat"
    assert grows("experiment folder (MiB)") == "linear" and grows("`tuner report` (s)") == "superlinear"
    assert grows("wall / ideal") == "flat"  # 1.100 -> 1.080: the wall grows as the ideal does
    (wall_row,) = _table_rows(text, "wall / ideal")
    assert "1.100 (1.111)" in wall_row and "1.080 (1.091)" in wall_row


@pytest.mark.slow
def test_search_efficiency_benchmark_writes_regret_tables_and_plots(ray_local, tmp_path):
    out = tmp_path / "bench.md"
    img = tmp_path / "img"
    saved = tmp_path / "runs.json"
    _bench_main(ray_local, "search_efficiency", "--seeds", "1", "--budget", "0.3", "--objectives", "lc_toy",
           "--methods", "random+fifo,random+asha,peer-optuna+hyperband", "--bootstrap", "50", "--output", out,
           "--img-dir", img, "--save-runs", saved)
    text = out.read_text()
    assert "## Search efficiency" in text and "Machine: " in text
    for method in ("random+fifo", "random+asha", "peer-optuna+hyperband"):
        (row,) = _table_rows(text, method)
        assert len(_numbers(row)) >= 4
    assert "Target (ASHA and BOHB" in text and "Target (issue 18)" in text
    (target,) = _table_rows(text, "Ray Tune learning-curve toy")
    assert "peer-optuna+hyperband" in target
    # A peer added to the saved runs: only it runs (no Ray), the others are read back as they were.
    out2 = tmp_path / "bench2.md"
    _bench_main(ray_local, "search_efficiency", "--seeds", "1", "--objectives", "lc_toy", "--methods",
           "random+fifo,random+asha,peer-optuna+hyperband,peer-optuna+median", "--bootstrap", "50",
           "--output", out2, "--img-dir", img, "--load-runs", saved, "--run-missing")
    text2 = out2.read_text()
    assert _table_rows(text2, "random+asha") == _table_rows(text, "random+asha")
    assert len(_table_rows(text2, "peer-optuna+median")) == 1 and "4 experiments" in text2
    if importlib.util.find_spec("matplotlib") is None:
        return
    assert (img / "search_efficiency_lc_toy.png").stat().st_size > 0
    assert "search_efficiency_lc_toy.png" in text


@pytest.mark.slow
def test_mnist_benchmark_writes_both_schedulers(ray_local, tmp_path):
    out = tmp_path / "bench.md"
    _bench_main(ray_local, "mnist_schedulers", "--seeds", "0", "--trials", "1", "--epochs", "1", "--limit-train",
           "200", "--accuracy", "0.05", "--output", out)
    text = out.read_text()
    assert "## A real training run" in text and "Machine: " in text
    for scheduler in ("asha", "fifo"):
        rows = _table_rows(text, scheduler)
        assert len(rows) == 2 and all(len(_numbers(r)) >= 2 for r in rows)


def test_schedule_toy_needs_a_schedule():
    """The PBT toy: no fixed learning rate gets far; following the best learning rate does (Ray's pbt_function)."""
    from benchmarks.pbt_schedule import best_fixed, oracle

    _, fixed = best_fixed(60)
    assert oracle(60) == pytest.approx(60.0)
    assert fixed < 0.6 * oracle(60)


@pytest.mark.slow
def test_pbt_benchmark_writes_every_method(ray_local, tmp_path):
    out = tmp_path / "bench.md"
    _bench_main(ray_local, "pbt_schedule", "--seeds", "1", "--population", "2", "--max-t", "6", "--output", out)
    text = out.read_text()
    assert "## PBT and PB2" in text
    for method in ("random+fifo", "random+asha", "pbt", "pb2"):
        rows = _table_rows(text, method + " |")
        assert len(rows) == 1 and len(_numbers(rows[0])) >= 3, (method, text)


def test_zdt1_fidelities_end_at_the_true_function():
    """ZDT1's front is f2 = 1 - sqrt(f1); the low fidelities only overstate f2, less with every step."""
    from benchmarks.workloads import ZDT1_MAX_HYPERVOLUME, ZDT1_MAX_T, ZDT1_REFERENCE, zdt1, zdt1_fidelity
    from tuner.search.pareto import hypervolume

    assert zdt1([0.25, 0, 0, 0, 0, 0]) == (0.25, pytest.approx(0.5))
    assert zdt1([1.0] * 6) == (1.0, pytest.approx(10 - math.sqrt(10)))
    xs = [0.3, 0.2, 0.1, 0.4, 0.5, 0.2]
    curve = [zdt1_fidelity(xs, t, seed=3) for t in range(1, ZDT1_MAX_T + 1)]
    assert {f1 for f1, _ in curve} == {0.3}
    f2s = [f2 for _, f2 in curve]
    assert f2s == sorted(f2s, reverse=True) and f2s[0] > f2s[-1] == pytest.approx(zdt1(xs)[1])
    assert curve != [zdt1_fidelity(xs, t, seed=4) for t in range(1, ZDT1_MAX_T + 1)]  # the noise is seeded
    # The constant is the hypervolume of the true front (sampled densely) up to the reference point.
    front = [zdt1([i / 4000] + [0.0] * 5) for i in range(4001)]
    assert hypervolume(front, [("f1", "min"), ("f2", "min")], ZDT1_REFERENCE) == pytest.approx(
        ZDT1_MAX_HYPERVOLUME, abs=1e-3)


def test_multiobjective_score_reevaluates_tuners_front():
    from benchmarks.multiobjective import score
    from benchmarks.workloads import ZDT1_MAX_HYPERVOLUME, ZDT1_REFERENCE
    from tuner.search.pareto import hypervolume

    # (trial, step, reported f1, f2, true f1, f2); budget 5, max_t 3.
    records = [("a", 1, 0.2, 9.0, 0.2, 3.0), ("b", 1, 0.5, 2.0, 0.5, 1.0), ("a", 2, 0.2, 6.0, 0.2, 3.0),
               ("c", 1, 0.1, 9.5, 0.1, 9.4), ("a", 3, 0.2, 3.0, 0.2, 3.0),
               ("c", 2, 0.1, 0.1, 0.1, 0.1)]  # past the budget: c errored, off the front
    s = score(records, budget=5, max_t=3)
    assert s["front"] == ["a", "b"] and s["below_max_t"] == 1  # b was stopped at step 1: re-evaluated
    assert s["iterations"] == 5 and s["trials"] == 3
    objectives = [("f1", "min"), ("f2", "min")]
    expected = hypervolume([(0.2, 3.0), (0.5, 1.0)], objectives, ZDT1_REFERENCE)
    assert s["hypervolume"] == pytest.approx(expected) and s["gap"] == pytest.approx(ZDT1_MAX_HYPERVOLUME - expected)
    # Stopped after 2 iterations: a and b at step 1, neither dominating the other.
    early = score(records, budget=5, max_t=3, upto=2)
    assert early["front"] == ["a", "b"] and early["iterations"] == 2 and early["below_max_t"] == 2


@pytest.mark.slow
def test_multiobjective_benchmark_writes_its_table_and_plot(ray_local, tmp_path):
    out = tmp_path / "bench.md"
    img = tmp_path / "img"
    methods = ("random", "tpe+asha[f2]")  # random search; Optuna's multi-objective TPE with ASHA on the second
    _bench_main(ray_local, "multiobjective", "--seeds", "1", "--budget", "27", "--methods", ",".join(methods),
           "--output", out, "--img-dir", img)
    text = out.read_text()
    assert "## Several objectives: ZDT1" in text and "Machine: " in text
    for method in methods:
        (row,) = _table_rows(text, method + " |")
        numbers = _numbers(row)
        assert len(numbers) >= 7 and 0 < numbers[0] < 11.77, row  # the gap is positive and below the maximum
    assert "Ranking by median gap" in text
    # The front scored from the step log is the one tuner returns (TuneResult.pareto_front).
    assert re.search(r"Cross-check: in (\d+) of \1 experiments", text), text
    if importlib.util.find_spec("matplotlib") is None:
        return
    assert (img / "multiobjective_zdt1.png").stat().st_size > 0


def test_conditional_toy_has_its_optimum_in_one_branch():
    """The toy's known optimum: 0 in mlp (adam, every parameter at its target); every other branch's best
    is its floor; the parameters of branches not taken change nothing (the flat space's)."""
    from benchmarks.workloads import (
        COND_BRANCHES, COND_MAX_T, COND_OPTIMUM, COND_OPTIMUM_CONFIG, COND_SGD_PENALTY, COND_WARMUP,
        conditional_fidelity, conditional_true_value)

    assert conditional_true_value(COND_OPTIMUM_CONFIG) == COND_OPTIMUM == 0.0
    at_target = {b: {"name": b, **{k: t for k, (_, t) in params.items() if t is not None}}
                 for b, (_, params) in COND_BRANCHES.items()}
    floors = {}
    for branch, model in at_target.items():
        if branch == "mlp":
            model["optimizer"] = "adam"
            model.pop("momentum")
        floors[branch] = conditional_true_value({"model": model, "warmup": COND_WARMUP[1]})
    assert floors == {b: pytest.approx(f) for b, (f, _) in COND_BRANCHES.items()}
    assert min(floors, key=floors.get) == "mlp" and sorted(floors.values())[1] > 0.05
    # Off the target, the loss grows; sgd at its best momentum costs the penalty.
    mlp = COND_OPTIMUM_CONFIG["model"]
    for key, value in (("width", 1024), ("dropout", 0.8), ("lr", 1e-5), ("beta2", 0.9)):
        assert conditional_true_value({"model": {**mlp, key: value}, "warmup": 0.1}) > 0.05, key
    assert conditional_true_value({"model": mlp, "warmup": 0.3}) > 0.0
    sgd = {k: v for k, v in mlp.items() if k != "beta2"} | {"optimizer": "sgd", "momentum": 0.9}
    assert conditional_true_value({"model": sgd, "warmup": 0.1}) == pytest.approx(COND_SGD_PENALTY)
    # The flat space's config: every branch's parameters, the others ignored.
    flat = {"model": {**at_target["linear"], **at_target["forest"], **at_target["cnn"], "alpha": 1.0,
                      "channels": 8, **mlp, "momentum": 0.0}, "warmup": 0.1}
    assert conditional_true_value(flat) == 0.0
    # The learning curve: too high early, shrinking, the true value at max_t.
    curve = [conditional_fidelity(0.25, t, z=-0.7) for t in range(1, COND_MAX_T + 1)]
    assert curve == sorted(curve, reverse=True) and curve[0] > 0.5 and curve[-1] == pytest.approx(0.25)


def test_conditional_toy_keys_agree_with_tuners_space():
    """The benchmark's own rule for which keys a config holds is the one tuner's conditions give the
    spec (``tuner.spec.conditions.Space``), on sampled configs of every branch and optimizer."""
    import random

    from benchmarks.conditional import violations
    from benchmarks.workloads import conditional_active_keys, conditional_space
    from tuner.core.params import nest
    from tuner.spec import load_spec

    space = load_spec({"trainable": "benchmarks.workloads:conditional_objective", "metric": "loss", "mode": "min",
                       "param_space": conditional_space()}).space
    rng = random.Random(0)

    def draw(p):
        d = p.dist
        if d.type == "choice":
            return rng.choice(list(d.values))
        if d.type in ("randint", "lograndint"):
            return rng.randrange(d.low, d.high)
        return rng.uniform(d.low, d.high)

    seen = set()
    for _ in range(200):
        flat = space.sample(draw)
        config = nest(flat)
        assert set(flat) == conditional_active_keys(config)
        assert violations(config, "conditional") == []
        seen.add((config["model"]["name"], config["model"].get("optimizer")))
    assert seen == {("linear", None), ("forest", None), ("cnn", None), ("mlp", "sgd"), ("mlp", "adam")}
    assert len(load_spec({"trainable": "benchmarks.workloads:conditional_objective", "param_space":
                          conditional_space(flat=True)}).space.params) == 15


def test_conditional_benchmark_finds_configs_off_the_space():
    from benchmarks.conditional import check_configs, violations
    from benchmarks.workloads import COND_OPTIMUM_CONFIG

    mlp = COND_OPTIMUM_CONFIG["model"]
    assert violations(COND_OPTIMUM_CONFIG, "conditional") == []
    assert "extra ['model/momentum']" in violations({"model": {**mlp, "momentum": 0.5}, "warmup": 0.1},
                                                      "conditional")[0]
    assert "missing ['warmup']" in violations({"model": mlp}, "conditional")[0]
    assert violations({"model": {"name": "linear", "alpha": 0.1, "l1_ratio": 0.5}, "warmup": 0.1},
                      "conditional")  # warmup belongs to cnn and mlp only
    assert violations({"model": {**mlp, "width": {"__numpy__": "np.int64(256)"}}, "warmup": 0.1}, "conditional")
    assert violations({"model": {**mlp, "width": 4096}, "warmup": 0.1}, "conditional")
    assert violations(COND_OPTIMUM_CONFIG, "flat")  # flat: every parameter must be there
    configs = [{"trial_id": "a", "config": COND_OPTIMUM_CONFIG}, {"trial_id": "b", "config": COND_OPTIMUM_CONFIG},
               {"trial_id": "b", "config": {"model": {**mlp, "dropout": 0.3}, "warmup": 0.1}}]
    trials, bad, examples = check_configs(configs, "conditional")
    assert (trials, bad) == (2, 1) and "resumed with another config" in examples[0]


def test_conditional_regret_follows_the_trial_tuner_returns():
    from benchmarks.conditional import lower_share, score

    # (trial, step, reported loss, true loss); budget 5, max_t 3.
    records = [("a", 1, 0.9, 0.3), ("b", 1, 0.6, 0.2), ("a", 2, 0.5, 0.3), ("c", 1, 0.2, 0.01),
               ("a", 3, 0.3, 0.3), ("c", 2, 0.05, 0.01)]  # c's second step is past the budget: c errored
    s = score(records, budget=5, max_t=3)
    assert s["best"] == "a" and s["regret"] == pytest.approx(0.3) and s["best_step"] == 3
    assert s["trials"] == 3 and s["iterations"] == 5
    early = score(records, budget=5, max_t=3, upto=4)  # c at step 1 (0.2) is the best so far
    assert early["best"] == "c" and early["regret"] == pytest.approx(0.01)
    # The share of pairs of runs in which the first form ends lower (ties half).
    assert lower_share([0.1, 0.3], [0.2, 0.3]) == pytest.approx((1 + 1 + 0 + 0.5) / 4)


@pytest.mark.slow
def test_conditional_benchmark_writes_its_table_and_plot(ray_local, tmp_path):
    out = tmp_path / "bench.md"
    img = tmp_path / "img"
    _bench_main(ray_local, "conditional", "--seeds", "1", "--budget", "18", "--methods", "random,bohb",
           "--output", out, "--img-dir", img)
    text = out.read_text()
    assert "## Conditional search spaces" in text and "Machine: " in text
    for searcher in ("random", "bohb"):
        for space in ("conditional", "flat"):
            (row,) = _table_rows(text, f"{searcher} | {space} |")
            numbers = _numbers(row)
            assert len(numbers) >= 5 and 0 <= numbers[0] < 3, row
    # Every config a trial got respected the space; the best trial scored is the one tuner returns.
    assert re.search(r"Conditions respected: 0 of [1-9]\d* trials", text), text
    assert re.search(r"Cross-check: in (\d+) of \1 experiments", text), text
    if importlib.util.find_spec("matplotlib") is None:
        return
    assert (img / "conditional_toy.png").stat().st_size > 0


def test_warm_start_benchmark_counts_the_iterations_to_the_first_experiments_regret():
    from benchmarks.warm_start import iterations_to

    assert iterations_to([4.0, 2.0, 1.0], 2.0) == 2
    assert iterations_to([1.0], 1.0) == 1
    assert math.isinf(iterations_to([4.0, 3.0], 1.0))


# --------------------------------------------------------------------------- the GPU suite (benchmarks/gpu_suite.py)


def test_gpu_suite_pack_selection_size_and_travel(tmp_path):
    """What `gpu_suite.py pack` carries is complete for the device's Python, pinned to the tested versions, and
    refused when it (with the repository's files) is over the upload limit; tuner's own files travel."""
    from importlib import metadata

    from benchmarks import gpu_suite as g

    assert g.requirements({"ray": "2.60.0", "pydantic": "2.14.4"}, ["ray", "pydantic"]) == ["ray==2.60.0",
                                                                                              "pydantic==2.14.4"]
    with pytest.raises(ValueError, match="not installed here.*: pydantic"):
        g.requirements({"ray": "2.60.0", "pydantic": None}, ["ray", "pydantic"])
    # The real pack against this venv's metadata: every unconditional dependency is carried or on the device.
    assert g.uncovered_dependencies(lambda n: metadata.requires(n) or []) == {}
    fake = {"a": ["b>=1", "c; python_version < '3.11'", "d; extra == 'x'", "Torch>=2", "e; python_version >= '3.12'"],
            "data": ["scipy-not-needed"]}
    gaps = g.uncovered_dependencies(fake.get, pack=["a", "data"], device_has=["torch"], not_needed=[],
                                    python_version="3.12", data_only=["data"])
    assert gaps == {"a": ["b>=1", 'e; python_version >= "3.12"']}
    assert "ray" in g.PACK and not set(map(g._norm, g.PACK)) & set(map(g._norm, g.DEVICE_HAS))
    mib = 2**20
    total, problems = g.size_check({"ray-2.60.0-cp312.whl": 43 * mib, "pydantic_core.whl": 2 * mib}, 3 * mib)
    assert total == 48 * mib and problems == []
    _, problems = g.size_check({"ray-2.60.0-cp312.whl": 60 * mib}, 5 * mib)
    assert len(problems) == 1 and "65.0 MiB (pack 60.0 MiB + repository 5.0 MiB) is over the 64 MiB" in problems[0]
    assert g.size_check({"x.whl": 1}, 0)[1] == ["no ray wheel in the pack"]
    repo_bytes, problems = g.travel_problems(ROOT, ROOT / "gpu_pack")
    assert problems == [] and 0 < repo_bytes < g.UPLOAD_LIMIT_BYTES
    _, problems = g.travel_problems(ROOT, ROOT / "docs")  # a folder git does not ignore cannot be the pack
    assert problems == ["docs/ is not git-ignored: it would travel as project files, not as carry"]
    assert 'carry=["gpu_pack"]' in g.device_command("gpu_pack")
    assert g.peak_overlap([(0, 2), (1, 3), (3, 4)]) == 2 and g.peak_overlap([]) == 0
    assert g.spans("1.0 a\n2.5 b\n3.0 a\n") == [(1.0, 3.0), (2.5, 2.5)]
    assert g.oom_sizes(80 * 2**30) == {"batch_size": 64, "bytes_per_sample": 80 * 2**30 // 32, "expected_batch": 16}


def test_gpu_suite_settings_sections_and_estimate(capsys):
    """GPU settings are numbers or "auto", passed to the spec's resources unchanged; --sections takes a subset
    and names the allowed ones when given another; the printed estimate of the default run is the sum of its
    sections (arithmetic on the recorded H200 figures, not a measured time) and stays within 5 minutes."""
    from benchmarks import gpu_suite as g

    assert g.parse_settings("1, 0.5,0.25,AUTO") == [1.0, 0.5, 0.25, "auto"] == list(g.GPU_SETTINGS)
    for bad in ("0", "-1", "x", "1,,2"):
        with pytest.raises(argparse.ArgumentTypeError, match="a number above 0 .* or 'auto'"):
            g.parse_settings(bad)
    assert g.trial_resources("auto", 2, dry=False) == {"cpu": 2, "gpu": "auto"}
    assert g.trial_resources(0.25, 2, dry=False) == {"cpu": 2, "gpu": 0.25}
    assert g.trial_resources("auto", 2, dry=True) == {"cpu": 1}
    assert g.parse_sections("ddp,amp") == ["amp", "ddp"]  # in running order
    args = g.parser().parse_args(["run"])
    assert args.sections == list(g.SECTIONS) and args.fractions == args.gpubound_settings == list(g.GPU_SETTINGS)
    with pytest.raises(SystemExit):
        g.parser().parse_args(["run", "--sections", "amp,gpu_bound"])
    err = capsys.readouterr().err
    assert "argument --sections: unknown section(s) 'gpu_bound'; allowed: " + ", ".join(g.SECTIONS) in err
    est = g.estimate_seconds(args.sections, len(args.fractions), args.trials, args.epochs,
                             len(args.gpubound_settings), args.gpubound_trials, args.gpubound_reports)
    assert set(est) == {"amp", "packing", "oom", "gpubound", "ddp", "ray_start", "total"}
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total")) and est["total"] < 300
    assert "ddp" not in g.estimate_seconds(["amp", "ddp"], 0, 8, 3, 0, 8, 4, skip_ddp=True)


def test_gpu_suite_version_is_the_packed_commit(tmp_path, monkeypatch):
    """The version line is the commit `pack` recorded, else tuner's own version, and never what git says where
    the suite runs: a copy without its .git inside another repository is not that repository's commit."""
    from benchmarks import gpu_suite as g
    import tuner

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    packed = g.pack_commit(ROOT)
    assert packed["commit"] == head and isinstance(packed["dirty"], bool)
    outer = tmp_path / "outer"
    (outer / "copy").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=outer, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "outer"], cwd=outer, check=True)
    assert g.pack_commit(outer / "copy") == {"commit": None, "dirty": False, "dirty_paths": []}
    (outer / "tuner").mkdir()
    (outer / "tuner" / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "tuner/a.py"], cwd=outer, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], cwd=outer, check=True)
    (outer / "tuner" / "a.py").write_text("x = 2\n")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=outer, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert g.pack_commit(outer) == {"commit": commit, "dirty": True, "dirty_paths": ["tuner/a.py"]}

    def no_git(*args, **kwargs):
        raise AssertionError(f"suite_version ran {args}")

    monkeypatch.setattr(subprocess, "run", no_git)
    (tmp_path / g.MANIFEST_NAME).write_text(json.dumps({"python": "3.12", "commit": "abc1234", "dirty": True}))
    assert g.suite_version(tmp_path) == "tuner abc1234 (commit at pack time, with uncommitted changes)"
    (tmp_path / g.MANIFEST_NAME).write_text(json.dumps({"python": "3.12", "commit": "abc1234", "dirty": False}))
    assert g.suite_version(tmp_path) == "tuner abc1234 (commit at pack time)"
    no_manifest = f"tuner {tuner.__version__} (package version; no pack manifest)"
    assert g.suite_version(None) == g.suite_version(outer) == no_manifest


class _FakeNvml:
    """pynvml's calls the sampler makes, returning the utilizations and memory given, one per sample."""

    def __init__(self, utils, used, fail_init=False):
        self.utils, self.used, self.fail_init, self.shut = list(utils), list(used), fail_init, False

    def nvmlInit(self):
        if self.fail_init:
            raise OSError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"gpu": self.utils.pop(0)})

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Memory", (), {"used": self.used.pop(0)})

    def nvmlShutdown(self):
        self.shut = True


def test_gpu_sampler_means_its_samples_and_runs_without_nvml():
    """GpuSampler samples on entering and on leaving (and every period between: an hour here, so never), and
    gives the mean utilization and the peak memory; without NVML it says so and its figures are None."""
    from benchmarks import gpu_suite as g

    nvml = _FakeNvml([30, 80], [2 * 2**30, 5 * 2**30])
    with g.GpuSampler(period_s=3600, nvml=nvml) as sampler:
        assert sampler._thread.is_alive()
    assert not sampler._thread.is_alive() and nvml.shut
    assert sampler.summary() == {"nvml": "ok", "period_s": 3600.0, "samples": 2, "mean_gpu_util_percent": 55.0,
                                 "device_memory_peak_bytes": 5 * 2**30}
    with g.GpuSampler(nvml=_FakeNvml([], [], fail_init=True)) as sampler:
        pass
    assert sampler.summary() == {"nvml": "no NVML (OSError: NVML Shared Library Not Found)", "period_s": 0.5,
                                 "samples": 0, "mean_gpu_util_percent": None, "device_memory_peak_bytes": None}
    assert sampler.period_s == g.SAMPLE_PERIOD_S


def test_gpu_suite_renders_a_gpu_record():
    """The H200 record of 2026-11-27 (main 5a5f3bf, before the GPU-bound section existed) renders the sections it
    holds, each figure labelled with the GPU and the date, and none it lacks."""
    from benchmarks import gpu_suite as g

    record = json.loads((ROOT / "tests" / "gpu_suite" / "h200-2026-11-27.json").read_text())
    text = g.render(record)
    for part in ("1. Fractional GPUs", "2. AMP against fp32", "3. CUDA out of memory", "4. GPU metrics",
                 "5. DDP against a single process"):
        assert f"**{part}" in text, part
    assert "**6. A GPU-bound" not in text and "**7. Data" not in text and g.DRY_LABEL not in text
    figures = [r for r in text.splitlines() if r.startswith("| ") and "measured on" in r]
    assert len(figures) == 3 + 2 + 1 + 2 + 2 and all(r.endswith("| measured on NVIDIA H200, 2026-11-27 |")
                                                     for r in figures)
    assert "tuner 5a5f3bf." in text and "**1. Fractional GPUs: MNIST trials per hour** (measured on NVIDIA H200" in text


def test_gpu_suite_dry_run_writes_every_section(ray_local, tmp_path):
    """`gpu_suite.py run --dry-run` on the session's Ray: every section but DDP (whose worker-group start-up
    would cost ~15 s here; it runs in the full dry run, and renders in the test above), at one GPU setting
    each, on CPU; every figure marked as a dry run; the OOM back-off halves the batch twice and the trial
    finishes; the GPU-bound ResNet trial runs under ASHA; no NVML here, so no utilization figure."""
    from benchmarks import gpu_suite as g

    out, doc = tmp_path / "out", tmp_path / "bench.md"
    sections = [s for s in g.SECTIONS if s != "ddp"]
    args = g.parser().parse_args(["run", "--dry-run", "--sections", ",".join(sections), "--trials", "1",
                                  "--fractions", "auto", "--gpubound-settings", "0.5", "--gpubound-trials", "1",
                                  "--gpubound-reports", "1", "--out", str(out), "--output", str(doc)])
    assert g.cmd_run(args) == 0
    record = json.loads((out / g.JSON_NAME).read_text())
    text = doc.read_text()
    assert text == "# Benchmarks\n\n" + (out / g.MD_NAME).read_text()
    assert f"## {g.HEADING}" in text and "**Failed**" not in text and "CPU dry run" in text
    assert record["sections"] == sections and "ddp" not in record and "**5. DDP" not in text
    for part in ("1. Fractional GPUs", "2. AMP against fp32", "3. CUDA out of memory", "4. GPU metrics",
                 "6. A GPU-bound workload"):
        assert f"**{part}" in text, part
    assert [r["resident"] for r in record["data"]["rows"]] == [False, False, True] and "**7. Data to the device" in text
    assert record["version"].startswith("tuner ") and "pack time" not in record["version"]  # no --pack
    without_data = g.render({k: v for k, v in record.items() if k != "data"})
    rows = [line for line in without_data.splitlines() if line.startswith("| ") and not line.startswith("| -")]
    figures = [r for r in rows if g.DRY_LABEL in r]
    assert len(figures) == 1 + 2 + 1 + 2 + 1 and all(r.endswith(f"| {g.DRY_LABEL} |") for r in figures)
    (run,) = record["packing"]["runs"]
    assert run["gpu"] == "auto" and run["resources"] == {"cpu": 1}
    assert run["finished"] == 1 and run["peak_at_once"] == 1 and run["trials_per_hour"] > 0
    assert [r["speedup"] > 0 for r in record["amp"]["rows"]] == [True, True] and record["amp"]["amp_dtype"] == "bfloat16"
    oom = record["oom"]
    assert (oom["batch_size_used"], oom["halved"], oom["finished"], oom["status"]) == (16, True, True, "TERMINATED")
    assert record["metrics"]["gpu_memory_peak_bytes"] == {"trials": 2, "present": 0, "min": None, "max": None}
    gb = record["gpubound"]
    (run,) = gb["runs"]
    assert gb["data"].startswith("synthetic") and gb["fixed"] == g.GPUBOUND_DRY and gb["scheduler"]["type"] == "asha"
    assert (run["gpu"], run["resources"], run["finished"], run["stopped_early"], run["errors"], run["epochs_total"],
            run["peak_at_once"]) == (0.5, {"cpu": 1}, 1, 0, 0, 1, 1)
    assert run["trials_per_hour"] > 0 and 0 <= run["best_val_accuracy"] <= 1 and run["gpu_shares"] == []
    assert (run["mean_gpu_util_percent"] is None) == run["nvml"].startswith("no NVML")
    assert "synthetic" in next(r for r in figures if r.startswith("| 0.5 "))
    measured = g.render({**record, "dry_run": False, "label": g.GPU_LABEL})
    assert g.DRY_LABEL not in measured and "| measured on no GPU (CPU dry run), " in measured


def test_gpu_suite_amp_steps_go_through_tuners_helpers_and_the_data_table():
    """The AMP step builds its model with trial.prepare_model and moves its batch with trial.to_device, and says
    whether channels_last and cudnn.benchmark were on (both off on the CPU, and cudnn.benchmark as it was after);
    measure_data times the three loaders (the last one resident) and render_data makes their table."""
    import torch

    from benchmarks import gpu_suite as g

    info: dict = {}
    benchmark = torch.backends.cudnn.benchmark
    seconds = g.step_time(lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                                                      torch.nn.Linear(4 * 6 * 6, 10)), (3, 8, 8), 2, True, 0, 1, info)
    assert seconds > 0 and info == {"channels_last": False, "input_channels_last": False, "cudnn_benchmark": False}
    assert torch.backends.cudnn.benchmark == benchmark
    section = g.measure_data(True)
    assert [(r["resident"], r["batches"]) for r in section["rows"]] == [(False, 4), (False, 4), (True, 4)]
    assert section["loader_kwargs"] == {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    assert section["rows"][0]["speedup"] == 1 and all(r["epoch_s"] > 0 and len(r["epochs_s"]) == 2
                                                       for r in section["rows"])
    lines = "\n".join(g.render_data(section)).splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| -")]
    assert rows[0].startswith("| loader | resident |") and len(rows) == 4
    assert all(r.endswith(f"| {g.DRY_LABEL} |") for r in rows[1:]) and rows[3].split(" | ")[1] == "yes"
    assert "Data to the device" in lines[1] and "(dry run (CPU), not a GPU figure)" in lines[1]


def test_dashboard_benchmark_reads_a_real_experiment_and_writes_its_table(ray_local, tmp_path):
    """benchmarks/dashboard.py's reads, on a real 3-trial experiment (on the session's Ray), and its section;
    its live part (a `tuner run` and a `tuner dashboard`) is what tests/test_dashboard.py runs."""
    from benchmarks.dashboard import read_time, section

    scale = read_time(tmp_path, trials=3, num_cpus=2, repeats=1)
    assert scale["trials"] == 3 and scale["folder_bytes"] > 0
    live = {"reports_seen": 6, "reports_made": 6, "interval_s": 1.0, "median_s": 1.5, "p90_s": 2.0, "max_s": 2.5,
            "file_median_s": 0.5}
    text = section(scale, live, "Machine: here.")
    rows = _table_rows(text, "the") + _table_rows(text, "a refresh")
    assert len(rows) == 4 and all(re.search(r"\| [\d,]+ ms \|$", r) for r in rows), text
    assert "median 1.50 s after the report" in text and "a median 0.50 s" in text
    assert "median\n2.5 s after it was made, and within about 4.5 s" in text
