"""The scheduler's state across SIGKILL, Ctrl-C and resume (tuner/search/scheduler_state.py).

Each test runs one experiment twice on deterministic trials (loss = x + 1/(epoch + 1), checkpointed
every epoch): once uninterrupted, as the reference (one per scheduler, shared by its tests; ASHA's and the
median rule's are constants, REFERENCE_ITERATIONS, and an uninterrupted ASHA run checks its own), and once
with the driver SIGKILLed (or sent SIGINT, Ctrl-C) while one trial is held
(tests.trainables:held_until_gate) after the scheduler has filled its rungs, then resumed. The
resumed experiment must end as the reference did: every trial stopped at the same iteration, and
(Hyperband, BOHB) every trial in the same bracket, the PAUSED ones included. Without the saved state
a resumed ASHA or median rule starts with no history and lets the trials after the kill run to the
end, and a resumed Hyperband puts every trial in new brackets.

The reference and the resume run in-process on the session's Ray (tune_model; prepare_resume and
resume_prepared, as `tuner resume`); the killed run is a `tuner run` subprocess.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT
from tuner.experiment.layout import CALLBACK_STATE_GLOB, EXPERIMENT_STATE_GLOB, STATE_SNAPSHOT_DIR

# One xdist worker runs this file, so its module-scoped references (an uninterrupted run of each case) are
# made once: the hyperband one serves both the SIGKILL and the Ctrl-C case.
pytestmark = pytest.mark.xdist_group("test_scheduler_state")

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

# ASHA's and the median rule's uninterrupted runs, one trial at a time over the grid in order, stop the same trials at
# the first rung: 0.9, 0.8 and 0.95 come after 0.5, 0.4 and 0.3 have filled it, and their loss x + 1 is above
# its cutoff (ASHA: the best half) or the median. The trials run deterministically, so these references are
# constants (an uninterrupted run gave them); Hyperband's and BOHB's depend on which trials run together.
REFERENCE_ITERATIONS = {case: [(0.1, 4), (0.2, 4), (0.3, 4), (0.4, 4), (0.5, 4), (0.8, 1), (0.9, 1), (0.95, 1)]
                        for case in ("asha", "median")}


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
    """The experiment's newest saved scheduler state (tuner.search.scheduler_state.dump_scheduler's), or None: also while
    Ray is still writing the file (it writes it in place, so a read can find it cut short)."""
    import pickle

    from ray import cloudpickle

    from tuner.search.scheduler_state import STATE_KEY

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
    from tuner.search.scheduler_state import load_scheduler

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
    from tuner.adapters.state import read_state

    state = read_state(exp)
    return {t["trial_id"]: t["status"] for t in state.trials} if state else {}


def held_trials(gate: Path) -> dict[str, int]:
    """The held trials (tests.trainables._say_held): trial id -> the results it had reported when it stopped."""
    held = Path(f"{gate}.held")
    lines = held.read_text().splitlines() if held.exists() else []
    return {trial_id: int(n) for trial_id, n in (line.split() for line in lines if len(line.split()) == 2)}


def saved_iterations(exp: Path) -> dict[str, int]:
    """Each trial's last training_iteration in the experiment state (0 before its first result)."""
    from tuner.adapters.ray_internals import saved_trial_entries
    from tuner.adapters.state import read_state

    state = read_state(exp)
    out = {}
    for item in saved_trial_entries(state.data) if state else []:
        trial, metadata = json.loads(item[0]), json.loads(item[1])
        out[trial["trial_id"]] = int((metadata.get("last_result") or {}).get("training_iteration", 0))
    return out


def kill_while_held(spec: Path, exp: Path, gate: Path, sig: int = signal.SIGKILL) -> dict[str, str]:
    """`tuner run` until every running trial is held and Ray has saved that in the experiment state and the
    scheduler's, then send ``sig`` (SIGKILL; SIGINT, Ctrl-C, must end it with exit 130). Returns the trials'
    statuses in the state the resume reads.

    The gate is what the run writes, with a generous timeout that asserts no speed: the held trials'
    ids in ``<gate>.held``; the experiment state with them RUNNING after the results they reported, and
    no other trial RUNNING; the scheduler's state knowing every trial, the held ones live, the others
    PAUSED or TERMINATED as in the experiment state; then one more save of the scheduler's state, so
    that both files are of the same quiet moment (they are saved together every 2 s), and tuner's snapshots of
    both hold that save. After the kill, the snapshots are put back in place of any file the kill cut short,
    as the resume does first."""
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--num-cpus", "2", "--storage",
                             str(exp.parent)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    waiting = ["the run's start"]  # what the last look waited for, for the message of a run that never gets there

    def quiet_save() -> tuple | None:
        """The newest scheduler-state file's (name, size, mtime) when the saved states show every running trial
        held, else None."""
        held = held_trials(gate)
        state = saved_state(exp) if held else None
        now = statuses(exp) if state else {}
        waiting[0] = f"held {held}, experiment state {now}, scheduler state {bool(state)}"
        if not now or {t for t, s in now.items() if s == "RUNNING"} != set(held):
            return None
        if any(saved_iterations(exp).get(t) != n for t, n in held.items()):
            waiting[0] = f"the held trials' last results saved: {saved_iterations(exp)} for held {held}"
            return None
        settled = set(state["paused"]) | set(state["terminated"])
        if not set(now) <= set(state["trials"]) or settled & set(held) or \
                not {t for t, s in now.items() if s in ("PAUSED", "TERMINATED")} <= settled:
            waiting[0] = f"the scheduler state to agree: {now} against {state}"
            return None
        if not snapshots_current(exp):
            waiting[0] = "tuner's snapshots of the newest state files (.tuner_state/)"
            return None
        newest = sorted(exp.glob(CALLBACK_STATE_GLOB))[-1].stat()
        return newest.st_size, newest.st_mtime_ns

    def wait(until, what: str):
        deadline = time.monotonic() + 900  # generous: the run's own pace sets when the gate opens
        while not until():
            assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"the run did not reach {what}; waiting for {waiting[0]}"
            time.sleep(0.2)

    try:
        first: list = []
        wait(lambda: first.append(quiet_save()) or first[-1] is not None, "the hold")
        wait(lambda: quiet_save() not in (None, first[-1]), "a save during the hold")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        if sig == signal.SIGINT:
            assert proc.returncode == 130, err[-3000:]
    finally:
        proc.kill()
        proc.communicate()
    from tuner.run.failures import restore_state_snapshot

    restore_state_snapshot(exp)  # what a resume does first: a kill during Ray's copy of a state file cuts it short
    return statuses(exp)


