"""Several objectives and constraints: the Pareto front against a brute-force check, the hypervolume on
known fronts, and end-to-end runs through the real Ray (Optuna's NSGA-II and multi-objective TPE with
ASHA, random search with a Ray Tune trainable that reports several metrics, a resume that keeps the
multi-objective study)."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tuner.experiment.layout import PARETO_CONFIGS, RESULTS_CSV, SEARCHER_STATE, SUMMARY
from tuner.search.pareto import hypervolume, hypervolume_history, pareto_front, reference_point
from tuner.spec import load_spec
from tuner.spec.sections import Constraint, Objective

# One xdist worker runs this file: its module-scoped run is made once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_multiobjective")


def _dominates(a: dict, b: dict, objectives: list[Objective]) -> bool:
    better = [(a[o.metric] < b[o.metric]) if o.mode == "min" else (a[o.metric] > b[o.metric]) for o in objectives]
    no_worse = [(a[o.metric] <= b[o.metric]) if o.mode == "min" else (a[o.metric] >= b[o.metric])
                for o in objectives]
    return all(no_worse) and any(better)


def brute_force_front(rows: list[dict], objectives: list[Objective], constraints: list[Constraint]) -> list:
    """The feasible, finished rows that no other such row dominates, by pairwise comparison."""
    def ok(r: dict) -> bool:
        return r["status"] != "ERROR" and all(
            r.get(c.metric) is not None and (c.min is None or r[c.metric] >= c.min)
            and (c.max is None or r[c.metric] <= c.max) for c in constraints)

    pool = [r for r in rows if ok(r)]
    return [r["trial_id"] for r in pool if not any(_dominates(o, r, objectives) for o in pool)]


@pytest.mark.parametrize("seed", range(6))
def test_the_front_is_the_brute_force_front(seed):
    """Mixed modes, 2 and 3 objectives, ties, duplicates, errored and infeasible trials."""
    rng = random.Random(seed)
    objectives = [Objective(metric="a", mode="max"), Objective(metric="b", mode="min")]
    if seed % 2:
        objectives.append(Objective(metric="c", mode="max"))
    constraints = [Constraint(metric="size", max=0.7)] if seed % 3 else []
    rows = [{"trial_id": f"t{i:03d}", "status": rng.choice(["TERMINATED"] * 9 + ["ERROR"]),
             "a": rng.randint(0, 6), "b": rng.randint(0, 6), "c": rng.randint(0, 3), "size": rng.random()}
            for i in range(120)]
    rows.append(dict(rows[0], trial_id="t999"))  # a duplicate of a trial: both on the front, or neither
    front = pareto_front(rows, objectives, result=lambda r: r, status=lambda r: r["status"], constraints=constraints)
    assert [r["trial_id"] for r in front] == brute_force_front(rows, objectives, constraints)
    assert front, "a non-empty front"


def test_a_trial_without_every_objective_is_not_on_the_front():
    objectives = [Objective(metric="a", mode="min"), Objective(metric="b", mode="min")]
    rows = [{"a": 0.0}, {"a": 1.0, "b": float("nan")}, {"a": 2.0, "b": 2.0}, {"a": "text", "b": 0.0}]
    assert pareto_front(rows, objectives, result=lambda r: r, status=lambda r: "TERMINATED") == [rows[2]]


def test_hypervolume_of_known_fronts():
    two = [Objective(metric="f1", mode="min"), Objective(metric="f2", mode="min")]
    # Three points of a staircase under the reference (4, 4): 3x1 + 2x1 + 1x1 = 6.
    assert hypervolume([[1, 3], [2, 2], [3, 1]], two, [4, 4]) == pytest.approx(6.0)
    assert hypervolume([[1, 3], [2, 2], [3, 1], [3, 3]], two, [4, 4]) == pytest.approx(6.0), "a dominated point adds 0"
    assert hypervolume([[5, 5]], two, [4, 4]) == 0.0, "beyond the reference point"
    mixed = [Objective(metric="acc", mode="max"), Objective(metric="cost", mode="min")]
    assert hypervolume([[0.9, 1.0]], mixed, [0.5, 3.0]) == pytest.approx(0.4 * 2.0)
    assert hypervolume_history([[2, 2], None, [1, 3], [3, 1]], two, [4, 4]) == pytest.approx([4.0, 4.0, 5.0, 6.0])
    assert reference_point([[0.9, 1.0], [0.7, 3.0]], mixed) == pytest.approx([0.68, 3.2])


def test_scheduler_objective_and_derived_fields():
    spec = load_spec({"trainable": "a:b", "metric": ["acc", "cost"], "mode": ["max", "min"],
                      "scheduler": {"type": "asha", "metric": "cost"}})
    assert (spec.metric, spec.mode, spec.multi_objective) == ("acc", "max", True)
    assert spec.scheduler_objective == Objective(metric="cost", mode="min")
    assert [o.metric for o in spec.objectives] == ["acc", "cost"]
    # The experiment's spec.yaml reads back as the same spec (derived fields are not written).
    again = load_spec(spec.model_dump(mode="json", exclude_unset=True))
    assert again.objectives == spec.objectives and again.scheduler_objective == spec.scheduler_objective
    single = load_spec({"trainable": "a:b", "metric": "loss", "mode": "min"})
    assert single.objectives == [Objective(metric="loss", mode="min")] and not single.multi_objective
    assert "objectives" not in single.model_dump(exclude_unset=True)


@pytest.mark.parametrize("objectives", [1, 2])
def test_the_constraints_reach_optunas_study(objectives):
    """Each finished trial's constraint violations are set on its Optuna trial (``Trial.set_constraint``), a
    missing or NaN constrained metric as ``inf``: the study's ``trial.constraints``, which Optuna's samplers
    read, and its best trials, which leave the infeasible ones out although they are better."""
    from tuner.adapters import ray_internals
    from tuner.search.algorithms import build_searcher
    from tuner.search.space import to_ray_space

    metric = ["f1", "f2"][:objectives]
    spec = load_spec({"trainable": "a:b", "metric": metric if objectives > 1 else "f1",
                      "mode": ["min"] * objectives if objectives > 1 else "min", "seed": 0,
                      "constraints": [{"metric": "size", "max": 0.5}, {"metric": "lat", "min": 1.0}],
                      "search": {"algorithm": "optuna"},
                      "param_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}}})
    searcher = build_searcher(spec)
    assert searcher.set_search_properties("f1", "min", to_ray_space(spec))  # as Tune sets it up
    results = [{"f1": 1.0, "f2": 1.0, "size": 0.2, "lat": 2.0},  # feasible
               {"f1": 0.0, "f2": 0.0, "size": 0.9, "lat": 2.0},  # size above its max by 0.4
               {"f1": 0.0, "f2": 0.0, "lat": 2.0},  # size missing
               {"f1": 0.0, "f2": 0.0, "size": 0.2, "lat": float("nan")}]  # lat NaN
    for i, result in enumerate(results):
        assert isinstance(searcher.suggest(f"t{i}"), dict)
        searcher.on_trial_complete(f"t{i}", {**result, "training_iteration": 1})
    study = ray_internals.optuna_study(searcher)
    inf = float("inf")
    assert [t.constraints for t in study.trials] == [
        {"size": pytest.approx(-0.3), "lat": -1.0}, {"size": pytest.approx(0.4), "lat": -1.0},
        {"size": inf, "lat": -1.0}, {"size": pytest.approx(-0.3), "lat": inf}]
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    best = study.best_trials if objectives > 1 else [study.best_trial]
    assert [t.number for t in best] == [0], "Optuna counts only the feasible trial"


MO_SPEC = """\
name: {name}
trainable: tests.trainables:two_objectives
metric: [f1, f2]
mode: [min, min]
constraints:
  - {{metric: size, max: 0.8}}
