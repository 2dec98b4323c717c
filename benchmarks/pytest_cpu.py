"""A pytest plugin that records each test's whole-machine CPU time, to find where the suite's time goes.

The suite runs on both cores at once (xdist), so its wall time is its CPU work; this finds the
tests that do the most of it. Run it serially on an otherwise idle machine (the CPU figure is the
whole machine's, Ray's processes included)::

    PYTHONPATH=benchmarks PYTEST_CPU_OUT=/tmp/cpu.jsonl python -m pytest -p pytest_cpu -n 0 -m "not slow"

Each finished test appends one JSON line ``[node id, CPU seconds, wall seconds]`` to
``PYTEST_CPU_OUT`` (default ``pytest_cpu.jsonl`` in the working folder). Figures:
``docs/benchmarks.md``, "Where the test suite's time goes".
"""

import json
import os
import time

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``; Linux only)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / _TICKS  # minus idle and iowait


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = machine_cpu_seconds(), time.monotonic()
    yield
    row = [item.nodeid, round(machine_cpu_seconds() - cpu, 1), round(time.monotonic() - wall, 1)]
    with open(os.environ.get("PYTEST_CPU_OUT", "pytest_cpu.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
