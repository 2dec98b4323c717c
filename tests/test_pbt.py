"""PBT and PB2 from the spec, on real Ray, with a toy where exploitation shows (tests.trainables:accumulates).

Two trials, x = 0.1 and x = 1.0; each adds x to a running total every iteration (score, mode max) and keeps
the total in its checkpoint, with its x. ``synch: true`` and ``quantile_fraction: 0.5``: at iteration 2 both
trials are compared, the x = 1.0 trial is the top one and the x = 0.1 trial the bottom one, which restarts
from the top trial's checkpoint (total 2.0, written by x = 1.0) with the top trial's x perturbed (x 0.8 or
x 1.2; ``resample_probability: 0``). Each trial reports what it restored (``restored_x``, ``restored_total``),
so the exploit is seen in the bottom trial's results: the top trial's state, and a config from the top trial.
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from tuner import tune_model
from tuner.experiment.layout import CLONE_SOURCES_DIR, PLACEMENT_GROUP_FILE, train_run_generation

SPEC = {
    "name": "pbt",
    "trainable": "tests.trainables:accumulates",
    "metric": "score",
    "mode": "max",
    "seed": 0,
    "num_samples": 1,
    "stop": {"training_iteration": 4},
    # More epochs than the stop: a trial ends by `stop` while its function still runs. (A function that
    # returned at the stop left its reused actor with Ray's end-of-function result, which once ended the
    # next trial on that actor, restored from a checkpoint, after one result: 2 of 3 resume runs under load.)
    "param_space": {"x": {"type": "grid", "values": [0.1, 1.0]}, "epochs": 10},
    "search": {"algorithm": "grid"},
    "scheduler": {"type": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.5, "resample_probability": 0,
                  "synch": True, "mutations": {"x": {"type": "uniform", "low": 0, "high": 10}}},
    "resources": {"cpu": 1},
    "reporting": {"cli": False, "tensorboard": False},
}


def histories(experiment: Path) -> dict[float, list[dict]]:
    """Every trial's results (its result.json), by the x it started with."""
    out = {}
    for folder in experiment.iterdir():
        if (folder / "result.json").is_file():
            rows = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
            out[rows[0]["x"]] = rows
    return out


def check_exploited(experiment: Path) -> list[dict]:
    """The x = 0.1 trial was cloned from the x = 1.0 trial at iteration 2, and went on with a perturbed x;
    the x = 1.0 trial only ever restored its own state. Returns the bottom trial's results after the exploit."""
    runs = histories(experiment)
    assert sorted(runs) == [0.1, 1.0], runs.keys()
    top, bottom = runs[1.0], runs[0.1]
    assert [r["training_iteration"] for r in top] == [1, 2, 3, 4]
    assert all(r["x"] == 1.0 and r["restored_x"] in (-1.0, 1.0) for r in top), top
    before = [r for r in bottom if r["training_iteration"] <= 2]
    after = [r for r in bottom if r["training_iteration"] > 2]
    # (The bottom trial's result at iteration 2, the one that made it exploit, is sometimes not logged: Ray
    # pauses the trial for the exploit while it processes that result; seen with DDP trials.)
    assert before and all(r["x"] == 0.1 and r["restored_x"] == -1.0 for r in before), bottom
    assert after and after[-1]["training_iteration"] == 4, bottom
    assert all(r["restored_x"] == 1.0 and r["restored_total"] == pytest.approx(2.0) for r in after), \
        f"the bottom trial restarted from the top trial's checkpoint: {after}"
    new = after[0]["x"]
    assert all(r["x"] == new for r in after)
    assert any(new == pytest.approx(f) for f in (0.8, 1.2)), f"the top trial's x, perturbed by 0.8 or 1.2: {new}"
    assert after[0]["score"] == pytest.approx(2.0 + new), "the restored total goes on growing by the new x"
    if "seed_seen" in bottom[0]:  # tests.trainables:accumulates: a clone keeps its id and its seed (README)
        table = pd.read_csv(experiment / "results.csv")
        seeds = dict(zip(table["trial_id"], table["trial_seed"]))
        for rows in (top, bottom):
            assert {r["trial_id"] for r in rows} == {rows[0]["trial_id"]}
            assert {r["seed_seen"] for r in rows} == {seeds[rows[0]["trial_id"]]}, rows
    return after


