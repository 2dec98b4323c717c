"""Command trials (``trainable: {command: ...}``) that resume, are cloned by PBT and run as a DDP group, end to end.

Real Ray and `python -m tuner` subprocesses, with the scripts of tests/data/command_scripts/ (``t2_*``): a
driver SIGKILLed with its whole process group, then `tuner resume` (twice); PBT exploiting another trial's
checkpoint; a trial under torchrun with 2 workers; the shipped search_spaces/script_asha.yaml from another
folder; the same spec run twice. Each run is a few trials of a few reports, marked slow.

The runs are shared (module fixtures): the promises about one run are tests of their own, at no run's cost.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from tests.fixtures.cli import run_tuner
from tests.fixtures.paths import ROOT
from tuner.experiment.layout import (CLONE_SOURCES_DIR, COMMAND_STDERR, COMMAND_STDOUT, RESULT_FILE, SUMMARY,
                                     TORCHRUN_LOGS)

pytestmark = pytest.mark.slow

SCRIPTS = ROOT / "tests" / "data" / "command_scripts"
PIDS = "t2_pids.txt"  # what t2_resumable.py appends its pid to, in $TUNER_TRIAL_DIR
START = "t2 start "  # the plain line t2_resumable.py prints first on each start
STARTS = "starts.jsonl"  # $T2_STARTS: where t2_resumable.py records each start, outside the experiment


def resumable_spec(name: str, *, xs=(1, 2), epochs: int = 3, env: dict | None = None, **extra) -> str:
    """A spec of t2_resumable.py trials as YAML text: one trial per x (grid), ``epochs`` reports each."""
    spec = {"name": name,
            "trainable": {"command": ["python", "t2_resumable.py", "{x}", "{epochs}"], "cwd": str(SCRIPTS),
                          "env": env or {}},
            "metric": "score", "mode": "max", "num_samples": 1, "seed": 0,
            "param_space": {"x": {"type": "grid", "values": list(xs)}, "epochs": epochs},
            "search": {"algorithm": "grid"}, "resources": {"cpu": 1},
            "reporting": {"cli": False, "tensorboard": False}, **extra}
    return yaml.safe_dump(spec, sort_keys=False)


def trial_folders(exp: Path) -> list[Path]:
    return sorted(p for p in exp.iterdir() if p.is_dir() and (p / "params.json").is_file())


def results(folder: Path) -> list[dict]:
    """A trial's results, oldest first (its result.json)."""
    return [json.loads(line) for line in (folder / RESULT_FILE).read_text().splitlines() if line.strip()]


def recorded_starts(path: Path) -> dict[str, list[dict]]:
    """Each start of t2_resumable.py as it recorded it in $T2_STARTS, by trial id, oldest first: ``pid``,
    ``epoch`` (the one it started from), ``restore`` ($TUNER_RESTORE_DIR or None) and ``argv``."""
    out: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines() if path.is_file() else ():
        item = json.loads(line)
        out.setdefault(item.pop("trial_id"), []).append(item)
    return out


def folder_of(exp: Path, trial_id: str) -> Path:
    [folder] = [f for f in trial_folders(exp) if f.name.endswith(f"_{trial_id}")]
    return folder


def starts(folder: Path) -> list[dict]:
    """Each start of t2_resumable.py in a trial, from its command_stdout.log: epoch, restore (None) and argv."""
    out = []
    for line in (folder / COMMAND_STDOUT).read_text().splitlines():
        if line.startswith(START):
            head, argv = line[len(START):].split(" argv=", 1)
            fields = dict(item.split("=", 1) for item in head.split())
            out.append({"epoch": int(fields["epoch"]), "restore": None if fields["restore"] == "-" else
                        fields["restore"], "argv": json.loads(argv)})
    return out


def by_status(exp: Path) -> dict:
    return json.loads((exp / SUMMARY).read_text())["trials"]["by_status"]


# --------------------------------------------------------------------------- SIGKILL of the driver, then resume

