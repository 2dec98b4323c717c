"""The scheduler's state across SIGKILL and resume (tuner/scheduler_state.py).

Each test runs one experiment twice on deterministic trials (loss = x + 1/(epoch + 1), checkpointed
every epoch): once uninterrupted, as the reference, and once with the driver SIGKILLed while one
trial is held (tests.trainables:held_until_gate) after the scheduler has filled its rungs, then
resumed. The resumed experiment must end as the reference did: every trial stopped at the same
iteration, and (Hyperband, BOHB) every trial in the same bracket, the PAUSED ones included.
Without the saved state a resumed ASHA or median rule starts with no history and lets the trials
after the kill run to the end, and a resumed Hyperband puts every trial in new brackets.

The reference and the resume run in-process on the session's Ray (tune_model; prepare_resume and
resume_prepared, as `tuner resume`); the killed run is a `tuner run` subprocess.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT
from tuner.layout import CALLBACK_STATE_GLOB

SPEC = """\
name: {name}
trainable: tests.trainables:held_until_gate
metric: loss
mode: min
seed: 0
num_samples: {samples}
param_space:
  x: {x}
  epochs: {epochs}
  hold: {hold}
  gate: {gate}
{search}scheduler: {scheduler}
resources: {{cpu: 1}}
reporting: {{cli: false, tensorboard: false}}
# Every checkpoint kept: Ray deletes a trial's older checkpoints at once but saves the experiment state only
# every few seconds, so a SIGKILL in between leaves a state that names a deleted checkpoint (seen 2 in 5
# runs under load; that trial then errors on the resume). Not what these tests are about.
checkpoint: {{num_to_keep: null}}
"""

XS = "{type: grid, values: [0.5, 0.4, 0.3, 0.9, 0.8, 0.2, 0.95, 0.1]}"
CASES = {
    # One trial at a time: the rungs' content is known. 0.9 (held) is stopped at the first rung.
    "asha": dict(x=XS, samples=1, epochs=4, hold=3, search="search: {algorithm: grid}\nmax_concurrent_trials: 1\n",
                 scheduler="{type: asha, max_t: 4, grace_period: 1, reduction_factor: 2}"),
    "median": dict(x=XS, samples=1, epochs=4, hold=3,
                   search="search: {algorithm: grid}\nmax_concurrent_trials: 1\n",
                   scheduler="{type: median, grace_period: 1, min_samples_required: 2}"),
    # Two trials at a time (Hyperband pauses a bracket's trials until all reach the rung).
    "hyperband": dict(x=XS, samples=1, epochs=4, hold=2, search="search: {algorithm: grid}\n",
                      scheduler="{type: hyperband, max_t: 4, reduction_factor: 2}"),
    "bohb": dict(x="{type: uniform, low: 0, high: 1}", samples=8, epochs=4, hold=2,
                 search="search: {algorithm: bohb}\n", scheduler="{type: bohb, max_t: 4, reduction_factor: 2}"),
}


def write_spec(folder: Path, case: str, name: str, gate: Path, hold: int | None = None) -> Path:
    values = dict(CASES[case])
    if hold is not None:
        values["hold"] = hold
    spec = folder / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, gate=gate, **values))
    return spec


def final_iterations(exp: Path) -> list[tuple]:
    """(x, last training_iteration) of every trial, sorted (trial ids differ between experiments)."""
    df = pd.read_csv(exp / "results.csv")
    assert set(df["status"]) == {"TERMINATED"}, (df[["trial_id", "status"]],
                                                 [p.read_text()[-2000:] for p in exp.glob("*/error.txt")])
    return sorted(zip(df["config/x"].round(9), df["training_iteration"]))


def saved_state(exp: Path) -> dict | None:
    """The experiment's newest saved scheduler state (tuner.scheduler_state.dump_scheduler's), or None: also while
    Ray is still writing the file (it writes it in place, so a read can find it cut short)."""
    import pickle

    from ray import cloudpickle

    from tuner.scheduler_state import STATE_KEY

    files = sorted(exp.glob(CALLBACK_STATE_GLOB))
    if not files:
        return None
    try:
        saved = cloudpickle.loads(files[-1].read_bytes())
    except (EOFError, pickle.UnpicklingError):  # caught mid-write: the caller's gate asks again
        return None
    return next((s[STATE_KEY] for s in saved.values() if s and STATE_KEY in s), None)


def saved_scheduler(exp: Path) -> dict:
    """The attributes of the experiment's newest saved scheduler, with trial ids for its trials."""
    from tuner.scheduler_state import load_scheduler

    class Ids(dict):
        def __missing__(self, key):
            return key

    return load_scheduler(saved_state(exp), Ids())