def check_clone_source(experiment: Path, after: list[dict]) -> None:
    """The bottom trial restored from tuner's copy of the top trial's checkpoint of iteration 2,
    ``pbt_clones/<top trial id>-2``, a hard link of the top trial's own checkpoint (which num_to_keep 4 keeps:
    4 iterations); and the copy is gone after the run (each trial saved checkpoints of its own since)."""
    top = histories(experiment)[1.0]
    assert {r["restored_from"] for r in after} == {str(experiment / CLONE_SOURCES_DIR / f"{top[0]['trial_id']}-2")}
    folder = next(p for p in experiment.iterdir() if p.name.endswith(top[0]["trial_id"]))
    original = [c / "state.json" for c in folder.glob("checkpoint_*")
                if json.loads((c / "state.json").read_text()) == {"epoch": 1, "total": 2.0, "x": 1.0}]
    assert len(original) == 1, sorted(p.name for p in folder.iterdir())
    assert {r["restored_inode"] for r in after} == {original[0].stat().st_ino}, "a hard link, not a copy"
    assert not (experiment / CLONE_SOURCES_DIR).exists(), sorted(p.name for p in (experiment / CLONE_SOURCES_DIR).iterdir())


def test_pbt_exploits_a_function_trainable(ray_local, tmp_path, make_spec):
    """A train function checkpointing through tuner.trial.report: the bottom trial restarts from the top
    trial's checkpoint (tuner.trial.get_checkpoint) with the top trial's config, perturbed."""
    result = tune_model(make_spec(SPEC))
    after = check_exploited(Path(result.experiment_path))
    check_clone_source(Path(result.experiment_path), after)
    assert set(result.dataframe["status"]) == {"TERMINATED"}


def test_an_exploit_at_the_last_iteration_ends_with_the_cloned_checkpoints_result(ray_local, tmp_path, make_spec):
    """The README (what a run leaves behind): a trial that exploits at its very last iteration ends with the cloned
    trial's checkpoint result as its last result, so its last metrics in results.csv are those of the weights it
    holds. No `stop` here: the function's 4 epochs end the trials, so PBT (synch) perturbs at iteration 4 too, and
    the bottom trial restarts from the top trial's checkpoint of iteration 4 with nothing left to run."""
    from tuner.search.schedule import read_perturbations

    spec = {k: v for k, v in SPEC.items() if k != "stop"}
    result = tune_model(make_spec(spec, name="last", param_space={**SPEC["param_space"], "epochs": 4}))
    exp = Path(result.experiment_path)
    exploits = read_perturbations(exp)
    assert [(p["iteration"], p["cloned_iteration"]) for p in exploits] == [(2, 2), (4, 4)], exploits
    # At 4 the trial behind (which one depends on the perturbed x) cloned the one ahead, at its very last iteration.
    loser, winner = exploits[-1]["trial_id"], exploits[-1]["cloned_from"]
    rows = {rows[0]["trial_id"]: rows for rows in histories(exp).values()}
    assert rows[winner][-1]["training_iteration"] == 4
    last = pd.read_csv(exp / "results.csv").set_index("trial_id").loc[loser]
    assert last["training_iteration"] == 4
    assert last["score"] == pytest.approx(rows[winner][-1]["score"]) and last["x"] == rows[winner][-1]["x"], \
        "its last result is the cloned trial's checkpoint result: the weights (the total) it holds"
    assert rows[loser][-1]["score"] != pytest.approx(last["score"]), "not its own last report"


def test_pbt_exploits_a_class_trainable(ray_local, tmp_path, make_spec):
    """A ray.tune.Trainable with save/load_checkpoint and reset_config: the bottom trial loads the top trial's
    checkpoint (load_checkpoint) with the new config, and reaches the stop like the top trial. Under PBT, tuner
    does not let Ray reuse a class trainable's actors: on a cached actor an exploited trial was sometimes ended
    after one result (1 run in 15 under load; tuner.run.trainable.reuse_actors)."""
    from tests.trainables import Accumulates

    from tuner.spec import load_spec
    from tuner.run.trainable import reuse_actors

    spec = make_spec(SPEC, trainable=None)
    assert not reuse_actors(Accumulates, load_spec(spec, require_trainable=False)), "no actor reuse under PBT"
    result = tune_model(spec, trainable=Accumulates)
    check_exploited(Path(result.experiment_path))
    assert set(result.dataframe["resets"]) == {0}, "every trial's actor was its own (reset_config never called)"