def saved_checkpoint_of_each(exp: Path, n: int) -> bool:
    """Whether Ray's newest experiment state records a checkpoint for each of ``n`` trials (what a resume
    restores; Ray rewrites the file every few seconds, after the trials report)."""
    from tuner.adapters.ray_internals import SavedCheckpoints, saved_trial_entries
    from tuner.adapters.state import load_state_file, newest_state_file

    newest = newest_state_file(exp)
    state = load_state_file(newest) if newest else None  # a half-written file reads as None: looked at again
    entries = saved_trial_entries(state) if state else []
    return len(entries) == n and all(SavedCheckpoints(entry).latest for entry in entries)


def ancestors(proc: psutil.Process) -> list[psutil.Process]:
    """The processes above ``proc`` (its parent, the parent's, ...) up to, without, pid 1 or one above this test."""
    mine = {p.pid for p in psutil.Process().parents()} | {os.getpid(), 1}
    out = []
    for parent in proc.parents():
        if parent.pid in mine:
            break
        out.append(parent)
    return out


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """`tuner run` of 2 trials of 3 epochs that hold after their first epoch (T2_HOLD), its own local Ray in
    its own process group; once both scripts run and Ray's saved state has a checkpoint of each, SIGKILL to
    that whole group. Then the gate opens, and `tuner resume` runs twice.

    Returns:
        A dict: ``exp``, ``starts`` (the $T2_STARTS file), the ``scripts`` (psutil processes of the killed
        run's scripts), the scripts ``left`` alive (pid, command line) once every process above them (tuner's
        leader, Ray's worker, raylet, the driver) was gone (then killed here, not to leak), and the two
        resumes' CompletedProcess, ``resume`` and ``again``.
    """
    tmp = tmp_path_factory.mktemp("killed")
    release = tmp / "release"
    spec = tmp / "killed.yaml"
    record = tmp / STARTS
    spec.write_text(resumable_spec("killed", env={"T2_HOLD": str(release), "T2_STARTS": str(record)}))
    exp = tmp / "runs" / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--num-cpus", "2", "--storage",
                             str(tmp / "runs")], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=(tmp / "run.err").open("w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # generous: the gate is what the run writes
        while not (len(recorded_starts(record)) == 2 and exp.is_dir() and saved_checkpoint_of_each(exp, 2)):
            assert proc.poll() is None, f"the run ended before the gate: {(tmp / 'run.err').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the run did not reach both trials' checkpoints"
            time.sleep(0.3)
        scripts = [psutil.Process(seen[0]["pid"]) for seen in recorded_starts(record).values()]
        above = {p for s in scripts for p in ancestors(s)}
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Ray's workers end once their raylet (in the driver's group) is gone; tuner's process above a script once it
    # has ended the script. Then a script still running is one nothing will end.
    _, alive = psutil.wait_procs(above, timeout=120)  # a bound on a hang, not a time to meet
    assert not alive, f"processes above the scripts outlived the killed driver by 120 s: {alive}"
    left = []
    for script in scripts:
        try:
            if script.is_running() and script.status() != psutil.STATUS_ZOMBIE:
                left.append((script.pid, script.cmdline()))
                script.kill()
        except psutil.NoSuchProcess:  # it ended just now
            pass
    psutil.wait_procs(scripts, timeout=30)
    release.touch()  # a trial that restarts from scratch goes on past its first epoch
    resume = run_tuner("resume", exp, "--num-cpus", "2", timeout=600)
    again = run_tuner("resume", exp, "--num-cpus", "2", timeout=600) if resume.returncode == 0 else None
    return {"exp": exp, "starts": record, "scripts": scripts, "left": left, "resume": resume, "again": again}


