"""`tuner report` with several objectives: the Pareto front, infeasible trials, the hypervolume.

One real experiment is run once for the module through the CLI: ``tests.trainables:accuracy_cost``
(accuracy max, cost min, and latency_ms constrained to <= 30), random search, 12 trials of 2
iterations. Every check compares the report with a brute-force non-dominated filter over the
trials' own ``result.json`` files, written out here without tuner.search.pareto or Optuna.
"""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests.fixtures.cli import run_spec
from tests.fixtures.paths import ROOT

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = [pytest.mark.xdist_group("test_report_pareto"), pytest.mark.slow]

SPEC = """\
name: pareto
trainable: tests.trainables:accuracy_cost
metric: [accuracy, cost]
mode: [max, min]
constraints:
  - {metric: latency_ms, max: 30}
num_samples: 12
seed: 0
param_space:
  x: {type: uniform, low: 0, high: 1}
  y: {type: choice, values: [0.0, 0.2, 0.4]}
  epochs: 2
resources: {cpu: 1}
"""

OBJECTIVES = [("accuracy", "max"), ("cost", "min")]
LATENCY_MAX = 30.0


@pytest.fixture(scope="module")
def exp(tmp_path_factory, on_session_ray):
    """The experiment folder of one real 2-objective run."""
    return run_spec(tmp_path_factory.mktemp("pareto"), "pareto", SPEC, on_session_ray)


def last_results(exp) -> dict[str, dict]:
    """Trial id -> its last line of result.json, read directly."""
    out = {}
    for f in exp.glob("*/result.json"):
        last = json.loads(f.read_text().splitlines()[-1])
        out[last["trial_id"]] = last
    return out


def dominates(a: dict, b: dict, objectives) -> bool:
    """a is at least as good as b on every objective and better on one."""
    better = [a[m] > b[m] if mode == "max" else a[m] < b[m] for m, mode in objectives]
    no_worse = [a[m] >= b[m] if mode == "max" else a[m] <= b[m] for m, mode in objectives]
    return all(no_worse) and any(better)


def brute_front(results: dict[str, dict], objectives=OBJECTIVES, latency_max=LATENCY_MAX) -> set[str]:
    ok = {t: r for t, r in results.items() if latency_max is None or r["latency_ms"] <= latency_max}
    return {t for t, r in ok.items() if not any(dominates(o, r, objectives) for u, o in ok.items() if u != t)}


def area_2d(points, reference) -> float:
    """Hypervolume of (accuracy max, cost min) points up to the reference: the union of rectangles."""
    pts = sorted((a, c) for a, c in points if a > reference[0] and c < reference[1])
    area, best_cost = 0.0, reference[1]
    for a, c in reversed(pts):  # highest accuracy first; each adds the strip its lower cost opens
        if c < best_cost:
            area += (a - reference[0]) * (best_cost - c)
            best_cost = c
    return area


