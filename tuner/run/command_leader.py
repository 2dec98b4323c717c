"""The process between a command trial and its program: it ends the program and everything it started.

:mod:`tuner.run.command` runs ``python command_leader.py GRACE_S PARENT_PID -- PROGRAM ARGS...`` (as a
file, importing nothing of tuner's, so it starts in milliseconds). The leader:

* starts the program in a process group (a session) of its own;
* on Linux becomes a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so that whatever the
  program starts and leaves behind is re-parented to it rather than to init, even a process in
  a session of its own (``torchrun``'s workers are);
* on SIGTERM or SIGINT (the trial was stopped, or timed out), or once its parent (the trial's
  process) is gone, a SIGKILL of Ray's worker included: sends SIGTERM to the program's group
  and to every process below it, waits up to GRACE_S seconds, then sends SIGKILL to what is left;
* when the program exits by itself, ends whatever it left running the same way;
* exits with the program's exit code (128 + N when signal N ended it).

So no process of a trial outlives it. Where ``/proc`` is missing (macOS) only the program's
process group is signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

_POLL_S = 0.1
_stop_requested = False


def _on_signal(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


def _subreaper() -> None:
    """Adopt the orphaned descendants (Linux ``prctl(PR_SET_CHILD_SUBREAPER, 1)``); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - without it, only the program's group is reached
        pass


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from ``/proc``); empty where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def _signal_all(group: int, sig: int) -> bool:
    """Send ``sig`` to the program's group and every process below this one; whether any was there."""
    hit = False
    try:
        os.killpg(group, sig)
        hit = True
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, sig)
            hit = True
        except (ProcessLookupError, PermissionError):
            pass
    return hit


def _reap() -> None:
    """Collect every exited child (the program's orphans are this process's children here)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(group: int, program: subprocess.Popen) -> bool:
    _reap_others(program)
    if program.poll() is None:
        return True
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        pass
    return any(_is_running(pid) for pid in _descendants(os.getpid()))


def _reap_others(program: subprocess.Popen) -> None:
    if program.returncode is not None:
        _reap()


def _is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] != b"Z"


def end_all(group: int, program: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the program's group and every process below, then SIGKILL after ``grace_s`` seconds."""
    if not _signal_all(group, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace_s
    while _alive(group, program) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    if _alive(group, program):
        _signal_all(group, signal.SIGKILL)
    program.wait()
    _reap()


def main(argv: list[str]) -> int:
    """Run ``argv``'s program as described in the module docstring; returns the exit code."""
    grace_s, parent = float(argv[1]), int(argv[2])
    command = argv[4:]
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    _subreaper()
    if os.getppid() != parent:  # the trial's process is gone already
        return 143
    try:
        program = subprocess.Popen(command, start_new_session=True)
    except OSError as err:
        print(f"tuner: cannot start {command[0]!r}: {err.strerror or err}", file=sys.stderr, flush=True)
        return 127
    group = program.pid
    while program.poll() is None and not _stop_requested and os.getppid() == parent:
        try:
            program.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            pass
    stopped = program.returncode is None
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    end_all(group, program, grace_s if stopped else min(grace_s, 2.0))
    code = program.returncode
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