def test_a_killed_driver_resumes_each_command_trial_from_its_checkpoint(killed_and_resumed):
    """SIGKILL of the driver's process group after each trial's first epoch and checkpoint, then `tuner resume`:
    exit 0, both trials TERMINATED with all 3 epochs, each script started again from its checkpoint's epoch 1
    (not 0), restoring its own trial's checkpoint (as it recorded, and printed to command_stdout.log; its reports
    in result.json). A second `tuner resume` of the finished experiment exits 0 and starts no script."""
    exp, resume = killed_and_resumed["exp"], killed_and_resumed["resume"]
    assert resume.returncode == 0, resume.stderr[-3000:]
    assert by_status(exp) == {"TERMINATED": 2}
    recorded = recorded_starts(killed_and_resumed["starts"])
    assert len(recorded) == 2 and len(trial_folders(exp)) == 2
    for trial_id, seen in recorded.items():
        folder = folder_of(exp, trial_id)
        assert [(s["epoch"], s["restore"] is None) for s in seen] == [(0, True), (1, False)], seen
        assert Path(seen[1]["restore"]).parent == folder, f"the resumed script restored its own checkpoint: {seen}"
        assert starts(folder)[-1] == {k: seen[1][k] for k in ("epoch", "restore", "argv")}, \
            "the resumed start's line in command_stdout.log"
        rows = results(folder)
        assert [r["training_iteration"] for r in rows] == [1, 2, 3], rows
        assert [r["epoch"] for r in rows] == [1, 2, 3] and [r["start_epoch"] for r in rows] == [0, 1, 1], rows
        assert [r["restore_dir"] for r in rows] == ["", seen[1]["restore"], seen[1]["restore"]]
        assert rows[-1]["score"] == pytest.approx(3 * float(seen[0]["argv"][0])), "the restored score grew on"
    again = killed_and_resumed["again"]
    assert again.returncode == 0, again.stderr[-3000:]
    assert by_status(exp) == {"TERMINATED": 2}
    assert recorded_starts(killed_and_resumed["starts"]) == recorded, "the second resume started no script"


def test_a_resumed_trials_stdout_log_keeps_the_start_before_the_kill(killed_and_resumed):
    """command_stdout.log is appended on each start: after the kill and the resume it holds both starts (from
    scratch, then from the checkpoint), and the script's own file in $TUNER_TRIAL_DIR both pids."""
    assert killed_and_resumed["resume"].returncode == 0
    for trial_id, seen in recorded_starts(killed_and_resumed["starts"]).items():
        folder = folder_of(killed_and_resumed["exp"], trial_id)
        assert starts(folder) == [{k: s[k] for k in ("epoch", "restore", "argv")} for s in seen], folder.name
        assert (folder / PIDS).read_text().split() == [str(s["pid"]) for s in seen], "each start's pid"


def test_no_script_outlives_a_killed_driver(killed_and_resumed):
    """After the SIGKILL of the driver's group, once every process above the scripts is gone (tuner's leader or
    its keeper, Ray's worker, raylet), no script of the killed run is still running: tuner ends a trial's
    script when the trial's process dies, though Ray's worker SIGKILLs its direct children as it exits
    (``RAY_kill_child_processes_on_worker_exit``)."""
    assert len(killed_and_resumed["scripts"]) == 2
    assert killed_and_resumed["left"] == [], "scripts left running after the killed driver's trials ended"


# --------------------------------------------------------------------------- PBT

