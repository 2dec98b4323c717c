"""tune_model end to end on a real local Ray (2 CPUs): searchers x schedulers, results, failures."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from tuner import tune_model
from tuner.spec import SpecError, load_spec
from tuner.run.engine import artifact_sync_config
from tuner.run.trainable import kept_checkpoints

SPACE = {
    "x": {"type": "uniform", "low": 0, "high": 1},
    "opt": {"type": "choice", "values": ["adam", "sgd"]},
    "epochs": 4,
}


# The specs of this file: make_spec(ENGINE, **overrides), stored in the test's tmp_path.
ENGINE = {
    "name": "t",
    "trainable": "tests.trainables:quadratic",
    "metric": "loss",
    "mode": "min",
    "num_samples": 4,
    "seed": 0,
    "param_space": SPACE,
    # Both of the session's CPUs: one trial at a time, on one trial actor reused by every trial of a run (a second
    # actor would cost about 1.4 CPU-s a run in the suite, and nothing here is about trials at once).
    "resources": {"cpu": 2},
    "reporting": {"cli": False, "tensorboard": False},
}


COMBOS = [
    ("random", "fifo"), ("random", "asha"), ("random", "hyperband"), ("random", "median"),
    ("grid", "fifo"), ("grid", "asha"),
    ("optuna", "fifo"), ("optuna", "asha"), ("optuna", "hyperband"),
    ("bohb", "bohb"),
]


@pytest.mark.parametrize("algo,sched", COMBOS, ids=[f"{a}-{s}" for a, s in COMBOS])
def test_searcher_scheduler_combinations(ray_local, make_spec, algo, sched):
    scheduler = {"type": sched}
    if sched in ("asha", "hyperband", "bohb"):
        scheduler.update(max_t=4, reduction_factor=2)
    space = dict(SPACE)
    if algo == "grid":
        space["x"] = {"type": "uniform", "low": 0, "high": 1, "grid_points": 2}
    result = tune_model(make_spec(ENGINE, search={"algorithm": algo}, scheduler=scheduler, param_space=space,
                                  num_samples=1 if algo == "grid" else 4))
    df = result.dataframe
    assert len(df) == 4
    assert set(df["status"]) == {"TERMINATED"}
    assert {"trial_id", "status", "config/x", "config/opt", "config/epochs", "loss", "training_iteration"} <= set(df.columns)
    best = df["loss"].min()
    assert result.best_metrics["loss"] == pytest.approx(best)
    assert result.best_config["opt"] in ("adam", "sgd") and type(result.best_config["opt"]) is str
    assert type(result.best_config["x"]) is float
    if algo == "grid":
        assert sorted(df["config/x"]) == [0.0, 0.0, 1.0, 1.0]
    if sched in ("asha", "hyperband", "bohb"):
        assert df["training_iteration"].max() == 4


def test_result_files(ray_local, tmp_path, make_spec):
    result = tune_model(make_spec(ENGINE, reporting={"cli": False, "tensorboard": True}))
    exp = tmp_path / "t"
    assert result.experiment_path == str(exp)
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["metric"] == "loss" and summary["mode"] == "min"
    assert summary["trials"] == {"total": 4, "by_status": {"TERMINATED": 4}}
    assert summary["best"]["trial_id"] == result.best_trial_id
    assert summary["best"]["config"] == result.best_config
    assert summary["wall_time_s"] > 0
    assert yaml.safe_load((exp / "best_config.yaml").read_text()) == result.best_config
    csv = pd.read_csv(exp / "results.csv")
    assert list(csv.columns[:2]) == ["trial_id", "status"]
    assert list(csv.columns) == list(result.dataframe.columns)
    assert csv["loss"].is_monotonic_increasing  # sorted best first (mode min)
    assert csv.loc[0, "trial_id"] == result.best_trial_id
    events = list(exp.glob("*/events.out.tfevents.*"))
    assert len(events) == 4, "one TensorBoard event file per trial"
    assert (exp / "tuner.log").exists()


def test_same_seed_same_configs(ray_local, make_spec):
    a = tune_model(make_spec(ENGINE, name="a")).dataframe
    b = tune_model(make_spec(ENGINE, name="b")).dataframe
    c = tune_model(make_spec(ENGINE, name="c", seed=1)).dataframe
    assert sorted(a["config/x"]) == sorted(b["config/x"])
    assert sorted(a["config/x"]) != sorted(c["config/x"])


@pytest.mark.parametrize("algo", ["optuna", "bohb"])
def test_model_based_searchers_seed_reproducible(ray_local, make_spec, algo):
    """The same seed gives the same sampled configs (trial ids are random, so compare as sets)."""
    kw = dict(search={"algorithm": algo}, param_space={"x": SPACE["x"], "epochs": 2})
    a = tune_model(make_spec(ENGINE, name="a", **kw)).dataframe
    b = tune_model(make_spec(ENGINE, name="b", **kw)).dataframe
    assert sorted(a["config/x"]) == sorted(b["config/x"])


def test_bohb_gives_plain_python_values(ray_local, make_spec):
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:typed", search={"algorithm": "bohb"},
                                  scheduler={"type": "bohb", "max_t": 2}))
    assert (result.dataframe["numpy_free"] == 1.0).all()
    assert all("opt=str" in t and "x=float" in t for t in result.dataframe["types"])
    assert type(result.best_config["opt"]) is str


def test_raw_ray_trainable_runs_unchanged(ray_local, make_spec):
    from tests.trainables import raw_ray

    result = tune_model(make_spec(ENGINE), trainable=raw_ray)
    assert (result.dataframe["training_iteration"] == 3).all()
    assert result.best_metrics["loss"] == pytest.approx(result.best_config["x"] + 1 / 3)


def test_errored_trials_are_counted(ray_local, make_spec):
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:fails_for_large_x", num_samples=6))
    by_status = result.summary["trials"]["by_status"]
    assert by_status.get("ERROR", 0) == (result.dataframe["config/x"] > 0.5).sum() > 0
    assert result.num_errors == by_status["ERROR"]
    assert all("x too large" in e["error"] for e in result.summary["errors"])
    assert result.best_config["x"] <= 0.5


def test_nan_metric_fails_the_trial_is_never_best_and_never_moves_asha_rungs(ray_local, make_spec):
    """A NaN is a bad config, not a bug: its trial fails (no abort, with the default failure settings),
    is never best, and fails before its result reaches the scheduler: no rung records it."""
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:nan_metric", num_samples=6,
                                  scheduler={"type": "asha", "max_t": 2, "reduction_factor": 2}))
    df = result.dataframe
    assert result.summary["aborted"] is None, "a NaN is a bad config, not a bug: no abort"
    assert result.best_config["x"] <= 0.5
    assert np.isfinite(result.best_metrics["loss"])
    assert set(df.loc[df["config/x"] > 0.5, "status"]) == {"ERROR"}
    assert set(df.loc[df["config/x"] <= 0.5, "status"]) == {"TERMINATED"}
    assert all("NonFiniteMetricError: metric 'loss' is nan" in e["error"] for e in result.summary["errors"])
    assert (df.loc[df["status"] == "ERROR", "loss"].isna()).all(), "no NaN result was ever recorded"


def test_checkpoint_is_returned(ray_local, make_spec):
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:checkpointing", num_samples=2))
    assert result.best_checkpoint and json.load(open(f"{result.best_checkpoint}/state.json"))["i"] == 3  # epochs 4


def test_stop_and_grid_repeats(ray_local, make_spec):
    result = tune_model(make_spec(ENGINE, stop={"training_iteration": 2}, num_samples=2,
                                  param_space={"x": {"type": "grid", "values": [0.1, 0.9]}, "epochs": 5}))
    assert len(result.dataframe) == 4
    assert (result.dataframe["training_iteration"] == 2).all()
    assert sorted(result.dataframe["config/x"]) == [0.1, 0.1, 0.9, 0.9]


def test_existing_experiment_folder_is_refused_by_an_explicit_name(ray_local, make_spec):
    tune_model(make_spec(ENGINE, num_samples=1))
    with pytest.raises(SpecError, match="already exists"):
        tune_model(make_spec(ENGINE, num_samples=1), name="t")


def test_trial_too_big_for_cluster_is_refused_before_running(ray_local, tmp_path, make_spec):
    with pytest.raises(SpecError,
                       match=r"resources.cpu: one trial asks for 3 CPU, but the running Ray cluster \(1 node\) has 2"):
        tune_model(make_spec(ENGINE, resources={"cpu": 3}))
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("num_to_keep,kept_count", [("default", 2), (None, 3)])
def test_checkpoint_frequency_and_num_to_keep(ray_local, tmp_path, make_spec, num_to_keep, kept_count):
    """A checkpoint every 2 reports of 6: 3 checkpoints, of which num_to_keep's default (2) keeps 2 and null
    keeps all."""
    keep = {} if num_to_keep == "default" else {"num_to_keep": num_to_keep}
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:checkpointing", num_samples=1,
                                  param_space={"x": 0.5, "epochs": 6}, checkpoint={"frequency": 2, **keep}))
    trial_dir = next(p for p in (tmp_path / "t").iterdir() if p.name.startswith("checkpointing_"))
    kept = sorted(p.name for p in trial_dir.glob("checkpoint_*"))
    assert len(kept) == kept_count, kept
    state = json.load(open(f"{result.best_checkpoint}/state.json"))
    assert state["i"] == 5, "reports 2, 4, 6 kept a checkpoint; the newest is of i=5"


def test_num_to_keep_null_keeps_all_under_pbt_too(make_spec):
    """PBT and PB2 default num_to_keep to 4 only when the spec leaves it out: null still keeps all."""
    pbt = {"type": "pbt", "perturbation_interval": 2}
    spec = load_spec(make_spec(ENGINE, stop={"training_iteration": 8}, scheduler=pbt, checkpoint={"num_to_keep": None}))
    assert spec.checkpoint.num_to_keep is None
    assert kept_checkpoints(spec)["num_to_keep"] is None
    assert kept_checkpoints(load_spec(make_spec(ENGINE)))["num_to_keep"] == 2, "the default elsewhere"
    assert kept_checkpoints(load_spec(make_spec(ENGINE, stop={"training_iteration": 8}, scheduler=pbt)))[
        "num_to_keep"] == 4, "pbt's default"


def test_hyperband_pauses_and_resumes_trials_from_checkpoints(ray_local, tmp_path, make_spec):
    """Synchronous Hyperband pauses trials at rungs; they resume from their checkpoints."""
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:steady", num_samples=6,
                                  param_space={"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 9, "sleep": 0},
                                  scheduler={"type": "hyperband", "max_t": 9, "reduction_factor": 3}))
    df = result.dataframe
    rows = {d.name: [json.loads(line) for line in (d / "result.json").read_text().splitlines()]
            for d in (tmp_path / "t").glob("steady_*")}
    # What each trial did, for the failure message: (epochs reported, the epochs its segments started at).
    seen = {name: ([r["epoch"] for r in rs], sorted({r["start"] for r in rs})) for name, rs in sorted(rows.items())}
    assert set(df["status"]) == {"TERMINATED"}, f"{df[['trial_id', 'status']]}\n{seen}"
    assert any(r["start"] > 0 for rs in rows.values() for r in rs), \
        f"some trial was paused and resumed from its checkpoint: {seen}"
    for name, (epochs, _) in seen.items():
        assert epochs == list(range(len(epochs))), f"no epoch repeated or skipped in {name}: {seen}"


def test_a_resumed_or_restarted_trial_keeps_the_results_it_reported_before(ray_local, tmp_path, make_spec):
    """The JSON and CSV loggers of a run keep a trial's earlier rows when it starts again in the run.

    Ray writes ``result.json`` and ``progress.csv`` in the driver's staging folder, copies that
    folder to the storage every few seconds, and copied the storage's copy back over the
    staging one when a trial with a checkpoint started again: a trial that Hyperband paused
    and resumed (a new ``on_trial_start``), or that failed and restarted (a new file after
    ``on_trial_error``), lost the rows reported since the last copy (2 runs in 80 of the
    Hyperband test above lost 3 rows). Here the interleaving is forced: a copy to the storage
    after the first result, two more results, then the restarts. A resumed experiment's new
    loggers still start from the storage's copy.
    """
    import shutil
    from pathlib import Path

    from ray.train._internal.storage import StorageContext  # the trial's storage, as Ray's controller makes it
    from ray.tune.experiment import Trial

    from tuner.run.loggers import build_callbacks
    from tuner.spec import load_spec

    (tmp_path / "ckpt").mkdir()
    storage = StorageContext(storage_path=str(tmp_path / "storage"), experiment_dir_name="exp",
                             trial_dir_name="steady_00000")
    trial = Trial("steady", stub=True, trial_id="00000", storage=storage, restore_path=str(tmp_path / "ckpt"))
    trial.init_local_path()
    loggers = build_callbacks(load_spec(make_spec(ENGINE)))
    assert trial.checkpoint is not None and len(loggers) == 2  # JSON, CSV (no TensorBoard in ENGINE)

    def each(hook: str, **kwargs) -> None:
        for logger in loggers:
            getattr(logger, hook)(iteration=0, trials=[trial], trial=trial, **kwargs)

    def result(i: int) -> None:
        each("on_trial_result", result={"training_iteration": i, "loss": 1.0 / i})

    each("on_trial_start")
    result(1)
    shutil.copytree(trial.local_path, trial.path, dirs_exist_ok=True)  # Ray's periodic copy to the storage
    result(2)
    result(3)
    each("on_trial_start")  # paused and resumed by the scheduler
    result(4)
    each("on_trial_error")  # failed; restarted from its checkpoint
    each("on_trial_start")
    result(5)
    def rows() -> tuple[list, list]:
        return ([json.loads(line)["training_iteration"] for line in Path(trial.local_path, "result.json").open()],
                pd.read_csv(Path(trial.local_path, "progress.csv"))["training_iteration"].tolist())

    assert rows() == ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]), "result.json, progress.csv"
    # A resumed experiment (a new driver, no staging copy) still starts from the storage's copy.
    shutil.copytree(trial.local_path, trial.path, dirs_exist_ok=True)
    shutil.rmtree(trial.local_path)
    trial.init_local_path()
    loggers = build_callbacks(load_spec(make_spec(ENGINE)))
    each("on_trial_start")
    result(6)
    assert rows() == ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]), "result.json, progress.csv"


def test_amp_from_the_spec_reaches_the_trial(ray_local, make_spec):
    """amp: true turns trial.autocast() on inside the trial: bf16 on this CPU."""
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:amp_probe", num_samples=1, param_space={},
                                  amp=True))
    m = result.best_metrics
    assert (m["autocast"], m["autocast_dtype"], m["output_dtype"]) == (1.0, "torch.bfloat16", "torch.bfloat16")


def test_trial_timeout_ends_a_hung_trial_and_frees_its_slot(ray_local, make_spec):
    """trial_timeout_s 10 ends the trials that hang (for 300 s) with TrialTimeoutError, and the trials after them
    run in the freed slots. Were the timeout broken, the hung trials would end TERMINATED after their 300 s, and
    the checks below would fail (no wall-clock deadline is asserted)."""
    result = tune_model(make_spec(ENGINE, trainable="tests.trainables:hangs_after_one_report", num_samples=4,
                                  trial_timeout_s=10, param_space={**ENGINE["param_space"], "hang_s": 300}))
    df = result.dataframe
    hung = df["config/x"] > 0.5
    assert set(df.loc[hung, "status"]) == {"ERROR"} and set(df.loc[~hung, "status"]) == {"TERMINATED"}
    assert all(e["error"].startswith("tuner.run.trainable.TrialTimeoutError: the trial ran longer than "
                                     "trial_timeout_s=10 s and was ended") for e in result.summary["errors"])


LEAN_TAG = r"""
import json, sys
import ray.air._internal.usage as air_usage
from ray._common.usage import usage_lib
from tuner.adapters.ray_internals import lean_callback_usage_tag
from tuner.run.failures import ExperimentStopper, StateSnapshots
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, LoggerCallback

