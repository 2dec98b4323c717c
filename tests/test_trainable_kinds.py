"""Every kind of trainable keeps tuner's promises: class trainables (ray.tune.Trainable),
Ray Tune function trainables (ray.tune.report, or a returned dict), tune.with_parameters,
and tuner.trial functions. All on a real local Ray (2 CPUs)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tuner import tune_model
from tuner.spec import SpecError

X = {"type": "uniform", "low": 0, "high": 1}


# The specs of this file: make_spec(TRAINABLES, trainable=..., **overrides), stored in the test's tmp_path.
TRAINABLES = {
    "name": "k",
    "metric": "loss",
    "mode": "min",
    "num_samples": 4,
    "seed": 0,
    "param_space": {"x": X},
    "stop": {"training_iteration": 4},
    "resources": {"cpu": 2},  # one trial at a time: one trial actor a run (as in test_engine.py's ENGINE)
    "reporting": {"cli": False, "tensorboard": False},
}


def rows(experiment, prefix):
    """Every result of every trial, from the trials' result.json files: {trial folder: [result, ...]}."""
    return {d.name: [json.loads(line) for line in (d / "result.json").read_text().splitlines()]
            for d in experiment.glob(f"{prefix}_*") if (d / "result.json").is_file()}


COMBOS = [("random", "hyperband"), ("optuna", "asha"), ("bohb", "bohb"), ("grid", "median")]


@pytest.mark.parametrize("algo,sched", COMBOS, ids=[f"{a}-{s}" for a, s in COMBOS])
def test_class_trainable_under_searchers_and_schedulers(ray_local, tmp_path, algo, sched, make_spec):
    """A ray.tune.Trainable subclass runs from the spec under each searcher and scheduler, with
    plain Python configs, Ray's checkpoints every checkpoint.frequency steps, and actor reuse.
    Each trial sees its own seed (trial.seed(), results.csv's trial_seed); under optuna, with
    seed_trials, ``random`` is seeded with it before setup and before reset_config (a reused actor)."""
    import random

    from tests.trainables import Counter

    space = {"x": {**X, "grid_points": 4} if algo == "grid" else X, "opt": {"type": "choice", "values": ["a", "b"]}}
    scheduler = {"type": sched, "max_t": 4, "reduction_factor": 2} if sched != "median" else {"type": "median"}
    # Ray's Hyperband fills its no-rung bracket (3 trials here) first: 6 trials reach a rung.
    samples = {"grid": 1, "random": 6}.get(algo, 4)
    result = tune_model(make_spec(TRAINABLES, search={"algorithm": algo}, scheduler=scheduler, param_space=space,
                                  num_samples=samples, checkpoint={"frequency": 2}, seed_trials=algo == "optuna"),
                        trainable=Counter)
    df = result.dataframe
    assert len(df) == (8 if algo == "grid" else samples)
    assert (df["seed_seen"] == df["trial_seed"]).all() and df["trial_seed"].nunique() == len(df), \
        df[["trial_id", "trial_seed", "seed_seen"]]
    if algo == "optuna":
        assert [random.Random(s).random() for s in df["trial_seed"]] == df["setup_draw"].tolist()
    assert set(df["status"]) == {"TERMINATED"}, df[["trial_id", "status"]]
    assert set(df["x_type"]) == {"float"}, "configs are plain Python values, also under BOHB"
    assert type(result.best_config["opt"]) is str and result.best_metrics["loss"] == df["loss"].min()
    trials = rows(tmp_path / "k", "Counter")
    assert len(trials) == len(df)
    finished = [name for name, rs in trials.items() if rs[-1]["training_iteration"] == 4]
    assert finished, "some trial ran to the end"
    for name in finished:  # Ray checkpointed every 2 iterations and at the end; num_to_keep=2
        kept = sorted(p.name for p in (tmp_path / "k" / name).glob("checkpoint_*"))
        assert len(kept) == 2, (name, kept)
    assert result.best_checkpoint and Path(result.best_checkpoint).parent.parent == tmp_path / "k"
    # (step, iteration, restored from, resets) of each result, for the messages below.
    seen = {n: [(r["step_no"], r["training_iteration"], r["restored_from"], r["resets"]) for r in rs]
            for n, rs in sorted(trials.items())}
    assert all(r["step_no"] == r["training_iteration"] for rs in trials.values() for r in rs), \
        f"a restored trial went on from the right checkpoint: {seen}"
    if sched in ("hyperband", "bohb"):
        assert any(r["restored_from"] > 0 for rs in trials.values() for r in rs), \
            f"a paused trial went on from its checkpoint: {seen}"
    else:  # Hyperband pauses: a restored trial may get a fresh actor
        assert max(r["resets"] for rs in trials.values() for r in rs) > 0, f"Ray reused actors (reset_config): {seen}"


