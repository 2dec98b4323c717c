"""A pytest plugin that records each test's CPU time, to find where the suite's time goes.

The suite runs on both cores at once (xdist), so its wall time is its CPU work; this finds the
tests that do the most of it. Two ways to count:

* **Per xdist worker (exact under xdist).** Where the cgroup v1 ``cpuacct`` controller is
  writable (``/sys/fs/cgroup/cpuacct``, as root), each xdist worker moves itself into a cgroup of
  its own, which its children (the tuner CLI, Ray's processes, trial workers, orphans too) inherit;
  a test's figure is its worker cgroup's ``cpuacct.usage`` over the test. A module-scoped fixture's
  start and a Ray that stays up count where they happen: that is CPU the suite spends too::

      PYTHONPATH=benchmarks PYTEST_CPU_OUT=/tmp/cpu.jsonl python -m pytest -p pytest_cpu

* **Whole machine (serial).** Elsewhere, the figure is the whole machine's busy time
  (``/proc/stat``), so run it serially on an otherwise idle machine::

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


#: The cgroup v1 CPU accounting hierarchy (Linux).
CPUACCT = "/sys/fs/cgroup/cpuacct"
_cgroup: str | None = None  # this xdist worker's cgroup, once it has moved into it


def _cgroup_cpu_seconds() -> float:
    """CPU seconds this worker's cgroup (the worker and every process started under it) has used."""
    with open(f"{_cgroup}/cpuacct.usage") as f:
        return int(f.read()) / 1e9


def pytest_configure(config):
    """Under xdist, move this worker into a cpuacct cgroup of its own where that is allowed."""
    global _cgroup
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    folder = f"{CPUACCT}/pytest_cpu_{worker}_{os.getpid()}"
    try:
        os.makedirs(folder, exist_ok=True)
        with open(f"{folder}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        return  # no writable cpuacct: the whole machine's figure (run serially)
    _cgroup = folder


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    measure = _cgroup_cpu_seconds if _cgroup else machine_cpu_seconds
    cpu, wall = measure(), time.monotonic()
    yield
    row = [item.nodeid, round(measure() - cpu, 1), round(time.monotonic() - wall, 1)]
    with open(os.environ.get("PYTEST_CPU_OUT", "pytest_cpu.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
