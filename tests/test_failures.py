"""Experiment lock: one run per experiment folder, freed even when the holder is SIGKILLed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tuner.failures import ExperimentLock, ExperimentLocked

HOLD = "import sys, time; from tuner.failures import ExperimentLock\n" \
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