def snapshots_current(exp: Path) -> bool:
    """Whether tuner's snapshots (.tuner_state/) of the experiment state and the callbacks' state hold the bytes
    of the newest files in the experiment folder: then a kill that cuts either file short leaves its snapshot of
    the same moment, which the resume puts back (tuner.run.failures.restore_state_snapshot)."""
    for glob in (EXPERIMENT_STATE_GLOB, CALLBACK_STATE_GLOB):
        files = sorted(exp.glob(glob))
        copy = exp / STATE_SNAPSHOT_DIR / files[-1].name if files else None
        try:
            if copy is None or copy.read_bytes() != files[-1].read_bytes():
                return False
        except OSError:
            return False
    return True


def run_reference(tmp_path: Path, case: str) -> Path:
    from tuner import tune_model

    gate = tmp_path / "open"
    gate.touch()
    tune_model(write_spec(tmp_path, case, "reference", gate, hold=-1), storage=str(tmp_path / "runs"))
    return tmp_path / "runs" / "reference"


@pytest.fixture(scope="module")
def references(ray_local, tmp_path_factory):
    """``reference(case)``: the uninterrupted run of a case, run once per module and worker."""
    made: dict[str, Path] = {}

    def reference(case: str) -> Path:
        if case not in made:
            made[case] = run_reference(tmp_path_factory.mktemp(f"reference-{case}"), case)
        return made[case]

    return reference


def resume(exp: Path) -> None:
    from tuner.run.engine import resume_prepared
    from tuner.run.prepare import prepare_resume

    resume_prepared(prepare_resume(exp))


@pytest.mark.slow
@pytest.mark.parametrize("case,sig", [("asha", signal.SIGKILL), ("median", signal.SIGKILL),
                                      ("hyperband", signal.SIGKILL), ("bohb", signal.SIGKILL),
                                      ("hyperband", signal.SIGINT)],
                         ids=["asha", "median", "hyperband", "bohb", "hyperband-ctrl-c"])
def test_scheduler_state_survives_sigkill_and_resume(ray_local, references, tmp_path, case, sig):
    """SIGKILL (or Ctrl-C) with one trial held after others filled the rungs (ASHA, median: one trial at a
    time, and finished trials in the history; Hyperband, BOHB: trials PAUSED at a rung, waiting for the held
    one), resume: every trial stops where the uninterrupted reference stopped it, and the paused trials go
    on in their own bracket. Each trial keeps checkpoint.num_to_keep's default (2): a trial whose saved
    checkpoint Ray deleted before the kill would go on from its newest one (test_resume's errored trial)."""
    reference = None if case in REFERENCE_ITERATIONS else references(case)
    gate = tmp_path / "gate"
    exp = tmp_path / "runs" / "killed"
    before = kill_while_held(write_spec(tmp_path, case, "killed", gate), exp, gate, sig)
    if case in ("hyperband", "bohb"):
        assert "PAUSED" in before.values(), f"killed with trials PAUSED at a rung: {before}"
        paused_brackets = [b for b in brackets_by_id(exp) if b & {t for t, s in before.items() if s == "PAUSED"}]
        assert paused_brackets
    else:
        assert "TERMINATED" in before.values(), f"the rungs hold finished trials before the kill: {before}"
    gate.touch()
    resume(exp)
    if case in REFERENCE_ITERATIONS:
        assert final_iterations(exp) == REFERENCE_ITERATIONS[case]
    elif case == "bohb":  # BOHB samples its configs afresh: the brackets' stopping pattern is what must match
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
    from tuner.run.engine import resume_prepared
    from tuner.run.prepare import prepare_resume

    exp = run_reference(tmp_path, "asha")
    assert final_iterations(exp) == REFERENCE_ITERATIONS["asha"], "the constant is what an uninterrupted run gives"
    said: list[str] = []
    resume_prepared(prepare_resume(exp), echo=said.append)
    assert not [line for line in said if "scheduler starts afresh" in line], said
    for file in [*exp.glob(CALLBACK_STATE_GLOB), *(exp / STATE_SNAPSHOT_DIR).glob(CALLBACK_STATE_GLOB)]:
        file.unlink()  # an older tuner kept neither the state nor a snapshot of it
    said.clear()
    resume_prepared(prepare_resume(exp), echo=said.append)
    assert [line for line in said if line.startswith("tuner: note: ") and "asha scheduler" in line
            and "starts afresh" in line], said
