"""The shipped specs, run end to end through the CLI on real data (slow)."""

import json

import pytest

from tests.fixtures.paths import ROOT
from tests.fixtures.specs import one_trial_at_a_time

pytestmark = pytest.mark.slow


def summary(path):
    return json.loads((path / "summary.json").read_text())


def test_main_job_reaches_098(tmp_path, run_cli):
    """The README's main job: 8 ASHA trials on the real MNIST digits reach val_accuracy >= 0.98 on the 1,000
    held-out digits (its time is measured in docs/benchmarks.md, "The main job's time", not here)."""
    proc = run_cli("run", "search_spaces/mnist_asha.yaml", "--storage", tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    s = summary(tmp_path / "mnist-asha")
    assert s["trials"] == {"total": 8, "by_status": {"TERMINATED": 8}}
    assert s["best"]["metrics"]["val_accuracy"] >= 0.98
    assert_best_is_the_tables_best_row(tmp_path / "mnist-asha", s)
    assert_dashboard_shows(tmp_path / "mnist-asha")
    assert f"Best trial {s['best']['trial_id']}: val_accuracy=" in proc.stdout


@pytest.mark.parametrize("name", ["mnist_grid", "mnist_random", "mnist_bohb", "mnist_optuna", "mnist_conditional"])
def test_each_searcher_spec_runs(ray_local, tmp_path, name):
    """Each shipped searcher spec runs as is, on a small slice of the data to keep CI short (through
    tune_model on the session's Ray; the main job above goes through the CLI). mnist_conditional's
    trials get the optimizer's branch as a mapping of its own parameters, and no inactive one."""
    from tuner import tune_model

    import yaml

    path = ROOT / "search_spaces" / f"{name}.yaml"
    algorithm = yaml.safe_load(path.read_text())["search"]["algorithm"]
    tune_model(path, storage=str(tmp_path), num_samples=2, **one_trial_at_a_time(algorithm),
               param_space={"limit_train": 400, "limit_val": 200, "epochs": 2})
    exp = next(tmp_path.iterdir())
    s = summary(exp)
    assert s["trials"]["by_status"] == {"TERMINATED": s["trials"]["total"]}
    assert_best_is_the_tables_best_row(exp, s)
    assert_dashboard_shows(exp)
    assert 0.2 < s["best"]["metrics"]["val_accuracy"] <= 1, "well above chance (0.1) after 2 epochs on 400 digits"
    assert 0 < s["best"]["metrics"]["val_loss"] < 2.3, "below the loss of a uniform guess, ln 10"
    if name == "mnist_conditional":
        config = s["best"]["config"]
        branch = {"sgd": {"name", "lr", "momentum"}, "adam": {"name", "lr", "beta2"}}[config["optimizer"]["name"]]
        assert set(config["optimizer"]) == branch
        assert {"hidden1", "hidden2"} & set(config) == {"hidden1", "hidden2"} & {
            1: set(), 2: {"hidden1"}, 3: {"hidden1", "hidden2"}}[config["fc_layers"]]


def test_multiobjective_spec_runs_and_finds_a_front(ray_local, tmp_path):
    """search_spaces/mnist_multiobjective.yaml runs as is (a small slice of the data): a Pareto front of
    accuracy against the CNN's size, whose best trial (on val_accuracy) is results.csv's first row."""
    import yaml

    from tuner import tune_model

    result = tune_model(ROOT / "search_spaces" / "mnist_multiobjective.yaml", storage=str(tmp_path), num_samples=3,
                        max_concurrent_trials=1, param_space={"limit_train": 400, "limit_val": 200, "epochs": 2})
    exp = next(tmp_path.iterdir())
    s = summary(exp)
    assert s["trials"]["by_status"] == {"TERMINATED": 3}
    assert s["pareto_front"] and s["objectives"] == [{"metric": "val_accuracy", "mode": "max"},
                                                     {"metric": "params_count", "mode": "min"}]
    assert all(t["objectives"]["params_count"] > 0 for t in s["pareto_front"])
    assert [t["trial_id"] for t in yaml.safe_load((exp / "pareto_configs.yaml").read_text())] == \
        [t["trial_id"] for t in result.pareto_front]
    assert_best_is_the_tables_best_row(exp, s)
    assert_dashboard_shows(exp)


def assert_best_is_the_tables_best_row(exp, s):
    """summary.json's and best_config.yaml's best trial is results.csv's first row, whose val_accuracy is
    the highest of the feasible trials; its config and metrics are that row's."""
    import pandas as pd
    import yaml

    from tuner.core.params import flatten

    table = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    row = table.iloc[0]
    best = s["best"]
    assert row["trial_id"] == best["trial_id"]
    # Under constraints (mnist_multiobjective's epoch_time_s, which depends on the machine's load) the best
    # trial is the best feasible one, and an infeasible trial may score higher.
    feasible = table[table["feasible"].astype(str) == "True"] if "feasible" in table else table
    assert row["val_accuracy"] == feasible["val_accuracy"].max() == pytest.approx(best["metrics"]["val_accuracy"])
    assert row["val_loss"] == pytest.approx(best["metrics"]["val_loss"])
    assert row["training_iteration"] == best["metrics"]["training_iteration"]
    for key, value in flatten(best["config"]).items():  # a sub-space choice's mapping: config/optimizer/lr
        assert row[f"config/{key}"] == (pytest.approx(value) if isinstance(value, float) else value), key
    assert yaml.safe_load((exp / "best_config.yaml").read_text()) == best["config"]


def assert_dashboard_shows(exp):
    """`tuner dashboard`'s study of the experiment, after the run: every trial of results.csv once, as COMPLETE (or
    PRUNED when a scheduler stopped it early), with the score results.csv ranks it by, its sampled parameters
    (the active ones only, as results.csv has them) and a learning curve; the study's directions are the
    objectives' modes, and Optuna's own best trial (or Pareto front) over it is tuner's."""
    import math

    import optuna
    import pandas as pd
    from optuna.trial import TrialState

    from tuner.report.dashboard import ExperimentStorage
    from tuner.report import load_experiment

    s, info = summary(exp), load_experiment(exp)
    storage = ExperimentStorage([exp])
    [study] = storage.get_all_studies()
    modes = [o["mode"] for o in s.get("objectives") or []] or [s["mode"]]
    assert [d.name for d in study.directions] == ["MAXIMIZE" if m == "max" else "MINIMIZE" for m in modes]
    table = pd.read_csv(exp / "results.csv", dtype={"trial_id": str}).set_index("trial_id")
    trials = {t.user_attrs["trial_id"]: t for t in storage.get_all_trials(study._study_id)}
    assert sorted(trials) == sorted(table.index)
    score = f"score_{info.metric}" if f"score_{info.metric}" in table else info.metric
    stopped_early = dict(zip(info.trials["trial_id"], info.trials["stopped_early"]))
    for trial_id, t in trials.items():
        row = table.loc[trial_id]
        assert t.state == (TrialState.PRUNED if stopped_early[trial_id] and len(modes) == 1
                           else TrialState.COMPLETE), (trial_id, t.state)
        if t.state == TrialState.COMPLETE:
            assert t.values[0] == pytest.approx(row[score])
        active = {k[len("config/"):] for k, v in row.items() if k.startswith("config/") and not pd.isna(v)}
        assert set(t.params) == active & set(info.params), trial_id
        assert t.intermediate_values and all(math.isfinite(v) for v in t.intermediate_values.values())
    loaded = optuna.load_study(study_name=study.study_name, storage=storage)
    if len(modes) > 1:
        assert {t.user_attrs["trial_id"] for t in loaded.best_trials} == {t["trial_id"] for t in s["pareto_front"]}
    elif trials[s["best"]["trial_id"]].state == TrialState.COMPLETE:  # Optuna ranks the COMPLETE trials only
        assert loaded.best_trial.user_attrs["trial_id"] == s["best"]["trial_id"]


def test_cifar_tutorial_on_a_generated_folder(tmp_path, run_cli, on_session_ray):
    """The tutorial spec runs on a tiny folder in the CIFAR-10 python format (through the CLI, on the
    session's Ray; one trial at a time, so one trial actor imports torch and the example)."""
    from examples.cifar import make_fake_cifar

    data = make_fake_cifar(tmp_path / "cifar")
    proc = run_cli("run", "search_spaces/cifar_tutorial.yaml", "--storage", tmp_path / "runs",
                   "--num-samples", "2", "--set", f"param_space.data_dir={data}", "--set", "param_space.epochs=2",
                   "--set", "scheduler.max_t=2", "--set", "max_concurrent_trials=1", timeout=600, env=on_session_ray)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    s = summary(tmp_path / "runs" / "cifar-tutorial")
    assert s["trials"] == {"total": 2, "by_status": {"TERMINATED": 2}}
    assert {"l1", "l2", "lr", "batch_size"} <= set(s["best"]["config"])
    assert_dashboard_shows(tmp_path / "runs" / "cifar-tutorial")


def test_pbt_spec_runs_and_exploits(ray_local, tmp_path):
    """search_spaces/mnist_pbt.yaml runs as is (a smaller slice of the data, 4 epochs, synchronous so that the
    perturbation at epoch 2 always happens): every trial ends, and the worst trial was cloned from the best
    (the saved population counts the exploit)."""
    from tests.test_scheduler_state import saved_scheduler
    from tuner import tune_model
    from tuner.spec import load_spec

    # As the README describes it: 4 trials, 8 epochs on 2,000 digits, lr, momentum and batch_size mutated every 2.
    spec = load_spec(ROOT / "search_spaces" / "mnist_pbt.yaml")
    assert (spec.num_samples, spec.stop["training_iteration"], spec.param_space["epochs"],
            spec.param_space["limit_train"], spec.scheduler.perturbation_interval) == (4, 8, 8, 2000, 2)
    assert sorted(spec.scheduler.mutations) == ["batch_size", "lr", "momentum"]
    tune_model(ROOT / "search_spaces" / "mnist_pbt.yaml", storage=str(tmp_path), stop={"training_iteration": 4},
               scheduler={"synch": True}, param_space={"limit_train": 400, "limit_val": 200, "epochs": 4})
    exp = tmp_path / "mnist-pbt"
    s = summary(exp)
    assert s["trials"] == {"total": 4, "by_status": {"TERMINATED": 4}}
    assert saved_scheduler(exp)["_num_perturbations"] >= 1, "a trial was exploited"
    assert_best_is_the_tables_best_row(exp, s)
    assert_dashboard_shows(exp)


def test_resnet_gpu_spec_runs_on_cpu(ray_local, tmp_path):
    """search_spaces/resnet_gpu.yaml runs as is but for its GPU (the CI machine has none) and its size: two ASHA
    trials of ResNet-18 at width 8 under amp (bf16 on CPU), on a few synthetic images (the spec's default data)."""
    from tuner import tune_model

    tune_model(ROOT / "search_spaces" / "resnet_gpu.yaml", storage=str(tmp_path), num_samples=2,
               resources={"cpu": 1, "gpu": 0}, max_concurrent_trials=1, stop={"training_iteration": 2},
               scheduler={"max_t": 2},
               param_space={"width": 8, "batch_size": 16, "n_train": 32, "n_val": 16, "epochs": 2})
    exp = tmp_path / "resnet-gpu"
    s = summary(exp)
    assert s["trials"] == {"total": 2, "by_status": {"TERMINATED": 2}}
    config = s["best"]["config"]
    assert config["data_dir"] is None and config["width"] == 8 and 1e-2 <= config["lr"] <= 2e-1
    assert 0 <= s["best"]["metrics"]["val_accuracy"] <= 1 and s["best"]["metrics"]["params_count"] > 0
    assert_dashboard_shows(exp)