num_samples: {samples}
seed: 3
search: {search}
scheduler: {{type: asha, max_t: 3, grace_period: 1, reduction_factor: 2}}
param_space:
  x: {{type: uniform, low: 0.0, high: 1.0}}
  y: {{type: choice, values: [0.0, 0.5, 1.0]}}
  epochs: 3
"""


def _rows(exp) -> list[dict]:
    return pd.read_csv(exp / RESULTS_CSV).to_dict("records")


#: The shared NSGA-II + ASHA run: the first three trials are Optuna's enqueued points, in order. Two trials run at
#: once, so the third (f1 = 0.7) reaches ASHA's first rung after one of the first two (f1 = 0.05, 0.6) recorded
#: a better f1 there: ASHA stops it, whatever the order of their results. The second leaves its constraint
#: metric out and the third reports it as NaN: both infeasible, although x + y <= 0.8.
NSGA2_POINTS = ("[{x: 0.05, y: 0.0, size_as: value}, {x: 0.6, y: 0.0, size_as: missing}, "
                "{x: 0.7, y: 0.0, size_as: nan}]")


@pytest.fixture(scope="module")
def nsga2(tmp_path_factory, run_cli, on_session_ray):
    """`tuner run` of NSGA-II with ASHA (no scheduler.metric: the first objective) on 2 CPUs, with its console:
    (experiment folder, results.csv rows, stdout)."""
    folder = tmp_path_factory.mktemp("nsga2")
    spec = folder / "mo.yaml"
    text = MO_SPEC.format(name="mo", samples=14, search="{algorithm: optuna, sampler: nsga2, population_size: 6, "
                                                       f"points_to_evaluate: {NSGA2_POINTS}}}")
    spec.write_text(text + "  size_as: {type: choice, values: [value, missing, nan]}\n"
                    "reporting: {cli: {max_report_frequency: 1}, tensorboard: false}\n")
    proc = run_cli("run", spec, "--storage", folder / "runs", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = folder / "runs" / "mo"
    return exp, _rows(exp), proc.stdout


@pytest.mark.slow
def test_nsga2_with_asha_writes_the_feasible_front(nsga2):
    """NSGA-II proposes, ASHA stops on f1; summary.json, results.csv and pareto_configs.yaml agree with a
    brute-force front over the trials' last results; a missing or NaN constraint metric is infeasible."""
    exp, rows, _ = nsga2
    summary = json.loads((exp / SUMMARY).read_text())
    assert len(rows) == 14 and {r["status"] for r in rows} == {"TERMINATED"}
    by_x = {round(r["config/x"], 9): r for r in rows}
    assert by_x[0.7]["training_iteration"] == 1, "ASHA stopped the third point at its first rung"
    objectives = [Objective(metric="f1", mode="min"), Objective(metric="f2", mode="min")]
    constraints = [Constraint(metric="size", max=0.8)]
    expected = brute_force_front(rows, objectives, constraints)
    assert sorted(r["trial_id"] for r in rows if r["pareto"]) == sorted(expected)
    assert [r["feasible"] for r in rows] == [r["size"] <= 0.8 for r in rows]
    assert by_x[0.05]["feasible"] and not by_x[0.6]["feasible"] and not by_x[0.7]["feasible"], \
        "a missing (x = 0.6) or NaN (x = 0.7) constraint metric is infeasible"
    assert pd.isna(by_x[0.6]["size"]) and pd.isna(by_x[0.7]["size"])
    assert any(not r["feasible"] and r["size"] > 0.8 for r in rows), "the space holds infeasible trials (x + y > 0.8)"
    assert all(r["feasible"] for r in rows if r["pareto"]), "no infeasible trial on the front"
    assert [r["pareto"] for r in rows] == sorted((r["pareto"] for r in rows), reverse=True), "the front first"
    front = summary["pareto_front"]
    assert sorted(t["trial_id"] for t in front) == sorted(expected)
    assert set(front[0]) == {"trial_id", "config", "objectives", "checkpoint"}
    saved = yaml.safe_load((exp / PARETO_CONFIGS).read_text())
    assert [t["trial_id"] for t in saved] == [t["trial_id"] for t in front]
    assert all(set(t["config"]) == {"x", "y", "size_as", "epochs"} for t in saved)
    # The best trial: on the front, the best f1 there.
    on_front = [r for r in rows if r["pareto"]]
    assert summary["best"]["trial_id"] == min(on_front, key=lambda r: (r["f1"], r["trial_id"]))["trial_id"]


