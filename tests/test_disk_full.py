"""A full disk: the storage folder on a small tmpfs fills up mid-run. The run ends with one
paragraph and exit code 75, no traceback reaches the console, and the resume after
space is freed (through the Python API of `tuner resume`, on the session's Ray) loses nothing.
Needs root (mount); skipped otherwise."""

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT
from tuner.errors import DiskFullError

# 3 trials, 2 at a time: x=0.1 runs to the end; x=0.3 and x=0.4 hold before their third
# epoch (after 2 checkpoints of 100 KB) until the test has filled the disk.
SPEC = """\
name: full
trainable: tests.trainables:bulky
metric: loss
mode: min
search: {{algorithm: grid}}
param_space:
  x: {{type: grid, values: [0.1, 0.3, 0.4]}}
  epochs: 4
  ckpt_kb: 100
  hold_above: 0.25
  hold_at: 2
  go: {go}
resources: {{cpu: 1}}
checkpoint: {{num_to_keep: 2}}
reporting: {{cli: {{max_report_frequency: 1}}}}
"""
EPOCHS, HOLD_AT = 4, 2


@pytest.fixture
def small_disk(tmp_path):
    """A folder on its own 8 MB tmpfs (the storage), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True,
                           text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)  # busy: detach it anyway


def fill(disk):
    """Fill the disk's free space with a ballast file beside the experiment."""
    fd = os.open(disk / "ballast", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, bytes(1 << 16))
    except OSError as err:
        assert err.errno == errno.ENOSPC, err
    finally:
        os.close(fd)


def trial_folders(exp):
    """x -> trial folder, from the params.json files Ray has synced so far."""
    out = {}
    for params in exp.glob("bulky_*/params.json"):
        try:
            out[json.loads(params.read_text())["x"]] = params.parent
        except ValueError:
            pass
    return out


def results(folder):
    return [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]


def lines(folder):
    path = folder / "result.json"
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.mark.slow
def test_a_full_disk_ends_the_run_with_one_paragraph_and_the_resume_loses_nothing(tmp_path, small_disk, ray_local,
                                                                                  capfd):
    """`tuner run` on the disk that fills up: exit 75 and one paragraph. The resume is in-process
    (prepare_resume, then resume_prepared, what `tuner resume` runs): what it finishes is checked."""
    from tuner.run.engine import resume_prepared
    from tuner.run.prepare import prepare_resume

    go = tmp_path / "signals" / "go"
    go.parent.mkdir()
    spec = tmp_path / "full.yaml"
    spec.write_text(SPEC.format(go=go))
    exp = small_disk / "full"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", spec, "--num-cpus", "2", "--storage", small_disk],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Both holders hold (so x=0.1 has finished) and the saved state has their checkpoints.
        deadline = time.monotonic() + 240
        while not (len(list(go.parent.glob("holding-*"))) == 2 and
                   all(lines(trial_folders(exp).get(x, exp / "none")) >= HOLD_AT for x in (0.3, 0.4))):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        fill(small_disk)
        go.touch()  # the holders write their next checkpoint: no space left
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == DiskFullError.exit_code == 75, err
    for noise in ("Traceback", "Exception in thread", "Exception ignored", "--- Logging error ---"):
        assert noise not in out + err, err
    # One paragraph: what could not be written, that the disk is full, and the command to go on.
    first, command, rest = err.split("\n", 2)
    assert first.startswith("tuner: error: the disk is full: could not write ") and str(exp) in first, err
    assert f"(no space left on the filesystem of {small_disk})" in first
    assert first.endswith("Free some space there, then run:")
    assert (command, rest) == (f"  tuner resume {exp}", "")
    assert not (exp / "summary.json").exists(), "tuner writes nothing more on the full disk"
    assert not list(exp.rglob("*.tmp")), "no half-written temporary files left taking space"

    folders = trial_folders(exp)
    finished = folders[0.1].joinpath("result.json").read_text()
    assert [r["training_iteration"] for r in results(folders[0.1])] == list(range(1, EPOCHS + 1))

    (small_disk / "ballast").unlink()  # space freed
    capfd.readouterr()
    resumed = resume_prepared(prepare_resume(exp))
    assert resumed.num_errors == 0 and not resumed.interrupted and resumed.aborted is None, resumed.summary
    printed = capfd.readouterr()
    assert "Traceback" not in printed.out + printed.err, printed.err
    df = pd.read_csv(exp / "results.csv")
    assert sorted(df["config/x"]) == [0.1, 0.3, 0.4] and df["trial_id"].is_unique
    assert set(df["status"]) == {"TERMINATED"} and (df["training_iteration"] == EPOCHS).all()
    assert folders[0.1].joinpath("result.json").read_text() == finished, "the finished trial is not rerun"
    for x in (0.3, 0.4):
        rows = results(folders[x])
        iters = [r["training_iteration"] for r in rows]
        assert iters == sorted(iters) and iters[-1] == EPOCHS, f"x={x}: iterations never go backwards: {iters}"
        assert {r["epoch"] for r in rows} == set(range(EPOCHS)), f"x={x}: every epoch reported"
        assert rows[-1]["start"] >= 1, f"x={x} went on from a checkpoint, not from scratch: {rows}"


@pytest.mark.slow
def test_tune_model_raises_disk_full_error_with_the_path_and_the_resume_command(ray_local, small_disk):
    from tuner import tune_model

    fd = os.open(small_disk / "ballast", os.O_WRONLY | os.O_CREAT, 0o644)  # leave ~300 KB: one checkpoint fails
    os.write(fd, bytes(os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize - 300 * 1024))
    os.close(fd)
    with pytest.raises(DiskFullError) as info:
        tune_model({"name": "api", "trainable": "tests.trainables:bulky", "metric": "loss", "mode": "min",
                    "num_samples": 2, "param_space": {"x": 0.5, "epochs": 3, "ckpt_kb": 200},
                    "resources": {"cpu": 1}, "reporting": {"cli": False}}, storage=str(small_disk))
    exp = small_disk / "api"
    assert info.value.resume_command == f"tuner resume {exp}"
    assert Path(info.value.path).is_relative_to(exp), info.value.path
    assert str(info.value).startswith("the disk is full: could not write ")
    assert info.value.__cause__ is not None
    (small_disk / "ballast").unlink()


def test_only_full_disk_errors_are_kept_off_the_console(tmp_path):
    """A writer thread that dies of a full disk goes to tuner.log; any other thread error still
    reaches stderr, as do full-disk errors when no run is watching."""
    script = f"""
import errno, os, threading
from tuner.run.console import DiskFullWatch, log_to_file

def die(error):
    def run():
        raise error
    thread = threading.Thread(target=run, name=type(error).__name__)
    thread.start()
    thread.join()

with DiskFullWatch() as watch, log_to_file({str(tmp_path / "tuner.log")!r}):
    die(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    die(ValueError("not the disk"))
    die(OSError(errno.EACCES, os.strerror(errno.EACCES)))
print(watch.error.errno == errno.ENOSPC)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True\n"
    assert "ValueError: not the disk" in proc.stderr and "PermissionError: [Errno 13]" in proc.stderr
    assert "No space left on device" not in proc.stderr
    log = (tmp_path / "tuner.log").read_text()
    assert "thread OSError failed" in log and "OSError: [Errno 28] No space left on device" in log
