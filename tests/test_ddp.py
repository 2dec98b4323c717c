"""DDP trials through Ray Train on CPU (gloo), logical GPUs, and the out-of-memory back-off."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT
from tuner import tune_model
from tuner.spec import load_spec


# The specs of this file: make_spec(DDP, **overrides), stored in the test's tmp_path.
DDP = {
    "name": "ddp",
    "trainable": "tests.trainables:ddp_probe",
    "metric": "loss",
    "mode": "min",
    "num_samples": 1,
    "param_space": {"x": 0.5, "epochs": 2},
    "resources": {"workers": 2, "cpu_per_worker": 1},
    "reporting": {"cli": False, "tensorboard": False},
}


@pytest.mark.slow
def test_ddp_trials_resume_a_worker_crash_on_all_ranks_and_asha_releases_their_workers(ray_local, tmp_path,
                                                                                       make_spec):
    """Three DDP trials of two gloo workers, one group at a time on the session's 2 CPUs. Each worker
    group start-up is costly, so one run serves all the checks:

    * rank 0 reports what the two ranks saw (world size, the split batch, disjoint shards, device);
    * the first trial's worker crashes at epoch 0, and both ranks go on from the checkpoint of epoch 0;
    * ASHA stops a trial before the last early; its worker group's CPUs are freed, so later trials run;
    * with seed_trials, every rank sees the trial's seed (results.csv's trial_seed) and is seeded with
      seed + rank (a restarted group again).
    """
    import random

    marker = tmp_path / "crashed-once"
    # ddp_probe reports its x: ASHA ranks the trials by it (seed 3: the second trial is the worse one at rung 1).
    result = tune_model(make_spec(DDP, name="asha-ddp", metric="x", num_samples=3, seed=3,
                                  param_space={"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 3,
                                               "fail_at_epoch": 0, "fail_marker": str(marker)},
                                  scheduler={"type": "asha", "max_t": 3, "grace_period": 1, "reduction_factor": 2},
                                  failure={"max_failures": 1}, seed_trials=True,
                                  checkpoint={"num_to_keep": 1, "score": "epoch", "score_mode": "min"}))
    df = pd.read_csv(tmp_path / "asha-ddp" / "results.csv")
    assert len(df) == 3 and set(df["status"]) == {"TERMINATED"}
    assert result.summary["trials"]["by_status"] == {"TERMINATED": 3}
    order = df.sort_values("trial_id")["training_iteration"].tolist()
    assert any(it < 3 for it in order[:-1]), f"some trial before the last was stopped early: {order}"
    for _, m in result.dataframe.iterrows():
        assert m["world_size"] == 2 and m["rank"] == 0, "rank 0's metrics reach Tune"
        assert m["per_worker_batch"] == 4, "the global batch of 8 is split over 2 workers"
        shards = json.loads(m["shards"])
        assert len(shards) == 2 and not set(shards[0]) & set(shards[1]), "DistributedSampler gives disjoint shards"
        assert sorted(shards[0] + shards[1]) == list(range(16)), "together the ranks see every sample once"
        assert m["device"] == "cpu"
    assert result.best_checkpoint and "checkpoint" in result.best_checkpoint
    assert marker.exists(), "a worker crashed once"
    first = result.dataframe.sort_values("trial_id").iloc[0]
    assert first["epoch"] == 2 and first["training_iteration"] == 3, "the crashed trial ran to the end"
    assert json.loads(first["starts"]) == [1, 1], "both ranks restored the checkpoint of epoch 0"
    assert [json.loads(s) for s in result.dataframe.sort_values("trial_id")["starts"][1:]] == [[0, 0], [0, 0]], \
        "only the first trial crashed"
    # Ray Train keeps rank 0's checkpoints by checkpoint.score (num_to_keep 1, the lowest epoch: epoch 0's)
    # besides the newest, so epoch 0's outlives the newer ones (the newest-only rule would delete it), and
    # the best checkpoint is epoch 0's. (Which newer ones are gone is not checked: ASHA stops a trial at
    # max_t as soon as Tune has its result, which may be before Ray Train deleted the older one.)
    # A checkpoint folder without its state.json is an older one Ray Train was deleting when the listing saw it
    # (a loaded run found one after the run: its deletion was still going, or was cut when the trial ended), so
    # it is not a kept checkpoint.
    kept = {}
    for trial_id in df["trial_id"]:
        folder = next((tmp_path / "asha-ddp").glob(f"*_{trial_id}"))
        kept[trial_id] = {epoch for c in folder.rglob("checkpoint_*") if c.is_dir()
                          if (epoch := _checkpoint_epoch(c)) is not None}
    assert all(0 in epochs for epochs in kept.values()) and any(len(e) > 1 for e in kept.values()), kept
    assert json.loads((Path(result.best_checkpoint) / "state.json").read_text())["epoch"] == 0
    assert result.summary["best"]["checkpoint_metrics"] == {"metric": "epoch", "value": 0, "training_iteration": 1}
    for _, m in df.iterrows():
        seed = int(m["trial_seed"])
        assert json.loads(m["seeds"]) == [[seed, seed + r, random.Random(seed + r).random()] for r in (0, 1)]
    assert df["trial_seed"].nunique() == 3
    # On this one-node Ray the trials' controllers never asked Ray Data's autoscaling coordinator for
    # resources, so Ray Train never started it (a named, detached actor: still listed if it ever ran).
    assert not [a for a in ray_local.util.list_named_actors(all_namespaces=True)
                if a["name"] == "AutoscalingCoordinator"]


def _checkpoint_epoch(folder: Path) -> int | None:
    """The epoch a ddp_probe checkpoint holds, or None for a folder whose state.json is gone (being deleted)."""
    try:
        return json.loads((folder / "state.json").read_text())["epoch"]
    except FileNotFoundError:
        return None


@pytest.mark.slow
def test_a_ddp_trial_continued_by_tuner_resume_keeps_its_earlier_results(ray_local, tmp_path, make_spec, run_cli):
    """A DDP trial's checkpoints are Ray Train's, so Tune holds none for it. Its worker crashes after the
    epoch 1 report with no retry left: the trial errors (the run in-process). `tuner resume
    --resume-errored`, in a Ray of its own, continues its Train run from the checkpoint of epoch 1, and
    the trial's result.json and progress.csv keep epochs 0 and 1 before epoch 2: Ray copies a resumed
    trial's results back from the experiment folder only when the trial has a Tune checkpoint, and the
    resume's empty copy replaced them."""
    marker = tmp_path / "crashed-once"
    # One worker: what is checked is the Train run's results across the resume (the ranks' restore is the
    # first test's), and each worker of a group costs a process start.
    result = tune_model(make_spec(DDP, name="ddp-resume", param_space={"x": 0.5, "epochs": 3, "fail_at_epoch": 1,
                                                                        "fail_marker": str(marker)},
                                  resources={"workers": 1, "cpu_per_worker": 1}))
    assert result.num_errors == 1 and marker.exists(), result.summary
    exp = tmp_path / "ddp-resume"
    folder = next(exp.glob("ddp_probe_*"))

    def results() -> list[tuple[int, int]]:
        return [(r["epoch"], r["start"]) for r in map(json.loads, (folder / "result.json").read_text().splitlines())]

    assert results() == [(0, 0), (1, 0)]
    proc = run_cli("resume", exp, "--resume-errored", "--num-cpus", "2")
    assert proc.returncode == 0, proc.stderr
    assert results() == [(0, 0), (1, 0), (2, 2)], "the earlier results kept; the Train run went on after epoch 1"
    progress = pd.read_csv(folder / "progress.csv")
    assert list(zip(progress["epoch"], progress["start"])) == [(0, 0), (1, 0), (2, 2)]
    assert "trial_seed" not in pd.read_csv(exp / "results.csv").columns, "no seed in the spec: no trial_seed column"


