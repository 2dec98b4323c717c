"""The CPU time of a command and of every process it starts, Ray's daemons and workers included.

``time`` (``RUSAGE_CHILDREN``) misses most of a Ray run: the raylet's workers and Ray's helper
processes are not waited for by the command. This samples ``/proc`` every 0.1 s instead and
sums, per process that descends from the command (or from one of its descendants seen
earlier), the largest user + system time seen. Processes of other programs on the machine do
not count, so figures taken while the machine is busy stay comparable; a process that lives
less than one sample (0.1 s) is missed. Linux only.

    python benchmarks/proc_cpu.py python -m tuner run search_spaces/mnist_asha.yaml
    python benchmarks/proc_cpu.py python -m pytest -n 0 -p no:cacheprovider tests/test_engine.py

    python benchmarks/proc_cpu.py --by-kind python -m pytest -p no:cacheprovider

Prints ``proc_cpu: cpu=<CPU seconds> wall=<seconds> rc=<exit code>`` to stderr at the end and
exits with the command's exit code. With ``--by-kind`` it also prints the CPU seconds and the
count of each kind of process (:func:`kind_of`: Ray's daemons, trial actors by class, the tuner
CLI), which shows what a whole test suite spends its time on. Figures: ``docs/benchmarks.md``, "Where the test suite's
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


#: Ray's processes, by a part of their command line (the raylet's names the agents it starts: it comes first).
_RAY_DAEMONS = (("raylet/raylet", "Ray: raylet"), ("gcs_server", "Ray: GCS"),
                ("dashboard/dashboard.py", "Ray: dashboard"), ("dashboard/agent.py", "Ray: dashboard agent"),
                ("runtime_env/agent/main.py", "Ray: runtime env agent"), ("log_monitor.py", "Ray: log monitor"),
                ("autoscaler/_private/monitor.py", "Ray: autoscaler monitor"),
                ("default_worker.py", "Ray worker (starting)"), ("setup_worker.py", "Ray worker (starting)"))

#: Kinds a process may still leave: a Ray worker starts as ``ray::IDLE`` (or its script) and takes its
#: actor's name; the agents take ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``.
_UNSETTLED = {"?", "ray::IDLE", "Ray worker (starting)", "Ray: dashboard agent", "Ray: runtime env agent"}


def kind_of(cmdline: str) -> str:
    """The kind of a process, from its command line (``/proc/PID/cmdline``, NULs as spaces).

    A Ray worker names itself ``ray::<actor class>.<method>`` (Ray 2.60's process title): its kind is
    ``ray::<actor class>`` (``ray::ImplicitFunc``: a function trainable's trial; ``ray::DashboardAgent``
    and ``ray::RuntimeEnvAgent``: the node's agents once started). Ray's daemons are named by their
    script or binary, the tuner CLI as ``tuner CLI``, anything else by its program (and ``-m`` module).
    """
    if cmdline.startswith("ray::"):
        return cmdline.split()[0].split(".")[0]
    for part, kind in _RAY_DAEMONS:
        if part in cmdline:
            return kind
    words = cmdline.split()
    if not words:
        return "?"
    if "-m" in words[:-1]:
        module = words[words.index("-m") + 1]
        return "tuner CLI" if module == "tuner" else f"python -m {module}"
    program = words[0].rsplit("/", 1)[-1]
    if program == "tuner" or (len(words) > 1 and words[1].endswith("/bin/tuner")):
        return "tuner CLI"
    if program.startswith("python") and len(words) > 1 and not words[1].startswith("-"):
        return f"python {words[1].rsplit('/', 1)[-1]}"
    return program


class Tracker:
    """Sums the CPU time of a root process and its descendants over repeated samples.

    Args:
        root: The pid whose descendants count (itself included).
    """

    def __init__(self, root: int):
        self.root = root
        self._ours: set[tuple[int, int]] = set()  # (pid, start time): survives pid reuse
        self._cpu: dict[tuple[int, int], float] = {}
        self._kind: dict[tuple[int, int], str] = {}

    def sample(self) -> None:
        """Read ``/proc`` once; adopt new descendants and update each one's CPU seconds."""
        procs = _processes()
        for pid, (_, start, cpu) in procs.items():
            key = (pid, start)
            if key not in self._ours and self._descends(pid, procs):
                self._ours.add(key)
            if key in self._ours:
                self._cpu[key] = max(self._cpu.get(key, 0.0), cpu)
                if self._kind.get(key, "?") in _UNSETTLED:
                    try:  # a Ray worker renames itself once it hosts an actor: read until it has
                        with open(f"/proc/{pid}/cmdline") as f:
                            cmdline = f.read().replace("\0", " ").strip()
                    except OSError:
                        continue
                    if cmdline:
                        self._kind[key] = kind_of(cmdline)

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

    def by_kind(self) -> list[tuple[str, int, float]]:
        """``(kind, processes, CPU seconds)`` of each kind of process seen (:func:`kind_of`), costliest first."""
        totals: dict[str, list] = {}
        for key, cpu in self._cpu.items():
            entry = totals.setdefault(self._kind.get(key, "?"), [0, 0.0])
            entry[0] += 1
            entry[1] += cpu
        return sorted(((kind, n, cpu) for kind, (n, cpu) in totals.items()), key=lambda row: -row[2])

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) of the root and its descendants seen so far."""
        return sum(self._cpu.values())


def main(argv: list[str]) -> int:
    """Run ``argv`` as a command, sample until it exits (and 1 s longer, for Ray's shutdown), report.

    Returns:
        The command's exit code.
    """
    by_kind = bool(argv) and argv[0] == "--by-kind"
    argv = argv[1:] if by_kind else argv
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
    if by_kind:
        for kind, count, cpu in tracker.by_kind():
            print(f"proc_cpu: {cpu:8.1f} CPU-s {count:5d} processes  {kind}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
