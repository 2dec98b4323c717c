"""The processes between a command trial and its program: they end the program and everything it started.

:mod:`tuner.run.command` runs ``python command_leader.py GRACE_S FD TEMP -- PROGRAM ARGS...`` (as a file,
importing nothing of tuner's, so it starts in milliseconds), where ``FD`` is its end of a socket pair
whose other end the trial's process holds. The leader forks a *keeper* and exits at once; the keeper:

* is no child of the trial's process, so it outlives it: Ray's worker SIGKILLs its direct children
  when it exits (``RAY_kill_child_processes_on_worker_exit``), and would leave the program behind;
* on Linux becomes a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so that whatever the
  program starts and leaves behind is re-parented to it rather than to init, even a process in a
  session of its own (``torchrun``'s workers are);
* starts the program in a session (a process group) of its own, and sends ``keeper PID`` and
  ``program PID`` lines on the socket;
* once the socket's other end closes (the trial was stopped, timed out, or its process died, a
  SIGKILL included), sends SIGTERM to the program's group and to every process below the keeper,
  waits up to GRACE_S seconds, then sends SIGKILL to what is left;
* when the program exits by itself, ends whatever it left running the same way;
* sends ``exit CODE`` (the program's exit code; 128 + N when signal N ended it; 127 when it could
  not start); once the socket's other end has closed (the trial has taken its last reports, or its
  process is gone), removes the trial's temporary folder TEMP (checkpoints in flight), which a trial's
  process killed mid-way could not, and exits.

So no process of a trial outlives it. Where ``/proc`` is missing (macOS) only the program's process
group is signalled.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time

_POLL_S = 0.1


def _subreaper() -> None:
    """Adopt the orphaned descendants (Linux ``prctl(PR_SET_CHILD_SUBREAPER, 1)``); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - without it, only the program's group is reached
        pass


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command's name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()


def _descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from ``/proc``); empty where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        fields = _stat(name) if name.isdigit() else None
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def _signal_all(group: int, sig: int) -> None:
    """Send ``sig`` to the program's group and to every process below this one."""
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


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
    if program.poll() is None:
        return True
    _reap()
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        pass
    return bool(_descendants(os.getpid()))


def end_all(group: int, program: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the program's group and every process below, then SIGKILL after ``grace_s`` seconds."""
    if not _alive(group, program):
        return
    _signal_all(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(group, program) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    if _alive(group, program):
        _signal_all(group, signal.SIGKILL)
    program.wait()
    _reap()


def _ignore(signum, frame) -> None:
    """Keep on: the keeper ends when the socket closes."""


def _send(sock: socket.socket, line: str) -> None:
    try:
        sock.sendall(line.encode() + b"\n")
    except OSError:  # the trial's process is gone: nobody to tell
        pass


def _closed(sock: socket.socket) -> bool:
    """Whether the other end of the socket has closed (the trial stopped, or its process is gone)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(64) == b""
    except OSError:
        return True


def keep(grace_s: float, sock: socket.socket, command: list[str]) -> int:
    """The keeper's work (see the module docstring); returns the program's exit code."""
    _subreaper()
    _send(sock, f"keeper {os.getpid()}")
    try:
        program = subprocess.Popen(command, start_new_session=True)
    except OSError as err:
        print(f"tuner: cannot start {command[0]!r}: {err.strerror or err}", file=sys.stderr, flush=True)
        return 127
    _send(sock, f"program {program.pid}")
    devnull = os.open(os.devnull, os.O_WRONLY)  # the pipes stay open only while the program's processes hold them
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    stopped = False
    while program.poll() is None:
        if _closed(sock):
            stopped = True
            break
        try:
            program.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            pass
    end_all(program.pid, program, grace_s if stopped else min(grace_s, 2.0))
    code = program.returncode
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    """Fork the keeper and return at once (the leader); in the keeper, run it to the end."""
    grace_s, fd, temporary = float(argv[1]), int(argv[2]), argv[3]
    command = argv[5:]
    sock = socket.socket(fileno=fd)
    if os.fork() != 0:
        return 0  # the leader: the trial's process reaps it now, and the keeper is nobody's child of its
    os.setsid()  # the keeper: out of the leader's session, so that no signal to it reaches the keeper
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # It ends when the socket closes, after its program. (A handler, not SIG_IGN: the program
        # would inherit an ignored signal, and a handler is reset to the default when it starts.)
        signal.signal(sig, _ignore)
    code = keep(grace_s, sock, command)
    _send(sock, f"exit {code}")
    while not _closed(sock):  # the trial takes its last reports, then closes its end (or its process dies)
        select.select([sock], [], [])
    if temporary:
        import shutil

        shutil.rmtree(temporary, ignore_errors=True)
    return code


if __name__ == "__main__":
    code = main(sys.argv)
    os._exit(code if code < 256 else 1)
