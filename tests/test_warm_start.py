"""search.warm_start: earlier experiments' finished trials checked against the spec and fed to the searcher.

Pure tests of the comparison rules (tuner.search.warm_start.compare_spaces, contains); golden refusals against a
committed earlier experiment (tests/warm_start/earlier: spec.yaml and results.csv, as `tuner run` leaves
them), one of them through the real CLI; and real runs: an experiment A on the session's Ray, then B
warm-started from it under optuna (through `tuner run`, the study read back from B's searcher state),
random (A's best configs run first) and bohb (A's trials in BOHB's model).
"""

from __future__ import annotations

import glob
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.fixtures.paths import ROOT
from tuner.experiment.layout import RESULTS_CSV, SEARCHER_STATE
from tuner.spec import SpecError, load_spec
from tuner.search.warm_start import EarlierTrial, WarmStart, compare_spaces, contains, load_warm_start, space_params

BAD = sorted((ROOT / "tests" / "warm_start" / "bad").glob("*.yaml"))
EARLIER = ROOT / "tests" / "warm_start" / "earlier"
BASE = {"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min"}


def _spec(space: dict, algorithm: str = "optuna", **search) -> object:
    return load_spec({**BASE, "param_space": space, "search": {"algorithm": algorithm, **search},
                      **({"scheduler": {"max_t": 2}} if algorithm == "bohb" else {})})


def _compare(old: dict, new: dict, algorithm: str = "optuna"):
    return compare_spaces(space_params(_spec(old)), space_params(_spec(new, algorithm)), algorithm)


U01 = {"type": "uniform", "low": 0.0, "high": 1.0}


# --------------------------------------------------------------------------- the rules, pure


def test_an_unchanged_space_gives_no_note_and_no_refusal():
    c = _compare({"x": U01, "epochs": 2}, {"x": U01, "epochs": 2})
    assert (c.refusals, c.notes, c.fill, c.added) == ([], [], {}, [])


