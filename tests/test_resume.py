"""Resume: real subprocesses and real signals, a truncated state, a changed spec.

Where a test proves what a resume finishes rather than the CLI's exit code, console or signals, the
first run or the resume goes through tuner's Python API on the session's Ray (``tune_model``;
``prepare_resume`` then ``resume_prepared``, which `tuner resume` runs), with no Ray of its own to start.

The tests that resume a run are marked slow (`-m "not slow"` skips them, as the README says);
the refusals, which start no run of their own or refuse before Ray starts, stay in the fast subset."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT
from tuner.experiment.layout import RUN_RECORD, SPEC_SNAPSHOT

SPEC = """\
name: steady
trainable: tests.trainables:steady
metric: loss
mode: min
num_samples: 6
seed: 0
param_space:
  x: {type: uniform, low: 0, high: 1}
  epochs: 6
  sleep: 0.4
resources: {cpu: 1}
reporting: {cli: false}
"""


def start(*args, env=None):
    """Start `python -m tuner ARGS` (stdout and stderr piped, text); ``env``: variables added to this
    process's environment (``on_session_ray``'s, to run on the session's Ray)."""
    return subprocess.Popen([sys.executable, "-m", "tuner", *map(str, args)], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def lines_of_progress(exp):
    """The results in the trials' progress.csv files, in all."""
    return sum(max(0, len(p.read_text().splitlines()) - 1) for p in exp.glob("*/progress.csv"))


def wait_for_progress(exp, min_lines, timeout=600):
    """Wait until the trials' progress.csv files hold at least min_lines results in all (a gate on what the
    run writes; the timeout is generous, no measure of speed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = lines_of_progress(exp)
        if lines >= min_lines:
            return lines
        time.sleep(0.3)
    raise AssertionError("no progress")


def wait_for_saved_checkpoint(exp, timeout=600):
    """Wait until Ray's newest experiment state in ``exp`` records a checkpoint for some trial, the one a
    resume restores (Ray rewrites the file every few seconds, so trials can report and checkpoint well
    before a state that knows of it is saved; a gate on the file, the timeout generous)."""
    from tuner.adapters.ray_internals import SavedCheckpoints, saved_trial_entries
    from tuner.adapters.state import load_state_file, newest_state_file

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        newest = newest_state_file(exp)
        # Ray writes the file in place: a half-written one (None) is read again.
        state = load_state_file(newest) if newest else None
        if state and any(SavedCheckpoints(entry).latest for entry in saved_trial_entries(state)):
            return
        time.sleep(0.3)
    raise AssertionError("no experiment state with a checkpoint")


def locked(exp, pid):
    """What `tuner run`/`tuner resume` prints when the experiment lock is held by ``pid``."""
    return (f"tuner: error: the experiment folder {exp} is in use by pid {pid}; wait for that run to end (or "
            "stop it) and try again.\n")


@pytest.mark.slow
def test_sigkill_the_driver_repeatedly_then_resume_while_the_lock_refuses_others(tmp_path, run_cli):
    """SIGKILL the driver mid-run, resume, SIGKILL the resumed driver, resume again: nothing is lost.
    Meanwhile the experiment lock (one run per folder, freed when its holder is SIGKILLed): a resume
    during the run is refused, naming the run's pid, and changes nothing, and the run goes on; of two
    resumes started at once after the kills, one runs and the other is refused naming the first's pid.
    (Epochs of 1.5 s, as sleeping costs no CPU: the run outlasts the refused resume's start-up, Ray Tune
    imported, and the resume that runs holds the lock long after the other has reached it.)"""
    spec = tmp_path / "steady.yaml"
    spec.write_text(SPEC.replace("sleep: 0.4", "sleep: 1.5"))
    exp = tmp_path / "runs" / "steady"
    proc = start("run", spec, "--num-cpus", "2", "--storage", tmp_path / "runs")
    try:
        deadline = time.monotonic() + 600  # generous: the gate is the run's files
        while not (lines_of_progress(exp) >= 4 and list(exp.glob("experiment_state-*.json"))):
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not get going"
            time.sleep(0.3)
        before = {name: (exp / name).read_bytes() for name in ("spec.yaml", "tuner_run.json")}
        clash = run_cli("resume", exp, "--num-cpus", "2")
        assert clash.returncode == 2, clash.stderr
        assert clash.stderr == locked(exp, proc.pid)
        assert {name: (exp / name).read_bytes() for name in before} == before, "the refused resume changed nothing"
        assert proc.poll() is None, "the run goes on"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)  # the driver writes progress.csv: nothing more comes once it is dead
        killed_at = lines_of_progress(exp)
        proc = start("resume", exp, "--num-cpus", "2")
        wait_for_progress(exp, killed_at + 8)  # the resumed driver has trained on
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert lines_of_progress(exp) < 6 * 6, "killed with work left"
    finally:
        proc.kill()
    # A dashboard open across the resumes (tuner.report.dashboard's storage, read before and after): the same study.
    from tuner.report.dashboard import ExperimentStorage

    clock = [0.0]  # its refresh period's clock, moved on by the test
    dashboard = ExperimentStorage([exp], clock=lambda: clock[0])
    killed = {t.user_attrs["trial_id"]: t.number for t in dashboard.get_all_trials(0)}
    assert killed and [s.study_name for s in dashboard.get_all_studies()] == ["steady"]
    first, second = start("resume", exp, "--num-cpus", "2"), start("resume", exp, "--num-cpus", "2")
    outs = {p.pid: p.communicate(timeout=300) for p in (first, second)}
    codes = sorted((p.returncode, p.pid) for p in (first, second))
    assert [c for c, _ in codes] == [0, 2], outs
    (_, winner), (_, loser) = codes
    assert outs[loser][1] == locked(exp, winner)
    df = pd.read_csv(exp / "results.csv")
    assert len(df) == 6 and df["trial_id"].is_unique, "every trial once"
    assert set(df["status"]) == {"TERMINATED"}
    assert (df["training_iteration"] == 6).all() and (df["epoch"] == 5).all()
    clock[0] += 60  # the next read is due
    resumed = {t.user_attrs["trial_id"]: (t.number, t.state.name) for t in dashboard.get_all_trials(0)}
    assert [s.study_name for s in dashboard.get_all_studies()] == ["steady"], "the same study, not a new one"
    assert sorted(resumed) == sorted(df["trial_id"]) and sorted(n for n, _ in resumed.values()) == list(range(6))
    assert {t: resumed[t][0] for t in killed} == killed, "a trial keeps its number across the resumes"
    assert {state for _, state in resumed.values()} == {"COMPLETE"}
    for trial_dir in exp.glob("steady_*"):
        iters = [json.loads(line)["training_iteration"] for line in (trial_dir / "result.json").read_text().splitlines()]
        assert iters == sorted(iters), f"iterations never go backwards: {iters}"
        epochs = [json.loads(line)["epoch"] for line in (trial_dir / "result.json").read_text().splitlines()]
        assert max(epochs) == 5 and len(set(epochs)) == 6


def canned_experiment(tmp_path, spec_text, spec_source=None):
    """An experiment folder as `tuner run` leaves it, as far as a resume's checks before Ray read it:
    the spec snapshot and the run record (naming the spec file it was started from)."""
    exp = tmp_path / "runs" / "steady"
    exp.mkdir(parents=True)
    (exp / SPEC_SNAPSHOT).write_text(spec_text)
    (exp / RUN_RECORD).write_text(json.dumps({"spec_source": str(spec_source) if spec_source else None,
                                              "python_path": [], "created": "now"}))
    return exp


def test_resume_refuses_a_changed_spec(tmp_path, run_cli):
    """Refused before Ray starts (on a canned experiment folder; the snapshot `tuner run` writes is
    read back by every resume test below)."""
    spec = tmp_path / "steady.yaml"
    spec.write_text(SPEC.replace("num_samples: 6", "num_samples: 1").replace("sleep: 0.4", "sleep: 0"))
    canned_experiment(tmp_path, spec.read_text(), spec)
    spec.write_text(SPEC.replace("num_samples: 6", "num_samples: 1").replace("high: 1}", "high: 2}")
                    .replace("epochs: 6", "epochs: 7"))
    proc = run_cli("resume", tmp_path / "runs" / "steady", "--num-cpus", "2")
    assert proc.returncode == 2
    assert proc.stderr == (f"tuner: error: {spec}: the spec changed since this experiment started, so it cannot be "
                           "resumed: param_space.x.high, param_space.epochs, param_space.sleep. Undo those changes, or "
                           "start a new experiment with `tuner run --name NEW`.\n")


def run_in_process(spec, storage):
    """The first run of a resume test, through tune_model on the session's Ray (a user's Python run;
    `tuner resume` then takes it over, as it would a `tuner run`'s): no Ray of its own to start."""
    from tuner import tune_model

    return tune_model(spec, storage=str(storage))


def resume_in_process(exp, **flags):
    """A resume through the Python API that `tuner resume` calls (prepare_resume, then resume_prepared),
    on the session's Ray: for the resumes whose exit code and console are not what the test proves.
    Returns the TuneResult of the whole experiment."""
    from tuner.run.engine import resume_prepared
    from tuner.run.prepare import prepare_resume

    return resume_prepared(prepare_resume(exp), **flags)


@pytest.mark.slow
@pytest.mark.parametrize("search", ["random", "grid", "optuna"])
def test_resume_with_a_larger_num_samples_adds_only_the_new_trials(ray_local, tmp_path, search, run_cli):
    """The run and the resume with num_samples 4 in-process (resume_in_process: what `tuner resume` runs,
    less its own Ray); `tuner resume` refuses a shrunk budget (random). The CLI resumes of finished and
    interrupted experiments are the tests below."""
    body = (SPEC.replace("num_samples: 6", "num_samples: 2").replace("epochs: 6", "epochs: 2")
            .replace("sleep: 0.4", "sleep: 0") + f"search: {{algorithm: {search}}}\n")
    if search == "grid":
        body = body.replace("x: {type: uniform, low: 0, high: 1}", "x: {type: choice, values: [0.1, 0.2, 0.3]}")
    spec = tmp_path / "steady.yaml"
    spec.write_text(body)
    run_in_process(spec, tmp_path / "runs")
    exp = tmp_path / "runs" / "steady"
    before = {p.parent.name: p.read_text() for p in exp.glob("*/result.json")}
    spec.write_text(body.replace("num_samples: 2", "num_samples: 4"))
    result = resume_in_process(exp)
    assert result.num_errors == 0 and not result.interrupted and result.aborted is None, result.summary
    df = pd.read_csv(exp / "results.csv")
    per_sample = 3 if search == "grid" else 1
    assert len(df) == 4 * per_sample and df["trial_id"].is_unique
    assert set(df["status"]) == {"TERMINATED"}
    assert {p.parent.name: p.read_text() for p in exp.glob("*/result.json") if p.parent.name in before} == before, \
        "finished trials are not rerun"
    if search == "grid":
        assert sorted(df["config/x"]) == [0.1] * 4 + [0.2] * 4 + [0.3] * 4
    else:
        assert df["config/x"].is_unique, "the new trials are new configurations"
    assert "num_samples: 4" in (exp / "spec.yaml").read_text()
    if search == "random":  # a budget may grow, not shrink
        spec.write_text(body.replace("num_samples: 2", "num_samples: 3"))
        proc = run_cli("resume", exp, "--num-cpus", "2")
        assert proc.returncode == 2
        assert proc.stderr == (f"tuner: error: {spec}: the spec changed since this experiment started, so it cannot "
                               "be resumed: num_samples (4 -> 3: a budget may grow on resume, not shrink). Undo those "
                               "changes, or start a new experiment with `tuner run --name NEW`.\n")


@pytest.mark.slow
def test_time_budget_spans_the_run_and_its_resumes_and_may_grow(ray_local, tmp_path, run_cli, on_session_ray):
    """`tuner run` stops on the time budget and says how to go on; `tuner resume` with the same budget is
    refused before Ray starts; with a larger one (resumed in-process: what it finishes is checked) the
    trials cut off go on from their checkpoints."""
    body = (SPEC.replace("num_samples: 6", "num_samples: 8").replace("epochs: 6", "epochs: 3")
            .replace("sleep: 0.4", "sleep: 0.5") + "time_budget_s: 4\nmax_concurrent_trials: 1\n")
    spec = tmp_path / "steady.yaml"
    spec.write_text(body)
    exp = tmp_path / "runs" / "steady"
    first = run_cli("run", spec, "--storage", tmp_path / "runs", env=on_session_ray)
    assert first.returncode == 0, first.stderr
    assert f"the time budget of 4 s is spent. To go on, raise time_budget_s in the spec and run: " \
           f"python -m tuner resume {exp}" in first.stdout
    done_first = len(pd.read_csv(exp / "results.csv"))
    assert done_first < 8
    again = run_cli("resume", exp, "--num-cpus", "2")  # same budget: spent, refused before anything starts
    assert again.returncode == 2
    assert again.stderr.startswith(f"tuner: error: {spec}:13:16: time_budget_s: the time budget of 4 s is spent (")
    assert again.stderr.endswith("s used so far), so the resumed experiment would stop at once; raise "
                                 "time_budget_s in the spec to go on.\n")
    spec.write_text(body.replace("time_budget_s: 4", "time_budget_s: 600"))
    grown = resume_in_process(exp)
    assert grown.num_errors == 0 and not grown.interrupted and grown.aborted is None, grown.summary
    df = pd.read_csv(exp / "results.csv")
    assert len(df) == 8 and df["trial_id"].is_unique
    assert set(df["status"]) == {"TERMINATED"}
    assert (df["training_iteration"] == 3).all(), "trials cut off by the budget went on from their checkpoints"
    for trial_dir in exp.glob("steady_*"):
        epochs = [json.loads(line)["epoch"] for line in (trial_dir / "result.json").read_text().splitlines()]
        assert epochs == sorted(epochs) and max(epochs) == 2


def test_resume_refuses_a_truncated_state_without_a_snapshot(tmp_path, run_cli):
    """A resume never silently starts over: an unreadable state and no snapshot is refused, before Ray starts."""
    exp = canned_experiment(tmp_path, SPEC)
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text("{\"trial_data\": [")
    proc = run_cli("resume", exp, "--num-cpus", "2")
    assert proc.returncode == 2
    assert ("the experiment state experiment_state-2026-01-01_00-00-00.json is truncated or unreadable and no "
            "earlier snapshot exists") in proc.stderr


def test_resume_refuses_a_folder_that_is_no_experiment(tmp_path, run_cli):
    proc = run_cli("resume", tmp_path)
    assert proc.returncode == 2
    assert "is not a tuner experiment folder" in proc.stderr


@pytest.mark.slow
def test_resume_of_a_finished_experiment_reruns_nothing_even_from_the_snapshot(ray_local, tmp_path, run_cli,
                                                                               on_session_ray):
    """A finished experiment resumes to nothing (resumed in-process); so does one whose newest state files were
    truncated mid-copy (Ray copies each into the experiment folder in place): the experiment state, the
    searcher's and the callbacks' (the ASHA scheduler's state). `tuner resume` falls back to the snapshots,
    names them, and keeps the broken files aside; without the searcher's and callbacks' snapshots, Ray's restore
    fails on a cut pickle ("pickle data was truncated")."""
    from tuner.run.failures import STATE_KINDS

    spec = tmp_path / "steady.yaml"
    spec.write_text(SPEC.replace("num_samples: 6", "num_samples: 2").replace("epochs: 6", "epochs: 2")
                    .replace("sleep: 0.4", "sleep: 0") + "scheduler: {type: asha, max_t: 2}\n")
    run_in_process(spec, tmp_path / "runs")
    exp = tmp_path / "runs" / "steady"
    before = {p.parent.name: p.read_text() for p in exp.glob("*/result.json")}
    assert len(before) == 2
    result = resume_in_process(exp)
    assert result.num_errors == 0 and len(result.dataframe) == 2, result.summary
    assert {p.parent.name: p.read_text() for p in exp.glob("*/result.json")} == before
    cut = [sorted(exp.glob(glob))[-1] for glob, _ in STATE_KINDS if list(exp.glob(glob))]
    assert sorted(f.name.split("-2")[0] for f in cut) == ["basic-variant-state", "callback-states",
                                                          "experiment_state"], cut
    for state in cut:
        state.write_bytes(state.read_bytes()[:100])  # truncated mid-copy
    proc = run_cli("resume", exp, env=on_session_ray)
    assert proc.returncode == 0, proc.stderr
    said = next(line for line in proc.stdout.splitlines() if "resumed from the snapshot" in line)
    assert said.startswith("tuner: the newest saved state was unreadable (cut short by a kill); resumed from "
                           "the snapshot "), said
    assert sorted(said.split("resumed from the snapshot ")[1].split(", ")) == sorted(f.name for f in cut), said
    for state in cut:
        assert (exp / (state.name + ".corrupt")).exists()
    assert {p.parent.name: p.read_text() for p in exp.glob("*/result.json")} == before
    # Without a snapshot the resume is refused: test_resume_refuses_a_truncated_state_without_a_snapshot.


def observations(exp):
    """What the experiment's saved searcher has learnt, as a Counter of (key, step, value) (Optuna:
    each trial's reported values by iteration; BOHB: each result its model holds, by budget)."""
    from collections import Counter

    from ray import cloudpickle

    newest = max(exp.glob("searcher-state-*.pkl"), key=lambda p: p.stat().st_mtime)
    state = cloudpickle.loads(newest.read_bytes())
    if "_ot_study" in state:  # OptunaSearch
        return Counter((t.number, step, round(v, 9)) for t in state["_ot_study"].trials
                       for step, v in t.intermediate_values.items())
    bohb = state["bohber"]  # TuneBOHB: hpbandster's BOHB config generator
    return Counter((tuple(round(float(v), 9) for v in config), budget, round(loss, 9)) for budget in bohb.losses
                   for config, loss in zip(bohb.configs[budget], bohb.losses[budget]))


def reported(exp):
    """Every loss the trials reported so far (rounded), from their result.json files."""
    return {round(json.loads(line)["loss"], 9) for p in exp.glob("*/result.json")
            for line in p.read_text().splitlines()}


@pytest.mark.slow
@pytest.mark.parametrize("search,scheduler", [("optuna", "asha"), ("bohb", "bohb")])
def test_searcher_state_survives_interrupt_and_resume(tmp_path, search, scheduler, run_cli, on_session_ray):
    """Ctrl-C mid-run, then resume: the searcher carries on to exactly num_samples trials, from what it
    had learnt: what the resumed session saved includes every observation it held at the interrupt
    (the pre-resume trials' results). (BOHB learns at the rungs of Hyperband brackets only, so it
    may learn nothing new after the resume here.)"""
    body = SPEC + f"search: {{algorithm: {search}}}\nscheduler: {{type: {scheduler}, max_t: 6}}\n"
    if search == "bohb":
        # 3 epochs, max_t 6 all the same: Hyperband's rungs are those of max_t, so the interrupt finds
        # the same trials PAUSED at the rung of 2 as with 6 epochs, but each needs 1 more epoch, not 4,
        # after the resume. The resumed Hyperband has its brackets back (tuner's saved scheduler state,
        # tuner/search/scheduler_state.py) and unpauses each paused trial, in a new process, when its bracket
        # lets it go on. Epochs of 1.5 s (sleeping costs no CPU): a trial unpaused before the interrupt
        # lands takes about as long as its 4 epochs of 0.4 s did.
        body = body.replace("epochs: 6", "epochs: 3").replace("sleep: 0.4", "sleep: 1.5")
    spec = tmp_path / "s.yaml"
    spec.write_text(body)
    exp = tmp_path / "runs" / "steady"
    proc = start("run", spec, "--storage", tmp_path / "runs", env=on_session_ray)
    # After BOHB's first bracket is processed, with trials PAUSED at a rung: Ray 2.60's TuneBOHB
    # may have forgotten one of them (the resume failed with a KeyError in TuneBOHB.to_wrapper),
    # and a resumed Hyperband with new brackets (Ray does not save them; tuner does) unpaused none (it hung).
    wait_for_progress(exp, 10)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    if search == "bohb":
        from tuner.adapters.state import read_state

        assert "PAUSED" in {t["status"] for t in read_state(exp).trials}, "interrupted with trials PAUSED at a rung"
    learnt = observations(exp)
    assert learnt, "the searcher had learnt something before the interrupt"
    assert {value for _, _, value in learnt} <= reported(exp), "what it learnt are the trials' results"
    resumed_at = time.time()
    done = run_cli("resume", exp, timeout=300, env=on_session_ray)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "a resumed (unpickled) BOHB searcher is as quiet as a new one"
    assert "starts afresh" not in done.stdout, "the resumed scheduler has its saved state (Hyperband: its brackets)"
    df = pd.read_csv(exp / "results.csv")
    assert len(df) == 6 and df["trial_id"].is_unique
    assert set(df["status"]) == {"TERMINATED"}
    assert max(p.stat().st_mtime for p in exp.glob("searcher-state-*.pkl")) > resumed_at, "saved by the resume"
    after = observations(exp)
    assert not learnt - after, "the resumed searcher went on from what it had learnt"


ERRORS = """\
name: errs
trainable: tests.trainables:fails_per_attempt
metric: loss
mode: min
seed: 0
param_space:
  x: {{type: grid, values: [0.2, 0.9]}}
  epochs: 5
  fail_at: [2, 3]
  fail_dir: {fail_dir}
resources: {{cpu: 1}}
reporting: {{cli: false}}
"""


def check_fall_back_on_copies(exp, trial_folder, copies):
    """tuner.run.failures.fall_back_to_existing_checkpoints on copies of an experiment whose errored trial has the
    checkpoints of epochs 0 and 1 (the state names epoch 1's), no Ray: a checkpoint on disk that the state
    does not record but a line of result.json names is taken, with that line's iteration; with none left,
    the trial starts over; with the named one there, nothing changes."""
    from tuner.run.failures import fall_back_to_existing_checkpoints
    from tuner.adapters.ray_internals import SavedCheckpoints, saved_trial_entries
    from tuner.adapters.state import read_state

    def latest(copy):
        state = read_state(copy)
        return {json.loads(e[0])["relative_logdir"]: SavedCheckpoints(e).latest for e in saved_trial_entries(state.data)}

    untouched = shutil.copytree(exp, copies / "untouched" / exp.name, symlinks=True)
    assert fall_back_to_existing_checkpoints(untouched) == [] and latest(untouched)[trial_folder] == "checkpoint_000001"
    # As if Ray had saved checkpoint 2 (and deleted 1) after its last state save:
    newer = shutil.copytree(exp, copies / "newer" / exp.name, symlinks=True)
    shutil.rmtree(newer / trial_folder / "checkpoint_000001")
    shutil.copytree(newer / trial_folder / "checkpoint_000000", newer / trial_folder / "checkpoint_000002")
    with open(newer / trial_folder / "result.json", "a") as f:
        f.write(json.dumps({"loss": 1.0, "training_iteration": 7, "checkpoint_dir_name": "checkpoint_000002"}) + "\n")
    [note] = fall_back_to_existing_checkpoints(newer)
    assert note.endswith("is gone; it goes on from checkpoint_000002 (iteration 7), its newest checkpoint that exists.")
    assert latest(newer)[trial_folder] == "checkpoint_000002"
    none = shutil.copytree(exp, copies / "none" / exp.name, symlinks=True)
    for folder in (none / trial_folder).glob("checkpoint_*"):
        shutil.rmtree(folder)
    [note] = fall_back_to_existing_checkpoints(none)
    assert note.endswith("which the experiment state names, is gone, and no other checkpoint of it is left, so it "
                         "starts over.")
    assert latest(none)[trial_folder] is None


@pytest.mark.slow
def test_resume_errored_continues_from_checkpoints_and_restart_errored_starts_over(ray_local, tmp_path, run_cli,
                                                                                    on_session_ray):
    """The trial with x = 0.9 errors at epoch 2 in the run (in-process, on the session's Ray). The
    checkpoint of epoch 1, which the saved state names for it, is deleted (as when a driver is killed
    after Ray deleted an old checkpoint and before it saved the state naming the new one): `tuner resume
    --resume-errored` (its own Ray) says so and continues the trial from its newest checkpoint that
    exists, epoch 0's (it starts at epoch 1, then errors at epoch 3); an in-process resume with
    restart_errored, back in the first Ray session, starts it over at epoch 0 and it ends. The trial
    that ended well never runs again, and no step loses another's results: the last step once copied
    the first run's stale result.json of the errored trial over the one the middle resume wrote. The
    trial keeps its seed through the resume and gets a new one, from the seed and its config, when it
    starts over under a new id."""
    from tuner.search.seeds import seed_of_trial

    spec = tmp_path / "errs.yaml"
    spec.write_text(ERRORS.format(fail_dir=tmp_path))
    exp = tmp_path / "runs" / "errs"

    def rows(x):  # every result of the trials with this x (a restarted trial gets a new folder)
        return [{**json.loads(line), "folder": d} for d in exp.glob("fails_per_attempt_*")
                if json.loads((d / "params.json").read_text())["x"] == x
                for line in (d / "result.json").read_text().splitlines()]

    def attempts(x):  # (attempt, start epoch, epochs reported) of the trial with this x, from its results
        out = {}
        for r in sorted(rows(x), key=lambda r: r["attempt"]):
            out.setdefault((r["attempt"], r["start"]), []).append(r["epoch"])
        return [(a, s, e) for (a, s), e in out.items()]

    run = run_in_process(spec, tmp_path / "runs")
    assert run.num_errors == 1 and run.aborted is None, run.summary
    assert attempts(0.9) == [(0, 0, [0, 1])]
    ok = attempts(0.2)
    assert ok == [(0, 0, [0, 1, 2, 3, 4])]
    errored = rows(0.9)[0]["folder"]
    named = errored / "checkpoint_000001"
    assert json.loads((named / "state.json").read_text())["epoch"] == 1
    check_fall_back_on_copies(exp, errored.name, tmp_path / "copies")
    shutil.rmtree(named)

    again = run_cli("resume", exp, "--resume-errored", env=on_session_ray)
    assert again.returncode == 1, again.stderr  # the trial errors again, at epoch 3
    trial_id = rows(0.9)[0]["trial_id"]
    assert (f"tuner: note: trial {trial_id}: its checkpoint checkpoint_000001, which the experiment state names, "
            "is gone; it goes on from checkpoint_000000 (iteration 1), its newest checkpoint that exists.\n"
            ) in again.stdout
    assert attempts(0.9) == [(0, 0, [0, 1]), (1, 1, [1, 2])], "continued from the checkpoint of epoch 0"

    over = resume_in_process(exp, restart_errored=True)
    assert over.num_errors == 0 and not over.interrupted and over.aborted is None, over.summary
    assert attempts(0.9) == [(0, 0, [0, 1]), (1, 1, [1, 2]), (2, 0, [0, 1, 2, 3, 4])], "started over at epoch 0"
    assert attempts(0.2) == ok, "the finished trial was not rerun"
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert len(df) == 2 and set(df["status"]) == {"TERMINATED"} and (df["epoch"] == 4).all()
    # Seeds: kept by the resume (the same trial id), new for the trial started over (a new id, no index).
    seeds = {(r["trial_id"], r["seed_seen"]) for r in rows(0.9)}
    restarted = next(r for r in rows(0.9) if r["attempt"] == 2)
    config = json.loads((restarted["folder"] / "params.json").read_text())
    assert seeds == {(trial_id, seed_of_trial(0, trial_id, config)),
                     (restarted["trial_id"], seed_of_trial(0, restarted["trial_id"], config))}
    assert restarted["trial_id"] != trial_id and len({s for _, s in seeds}) == 2
    assert dict(zip(df["trial_id"], df["trial_seed"]))[restarted["trial_id"]] == restarted["seed_seen"]
    # Ray starts the errored trial over as a new trial: `tuner report`/`list` leave the old one out.
    listed = run_cli("list", tmp_path / "runs")
    assert listed.stdout.splitlines()[1].split()[:3] == ["errs", "finished", "2"], listed.stdout


def test_state_snapshots_copy_a_readable_state_once_and_again_only_when_it_changed(tmp_path):
    """The snapshot of Ray's experiment state (tuner.run.failures.StateSnapshots): a readable file is copied, an
    unchanged one is not read and copied again (the file holds every trial, ~10 kB each), a changed one is,
    and a truncated one never replaces the last good copy. No Ray: the callback's hooks on real files."""
    import pickle

    from tuner.run.failures import StateSnapshots
    from tuner.experiment.layout import EXPERIMENT_STATE, STATE_SNAPSHOT_DIR

    state = tmp_path / EXPERIMENT_STATE.format("2026-01-01_00-00-00")
    copy = tmp_path / STATE_SNAPSHOT_DIR / state.name
    snapshots = StateSnapshots(tmp_path)
    snapshots.on_experiment_end([])  # no state yet: nothing
    assert not copy.exists()
    state.write_text(json.dumps({"trial_data": [], "runner_data": {"n": 1}}))
    snapshots.on_experiment_end([])
    assert json.loads(copy.read_text())["runner_data"] == {"n": 1}
    copy.write_text("left alone")  # were the unchanged file copied again, this would be overwritten
    snapshots.on_step_end(1, [])
    snapshots.on_experiment_end([])
    assert copy.read_text() == "left alone"
    state.write_text(json.dumps({"trial_data": [], "runner_data": {"n": 22}}))
    snapshots.on_experiment_end([])
    assert json.loads(copy.read_text())["runner_data"] == {"n": 22}
    good = copy.read_text()
    state.write_text(good[:20])  # truncated by a driver killed mid-write
    snapshots.on_experiment_end([])
    assert copy.read_text() == good
    # Ray pickles the callback into tuner.pkl: a restored one copies the state again at once.
    restored = pickle.loads(pickle.dumps(snapshots))
    state.write_text(good)
    copy.write_text("stale")
    restored.on_step_end(1, [])
    assert copy.read_text() == good


def test_a_cut_searcher_or_scheduler_state_comes_back_from_its_snapshot_or_is_set_aside(tmp_path):
    """The searcher's and callbacks' states (pickles) are kept like the experiment state: a whole file is copied,
    a cut one never replaces its copy, and restore_state_snapshot puts the copy back in place of a cut file and
    keeps that file aside (*.corrupt). A cut file with no whole copy is set aside, and named: Ray then restores
    that state from an older file, or starts it afresh. No Ray: the callback's hooks on real files."""
    import pickle

    from tuner.run.failures import StateSnapshots, restore_state_snapshot
    from tuner.experiment.layout import (CALLBACK_STATE, CORRUPT_SUFFIX, EXPERIMENT_STATE, SEARCH_GEN_STATE, SEARCHER_STATE,
                                         STATE_SNAPSHOT_DIR)

    stamp = "2026-01-01_00-00-00"
    experiment = tmp_path / EXPERIMENT_STATE.format(stamp)
    experiment.write_text(json.dumps({"trial_data": [], "runner_data": {}}))
    pickled = {tmp_path / template.format(stamp): pickle.dumps({"state": template, "n": list(range(50))})
               for template in (SEARCH_GEN_STATE, SEARCHER_STATE, CALLBACK_STATE)}
    for file, data in pickled.items():
        file.write_bytes(data)
    StateSnapshots(tmp_path).on_experiment_end([])
    assert sorted(p.name for p in (tmp_path / STATE_SNAPSHOT_DIR).iterdir()) == sorted(
        [experiment.name, *(f.name for f in pickled)])
    for file, data in pickled.items():
        file.write_bytes(data[: len(data) // 2])  # cut short by a kill during Ray's copy
    StateSnapshots(tmp_path).on_experiment_end([])  # a cut file is not copied over the whole one
    restored, set_aside = restore_state_snapshot(tmp_path)
    assert (sorted(restored), set_aside) == (sorted(f.name for f in pickled), [])
    for file, data in pickled.items():
        assert file.read_bytes() == data
        assert len((tmp_path / (file.name + CORRUPT_SUFFIX)).read_bytes()) == len(data) // 2
    assert restore_state_snapshot(tmp_path) == ([], []), "every file whole: nothing to do"
    # A cut callbacks' state whose snapshot is gone (killed before the first copy): set aside, and named.
    callbacks = tmp_path / CALLBACK_STATE.format(stamp)
    callbacks.write_bytes(pickled[callbacks][:10])
    (tmp_path / STATE_SNAPSHOT_DIR / callbacks.name).unlink()
    assert restore_state_snapshot(tmp_path) == ([], [callbacks.name])
    assert not callbacks.exists() and experiment.exists()


def test_state_snapshots_wait_1_s_or_19_times_the_last_copy_then_copy_the_next_save(tmp_path, monkeypatch):
    """The README's rate: a changed state is copied at most every second, or 19 times what the last copy took
    (Ray's own rule for its saves), whichever is longer; past that, the first step after a new save copies
    it. The callback's clock (tuner.run.failures._monotonic) is set by the test: no sleeping, no Ray."""
    from tuner.run import failures
    from tuner.run.failures import StateSnapshots
    from tuner.experiment.layout import EXPERIMENT_STATE, STATE_SNAPSHOT_DIR

    state = tmp_path / EXPERIMENT_STATE.format("2026-01-01_00-00-00")
    copy = tmp_path / STATE_SNAPSHOT_DIR / state.name
    clock = iter([])

    def monotonic() -> float:
        reading = next(clock, None)
        assert reading is not None, "the clock was read once more than the test says: a copy the rate forbids"
        return reading

    monkeypatch.setattr(failures, "_monotonic", monotonic)
    snapshots = StateSnapshots(tmp_path)

    def step(*times: float, n: int | None) -> int | None:
        """One on_step_end with the state changed to ``n`` (None: unchanged), the clock reading ``times`` (a
        copy reads it before and after): the ``n`` of the copy then, or None."""
        nonlocal clock
        if n is not None:
            state.write_text(json.dumps({"trial_data": [], "runner_data": {"n": n}}))
        clock = iter(times)
        snapshots.on_step_end(1, [])
        assert next(clock, None) is None, "the clock was read as often as the test says"
        return json.loads(copy.read_text())["runner_data"]["n"] if copy.exists() else None

    assert step(100.0, 100.0, n=1) == 1  # the first step copies
    assert step(100.5, n=2) == 1  # 0.5 s later: not yet
    assert step(100.9, n=3) == 1
    assert step(101.0, 102.0, n=4) == 4  # 1 s after the last copy; this copy takes 1 s
    assert step(110.0, n=5) == 4  # 8 s after it: under 19 x 1 s
    assert step(120.9, n=6) == 4
    assert step(121.0, 121.0, n=7) == 7  # 19 s after it; a quick copy again
    assert step(121.9, n=8) == 7 and step(122.0, 122.0, n=9) == 9  # back to every second
    # Past the period with nothing saved since the last copy: no look (no clock read after it), and the
    # next step looks again, so a save Ray's syncer writes just after a step is copied at the next one.
    assert step(124.0, n=None) == 9 and step(124.1, n=None) == 9
    assert step(124.2, 124.2, n=10) == 10
