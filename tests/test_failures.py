"""Experiment lock: one run per experiment folder, freed even when the holder is SIGKILLed; a run or
resume refused by it changes nothing (here in-process; on real `tuner run`/`tuner resume` processes in
tests/test_resume.py's SIGKILL test). The first-error abort, fail_fast."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tuner.run.failures import ExperimentLock, ExperimentLocked

HOLD = "import sys, time; from tuner.run.failures import ExperimentLock\n" \
       "with ExperimentLock(sys.argv[1]):\n    print('locked', flush=True); time.sleep(60)\n"


def test_second_holder_is_refused_until_the_first_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ExperimentLocked, match=rf"is in use by pid {holder.pid}; wait for that run"):
            with ExperimentLock(tmp_path):
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        deadline = time.monotonic() + 5
        while True:
            try:
                with ExperimentLock(tmp_path):
                    break
            except ExperimentLocked:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        holder.kill()


def test_lock_is_reentrant_across_sequential_runs(tmp_path):
    with ExperimentLock(tmp_path):
        pass
    with ExperimentLock(tmp_path):
        pass
    assert (tmp_path / ".tuner.lock").read_text() == str(os.getpid())


# --------------------------------------------------------------------------- the lock on real runs

def test_a_run_refused_by_the_lock_writes_nothing(tmp_path):
    """Two runs that both passed the folder check: the one refused by the lock writes no spec.yaml or
    tuner_run.json (it used to write both before taking the lock)."""
    from tuner.run.engine import run_prepared
    from tuner.run.prepare import prepare

    prepared = prepare({"name": "race", "trainable": "tests.trainables:quadratic", "storage": str(tmp_path)})
    exp = tmp_path / "race"
    with ExperimentLock(exp):  # the other run, which took the lock first (a second open file: flock conflicts)
        with pytest.raises(ExperimentLocked, match=f"is in use by pid {os.getpid()}"):
            run_prepared(prepared)
        assert sorted(p.name for p in exp.iterdir()) == [".tuner.lock"]


# The lock on a real `tuner run` and `tuner resume` (a resume refused during the run changes nothing and
# the run goes on; of two resumes started at once, one runs and the other is refused naming its pid) is
# checked in tests/test_resume.py's SIGKILL test, whose run and resumes it shares.


# --------------------------------------------------------------------------- first-error abort, fail_fast


# The specs of this section: make_spec(FIRST_ERROR, trainable=..., **overrides), stored in the test's tmp_path.
FIRST_ERROR = {"name": "t", "metric": "loss", "mode": "min", "resources": {"cpu": 1},
               "reporting": {"cli": False, "tensorboard": False}}


def test_nan_oom_and_a_dead_process_before_any_result_never_abort(ray_local, make_spec):
    """One trial at a time, the first three each fail before any trial reported a result: a NaN in the
    first report, a CUDA out-of-memory without oom_backoff, a process that dies. None is a bug in the
    train function, so the experiment goes on and the last two trials run."""
    from tuner import tune_model

    kinds = ["nan", "oom", "exit", "none", "none"]
    result = tune_model(make_spec(FIRST_ERROR, trainable="tests.trainables:fails_first", max_concurrent_trials=1,
                                  param_space={"fail": {"type": "grid", "values": kinds}}))
    assert result.aborted is None
    df = result.dataframe.sort_values("trial_id")
    assert list(df["config/fail"]) == kinds, "the trials ran in this order"
    assert list(df["status"]) == ["ERROR"] * 3 + ["TERMINATED"] * 2
    assert df["training_iteration"].iloc[:3].isna().all(), "the failing trials reported nothing"
    assert list(df["training_iteration"].iloc[3:]) == [2, 2]
    errors = {e["trial_id"]: e["error"] for e in result.summary["errors"]}
    nan, oom, dead = (errors[t] for t in df["trial_id"].iloc[:3])
    assert "NonFiniteMetricError" in nan
    assert "OutOfMemoryError" in oom
    assert "worker process has died" in dead, dead


def test_fail_fast_stops_the_other_trials_at_the_first_error(ray_local, make_spec, tmp_path):
    """failure.fail_fast: the second trial errors after its first result (once the first, running beside
    it, has reported: `gate`; under load the first trial's process once started too late to report at
    all); the first is stopped long before its 50 epochs, and the two trials still waiting never start."""
    from tuner import tune_model

    result = tune_model(make_spec(FIRST_ERROR, trainable="tests.trainables:slow_unless_failing",
                                  failure={"fail_fast": True},
                                  param_space={"fail": {"type": "grid", "values": [False, True, False, False]},
                                               "epochs": 50, "sleep": 0.2, "gate": str(tmp_path / "reported")}))
    df = result.dataframe.sort_values("trial_id").reset_index(drop=True)
    assert list(df["config/fail"].iloc[:2]) == [False, True]
    assert df.loc[1, "status"] == "ERROR" and result.num_errors == 1
    assert df["training_iteration"].fillna(0).iloc[0] < 50, "the running trial was stopped"
    assert df["training_iteration"].iloc[2:].isna().all(), "the waiting trials never ran"


def test_the_releaser_removes_placement_groups_whose_creator_actor_died(ray_local, tmp_path):
    """A placement group an actor made outlives it (its lifetime is the job's): as a DDP trial's worker group
    that Ray Train's controller restarted after the releaser had removed the recorded one, while the trial
    was being stopped (under load the next DDP trial then waited for its CPUs for good). The releaser's sweep
    removes it; a group the driver made (Tune's own) and one whose creator lives stay."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    from tuner.run.failures import PlacementGroupReleaser
    from tuner.adapters.ray_internals import orphaned_placement_groups

    @ray.remote(num_cpus=0)
    class Controller:
        def start_group(self):
            self.pg = placement_group([{"CPU": 0.1}, {"CPU": 0.1}])
            ray.get(self.pg.ready())
            return self.pg.id.hex()

    drivers = placement_group([{"CPU": 0.1}])
    ray.get(drivers.ready())
    dead, alive = Controller.remote(), Controller.remote()
    orphan, kept = ray.get([dead.start_group.remote(), alive.start_group.remote()])
    ray.kill(dead)
    # The gate: the GCS marks the group's creator dead once it knows the actor died.
    while orphan not in orphaned_placement_groups():
        time.sleep(0.1)
    assert orphaned_placement_groups() == [orphan]
    PlacementGroupReleaser(tmp_path).on_step_end(0, [])
    states = {pg: placement_group_table().get(pg, {}).get("state") for pg in (orphan, kept, drivers.id.hex())}
    assert states == {orphan: "REMOVED", kept: "CREATED", drivers.id.hex(): "CREATED"}
    ray.kill(alive)  # then its group goes too, at a later sweep
    while kept not in orphaned_placement_groups():
        time.sleep(0.1)
    PlacementGroupReleaser(tmp_path).on_step_end(0, [])
    assert placement_group_table()[kept]["state"] == "REMOVED"
    remove_placement_group(drivers)