@pytest.mark.slow
def test_the_hypervolume_is_the_area_the_front_dominates(nsga2):
    """summary.json's hypervolume against a hand computation: the reference point is each objective's worst
    feasible value, 10% of its range further out, and the area is the staircase under the front (both min)."""
    exp, rows, _ = nsga2
    hv = json.loads((exp / SUMMARY).read_text())["hypervolume"]
    feasible = [(r["f1"], r["f2"]) for r in rows if r["feasible"]]
    reference = [max(v[k] for v in feasible) + 0.1 * (max(v[k] for v in feasible) - min(v[k] for v in feasible))
                 for k in (0, 1)]
    assert hv["reference"] == pytest.approx(reference)
    front = sorted((r["f1"], r["f2"]) for r in rows if r["pareto"])
    area, right = 0.0, reference[0]
    for f1, f2 in reversed(front):  # from the largest f1: each point adds the strip to the right of it
        area += (right - f1) * (reference[1] - f2)
        right = f1
    assert len(front) >= 2 and hv["value"] == pytest.approx(area)


@pytest.mark.slow
def test_the_scheduler_compares_by_the_first_objective_by_default(nsga2):
    """No scheduler.metric: ASHA's rungs (its state saved with the experiment) hold each trial's f1, not f2."""
    from tests.test_scheduler_state import saved_scheduler

    exp, rows, _ = nsga2
    state = saved_scheduler(exp)
    assert (state["_metric"], state["_mode"]) == ("f1", "min")
    f1 = {r["trial_id"]: r["f1"] for r in rows}
    [bracket] = state["_brackets"]
    recorded = {trial_id: value for _, rung in bracket._rungs for trial_id, value in rung.items()}
    assert len(recorded) >= 14, "every trial reached the first rung"
    assert recorded == {t: pytest.approx(-f1[t]) for t in recorded}, "the rungs hold -f1 (min): f1's reward"