def test_ddp_plan(tmp_path, run_cli):
    (tmp_path / "s.yaml").write_text(
        "trainable: tests.trainables:ddp_probe\nresources: {workers: 2, cpu_per_worker: 1}\n")
    proc = run_cli("validate", tmp_path / "s.yaml", "--num-cpus", "4")
    assert proc.returncode == 0, proc.stderr
    assert "resources:  DDP, 2 workers x (1 CPU, 0 GPU), PACK, gloo; 2 CPU, 0 GPU per trial" in proc.stdout
    assert "fit:        2 trials at a time" in proc.stdout
    proc = run_cli("validate", tmp_path / "s.yaml", "--num-cpus", "1")
    assert proc.returncode == 2
    assert "resources.cpu_per_worker: one trial asks for 2 workers x 1 CPU, but this machine" in proc.stderr


def test_logical_gpus_pack_four_trials_without_oversubscription(tmp_path, run_cli):
    """--num-gpus 2 with gpu: 0.5 runs 4 trials at once (each waits until 4 have started: were fewer ever at
    once, they would wait for good and fail), each on its assigned GPU, never 3 on one GPU."""
    gate = tmp_path / "gate"
    gate.mkdir()
    (tmp_path / "g.yaml").write_text(f"""\
name: gpus
trainable: tests.trainables:gpu_probe
metric: loss
mode: min
num_samples: 8
param_space: {{x: {{type: uniform, low: 0, high: 1}}, gate: {gate}, together: 4}}
resources: {{cpu: 0.5, gpu: 0.5}}
reporting: {{cli: false}}
""")
    proc = run_cli("run", tmp_path / "g.yaml", "--num-cpus", "2", "--num-gpus", "2", "--storage", tmp_path)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(tmp_path / "gpus" / "results.csv", dtype={"gpu_ids": str, "cuda_visible_devices": str})
    assert len(df) == 8 and set(df["status"]) == {"TERMINATED"}
    assert set(df["gpu_ids"]) == {"0", "1"} and (df["gpu_ids"] == df["cuda_visible_devices"]).all()
    assert df.groupby("gpu_ids")["gpu_peers"].max().to_dict() == {"0": 2, "1": 2}, \
        "two 0.5-GPU trials on each GPU at once, never more"