def test_class_trainable_failures_timeout_and_amp(ray_local, tmp_path, make_spec):
    """failure.max_failures restores a class trainable from its checkpoint; trial_timeout_s ends
    one that runs too long; amp reaches tuner.trial inside the class."""
    from tests.trainables import Counter

    space = {"x": 0.8, "fail_dir": str(tmp_path), "fail_at": 3}  # one trial each time
    result = tune_model(make_spec(TRAINABLES, num_samples=1, param_space=space, failure={"max_failures": 1}, amp=True),
                        trainable=Counter)
    assert set(result.dataframe["status"]) == {"TERMINATED"}
    trials = rows(tmp_path / "k", "Counter")
    assert len(trials) == 1
    for name, rs in trials.items():
        assert [r["step_no"] for r in rs][-1] == 4 and rs[-1]["restored_from"] == 2, \
            (name, [(r["step_no"], r["restored_from"]) for r in rs])
        assert all(r["amp"] == 1.0 for r in rs)
    slow = tune_model(make_spec(TRAINABLES, name="slow", num_samples=1, trial_timeout_s=3,
                                param_space={"x": 0.8, "sleep": 2}),
                      trainable=Counter)
    assert set(slow.dataframe["status"]) == {"ERROR"} and len(slow.errors) == 1
    assert all(e["error"].startswith("tuner.run.trainable.TrialTimeoutError: the trial ran longer than "
                                     "trial_timeout_s=3 s") for e in slow.errors), slow.errors


def test_oom_backoff_restarts_a_ray_tune_function_from_its_last_checkpoint(ray_local, make_spec):
    """README's table: under oom_backoff a Ray Tune function trainable is called again with the halved batch, and
    goes on from ``ray.tune.get_checkpoint()``, the last checkpoint it reported (epoch 1's: it starts at epoch 2);
    every result carries ``batch_size_used`` (added to its ``ray.tune.report`` metrics, as to ``trial.report``'s)."""
    result = tune_model(make_spec(TRAINABLES, trainable="tests.trainables:raw_ray_oom_until_small", num_samples=1,
                                  param_space={"batch_size": 64, "fits": 16}, stop=None, oom_backoff="batch_size"))
    df = result.dataframe
    assert list(df["status"]) == ["TERMINATED"] and df.loc[0, "batch_size_used"] == 16
    (reports,) = rows(Path(result.experiment_path), "raw_ray_oom_until_small").values()
    assert [(r["batch_size_seen"], r["batch_size_used"], r["start"], r["epoch"]) for r in reports] == \
        [(64, 64, 0, 0), (64, 64, 0, 1), (16, 16, 2, 2), (16, 16, 2, 3)]


def test_class_trainable_refusals(tmp_path, make_spec):
    """What a class trainable cannot do is refused before anything starts, with the reason."""
    from tests.trainables import Counter, NoCheckpoints

    with pytest.raises(SpecError, match=r"resources.workers: resources.workers makes each trial a DDP group .*"
                                        r"but Counter is a class trainable"):
        tune_model(make_spec(TRAINABLES, resources={"workers": 2}), trainable=Counter)
    with pytest.raises(SpecError, match=r"oom_backoff: oom_backoff restarts a train function .* but Counter is a "
                                        r"class trainable"):
        tune_model(make_spec(TRAINABLES, param_space={"batch_size": 8}, oom_backoff="batch_size"), trainable=Counter)
    with pytest.raises(SpecError, match=r"scheduler.type: scheduler hyperband pauses trials .* but NoCheckpoints "
                                        r"does not implement save_checkpoint and load_checkpoint"):
        tune_model(make_spec(TRAINABLES, scheduler={"type": "hyperband"}), trainable=NoCheckpoints)
    assert not list(tmp_path.iterdir()), "nothing written"


KINDS = [("tests.trainables:nan_metric", "inf"), ("tests.trainables:raw_ray_nan", "nan"),
         ("tests.trainables:returns_metrics", "-inf"), ("tests.trainables:Counter", "nan")]