@pytest.mark.slow
def test_the_console_shows_every_objective_and_constraint_and_the_front(nsga2):
    """The CLIReporter table has a column for f1, f2 and size; the progress line under it gives the front's size."""
    from tests.fixtures.console import console_reports

    _, rows, out = nsga2
    reports = console_reports(out)
    assert reports, out[-2000:]
    last = reports[-1]
    columns = set(next(iter(last["rows"].values())))
    assert {"f1", "f2", "size"} <= columns, columns
    front = sum(bool(r["pareto"]) for r in rows)
    assert last["progress"] is not None and f"| Pareto front {front} trials" in last["progress"], last["progress"]


@pytest.mark.slow
def test_a_ray_tune_trainable_reporting_several_metrics_runs_unchanged(ray_local, tmp_path):
    """A plain Ray Tune function (ray.tune.report of acc, cost, epoch), random search, two objectives."""
    from tuner import tune_model

    result = tune_model({"name": "raw", "trainable": "tests.trainables:raw_ray_two_objectives",
                         "metric": ["acc", "cost"], "mode": ["max", "min"], "num_samples": 8, "seed": 1,
                         "param_space": {"x": {"type": "uniform", "low": 0, "high": 1},
                                         "y": {"type": "choice", "values": [0.0, 0.5]}}},
                        storage=str(tmp_path / "runs"))
    rows = _rows(tmp_path / "runs" / "raw")
    expected = brute_force_front(rows, [Objective(metric="acc", mode="max"), Objective(metric="cost", mode="min")],
                                 [])
    assert sorted(t["trial_id"] for t in result.pareto_front) == sorted(expected)
    assert {r["trial_id"] for r in rows if r["pareto"]} == set(expected)
    assert "feasible" not in rows[0], "no constraints: no feasible column"


def _study_trials(exp) -> tuple[int, int]:
    """(trials, objectives) of the Optuna study in the experiment's saved searcher state."""
    import optuna

    state = sorted(exp.glob(SEARCHER_STATE.format("*")))[-1]  # the newest session's (its start time in the name)

    def studies(obj, depth=0):
        if isinstance(obj, optuna.study.Study):
            yield obj
        elif depth < 4 and isinstance(obj, dict):
            for v in obj.values():
                yield from studies(v, depth + 1)
        elif depth < 4 and hasattr(obj, "__dict__"):
            yield from studies(vars(obj), depth + 1)

    [study] = {id(s): s for s in studies(pickle.loads(state.read_bytes()))}.values()
    return len(study.trials), len(study.directions)