@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory, on_session_ray):
    """`tuner run` of 2 PBT trials (x = 1 and x = 4, 4 epochs, synchronous, perturbation every 2 iterations,
    quantile 0.5, x resampled never, only perturbed): at iteration 2 the x = 1 trial exploits the x = 4 one.
    The script checkpoints into a folder of its own per epoch (``"checkpoint": "epoch-N"``), as
    docs/guides/command-trials.md advises: each checkpoint stays as it was when its line was printed.
    Returns the experiment folder and the $T2_STARTS file."""
    tmp = tmp_path_factory.mktemp("pbt")
    spec = tmp / "pbt.yaml"
    spec.write_text(resumable_spec("pbt", xs=(1, 4), epochs=4, env={"T2_STARTS": str(tmp / STARTS),
                                                                    "T2_CHECKPOINT": "named"}, scheduler={
        "type": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.5, "resample_probability": 0,
        "synch": True, "mutations": {"x": {"type": "uniform", "low": 0, "high": 10}}}))
    proc = run_tuner("run", spec, "--storage", tmp / "runs", env=on_session_ray, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "runs" / "pbt", tmp / STARTS


def exploited_start(exp: Path, record: Path) -> tuple[dict, dict]:
    """The first exploit of a PBT run (tuner.search.schedule.read_perturbations) and the exploiting trial's
    start of its script (as the script recorded it) that restored a checkpoint of the trial it cloned."""
    from tuner.search.schedule import read_perturbations

    exploits = read_perturbations(exp)
    assert exploits, "PBT exploited no trial"
    first = exploits[0]
    seen = recorded_starts(record)[first["trial_id"]]
    cloned = [s for s in seen if s["restore"] and first["cloned_from"] in s["restore"]]
    assert cloned, f"no start of trial {first['trial_id']} restored a checkpoint of {first['cloned_from']}: {seen}"
    return first, cloned[0]


def test_pbt_restarts_a_command_trial_from_another_trials_checkpoint_with_the_new_config(pbt_run):
    """The exploiting trial's script started again with $TUNER_RESTORE_DIR a checkpoint of the trial it cloned
    (tuner's copy in pbt_clones/<that trial's id>-<iteration>, or that trial's own folder), and the new,
    perturbed config in its argv; every trial TERMINATED."""
    exp, record = pbt_run
    assert by_status(exp) == {"TERMINATED": 2}
    exploit, start = exploited_start(exp, record)
    assert exploit["iteration"] == 2 and exploit["cloned_iteration"] == 2, exploit
    restore = Path(start["restore"])
    assert restore.parent in (exp / CLONE_SOURCES_DIR, folder_of(exp, exploit["cloned_from"])), restore
    assert exploit["new_config"]["x"] != exploit["old_config"]["x"]
    assert float(start["argv"][0]) == pytest.approx(exploit["new_config"]["x"]), (start, exploit)
    assert start["argv"][1] == "4"


def test_a_cloned_checkpoint_holds_the_epoch_it_was_reported_with(pbt_run):
    """The exploiting trial's script restored the state of the cloned trial's iteration 2, the checkpoint PBT
    chose (its own folder per report, though the script ran on past it before Ray took the report): it starts
    at epoch 2 from the cloned trial's score then, and reports epochs 3 and 4 with the new x."""
    exp, record = pbt_run
    exploit, start = exploited_start(exp, record)
    assert start["epoch"] == exploit["cloned_iteration"], f"restored epoch {start['epoch']}, reported with " \
                                                          f"iteration {exploit['cloned_iteration']}"
    cloned = {r["training_iteration"]: r for r in results(folder_of(exp, exploit["cloned_from"]))}
    after = [r for r in results(folder_of(exp, exploit["trial_id"])) if r["restore_dir"] == start["restore"]]
    x = exploit["new_config"]["x"]
    assert [(r["epoch"], r["start_epoch"]) for r in after] == [(3, 2), (4, 2)], after
    assert [r["score"] for r in after] == pytest.approx([cloned[2]["score"] + x, cloned[2]["score"] + 2 * x])


def test_an_exploited_trials_stdout_log_holds_each_start(pbt_run):
    """command_stdout.log is appended on each start: the exploiting trial's holds its first start (no
    checkpoint) and its start from the cloned checkpoint, as the script recorded them."""
    exp, record = pbt_run
    exploit, _ = exploited_start(exp, record)
    seen = recorded_starts(record)[exploit["trial_id"]]
    assert len(seen) >= 2
    assert starts(folder_of(exp, exploit["trial_id"])) == [{k: s[k] for k in ("epoch", "restore", "argv")}
                                                          for s in seen]


# --------------------------------------------------------------------------- torchrun

def test_a_command_trial_with_two_workers_runs_under_torchrun(tmp_path, on_session_ray):
    """``resources: {workers: 2, cpu_per_worker: 1}``: t2_ranks.py runs under torchrun as 2 ranks (gloo needs no
    torch here: the script imports none) that each print 2 lines; only rank 0's count: 2 results, each of rank 0
    and world size 2. Each rank's output is in its own log under the trial's torchrun logs folder."""
    spec = {"name": "ranks", "trainable": {"command": ["python", "t2_ranks.py", "{epochs}"], "cwd": str(SCRIPTS)},
            "metric": "step", "mode": "max", "num_samples": 1, "param_space": {"epochs": 2},
            "resources": {"workers": 2, "cpu_per_worker": 1}, "reporting": {"cli": False, "tensorboard": False}}
    path = tmp_path / "ranks.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = run_tuner("run", path, "--storage", tmp_path / "runs", env=on_session_ray, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = tmp_path / "runs" / "ranks"
    assert by_status(exp) == {"TERMINATED": 1}
    [folder] = trial_folders(exp)
    rows = results(folder)
    assert [(r["step"], r["rank"], r["world_size"]) for r in rows] == [(1, 0, 2), (2, 0, 2)], rows
    logs = folder / TORCHRUN_LOGS
    by_rank = {}
    for log in logs.rglob("stdout.log"):
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        by_rank[int(log.parent.name)] = lines
    assert sorted(by_rank) == [0, 1], sorted(str(p.relative_to(logs)) for p in logs.rglob("*"))
    for rank, lines in by_rank.items():
        assert [(line["step"], line["rank"], line["world_size"]) for line in lines] == [(1, rank, 2), (2, rank, 2)]
    stderr_logs = {int(p.parent.name): p.read_text() for p in logs.rglob("stderr.log")}
    assert {rank: f"t2 rank {rank}" in text for rank, text in stderr_logs.items()} == {0: True, 1: True}
    assert "t2 rank 0" in (folder / COMMAND_STDERR).read_text()


# --------------------------------------------------------------------------- the shipped example

def test_the_shipped_script_spec_runs_from_another_folder(tmp_path, on_session_ray):
    """search_spaces/script_asha.yaml (examples/train_script.py, its path relative to the spec's folder) run
    from another folder, smaller: 2 trials of up to 3 epochs, both TERMINATED, each report from the script's
    JSON lines with a checkpoint, the best well above chance (0.1) on the digits."""
    proc = run_tuner("run", ROOT / "search_spaces" / "script_asha.yaml", "--num-samples", "2",
                     "--set", "param_space.epochs=3", "--set", "scheduler.max_t=3", "--storage", tmp_path / "runs",
                     cwd=tmp_path, env=on_session_ray, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = tmp_path / "runs" / "script-asha"
    summary = json.loads((exp / SUMMARY).read_text())
    assert summary["trials"] == {"total": 2, "by_status": {"TERMINATED": 2}}
    assert summary["best"]["metrics"]["val_accuracy"] > 0.3
    for folder in trial_folders(exp):
        rows = results(folder)
        assert 1 <= len(rows) <= 3 and [r["epoch"] for r in rows] == list(range(1, len(rows) + 1)), rows
        assert all(r["checkpoint_dir_name"] for r in rows), "the script's checkpoint each epoch"
    table = pd.read_csv(exp / "results.csv")
    assert len(table) == 2 and (table["val_accuracy"] > 0).all()


# --------------------------------------------------------------------------- the same spec twice

def test_the_same_command_spec_run_twice_makes_two_experiments(tmp_path, on_session_ray):
    """`tuner run` of one spec twice in a row: the second run goes to ``<name>-2``, its trials start from scratch
    (no checkpoint of the first run restored); both folders are whole experiments with every trial TERMINATED."""
    path = tmp_path / "twice.yaml"
    path.write_text(resumable_spec("twice", xs=(1,), epochs=2))
    for _ in range(2):
        proc = run_tuner("run", path, "--storage", tmp_path / "runs", env=on_session_ray, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = tmp_path / "runs" / "twice", tmp_path / "runs" / "twice-2"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["twice", "twice-2"]
    assert "holds an experiment already, so this run goes to twice-2" in proc.stdout + proc.stderr
    for exp in (first, second):
        assert by_status(exp) == {"TERMINATED": 1}
        [folder] = trial_folders(exp)
        assert [s["restore"] for s in starts(folder)] == [None], starts(folder)
        assert [r["epoch"] for r in results(folder)] == [1, 2]