@pytest.mark.parametrize("kind,bad", KINDS, ids=[f"{k.split(':')[1]}-{b}" for k, b in KINDS])
def test_non_finite_metric_never_reaches_the_rungs(ray_local, tmp_path, kind, bad, make_spec):
    """Whatever the kind of trainable, a NaN or inf metric fails its trial inside the trial's
    process: ASHA's rungs record only finite values, and the trial ends in ERROR. Two trials: one
    reports finite values (into the rungs at 1 and 2 iterations), the other a non-finite value from
    its first iteration on (a rung's iteration), which must never get there."""
    from ray import tune

    from tuner.search.algorithms import build_scheduler
    from tuner.spec import load_spec, resolve_trainable
    from tuner.run.trainable import build_trainable

    xs = [0.2, 0.8]
    s = load_spec(make_spec(TRAINABLES, trainable=kind, num_samples=1, stop={"training_iteration": 3},
                            failure={"abort_on_first_error": False},
                            param_space={"x": {"type": "grid", "values": xs}, "nan_above": 0.5, "bad_value": bad},
                            scheduler={"type": "asha", "max_t": 3, "grace_period": 1, "reduction_factor": 2}))
    scheduler = build_scheduler(s)
    grid = tune.Tuner(
        build_trainable(resolve_trainable(s), s, tmp_path / "k"),
        param_space={"x": tune.grid_search(xs), "nan_above": 0.5, "bad_value": bad, "fail_dir": ""},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=1, scheduler=scheduler,
                                    search_alg=tune.search.BasicVariantGenerator(random_state=0)),
        run_config=tune.RunConfig(name="k", storage_path=str(tmp_path), verbose=0,
                                  stop={"training_iteration": 3}),
    ).fit()
    recorded = [v for bracket in scheduler._brackets for _, rung in bracket._rungs for v in rung.values()]
    assert recorded and all(math.isfinite(v) for v in recorded), recorded
    assert sorted(result.config["x"] for result in grid) == xs
    for result in grid:
        bad_trial = result.config["x"] > 0.5
        assert (result.error is not None) == bad_trial, (result.config, result.error)
        if bad_trial:
            assert "NonFiniteMetricError" in str(result.error)
            assert math.isfinite(result.metrics.get("loss", 0.0))


def test_with_parameters_passes_data_through_the_object_store(ray_local, tmp_path, make_spec):
    """tune.with_parameters(train, data=...) works as trainable=, for functions and classes; the
    data is not copied into the trainable or the experiment: trials read the object store's copy."""
    from ray import tune

    from tests.trainables import with_data

    data = np.arange(4_000_000, dtype=np.float64)  # 32 MB
    # One trial at a time: one trial process (reused) serves the three.
    result = tune_model(make_spec(TRAINABLES, num_samples=3, stop=None, max_concurrent_trials=1),
                        trainable=tune.with_parameters(with_data, data=data))
    df = result.dataframe
    assert set(df["status"]) == {"TERMINATED"} and (df["nbytes"] == data.nbytes).all()
    assert (df["writeable"] == 0.0).all(), "each trial maps the object store's read-only copy, zero-copy"
    stored = sum(p.stat().st_size for p in (tmp_path / "k").rglob("*") if p.is_file())
    assert stored < 2_000_000, f"the experiment holds {stored} bytes: the data was pickled with the trainable"
    assert result.best_metrics["loss"] == pytest.approx(45.0 + result.best_config["x"])


def test_tune_model_with_a_trainable_and_no_trainable_key(ray_local, tmp_path, make_spec):
    """The spec needs no `trainable:` when tune_model gets trainable=; the experiment records the
    callable's import path, so `tuner resume` can find it."""
    from tests.trainables import quadratic

    result = tune_model(make_spec(TRAINABLES, num_samples=1, stop=None, param_space={"x": X, "epochs": 2}),
                        trainable=quadratic)
    assert set(result.dataframe["status"]) == {"TERMINATED"}
    import yaml

    assert yaml.safe_load((tmp_path / "k" / "spec.yaml").read_text())["trainable"] == "tests.trainables:quadratic"
    with pytest.raises(SpecError, match=r"<spec>: trainable: required key 'trainable' is missing\."):
        tune_model(make_spec(TRAINABLES, name="none"))


CLASS_SPEC = """\
name: counter
trainable: tests.trainables:Counter
metric: loss
mode: min
num_samples: 4
seed: 0
stop: {training_iteration: 6}
param_space:
  x: {type: uniform, low: 0, high: 1}
  sleep: 0.4
checkpoint: {frequency: 1}
resources: {cpu: 1}
reporting: {cli: false}
"""