def brackets_by_id(exp: Path) -> list[frozenset]:
    """A Hyperband scheduler's brackets in the newest saved state, each as the set of its trial ids."""
    return [frozenset(b._all_trials) for band in saved_scheduler(exp)["_hyperbands"] for b in band if b is not None]


def brackets(exp: Path) -> list[frozenset]:
    """A Hyperband scheduler's brackets, each as the set of its trials' x values, sorted."""
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    x_of = dict(zip(df["trial_id"], df["config/x"].round(9)))
    return sorted((frozenset(x_of[t] for t in b) for b in brackets_by_id(exp)), key=sorted)


def statuses(exp: Path) -> dict[str, str]:
    from tuner.state import read_state

    state = read_state(exp)
    return {t["trial_id"]: t["status"] for t in state.trials} if state else {}


def kill_while_held(spec: Path, exp: Path, gate: Path) -> dict[str, str]:
    """`tuner run` until the held trial waits and Ray has saved the experiment state and the scheduler's
    since it started, then SIGKILL. Returns the trials' statuses in the state the resume reads."""
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--num-cpus", "2", "--storage",
                             str(exp.parent)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def saved_while_held() -> bool:
        """Both states saved since the held trial started (it is RUNNING in them, and stays so)."""
        held = Path(f"{gate}.held")
        state = saved_state(exp) if held.exists() else None
        running = [t for t, s in statuses(exp).items() if s == "RUNNING"] if state else []
        newest = sorted(exp.glob(CALLBACK_STATE_GLOB))[-1] if state else None
        return bool(running) and newest.stat().st_mtime > held.stat().st_mtime + 0.2 and \
            set(running) <= set(state["trials"])

    try:
        deadline = time.monotonic() + 180
        while not saved_while_held():
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not reach the hold"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.communicate()
    return statuses(exp)


def run_reference(tmp_path: Path, case: str) -> Path:
    from tuner import tune_model

    gate = tmp_path / "open"
    gate.touch()
    tune_model(write_spec(tmp_path, case, "reference", gate, hold=-1), storage=str(tmp_path / "runs"))
    return tmp_path / "runs" / "reference"


def resume(exp: Path) -> None:
    from tuner.engine import prepare_resume, resume_prepared

    resume_prepared(prepare_resume(exp))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["asha", "median", "hyperband", "bohb"])
def test_scheduler_state_survives_sigkill_and_resume(ray_local, tmp_path, case):
    """SIGKILL with one trial held after others filled the rungs (ASHA, median: one trial at a time, and
    finished trials in the history; Hyperband, BOHB: trials PAUSED at a rung, waiting for the held one),
    resume: every trial stops where the uninterrupted reference stopped it, and the paused trials go on in
    their own bracket."""
    reference = run_reference(tmp_path, case)
    gate = tmp_path / "gate"
    exp = tmp_path / "runs" / "killed"
    before = kill_while_held(write_spec(tmp_path, case, "killed", gate), exp, gate)
    if case in ("hyperband", "bohb"):
        assert "PAUSED" in before.values(), f"killed with trials PAUSED at a rung: {before}"
        paused_brackets = [b for b in brackets_by_id(exp) if b & {t for t, s in before.items() if s == "PAUSED"}]
        assert paused_brackets
    else:
        assert "TERMINATED" in before.values(), f"the rungs hold finished trials before the kill: {before}"
    gate.touch()
    resume(exp)
    if case == "bohb":  # BOHB samples its configs afresh: the brackets' stopping pattern is what must match
        assert sorted(i for _, i in final_iterations(exp)) == sorted(i for _, i in final_iterations(reference))
    else:
        assert final_iterations(exp) == final_iterations(reference)
    if case == "hyperband":
        assert brackets(exp) == brackets(reference)
    if case in ("hyperband", "bohb"):
        after = brackets_by_id(exp)
        for bracket in paused_brackets:
            assert any(bracket <= b for b in after), "a paused trial resumed in its own bracket"



def test_a_resume_without_a_saved_scheduler_state_says_so(ray_local, tmp_path):
    """A folder without tuner's scheduler state (an older tuner's): the resume says that the scheduler starts
    afresh, and says nothing when the state is there."""
    from tuner.engine import prepare_resume, resume_prepared

    exp = run_reference(tmp_path, "asha")
    said: list[str] = []
    resume_prepared(prepare_resume(exp), echo=said.append)
    assert not [line for line in said if "scheduler starts afresh" in line], said
    for file in exp.glob(CALLBACK_STATE_GLOB):
        file.unlink()
    said.clear()
    resume_prepared(prepare_resume(exp), echo=said.append)
    assert [line for line in said if line.startswith("tuner: note: ") and "asha scheduler" in line
            and "starts afresh" in line], said
