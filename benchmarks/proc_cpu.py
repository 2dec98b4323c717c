"""The CPU time of a command and of every process it starts, Ray's daemons and workers included.

``time`` (``RUSAGE_CHILDREN``) misses most of a Ray run: the raylet's workers and Ray's helper
processes are not waited for by the command. This samples ``/proc`` every 0.1 s instead and
sums, per process that descends from the command (or from one of its descendants seen
earlier), the largest user + system time seen. Processes of other programs on the machine do
not count, so figures taken while the machine is busy stay comparable; a process that lives
less than one sample (0.1 s) is missed. Linux only.

    python benchmarks/proc_cpu.py python -m tuner run search_spaces/mnist_asha.yaml
    python benchmarks/proc_cpu.py python -m pytest -n 0 -p no:cacheprovider tests/test_engine.py

Prints ``proc_cpu: cpu=<CPU seconds> wall=<seconds> rc=<exit code>`` to stderr at the end and
exits with the command's exit code. Figures: ``docs/benchmarks.md``, "Where the test suite's
time goes". This is a benchmark tool, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

_TICKS = os.sysconf("SC_CLK_TCK")
_SAMPLE_S = 0.1


def _processes() -> dict[int, tuple[int, int, float]]:
    """Every process now: pid -> (parent pid, start time in ticks since boot, CPU seconds used)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        out[int(name)] = (int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICKS)
    return out


class Tracker:
    """Sums the CPU time of a root process and its descendants over repeated samples.

    Args:
        root: The pid whose descendants count (itself included).
    """

    def __init__(self, root: int):
        self.root = root
        self._ours: set[tuple[int, int]] = set()  # (pid, start time): survives pid reuse
        self._cpu: dict[tuple[int, int], float] = {}

    def sample(self) -> None:
        """Read ``/proc`` once; adopt new descendants and update each one's CPU seconds."""
        procs = _processes()
        for pid, (_, start, cpu) in procs.items():
            key = (pid, start)
            if key not in self._ours and self._descends(pid, procs):
                self._ours.add(key)
            if key in self._ours:
                self._cpu[key] = max(self._cpu.get(key, 0.0), cpu)

    def _descends(self, pid: int, procs: dict[int, tuple[int, int, float]]) -> bool:
        seen = 0
        while pid in procs and seen < 64:
            if pid == self.root:
                return True
            parent = procs[pid][0]
            if parent in procs and (parent, procs[parent][1]) in self._ours:
                return True
            pid, seen = parent, seen + 1
        return False

    @property
    def per_process(self) -> dict[tuple[int, int], float]:
        """CPU seconds of each process seen so far, by ``(pid, start time in ticks since boot)``."""
        return dict(self._cpu)

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) of the root and its descendants seen so far."""
        return sum(self._cpu.values())


def main(argv: list[str]) -> int:
    """Run ``argv`` as a command, sample until it exits (and 1 s longer, for Ray's shutdown), report.

    Returns:
        The command's exit code.
    """
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    start = time.monotonic()
    proc = subprocess.Popen(argv)
    tracker = Tracker(proc.pid)
    while proc.poll() is None:
        tracker.sample()
        time.sleep(_SAMPLE_S)
    for _ in range(10):
        tracker.sample()
        time.sleep(_SAMPLE_S)
    print(f"proc_cpu: cpu={tracker.cpu_seconds:.1f} wall={time.monotonic() - start:.1f} rc={proc.returncode}",
          file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