@pytest.mark.slow
def test_class_trainable_from_yaml_survives_a_killed_driver(tmp_path):
    """`tuner run` of a class trainable named in YAML, the driver SIGKILLed mid-run, then
    `tuner resume`: every trial ends with all its steps, the interrupted ones restored from
    the checkpoints Ray took through save_checkpoint."""
    import signal

    from tests.test_resume import start, wait_for_progress, wait_for_saved_checkpoint

    spec_file = tmp_path / "counter.yaml"
    spec_file.write_text(CLASS_SPEC)
    exp = tmp_path / "runs" / "counter"
    proc = start("run", spec_file, "--num-cpus", "2", "--storage", tmp_path / "runs")
    wait_for_progress(exp, 5)
    wait_for_saved_checkpoint(exp)  # else a resume has no checkpoint to go on from and starts over
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    resumed = start("resume", exp, "--num-cpus", "2")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["trials"]["by_status"] == {"TERMINATED": 4}
    trials = rows(exp, "Counter")
    assert len(trials) == 4
    for name, rs in trials.items():
        assert rs[-1]["training_iteration"] == 6 and rs[-1]["step_no"] == 6, name
        assert all(r["step_no"] == r["training_iteration"] for r in rs), (name, [r["step_no"] for r in rs])
    assert any(r["restored_from"] > 0 for rs in trials.values() for r in rs), "a trial went on from a checkpoint"


def test_class_refusal_through_the_cli_names_the_line(tmp_path, run_cli):
    """`tuner validate` of a YAML spec asking a class trainable for DDP workers: exit 2, the
    field's file:line:col and why, nothing started."""
    spec_file = tmp_path / "ddp.yaml"
    spec_file.write_text(CLASS_SPEC.replace("resources: {cpu: 1}", "resources: {workers: 2, cpu_per_worker: 1}"))
    proc = run_cli("validate", spec_file, "--num-cpus", "2")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"tuner: error: {spec_file}:12:22: resources.workers: resources.workers makes each trial a "
                           "DDP group of train-function processes, but Counter is a class trainable "
                           "(ray.tune.Trainable), which runs as one process; use a train function (see tuner.trial) "
                           "or drop resources.workers.\n")


def test_checkpoint_config_of_each_kind_of_trainable():
    """README table: `checkpoint.frequency` is not applied to a Ray Tune function (it passes its own checkpoints;
    a tuner.trial function keeps every n-th in trial.report), and is Ray's checkpoint_frequency for a class
    trainable with save_checkpoint; `num_to_keep` applies to every kind. (No Ray started.)"""
    from tests.trainables import Counter, NoCheckpoints, raw_ray
    from tuner.spec import load_spec
    from tuner.run.trainable import checkpoint_config

    spec = load_spec({"trainable": "a.b:c", "checkpoint": {"frequency": 3, "num_to_keep": 2}})
    for fn in (raw_ray, lambda config: None):
        config = checkpoint_config(fn, spec)
        assert (config.num_to_keep, config.checkpoint_frequency, config.checkpoint_at_end) == (2, 0, None)
    config = checkpoint_config(Counter, spec)
    assert (config.num_to_keep, config.checkpoint_frequency, config.checkpoint_at_end) == (2, 3, True)
    assert checkpoint_config(NoCheckpoints, spec).checkpoint_at_end is False, "no save_checkpoint: never"


@pytest.mark.parametrize("overrides", [
    {"search": {"algorithm": "bohb"}, "scheduler": {"type": "bohb"}},
    {"scheduler": {"type": "pb2", "perturbation_interval": 2, "bounds": {"x": [0.0, 1.0]}}},
], ids=["bohb", "pb2"])
def test_bohb_and_pb2_refuse_a_class_trainable_without_checkpoints(tmp_path, make_spec, overrides):
    """README: "`hyperband`/`bohb` need `save_checkpoint`/`load_checkpoint` (they pause trials), `pbt`/`pb2` too
    (they clone checkpoints), else refused": before anything starts, naming the field and why."""
    from tests.trainables import NoCheckpoints

    kind = overrides["scheduler"]["type"]
    why = "pauses trials and resumes them from a checkpoint" if kind == "bohb" else \
        "restarts a trial of the bottom quantile from the checkpoint of a top trial"
    with pytest.raises(SpecError, match=rf"scheduler.type: scheduler {kind} {why}.* but NoCheckpoints does not "
                                        r"implement save_checkpoint and load_checkpoint"):
        tune_model(make_spec(TRAINABLES, **overrides), trainable=NoCheckpoints)
    assert not list(tmp_path.iterdir()), "nothing written"