class Mine(Callback): pass
class MyLogger(LoggerCallback): pass

callbacks = [CSVLoggerCallback(), Mine(), MyLogger(), StateSnapshots("/nonexistent"), "not a callback"]
lean_callback_usage_tag()
air_usage.tag_callbacks(callbacks)
lean = usage_lib._recorded_extra_usage_tags["air_callbacks"]
heavy = sys.modules.get("mlflow") is not None or sys.modules.get("wandb") is not None
print(json.dumps({"lean": json.loads(lean), "ray": air_usage._count_callbacks(callbacks), "imported": heavy}))
"""


def test_callback_usage_tag_counts_like_ray_without_importing_wandb_or_mlflow():
    """Ray's tag imports its W&B/MLflow integrations (1.3 s); tuner's gives the same counts."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", LEAN_TAG], capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["imported"] is False
    assert got["lean"] == got["ray"] == {"CSVLoggerCallback": 1, "CustomCallback": 2, "CustomLoggerCallback": 1}


def test_a_trials_output_is_copied_at_most_every_five_minutes_and_not_on_each_checkpoint():
    """README: Ray copies a trial's working folder (its stdout and stderr) into the trial's folder
    with its first result, "at most every 5 minutes after", and when a function trainable ends.
    The 5 minutes are Ray's default sync_period, which tuner keeps: this fails if Ray changes it."""
    sync = artifact_sync_config()
    assert sync.sync_artifacts and not sync.sync_artifacts_on_checkpoint
    assert sync.sync_period == 300