def report_json(exp, run_cli) -> dict:
    proc = run_cli("report", exp, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_front_is_the_brute_force_non_dominated_set(exp):
    from tuner.report import load_experiment

    results = last_results(exp)
    assert len(results) == 12
    front = brute_front(results)
    unconstrained = brute_front(results, latency_max=None)
    report = load_experiment(exp)
    assert set(report.front) == front
    feasible = {t for t, r in results.items() if r["latency_ms"] <= LATENCY_MAX}
    assert feasible - front, "the sample has a feasible dominated trial (the check can tell)"
    assert unconstrained - feasible, "an infeasible trial would be on the front without its constraint"
    assert not set(report.front) - feasible, "infeasible trials are not on it"
    t = report.trials.set_index("trial_id")
    assert {i for i in t.index if t.at[i, "feasible"]} == feasible
    assert {i for i in t.index if t.at[i, "pareto"]} == front
    assert list(report.trials["trial_id"])[:len(front)] == sorted(front, key=lambda i: -results[i]["accuracy"])
    # The best trial: on the front, the best on the first objective (not the infeasible best accuracy).
    assert report.best_trial == max(front, key=lambda i: results[i]["accuracy"])
    assert max(results, key=lambda i: results[i]["accuracy"]) not in feasible
    # The run's own files agree: results.csv's order and columns, summary.json's front and best.
    csv = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert list(report.trials["trial_id"]) == list(csv["trial_id"])
    assert set(csv.loc[csv["pareto"], "trial_id"]) == front and set(csv.loc[csv["feasible"], "trial_id"]) == feasible
    summary = json.loads((exp / "summary.json").read_text())
    assert {e["trial_id"] for e in summary["pareto_front"]} == front
    assert summary["best"]["trial_id"] == report.best_trial


def test_report_table_lists_the_front(exp, run_cli):
    results = last_results(exp)
    front = brute_front(results)
    proc = run_cli("report", exp)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "12 trials (12 TERMINATED); objectives accuracy (max), cost (min); constraints latency_ms <= 30"
    n_feasible = sum(r["latency_ms"] <= LATENCY_MAX for r in results.values())
    start = lines.index(next(line for line in lines if line.startswith("Pareto front: ")))
    assert lines[start] == (f"Pareto front: {len(front)} of the {n_feasible} feasible trials; {12 - n_feasible} of "
                            "12 trials with a result are infeasible (latency_ms <= 30)")
    assert lines[start + 1].startswith("Hypervolume ")
    header = lines[start + 3].split()
    assert header == ["trial_id", "accuracy", "(max)", "cost", "(min)", "x", "y"]
    rows = [line.split() for line in lines[start + 4:start + 4 + len(front)]]
    assert {r[0] for r in rows} == front
    for r in rows:
        assert float(r[1]) == pytest.approx(results[r[0]]["accuracy"], rel=1e-5)
        assert float(r[2]) == pytest.approx(results[r[0]]["cost"], rel=1e-5)
        assert float(r[3]) == pytest.approx(results[r[0]]["config"]["x"], rel=1e-5)
    assert lines[start + 4 + len(front)] == "", "the front table ends before the trials table"


def test_report_json_has_the_front_and_the_hypervolume(exp, run_cli):
    results = last_results(exp)
    front = brute_front(results)
    doc = report_json(exp, run_cli)["experiment"]
    assert doc["objectives"] == [{"metric": m, "mode": d} for m, d in OBJECTIVES]
    assert doc["constraints"] == [{"metric": "latency_ms", "max": 30.0}]
    feasible = [r for r in results.values() if r["latency_ms"] <= LATENCY_MAX]
    assert (doc["trials"]["feasible"], doc["trials"]["infeasible"]) == (len(feasible), 12 - len(feasible))
    assert {e["trial_id"] for e in doc["pareto_front"]} == front
    for entry in doc["pareto_front"]:
        folder = next(exp.glob(f"*_{entry['trial_id']}"))
        assert entry["config"] == json.loads((folder / "params.json").read_text())
        assert entry["objectives"] == pytest.approx({m: results[entry["trial_id"]][m] for m, _ in OBJECTIVES})
    hv = doc["hypervolume"]
    summary = json.loads((exp / "summary.json").read_text())
    # The worst feasible value of each objective, 10% of its range further out; the run's own.
    acc = [r["accuracy"] for r in feasible]
    cost = [r["cost"] for r in feasible]
    rule = [min(acc) - 0.1 * (max(acc) - min(acc)), max(cost) + 0.1 * (max(cost) - min(cost))]
    assert hv["reference"] == pytest.approx(rule)
    assert summary["hypervolume"]["reference"] == pytest.approx(rule)
    assert summary["hypervolume"]["value"] == pytest.approx(hv["value"])
    points = [(results[t]["accuracy"], results[t]["cost"]) for t in front]
    assert hv["value"] == pytest.approx(area_2d(points, hv["reference"]), rel=1e-9) and hv["value"] > 0
    # The history adds the trials in creation order (their ids' numeric suffix); it ends at the value.
    history = doc["hypervolume_history"]
    assert history["trial_ids"] == sorted(results, key=lambda t: int(t.rsplit("_", 1)[1]))
    ok = [(results[t]["accuracy"], results[t]["cost"]) if results[t]["latency_ms"] <= LATENCY_MAX else None
          for t in history["trial_ids"]]
    expected = [area_2d([p for p in ok[:n + 1] if p is not None], hv["reference"]) for n in range(12)]
    assert history["hypervolume"] == pytest.approx(expected, rel=1e-9)
    assert history["hypervolume"][-1] == pytest.approx(hv["value"])


def test_html_report_has_the_pareto_plots_and_table(exp, tmp_path):
    page = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "tuner", "report", str(exp), "--format", "html", "--output",
                           str(page)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "<h2>Pareto front</h2>" in text and "Hypervolume " in text
    section = text.split("<h2>Pareto front</h2>")[1].split("<h2>Budget</h2>")[0]
    for trial_id in brute_front(last_results(exp)):
        assert f">{trial_id}</td>" in section
    assert text.count('<img src="data:image/png;base64,') == 7
    from PIL import Image

    plots = {p.stem: p for p in (tmp_path / "report_plots").glob("*.png")}
    assert {"pareto_front", "hypervolume"} <= set(plots)
    for name in ("pareto_front", "hypervolume"):
        with Image.open(plots[name]) as img:
            assert img.width >= 600 and img.height >= 300
            assert len(img.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 20, name


def test_three_objectives_give_a_scatter_per_pair(exp, tmp_path):
    """The same trials read with a third objective (latency_ms, min) and no constraint."""
    from PIL import Image

    from tuner.report import load_experiment, write_plots

    copy = shutil.copytree(exp, tmp_path / "three", symlinks=True)
    spec = yaml.safe_load((copy / "spec.yaml").read_text())
    spec["objectives"].append({"metric": "latency_ms", "mode": "min"})
    del spec["constraints"]
    (copy / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    objectives = [*OBJECTIVES, ("latency_ms", "min")]
    report = load_experiment(copy)
    assert set(report.front) == brute_front(last_results(exp), objectives, latency_max=None)
    assert "feasible" not in report.trials
    files = write_plots(report, tmp_path / "plots")
    with Image.open(files["pareto_front"]) as img:
        assert img.width > 2.5 * img.height, "three panels side by side (3 pairs)"


def test_front_comes_from_the_last_results_of_a_stopped_run(exp, tmp_path):
    """No summary.json or results.csv (a driver killed mid-run), and a trial whose last
    iteration is lost: the front is worked out from each trial's last result as it stands."""
    from tuner.report import load_experiment, pareto_facts

    copy = shutil.copytree(exp, tmp_path / "stopped", symlinks=True)
    (copy / "summary.json").unlink()
    (copy / "results.csv").unlink()
    results = last_results(copy)
    cut = max(brute_front(results), key=lambda t: results[t]["accuracy"])  # the best trial
    f = next(copy.glob(f"*_{cut}/result.json"))
    f.write_text(f.read_text().splitlines()[0] + "\n")  # only iteration 1: half the accuracy
    (f.parent / "progress.csv").unlink()
    results = last_results(copy)
    assert results[cut]["training_iteration"] == 1
    report = load_experiment(copy)
    assert report.status == "stopped"
    assert set(report.front) == brute_front(results)
    hv = pareto_facts(report)["hypervolume"]  # no summary.json: its own reference point
    points = [(results[t]["accuracy"], results[t]["cost"]) for t in brute_front(results)]
    assert hv["value"] == pytest.approx(area_2d(points, hv["reference"]), rel=1e-9)
    assert report.best_trial == max(brute_front(results), key=lambda t: results[t]["accuracy"])


def test_objectives_from_summary_json_without_the_spec(exp, tmp_path):
    from tuner.report import load_experiment

    copy = shutil.copytree(exp, tmp_path / "nospec", symlinks=True)
    (copy / "spec.yaml").unlink()
    summary = json.loads((copy / "summary.json").read_text())
    summary["objectives"] = [{"metric": m, "mode": d} for m, d in OBJECTIVES]
    summary["constraints"] = [{"metric": "latency_ms", "max": LATENCY_MAX}]
    (copy / "summary.json").write_text(json.dumps(summary))
    report = load_experiment(copy)
    assert report.spec is None and report.multi_objective
    assert set(report.front) == brute_front(last_results(exp))


def test_one_objective_with_a_constraint_never_picks_an_infeasible_best(exp, tmp_path, run_cli):
    """The same trials read with accuracy alone: with the constraint the best is the best feasible
    trial; without it the report is the single-objective one (no front, no feasible column)."""
    results = last_results(exp)
    feasible = {t for t, r in results.items() if r["latency_ms"] <= LATENCY_MAX}
    for constrained in (True, False):
        copy = shutil.copytree(exp, tmp_path / f"single-{constrained}", symlinks=True)
        spec = yaml.safe_load((copy / "spec.yaml").read_text())
        del spec["objectives"]
        spec.update(metric="accuracy", mode="max")
        if not constrained:
            del spec["constraints"]
        (copy / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        doc = report_json(copy, run_cli)
        pool = feasible if constrained else set(results)
        assert doc["experiment"]["best"]["trial_id"] == max(pool, key=lambda t: results[t]["accuracy"])
        assert "pareto_front" not in doc["experiment"] and "pareto" not in doc["trials"][0]
        assert ("feasible" in doc["trials"][0]) == constrained == ("constraints" in doc["experiment"])
        table = run_cli("report", copy).stdout
        assert "Pareto front" not in table
        assert ("Feasible: " in table) == constrained
        if not constrained:
            assert table.splitlines()[1] == "12 trials (12 TERMINATED); metric accuracy (max); best trial by scope last"


def test_creation_index_of_a_saved_trial():
    """Ray's trial generators start each experiment_tag with their counter (random ids under a searcher)."""
    from tuner.adapters.ray_internals import saved_trial_creation_index as index

    assert index({"trial_id": "b2f62762", "experiment_tag": "12_x=0.5488,y=0.0000"}) == 12
    assert index({"experiment_tag": "3_lr=0.01@perturbed[lr=0.012]"}) == 3
    assert index({"experiment_tag": "0"}) == 0
    assert index({"experiment_tag": "x=1"}) is None and index({}) is None and index({"experiment_tag": 4}) is None


def _marker_of(collection) -> str | None:
    """Which matplotlib marker a scatter draws, by its path."""
    import numpy as np
    from matplotlib.markers import MarkerStyle

    path = collection.get_paths()[0]
    for name in ("x", "*", "o", "+", "s", "^"):
        style = MarkerStyle(name)
        marker = style.get_path().transformed(style.get_transform())
        if marker.vertices.shape == path.vertices.shape and np.allclose(marker.vertices, path.vertices):
            return name
    return None


def test_pareto_plot_marks_infeasible_trials_grey_x_the_best_a_red_star_and_steps_through_the_front(tmp_path):
    """README: `pareto_front` draws every trial's last values, "the front drawn as a step line, infeasible trials
    as grey x, the best trial as a red star, axes labelled `(max)`/`(min)`"."""
    import matplotlib.colors as mcolors

    from tuner.report.analysis import pareto_facts
    from tuner.report.loading import Experiment
    from tuner.report.plots import _plot_pareto
    from tuner.spec.sections import Constraint, Objective

    rows = [  # trial, accuracy (max), cost (min), latency_ms (<= 30): a and b on the front, c dominated, d infeasible
        ("p_00000", 0.9, 5.0, 10.0, True, True),
        ("p_00001", 0.7, 2.0, 20.0, True, True),
        ("p_00002", 0.6, 4.0, 25.0, True, False),
        ("p_00003", 0.95, 1.0, 50.0, False, False),
    ]
    trials = pd.DataFrame([{"trial_id": t, "status": "TERMINATED", "iterations": 2, "stopped_early": False,
                            "config/x": i / 4, "last_accuracy": a, "last_cost": c, "last_latency_ms": lat,
                            "feasible": ok, "pareto": front} for i, (t, a, c, lat, ok, front) in enumerate(rows)])
    exp = Experiment(path=tmp_path, name="pareto", spec=None, metric="accuracy", mode="max", status="finished",
                     started=None, summary=None, trials=trials, history=pd.DataFrame(), best_trial="p_00000",
                     params=["x"], created=[r[0] for r in rows],
                     objectives=[Objective(metric="accuracy", mode="max"), Objective(metric="cost", mode="min")],
                     constraints=[Constraint(metric="latency_ms", max=LATENCY_MAX)])
    ax = _plot_pareto(exp, pareto_facts(exp)).axes[0]
    drawn = {c.get_label(): c for c in ax.collections}
    infeasible, best = drawn["infeasible"], drawn["best (accuracy): p_00000"]
    assert _marker_of(infeasible) == "x" and infeasible.get_offsets().tolist() == [[0.95, 1.0]]
    assert mcolors.to_hex(infeasible.get_facecolor()[0]) == mcolors.to_hex("grey")
    assert _marker_of(best) == "*" and best.get_offsets().tolist() == [[0.9, 5.0]]
    assert mcolors.to_hex(best.get_facecolor()[0]) == mcolors.to_hex("crimson")
    assert drawn["Pareto front"].get_offsets().tolist() == [[0.9, 5.0], [0.7, 2.0]]
    assert drawn["feasible, dominated"].get_offsets().tolist() == [[0.6, 4.0]]
    steps = [line for line in ax.get_lines() if line.get_drawstyle().startswith("steps")]
    assert len(steps) == 1 and steps[0].get_drawstyle() == "steps-pre"  # x maximised: the step rises before a point
    assert list(steps[0].get_xdata()) == [0.7, 0.9] and list(steps[0].get_ydata()) == [2.0, 5.0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("accuracy (max)", "cost (min)")