def seeds_seen(result) -> list[tuple[int, int]]:
    """(batch size, seed) of each result the experiment's one trial reported, from its result.json."""
    folder = next(Path(result.experiment_path).glob("*/result.json"))
    return [(r["batch_size_seen"], r["seed_seen"]) for r in map(json.loads, folder.read_text().splitlines())]


@pytest.mark.parametrize("fits,expect_error", [(16, False), (4, True)])
def test_oom_backoff_single_process(ray_local, make_spec, fits, expect_error):
    """The batch is halved until it fits; the trial keeps its seed through the back-off."""
    result = tune_model(make_spec(DDP, trainable="tests.trainables:oom_until_small", seed=5,
                                  resources={"cpu": 1}, param_space={"batch_size": 64, "fits": fits},
                                  oom_backoff="batch_size", min_batch_size=8))
    df = result.dataframe
    if not expect_error:
        assert df.loc[0, "status"] == "TERMINATED"
        assert df.loc[0, "batch_size_used"] == 16 and df.loc[0, "batch_size_seen"] == 16
        assert df.loc[0, "training_iteration"] == 4 and df.loc[0, "epoch"] == 3, "resumed at epoch 2, not 0"
        seed = int(pd.read_csv(Path(result.experiment_path) / "results.csv")["trial_seed"][0])
        assert seeds_seen(result) == [(64, seed), (64, seed), (16, seed), (16, seed)], "the same seed after it"
    else:
        assert df.loc[0, "status"] == "ERROR"
        assert result.summary["errors"][0]["error"] == (
            "tuner.run.trainable.OutOfMemoryBackoffError: CUDA out of memory with batch_size=8; halving it would go "
            "below min_batch_size=8, so the trial stops here. Lower the model size or give the trial more GPU memory.")


def test_a_ddp_trials_own_actor_asks_for_no_cpu():
    """README: a DDP trial's own actor only drives the Ray Train run and asks for no CPU (its workers ask for
    theirs); a single-process trial asks for resources.cpu/gpu."""
    from tuner.run.trainable import driver_request

    assert driver_request(load_spec({**DDP, "trainable": "a.b:c"})) == {"cpu": 0, "memory": 1}
    single = load_spec({"trainable": "a.b:c", "resources": {"cpu": 2, "gpu": 0.5}})
    assert driver_request(single) == {"cpu": 2.0, "gpu": 0.5}