def test_pb2_exploits_within_bounds(ray_local, tmp_path, make_spec):
    """PB2 (scikit-learn's GP): the bottom trial restarts from the top trial's checkpoint with an x that PB2
    chose inside bounds."""
    result = tune_model(make_spec(SPEC, scheduler=PB2, name="pb2"))
    runs = histories(Path(result.experiment_path))
    after = [r for r in runs[0.1] if r["training_iteration"] > 2]
    assert after and all(r["restored_x"] == 1.0 and r["restored_total"] == pytest.approx(2.0) for r in after), after
    assert 0.0 <= after[0]["x"] <= 10.0 and after[0]["x"] != 0.1
    # PB2's state as saved with the experiment for a resume (tuner.search.scheduler_state): the population, with
    # trial ids for its trials, and the GP's data.
    from tests.test_scheduler_state import saved_scheduler

    state = saved_scheduler(Path(result.experiment_path))
    assert sorted(state["_trial_state"]) == sorted(result.dataframe["trial_id"])
    assert state["_num_perturbations"] >= 1 and len(state["data"]) >= 2


def test_plan_lines(make_spec):
    """`tuner validate` shows the interval, the quantile and each mutation (pbt) or bound (pb2)."""
    from tuner.search.algorithms import describe_search
    from tuner.spec import load_spec

    assert describe_search(load_spec(make_spec(SPEC)))[1:] == [
        "scheduler:  pbt (PopulationBasedTraining), synchronous, perturbation every 2 iterations, quantile 0.5, "
        "resample probability 0",
        "            mutate x: uniform [0, 10] (x0.8 or x1.2, or resampled)"]
    space = {"lr": {"type": "loguniform", "low": 1e-4, "high": 0.1}, "act": {"type": "choice", "values": ["a", "b"]}}
    assert describe_search(load_spec(make_spec(SPEC, param_space=space, search={"algorithm": "random"},
                                               scheduler={"type": "pb2", "perturbation_interval": 2})))[1:] == [
        "scheduler:  pb2 (PB2, GP-UCB explore), asynchronous, perturbation every 2 iterations, quantile 0.25",
        "            bound lr: [0.0001, 0.1]"]


@pytest.mark.parametrize("scheduler", ["pbt", "pb2"])
def test_seed_seeds_the_drivers_generators(make_spec, scheduler):
    """``seed`` seeds Python's ``random`` in the driver (Ray's PBT draws which top trial to clone, resample or
    perturb, which factor and which neighbour from it), and under pb2 numpy's global generator too (PB2's
    GP-UCB start points), when the scheduler is built; pbt leaves numpy's alone."""
    import random

    import numpy as np

    from tuner.search.algorithms import build_scheduler
    from tuner.spec import load_spec

    spec = load_spec(make_spec(SPEC, seed=7, scheduler=PB2 if scheduler == "pb2" else SPEC["scheduler"]))
    random.seed(12345)
    np.random.seed(12345)
    build_scheduler(spec)
    drawn = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    seeded = (random.random(), np.random.random())
    random.seed(12345)
    np.random.seed(12345)
    unseeded = (random.random(), np.random.random())
    assert drawn[0] == seeded[0]
    assert drawn[1] == (seeded[1] if scheduler == "pb2" else unseeded[1])


@pytest.mark.slow
def test_pbt_restarts_a_ddp_trial_from_the_top_trial(ray_local, tmp_path, make_spec):
    """A DDP trial (a worker group of one gloo worker: that every rank of a group restores the same checkpoint is
    test_ddp.py's worker-crash test, and each worker costs a process start): the bottom trial's worker group
    restarts from the top trial's checkpoint, with the new config and the restored state.

    ``trial_timeout_s`` turns a hang into an error: a paused trial's worker group that is not freed keeps the
    CPUs its restarted group needs (seen with the PlacementGroupReleaser's release on pause taken out: the run
    waited until killed). A guard, not a time to meet: a trial takes well under a minute here with nothing
    else running, and more than 300 s (the guard's old value) once, with the suite under a load of 4 busy
    processes on 2 cores."""
    result = tune_model(make_spec(SPEC, trainable="tests.trainables:accumulates_ddp", trial_timeout_s=1800,
                                  resources={"workers": 1, "cpu_per_worker": 1}))
    exp = Path(result.experiment_path)
    after = check_exploited(exp)
    for row in after:
        assert row["world_size"] == 1
        ranks = json.loads(row["ranks"])
        assert ranks == [[row["x"], 1.0, pytest.approx(2.0)]], f"the rank: new x, top trial's state: {ranks}"
    # The exploited trial went on in a fresh Ray Train run, <trial id>-pbt1, in its trial folder; the top trial,
    # paused too (synch), went on in its own run.
    for rows, runs in ((after, ["{}", "{}-pbt1"]), ([r for r in histories(exp)[1.0] if r["epoch"] > 1], ["{}"])):
        trial_id = rows[0]["trial_id"]
        folder = next(p for p in exp.iterdir() if p.name.endswith(trial_id))
        assert sorted(p.name for p in folder.iterdir() if train_run_generation(p.name, trial_id) is not None) == \
            [run.format(trial_id) for run in runs]
        # Each trial's worker group was freed once the trial was paused, before its new group started (Ray Train
        # would keep it: tuner's PlacementGroupReleaser removes it).
        first, second = (folder / PLACEMENT_GROUP_FILE).read_text().split()
        seen = json.loads(rows[0]["groups"])
        assert (seen[first], seen[second]) == ("REMOVED", "CREATED"), (trial_id, seen)