@pytest.mark.slow
def test_a_resume_keeps_the_multi_objective_study(ray_local, tmp_path):
    """The run's 4 trials stay in the Optuna study when a resume adds 3: 7 trials, 2 directions (a study
    rebuilt on resume would hold 3)."""
    from tests.test_resume import resume_in_process, run_in_process

    spec = tmp_path / "mo.yaml"
    body = MO_SPEC.format(name="mo", samples=4, search="{algorithm: optuna, sampler: tpe, n_startup_trials: 2}")
    spec.write_text(body)
    run_in_process(spec, tmp_path / "runs")
    exp = tmp_path / "runs" / "mo"
    assert _study_trials(exp) == (4, 2)
    spec.write_text(body.replace("num_samples: 4", "num_samples: 7"))
    result = resume_in_process(exp)
    assert result.num_errors == 0
    assert _study_trials(exp) == (7, 2)
    assert len(_rows(exp)) == 7 and result.pareto_front


def test_a_nan_in_any_objective_fails_the_trial():
    from tuner import trial

    trial.check_finite({"acc": 0.9, "cost": 3.0}, ("acc", "cost"))
    with pytest.raises(trial.NonFiniteMetricError, match="metric 'cost' is nan"):
        trial.check_finite({"acc": 0.9, "cost": float("nan")}, ("acc", "cost"))


def test_validate_prints_the_objectives_the_scheduler_metric_and_the_constraints(run_cli, tmp_path):
    spec = tmp_path / "mo.yaml"
    spec.write_text(MO_SPEC.format(name="mo", samples=4, search="{algorithm: optuna, sampler: nsga2}")
                    .replace("reduction_factor: 2}", "reduction_factor: 2, metric: f2}"))
    proc = run_cli("validate", spec)
    assert proc.returncode == 0, proc.stderr
    assert ("objectives: f1 (min), f2 (min): the result is the Pareto front of the feasible trials (summary.json, "
            "pareto_configs.yaml); best_config is the front's best on f1\n"
            "            scheduler asha compares trials by f2 (min) only (scheduler.metric)\n"
            "constraint: size <= 0.8 (an infeasible trial is never the best nor on the front)\n") in proc.stdout
    assert "searcher:   optuna (NSGA-II sampler, 2 objectives, 1 constraint(s))" in proc.stdout


def test_constraints_with_one_objective_make_the_best_the_best_feasible_trial(ray_local, make_spec):
    """README: "Constraints work with one objective too (the best feasible trial)". Three enqueued points under
    random search, f1 minimized, size (x + y) at most 0.5: the lowest f1 (x 0.05, y 1: size 1.05) is infeasible,
    so the best trial is x 0.3; results.csv's feasible column and summary.json's constraints say so."""
    from tuner import tune_model

    points = [{"x": 0.05, "y": 1.0}, {"x": 0.3, "y": 0.0}, {"x": 0.6, "y": 0.0}]
    result = tune_model(make_spec({
        "name": "one-objective", "trainable": "tests.trainables:two_objectives", "metric": "f1", "mode": "min",
        "constraints": [{"metric": "size", "max": 0.5}], "num_samples": 3, "seed": 0,
        "search": {"algorithm": "random", "points_to_evaluate": points},
        "param_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0},
                        "y": {"type": "choice", "values": [0.0, 0.5, 1.0]}, "epochs": 1},
        "reporting": {"cli": False, "tensorboard": False}}))
    rows = _rows(Path(result.experiment_path))
    feasible = {round(r["config/x"], 9): r["feasible"] for r in rows}
    assert feasible == {0.05: False, 0.3: True, 0.6: False}
    assert result.best_config["x"] == pytest.approx(0.3) and result.best_metrics["f1"] == pytest.approx(0.3)
    assert rows[0]["trial_id"] == result.best_trial_id
    summary = json.loads((Path(result.experiment_path) / SUMMARY).read_text())
    assert summary["constraints"] == [{"metric": "size", "max": 0.5}]
    assert summary["best"]["trial_id"] == result.best_trial_id