def test_oom_backoff_spec_errors():
    with pytest.raises(Exception, match="oom_backoff names 'bs', which is not a parameter in param_space"):
        load_spec({"trainable": "a.b:c", "oom_backoff": "bs", "param_space": {"batch_size": 8}})


def test_oom_backoff_frees_the_cuda_cache_before_it_halves_the_batch(monkeypatch):
    """README: oom_backoff frees the CUDA cache, then halves the parameter (nested names too), and stops the
    trial with one paragraph where halving would go below min_batch_size. (CUDA faked: no GPU here.)"""
    import torch

    from tuner.run.trainable import OutOfMemoryBackoffError, _back_off

    freed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(1))
    config = {"data": {"batch_size": 64}}
    _back_off(config, "data.batch_size", 8, torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert config == {"data": {"batch_size": 32}} and len(freed) == 1
    with pytest.raises(OutOfMemoryBackoffError, match="below min_batch_size=32"):
        _back_off(config, "data.batch_size", 32, torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert config == {"data": {"batch_size": 32}} and len(freed) == 2


@pytest.mark.slow
def test_mnist_ddp_spec_runs(ray_local, tmp_path):
    tune_model(ROOT / "search_spaces" / "mnist_ddp.yaml", storage=str(tmp_path), num_samples=1,
               param_space={"epochs": 1, "limit_train": 800})
    summary = json.loads((tmp_path / "mnist-ddp" / "summary.json").read_text())
    assert summary["best"]["metrics"]["val_accuracy"] > 0.5
    from tests.test_shipped_specs import assert_dashboard_shows

    assert_dashboard_shows(tmp_path / "mnist-ddp")  # a DDP trial's results are Ray Train's, read the same way


@pytest.mark.slow
def test_oom_backoff_ddp_restarts_the_worker_group(ray_local, make_spec):
    result = tune_model(make_spec(DDP, trainable="tests.trainables:ddp_oom_until_small", seed=5,
                                  param_space={"batch_size": 32, "fits": 16}, oom_backoff="batch_size",
                                  resources={"workers": 1, "cpu_per_worker": 1}))  # a group of one: 3 group starts
    m = result.best_metrics
    assert result.summary["trials"]["by_status"] == {"TERMINATED": 1}
    assert m["batch_size_used"] == 16 and m["batch_size_seen"] == 16
    assert m["epoch"] == 2 and m["start"] == 1, "the group resumed from the checkpoint of epoch 0"
    seed = int(pd.read_csv(Path(result.experiment_path) / "results.csv")["trial_seed"][0])
    assert seeds_seen(result) == [(32, seed), (16, seed), (16, seed)], "the new worker group has the trial's seed"


def test_no_gpu_metrics_on_cpu():
    from tuner import trial

    assert trial._gpu_metrics() == {}


def test_lean_trainer_leaves_out_only_what_it_names():
    """tuner's TorchTrainer starts Ray Train's controller with its own callbacks but two, which would each
    start an actor per trial; a trainer given datasets keeps the one that serves them."""
    import ray.train
    from ray.train.torch import TorchTrainer

    from tuner.adapters.ray_internals import lean_torch_trainer

    def names(trainer):
        return [type(cb).__name__ for cb in trainer._create_default_callbacks()]

    kwargs = {"scaling_config": ray.train.ScalingConfig(num_workers=2),
              "run_config": ray.train.RunConfig(name="x", storage_path="/tmp/unused")}
    plain, lean = TorchTrainer(print, **kwargs), lean_torch_trainer(True)(print, **kwargs)
    assert isinstance(lean, TorchTrainer)
    assert [n for n in names(plain) if n not in ("PlacementGroupCleanerCallback", "DatasetsCallback")] == names(lean)
    assert len(names(plain)) == len(names(lean)) + 2
    with_data = lean_torch_trainer(True)(print, datasets={"train": [1, 2]}, **kwargs)
    assert "DatasetsCallback" in names(with_data) and "PlacementGroupCleanerCallback" not in names(with_data)


def test_lean_train_env_keeps_what_the_user_set(monkeypatch):
    from tuner.adapters.ray_internals import (TRAIN_HEALTH_CHECK_INTERVAL_ENV, TRAIN_PREEMPTION_WATCHER_ENV,
                                              lean_train_env)

    monkeypatch.delenv(TRAIN_HEALTH_CHECK_INTERVAL_ENV, raising=False)
    monkeypatch.delenv(TRAIN_PREEMPTION_WATCHER_ENV, raising=False)
    assert lean_train_env(single_node=True) == {TRAIN_HEALTH_CHECK_INTERVAL_ENV: "0.5",
                                                TRAIN_PREEMPTION_WATCHER_ENV: "0"}
    assert lean_train_env(single_node=False) == {TRAIN_HEALTH_CHECK_INTERVAL_ENV: "0.5"}, \
        "several nodes: the preemption watcher stays"
    monkeypatch.setenv(TRAIN_HEALTH_CHECK_INTERVAL_ENV, "3")
    assert lean_train_env(single_node=True) == {TRAIN_PREEMPTION_WATCHER_ENV: "0"}


def _lean_decision(trainable) -> bool:
    """The ``lean`` that a DDP trainable built by ``build_trainable`` carries to its trial (decided in the driver,
    pickled with the trainable): the keyword of the ``_ddp_trial`` partial in the trainable's closure."""
    import functools

    from tuner.run.trainable import _ddp_trial

    [entry] = [c.cell_contents for c in trainable.__closure__ or ()
               if isinstance(c.cell_contents, functools.partial) and c.cell_contents.func is _ddp_trial]
    return entry.keywords["lean"]


def test_tuner_lean_ddp_0_keeps_ray_trains_defaults(ray_local, monkeypatch, tmp_path, make_spec):
    """TUNER_LEAN_DDP=0 where tuner runs: the DDP trial launches Ray Train's own TorchTrainer and sets none of the
    controller's variables; unset (or 1), tuner's lean trainer and its variables."""
    from ray.train.torch import TorchTrainer

    from tests.trainables import ddp_probe
    from tuner.adapters.ray_internals import TRAIN_HEALTH_CHECK_INTERVAL_ENV, TRAIN_PREEMPTION_WATCHER_ENV
    from tuner.run.trainable import LEAN_DDP_ENV, _train_launcher, build_trainable

    controller_env = (TRAIN_HEALTH_CHECK_INTERVAL_ENV, TRAIN_PREEMPTION_WATCHER_ENV)
    for name in controller_env:  # unset here, and restored as they were after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    spec = load_spec(make_spec(DDP))
    monkeypatch.setenv(LEAN_DDP_ENV, "0")
    assert _lean_decision(build_trainable(ddp_probe, spec, tmp_path)) is False
    assert _train_launcher(False) is TorchTrainer
    assert not set(controller_env) & set(os.environ), "Ray Train's defaults: tuner set no controller variable"
    for value in ("1", None):
        if value is None:
            monkeypatch.delenv(LEAN_DDP_ENV)
        else:
            monkeypatch.setenv(LEAN_DDP_ENV, value)
        assert _lean_decision(build_trainable(ddp_probe, spec, tmp_path)) is True
    lean = _train_launcher(True)
    assert lean is not TorchTrainer and issubclass(lean, TorchTrainer)
    assert {name: os.environ.get(name) for name in controller_env} == {TRAIN_HEALTH_CHECK_INTERVAL_ENV: "0.5",
                                                                       TRAIN_PREEMPTION_WATCHER_ENV: "0"}


@pytest.mark.slow
def test_a_ray_tune_function_under_workers_fails_naming_tuner_trial_report(ray_local, make_spec):
    """The README's table of trainable kinds: inside a DDP worker group `ray.tune.report` reaches no one (Ray only
    warns in the worker's log), so the trial fails, saying to report with `tuner.trial.report`, and the first
    trial's error stops the experiment (instead of Ray Tune's own error about a result without the metric)."""
    from tuner.errors import TrialError

    with pytest.raises(TrialError) as caught:
        tune_model(make_spec(DDP, trainable="tests.trainables:raw_ray", resources={"workers": 1, "cpu_per_worker": 1}))
    assert "inside a DDP worker group (resources.workers), report with tuner.trial.report" in caught.value.traceback
    assert caught.value.result.summary["trials"]["by_status"] == {"ERROR": 1}