def test_a_removed_parameter_is_dropped_with_a_note_and_a_likely_rename_is_named():
    c = _compare({"x": U01, "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}},
                 {"x": U01, "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1}})
    assert not c.refusals
    assert c.notes == ["lr (loguniform [0.0001, 0.1)) is no longer in param_space: dropped from the earlier configs.",
                       "learning_rate (loguniform [0.0001, 0.1)) is new (a rename of lr, which has the same "
                       "distribution? The earlier values of lr are not used for learning_rate): the earlier trials "
                       "lack it; Optuna models it from this run's trials."]
    assert c.added == ["learning_rate"]


def test_a_new_parameter_is_accepted_by_optuna_and_random_but_refused_by_bohb():
    old, new = {"x": U01}, {"x": U01, "y": {"type": "choice", "values": [1, 2]}}
    assert not _compare(old, new, "optuna").refusals and not _compare(old, new, "random").refusals
    assert "the earlier configs run again get it sampled" in _compare(old, new, "random").notes[0]
    assert _compare(old, new, "bohb").refusals[0].startswith("y (choice [1, 2]) is new, and BOHB's model needs")
    # A new constant needs nothing from the earlier trials, under any searcher.
    assert _compare(old, {"x": U01, "epochs": 3}, "bohb").refusals == []


def test_a_constant_that_became_sampled_is_filled_in_and_a_sampled_one_that_became_constant_is_dropped():
    c = _compare({"x": U01, "epochs": 2}, {"x": U01, "epochs": {"type": "randint", "low": 1, "high": 4}}, "bohb")
    assert c.fill == {"epochs": 2} and not c.refusals
    assert c.notes == ["epochs was the constant 2 and is randint [1, 4) now: the earlier trials are fed with epochs=2."]
    c = _compare({"x": U01, "epochs": {"type": "randint", "low": 1, "high": 4}}, {"x": U01, "epochs": 3})
    assert c.notes == ["epochs (randint [1, 4)) is the constant 3 now: dropped from the earlier configs."]


def test_a_domain_changed_within_its_kind_is_a_note_and_a_change_of_kind_is_refused():
    c = _compare({"x": U01}, {"x": {"type": "loguniform", "low": 0.01, "high": 1.0}})
    assert not c.refusals and c.notes == ["x was uniform [0, 1) and is loguniform [0.01, 1) now: earlier trials "
                                          "whose value lies outside it are left out."]
    assert not _compare({"n": {"type": "randint", "low": 1, "high": 9}}, {"n": U01}).refusals  # integer -> float
    c = _compare({"n": {"type": "randint", "low": 1, "high": 9}}, {"n": {"type": "choice", "values": [1, 2]}})
    assert "a change of type (numeric to categorical)" in c.refusals[0]


@pytest.mark.parametrize("dist,value,expected", [
    ({"type": "uniform", "low": 0, "high": 1}, 0.5, (True, 0.5)),
    ({"type": "uniform", "low": 0, "high": 1}, 1.5, (False, None)),
    ({"type": "randint", "low": 8, "high": 65}, 32.0, (True, 32)),  # a results.csv column with blanks
    ({"type": "randint", "low": 8, "high": 65}, 65, (False, None)),  # high exclusive, as tune.randint
    ({"type": "randint", "low": 8, "high": 65}, 8.5, (False, None)),
    ({"type": "qrandint", "low": 0, "high": 10, "q": 5}, 10, (True, 10)),  # high inclusive with q > 1
    ({"type": "quniform", "low": 0, "high": 1, "q": 0.25}, 0.3, (False, None)),
    ({"type": "choice", "values": [32, 64]}, 64.0, (True, 64)),
    ({"type": "choice", "values": ["sgd", "adam"]}, "adam", (True, "adam")),
    ({"type": "choice", "values": [True, False]}, 1, (False, None)),  # True is not 1 here
    ({"type": "randn"}, -3.0, (True, -3.0)),
])
def test_contains_reads_earlier_values_as_this_distribution_gives_them(dist, value, expected):
    spec = _spec({"p": dist}, "random")
    assert contains(spec.space.get("p").dist, value) == expected


def test_the_best_earlier_trials_are_ranked_by_the_best_trial_rule_one_per_config():
    trials = [EarlierTrial("a", "t1", {"x": 0.1}, (0.5,), 2), EarlierTrial("a", "t2", {"x": 0.2}, (0.1,), 2),
              EarlierTrial("b", "t1", {"x": 0.2}, (0.2,), 2), EarlierTrial("b", "t2", {"x": 0.3}, (0.3,), 2)]
    warm = WarmStart(trials, [])
    assert [(t.source, t.trial_id) for t in warm.best(2, "min")] == [("a", "t2"), ("b", "t2")]
    assert [t.trial_id for t in warm.best(1, "max")] == ["t1"]
    assert warm.best(0, "min") == []


def test_the_earlier_experiment_is_read_checked_and_converted(monkeypatch):
    """Only finished trials with a finite value, inside this space; each with its config, value and budget."""
    monkeypatch.chdir(ROOT)
    spec = _spec({"x": {"type": "uniform", "low": 0.0, "high": 0.8}, "opt": {"type": "choice", "values": ["sgd", "adam"]},
                  "epochs": 2}, warm_start=["tests/warm_start/earlier"])
    assert load_warm_start(_spec({"x": U01})) is None
    warm = load_warm_start(spec)
    assert [(t.trial_id, t.config, t.values, t.budget) for t in warm.trials] == [
        ("a0000001", {"x": 0.31, "opt": "adam"}, (0.5001,), 2.0), ("a0000002", {"x": 0.52, "opt": "sgd"}, (0.5484,), 2.0),
        ("a0000003", {"x": 0.74, "opt": "adam"}, (0.6936,), 2.0), ("a0000004", {"x": 0.12, "opt": "sgd"}, (1.0324,), 1.0),
        ("a0000007", {"x": 0.22, "opt": "adam"}, (0.5064,), 2.0)]
    assert warm.sources[0].notes == [
        "width (randint [8, 65)) is no longer in param_space: dropped from the earlier configs.",
        "x was uniform [0, 1) and is uniform [0, 0.8) now: earlier trials whose value lies outside it are left out.",
        "1 trial left out: no finite value of loss.", "1 trial left out: status ERROR."]
    # A bare experiment name is looked up under the spec's storage too.
    named = load_spec({**spec.model_dump(exclude_unset=True), "storage": "tests/warm_start",
                       "search": {"algorithm": "optuna", "warm_start": ["earlier"]}})
    assert len(load_warm_start(named).trials) == 5


def test_an_earlier_experiment_of_another_mode_is_accepted(monkeypatch):
    """README "Warm start", same metric: each objective must be an earlier one, whose mode may differ (loss was
    minimized in tests/warm_start/earlier, maximized here)."""
    monkeypatch.chdir(ROOT)
    space = {"x": U01, "opt": {"type": "choice", "values": ["sgd", "adam"]}, "epochs": 2}
    spec = load_spec({**BASE, "mode": "max", "param_space": space,
                      "search": {"algorithm": "optuna", "warm_start": ["tests/warm_start/earlier"]}})
    warm = load_warm_start(spec)
    assert [(t.trial_id, t.values) for t in warm.trials] == [
        ("a0000001", (0.5001,)), ("a0000002", (0.5484,)), ("a0000003", (0.6936,)), ("a0000004", (1.0324,)),
        ("a0000007", (0.5064,))]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_refusal_golden_message(path, monkeypatch):
    """Each refusal names the warm_start entry with file:line:col, says why, and what to do."""
    monkeypatch.chdir(ROOT)
    rel = path.relative_to(ROOT).as_posix()
    with pytest.raises(SpecError) as info:
        load_warm_start(load_spec(rel))
    assert str(info.value) + "\n" == path.with_suffix(".err").read_text()


def test_a_refusal_through_the_cli_exits_2_before_ray_starts(tmp_path, run_cli):
    rel = "tests/warm_start/bad/type_change.yaml"
    proc = run_cli("validate", rel, "--storage", tmp_path / "runs", timeout=120, env={"RAY_TMPDIR": str(tmp_path / "ray")})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "tuner: error: " + (ROOT / rel).with_suffix(".err").read_text()
    assert not (tmp_path / "ray").exists() and not (tmp_path / "runs").exists(), "Ray started, or a folder was written"


# --------------------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def earlier(ray_local, tmp_path_factory):
    """Experiment A: 4 trials of the quadratic toy under optuna, on the session's Ray."""
    from tuner import tune_model

    folder = tmp_path_factory.mktemp("warm")
    spec = {**BASE, "name": "a", "num_samples": 4, "seed": 0, "param_space": {"x": U01, "epochs": 1},
            "search": {"algorithm": "optuna"}, "reporting": {"cli": False, "tensorboard": False}}
    tune_model(spec, storage=str(folder / "runs"))
    rows = pd.read_csv(folder / "runs" / "a" / RESULTS_CSV, dtype={"trial_id": str})
    assert (rows["status"] == "TERMINATED").all()
    return folder, rows


def _restored(experiment: Path, cls):
    from tuner.adapters import ray_internals

    searcher = cls()
    searcher.restore(sorted(glob.glob(str(experiment / SEARCHER_STATE.format("*"))))[-1])  # the newest session's
    return searcher, ray_internals


@pytest.mark.slow
def test_optuna_warm_started_through_the_cli_has_the_earlier_trials_in_its_study(earlier, run_cli, on_session_ray):
    """B (`tuner run`) adds every trial of A to its study before its first suggestion, and says so. Resumed
    with one trial more (in-process, as `tuner resume` does, with A's folder gone), B's searcher still holds them, once each,
    and learns from the new trial too."""
    from tuner.run.engine import resume_prepared
    from tuner.run.prepare import prepare_resume

    from ray.tune.search.optuna import OptunaSearch

    folder, rows = earlier
    spec = {**BASE, "name": "b", "num_samples": 2, "seed": 1,
            "param_space": {"x": {"type": "uniform", "low": 0.0, "high": 0.8}, "epochs": 1},
            "search": {"algorithm": "optuna", "n_startup_trials": 2, "warm_start": [str(folder / "runs" / "a")]},
            "reporting": {"cli": False, "tensorboard": False}}
    (folder / "b.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run_cli("run", folder / "b.yaml", "--storage", folder / "runs", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inside = rows[rows["config/x"] < 0.8]
    assert f"warm start: {len(inside)} earlier trials, added to the Optuna study as completed trials" in proc.stdout
    assert f"{len(inside)} of 4 from {folder / 'runs' / 'a'}" in proc.stdout
    searcher, ray_internals = _restored(folder / "runs" / "b", OptunaSearch)
    told = ray_internals.optuna_study(searcher).trials
    assert len(told) == len(inside) + 2
    fed = {t.user_attrs["tuner_warm_start"].rsplit(":", 1)[1]: (t.params, t.value) for t in told[:len(inside)]}
    assert fed == {r.trial_id: ({"x": r["config/x"]}, r.loss) for _, r in inside.iterrows()}
    assert all(t.state.name == "COMPLETE" and not t.user_attrs for t in told[len(inside):])  # B's own
    # The resume unpickles B's searcher: A's trials stay in its study, and it goes on learning. A's folder is
    # moved away meanwhile (README: the earlier folders are not read again), and back for the other tests.
    (folder / "b3.yaml").write_text(yaml.safe_dump({**spec, "num_samples": 3}, sort_keys=False))
    a, away = folder / "runs" / "a", folder / "a-away"
    a.rename(away)
    try:
        resumed = resume_prepared(prepare_resume(folder / "runs" / "b", spec=folder / "b3.yaml"))
    finally:
        away.rename(a)
    assert resumed.num_errors == 0 and len(resumed.dataframe) == 3, resumed.summary
    searcher, ray_internals = _restored(folder / "runs" / "b", OptunaSearch)
    after = ray_internals.optuna_study(searcher).trials
    assert [t for t in after if t.user_attrs.get("tuner_warm_start")] == told[:len(inside)], "fed once, kept"
    assert len(after) == len(inside) + 3 and all(t.state.name == "COMPLETE" for t in after)


@pytest.mark.slow
def test_random_search_runs_the_earlier_best_first_and_samples_a_new_parameter(earlier):
    from tuner import tune_model

    folder, rows = earlier
    spec = {**BASE, "name": "c", "num_samples": 3, "seed": 2,
            "param_space": {"x": U01, "y": {"type": "choice", "values": [1, 2]}, "epochs": 1},
            "search": {"algorithm": "random", "warm_start": [str(folder / "runs" / "a")], "warm_start_top_k": 2},
            "reporting": {"cli": False, "tensorboard": False}}
    result = tune_model(spec, storage=str(folder / "runs"))
    got = pd.read_csv(folder / "runs" / "c" / RESULTS_CSV, dtype={"trial_id": str}).sort_values("trial_id")
    assert result.num_errors == 0 and len(got) == 3
    best2 = rows.sort_values("loss")["config/x"].head(2).tolist()
    assert got["config/x"].head(2).tolist() == best2  # A's two best, first, as Ray's points to evaluate
    assert set(got["config/y"]) <= {1, 2}  # new since A: sampled
    assert got["config/x"].iloc[2] not in best2


def test_bohb_tells_its_model_the_earlier_trials_at_the_budget_each_reached(monkeypatch):
    """The searcher as Tune sets it up (set_search_properties with the Ray space): the earlier trials are in
    hpbandster's BOHB at their budgets (iterations), and its model is fitted on the largest."""
    from tuner.adapters import ray_internals
    from tuner.search.algorithms import build_searcher
    from tuner.search.space import to_ray_space

    monkeypatch.chdir(ROOT)
    spec = _spec({"x": U01, "epochs": 2}, "bohb", warm_start=["tests/warm_start/earlier"], min_points_in_model=2)
    searcher = build_searcher(spec, warm=load_warm_start(spec))
    assert ray_internals.bohb_config_generator(searcher) is None  # no space yet: Tune gives it
    assert searcher.set_search_properties("loss", "min", to_ray_space(spec))
    model = ray_internals.bohb_config_generator(searcher)
    assert model.losses == {1.0: [1.0324], 2.0: [0.5001, 0.5484, 0.6936, 0.5064]}
    assert list(model.kde_models) == [2.0]
    assert 0 <= searcher.suggest("t1")["x"] <= 1


def test_optuna_adds_the_earlier_trials_to_a_define_by_run_study(monkeypatch):
    """A conditional space (Optuna's define-by-run, which Ray's evaluated_rewards refuses): each earlier trial is
    a completed trial with the parameters it has; momentum, new and active under sgd only, is absent."""
    from tuner.adapters import ray_internals
    from tuner.search.algorithms import build_searcher

    monkeypatch.chdir(ROOT)
    spec = _spec({"x": U01, "opt": {"type": "choice", "values": ["sgd", "adam"]},
                  "momentum": {"type": "uniform", "low": 0.5, "high": 0.99, "when": {"opt": "sgd"}}, "epochs": 2},
                 warm_start=["tests/warm_start/earlier"])
    searcher = build_searcher(spec, warm=load_warm_start(spec))
    told = ray_internals.optuna_study(searcher).trials
    assert [(t.params, t.value, t.state.name) for t in told] == [
        ({"x": 0.31, "opt": "adam"}, 0.5001, "COMPLETE"), ({"x": 0.52, "opt": "sgd"}, 0.5484, "COMPLETE"),
        ({"x": 0.74, "opt": "adam"}, 0.6936, "COMPLETE"), ({"x": 0.12, "opt": "sgd"}, 1.0324, "COMPLETE"),
        ({"x": 0.22, "opt": "adam"}, 0.5064, "COMPLETE")]
    config = searcher.suggest("t1")
    assert ("momentum" in config) == (config["opt"] == "sgd")


def _first_choices(n_startup_trials: int, seeds=range(8)) -> list[str]:
    """The ``opt`` of each seed's first Optuna suggestion, warm-started from tests/warm_start/earlier (5 usable
    trials; the best by far is adam's)."""
    from tuner.search.algorithms import build_searcher
    from tuner.search.space import to_ray_space

    out = []
    for seed in seeds:
        spec = load_spec({**BASE, "seed": seed, "param_space": {"x": U01, "opt": {"type": "choice",
                                                                                   "values": ["sgd", "adam"]}},
                          "search": {"algorithm": "optuna", "n_startup_trials": n_startup_trials,
                                     "warm_start": [str(EARLIER)]}})
        searcher = build_searcher(spec, warm=load_warm_start(spec))
        assert searcher.set_search_properties("loss", "min", to_ray_space(spec))  # as Tune sets it up
        out.append(searcher.suggest("t0")["opt"])
    return out


def test_tpe_counts_the_earlier_trials_in_n_startup_trials():
    """With n_startup_trials: 5 and 5 earlier trials, TPE's very first suggestion is its model's (adam, whose
    earlier trials were best, for every seed); with 6, the first is one of TPE's random start-up draws."""
    assert _first_choices(5) == ["adam"] * 8
    assert "sgd" in _first_choices(6)


def _earlier_multi_objective(folder: Path) -> Path:
    """An earlier experiment with two objectives (loss, cost): its spec.yaml and results.csv."""
    exp = folder / "earlier-mo"
    exp.mkdir()
    (exp / "spec.yaml").write_text(yaml.safe_dump({
        **BASE, "name": "earlier-mo", "metric": ["loss", "cost"], "mode": ["min", "min"], "num_samples": 4,
        "param_space": {"x": U01, "epochs": 2}, "search": {"algorithm": "optuna"}}, sort_keys=False))
    (exp / RESULTS_CSV).write_text("trial_id,status,config/x,config/epochs,loss,cost,training_iteration\n"
                                   "b1,TERMINATED,0.2,2,0.9,0.1,2\n"
                                   "b2,TERMINATED,0.5,2,0.5,0.4,2\n"
                                   "b3,TERMINATED,0.8,2,0.2,0.7,2\n"  # cost above this spec's constraint
                                   "b4,TERMINATED,0.6,2,0.3,,2\n")  # no cost: not a finite objective value
    return exp


def test_optuna_warm_starts_several_objectives_with_the_feasible_earlier_trials(tmp_path):
    """Two objectives and a constraint on one of them: the earlier trials are added to the two-direction study
    with both values, feasible (constraints set to 0); the infeasible one and the one without a value are left
    out, each with a note."""
    from tuner.adapters import ray_internals
    from tuner.search.algorithms import build_searcher
    from tuner.search.space import to_ray_space

    exp = _earlier_multi_objective(tmp_path)
    spec = load_spec({**BASE, "metric": ["loss", "cost"], "mode": ["min", "min"], "seed": 0,
                      "constraints": [{"metric": "cost", "max": 0.5}], "param_space": {"x": U01, "epochs": 2},
                      "search": {"algorithm": "optuna", "warm_start": [str(exp)]}})
    warm = load_warm_start(spec)
    assert [(t.trial_id, t.values) for t in warm.trials] == [("b1", (0.9, 0.1)), ("b2", (0.5, 0.4))]
    assert warm.sources[0].notes == ["1 trial left out: infeasible under this spec's constraints.",
                                     "1 trial left out: no finite value of loss, cost."]
    searcher = build_searcher(spec, warm=warm)
    assert searcher.set_search_properties("loss", "min", to_ray_space(spec))  # as Tune sets it up
    study = ray_internals.optuna_study(searcher)
    assert len(study.directions) == 2
    assert [(t.params, t.values, t.constraints, t.state.name) for t in study.trials] == [
        ({"x": 0.2}, [0.9, 0.1], {"cost": 0.0}, "COMPLETE"), ({"x": 0.5}, [0.5, 0.4], {"cost": 0.0}, "COMPLETE")]


def test_random_search_runs_the_best_3_earlier_trials_right_after_the_points_to_evaluate():
    """warm_start_top_k unset: the 3 best earlier trials by loss (one per config), after the spec's own point, then
    random draws: the order of the generator's trials."""
    from ray.tune.experiment import Experiment

    from tuner.search.algorithms import build_searcher
    from tuner.search.space import to_ray_space

    point = {"x": 0.9, "opt": "sgd", "width": 10}
    spec = load_spec({**BASE, "num_samples": 6, "seed": 0, "param_space": {
        "x": U01, "opt": {"type": "choice", "values": ["sgd", "adam"]}, "width": {"type": "randint", "low": 8,
                                                                                 "high": 65}, "epochs": 2},
        "search": {"algorithm": "random", "points_to_evaluate": [point], "warm_start": [str(EARLIER)]}})
    generator = build_searcher(spec, warm=load_warm_start(spec))
    generator.add_configurations([Experiment("w", lambda config: None, num_samples=6, config=to_ray_space(spec))])
    configs = [generator.next_trial().config for _ in range(6)]
    assert configs[:4] == [{**point, "epochs": 2}, {"x": 0.31, "opt": "adam", "width": 16, "epochs": 2},
                           {"x": 0.22, "opt": "adam", "width": 24, "epochs": 2},
                           {"x": 0.52, "opt": "sgd", "width": 32, "epochs": 2}]
    assert all(c not in configs[:4] for c in configs[4:]), "then random draws"