PB2 = {"type": "pb2", "perturbation_interval": 2, "quantile_fraction": 0.5, "synch": True, "bounds": {"x": [0.0, 10.0]}}


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["pbt", "pb2"])
def test_population_survives_sigkill_and_resume(ray_local, tmp_path, make_spec, scheduler):
    """SIGKILL after the exploit at iteration 2, with both trials held before iteration 3; resume: the
    population comes back (each trial's last perturbation time, the count of perturbations), and the
    experiment ends with the population an uninterrupted run ends with. A scheduler that started afresh
    would perturb both trials again at iteration 3 (their last perturbation time 0, not 2)."""
    from tests.test_scheduler_state import kill_while_held, resume, saved_scheduler

    spec = SPEC if scheduler == "pbt" else {**SPEC, "scheduler": PB2}

    def population(exp: Path) -> tuple[list, int]:
        state = saved_scheduler(exp)
        return sorted(s.last_perturbation_time for s in state["_trial_state"].values()), state["_num_perturbations"]

    def pb2_data(exp: Path) -> list[tuple]:
        """PB2's data for its GP, as saved: a row per trial and perturbation point (time, x, reward), sorted
        (its trial names differ between experiments); empty under pbt."""
        data = saved_scheduler(exp).get("data")
        return [] if data is None or data.empty else sorted(map(tuple, data[["Time", "x", "Reward"]].round(9).values.tolist()))

    gate = tmp_path / "gate"
    config = {"gate": str(gate), "hold_at": 2}
    space = {**SPEC["param_space"], **config}
    # The population of an uninterrupted run (synch: one perturbation of both trials at iteration 2, none at 4,
    # where the trials stop), and PB2's data then: a row per trial at time 2 (x and its total at iteration 2).
    reference = ([2, 2], 1)
    data = [(2, 0.1, 0.2), (2, 1.0, 2.0)] if scheduler == "pb2" else []

    exp = tmp_path / "killed"
    before = kill_while_held(make_spec(spec, name="killed", param_space=space, file="killed.yaml"), exp, gate)
    assert "RUNNING" in before.values(), before
    assert population(exp) == reference, "killed after the exploit, before the next perturbation"
    assert pb2_data(exp) == data
    gate.touch()
    resume(exp)
    if scheduler == "pbt":
        check_exploited(exp)
    assert population(exp) == reference
    assert pb2_data(exp) == data, "PB2's data came back with the resume (and the run made no more)"


def test_pbt_refuses_a_class_trainable_without_checkpoints(tmp_path, make_spec, run_cli):
    """A class trainable without save_checkpoint/load_checkpoint has nothing to clone: `tuner validate`
    refuses it before anything starts (exit 2, the field and why)."""
    spec = make_spec(SPEC, trainable="tests.trainables:NoCheckpoints", file="spec.yaml")
    proc = run_cli("validate", spec)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"tuner: error: {spec}:19:9: scheduler.type: scheduler pbt restarts a trial of the bottom quantile from the "
        "checkpoint of a top trial (exploit), but NoCheckpoints does not implement save_checkpoint and "
        "load_checkpoint, so it has no checkpoint to clone; implement them.\n")


def test_pbt_says_when_a_trial_has_no_checkpoint_to_clone(ray_local, tmp_path, make_spec, capfd):
    """A train function that never passes checkpoint_dir: PBT cannot exploit, and the console says why, once."""
    tune_model(make_spec(SPEC, trainable="tests.trainables:quadratic", name="nockpt",
                         param_space={"x": SPEC["param_space"]["x"], "epochs": 10}))
    err = capfd.readouterr().err
    assert err.count("tuner: note: pbt could not exploit trial") == 1, err[-3000:]
    assert "pass checkpoint_dir= to tuner.trial.report" in err
