"""Running a command trial: the spec's program as a process per trial, its metrics lines as reports.

:func:`command_trainable` builds the train function that :mod:`tuner.run.trainable` wraps as for any
function (so the schedulers, ``stop``, ``trial_timeout_s``, the NaN refusal, checkpoints, resume and
PBT work as they do for a function). Per trial it:

1. writes the config as YAML into the trial's folder (``$TUNER_CONFIG``,
   :data:`~tuner.experiment.layout.COMMAND_CONFIG`), and fills the command's placeholders
   (:func:`tuner.spec.command.render_command`);
2. starts the program under :mod:`tuner.run.command_leader` (which ends the program and all it
   started when the trial stops), in ``trainable.cwd``, with the environment below; with
   ``resources.workers: N`` under ``torchrun --standalone --nproc-per-node N`` (only rank 0's
   output is read; each rank's is in :data:`~tuner.experiment.layout.TORCHRUN_LOGS`);
3. reads its metrics lines (stdout, or the metrics file) and reports each as a result
   (:func:`tuner.trial.report`), with the checkpoint a line names;
4. fails the trial when the program exits with a code other than 0, with the last lines of its
   stderr in the error.

The program's environment: the trial's own (Ray's ``CUDA_VISIBLE_DEVICES`` for the trial's GPUs,
and the ``PYTHONPATH`` tuner gives trial workers), then ``trainable.env``, then
``PYTHONUNBUFFERED=1``, ``TUNER_CONFIG``, ``TUNER_TRIAL_ID``, ``TUNER_TRIAL_DIR``,
``TUNER_CHECKPOINT_DIR``, ``TUNER_RESTORE_DIR`` (only when there is a checkpoint to restore) and
``TUNER_METRICS_FILE`` (only with ``metrics: FILE``). Its stdout and stderr go to the trial's
:data:`~tuner.experiment.layout.COMMAND_STDOUT` and :data:`~tuner.experiment.layout.COMMAND_STDERR`,
never to the console.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any
from collections.abc import Iterator, Mapping

from tuner import trial
from tuner.experiment.layout import COMMAND_CONFIG, COMMAND_STDERR, COMMAND_STDOUT, TORCHRUN_LOGS
from tuner.spec import command_cwd
from tuner.spec.command import CommandTrainable, render_command

__all__ = ["CommandTrial", "CommandFailedError", "command_trainable", "parse_line",
           "STDERR_TAIL_LINES", "CHECKPOINT_KEY"]

logger = logging.getLogger("tuner")

#: How many of the last lines of the program's stderr a failed trial's error shows.
STDERR_TAIL_LINES = 20
#: The key of a metrics line that marks a checkpoint (``true``, or a name inside ``$TUNER_CHECKPOINT_DIR``).
CHECKPOINT_KEY = "checkpoint"
#: Katib's default metrics filter (``name=value``; its ``metricsFormat`` default), per pair on a line.
_KV = re.compile(r"([\w|-]+)\s*=\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|NaN|Inf)|true|false)"
                 r"(?![\w.])")
#: torchrun's prefix of a rank's line on its console (``[default0]:``), with ``--tee``.
_RANK_PREFIX = re.compile(r"^\[[A-Za-z_]*\d+\]:")
_LEADER = Path(__file__).with_name("command_leader.py")
_POLL_S = 0.2


class CommandFailedError(RuntimeError):
    """The command trial's program exited with a code other than 0, or reported nothing."""


def _number(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and re.fullmatch(r"[+-]?\d+", text) else value


def parse_line(line: str, how: str) -> dict[str, Any] | None:
    """One metrics line as a report, or None for a line that holds none.

    Args:
        line: One line the program wrote (no newline needed).
        how: ``json`` (the line is one JSON object), ``kv`` (``name=value`` pairs, Katib's
            format; other text on the line is ignored) or ``file`` (either, line by line).

    Returns:
        Metric name to value (numbers as ``int``/``float``, ``true``/``false`` as bools);
        None when the line is not a metrics line.
    """
    text = _RANK_PREFIX.sub("", line.strip(), count=1).strip()
    if how != "kv" and text.startswith("{"):
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        if isinstance(found, dict) and found:
            return found
    if how == "json":
        return None
    pairs = _KV.findall(text)
    return {name: _number(value) for name, value in pairs} or None


#: The key a line's checkpoint is kept under, once taken (:class:`_Snapshots`), until it is reported.
_SNAPSHOT = "__tuner_checkpoint_snapshot__"


class _Reports:
    """Lines to reports: a line without the spec's metrics adds its values to the next one that has them."""

    def __init__(self, metrics: tuple[str, ...] | None):
        self.metrics: tuple[str, ...] = metrics or ()
        self.pending: dict[str, Any] = {}

    def add(self, found: Mapping[str, Any]) -> dict[str, Any] | None:
        if _SNAPSHOT in found and _SNAPSHOT in self.pending:  # a newer checkpoint replaces the pending one
            _remove(self.pending.pop(_SNAPSHOT))
        self.pending.update(found)
        if all(m in self.pending for m in self.metrics):
            out, self.pending = self.pending, {}
            return out
        return None


class _Snapshots:
    """A line's checkpoint, copied as soon as the line is read.

    The program goes on while Ray takes the reports before it (each :func:`tuner.trial.report` waits
    for Tune), and writes its next checkpoint into ``$TUNER_CHECKPOINT_DIR``; the copy keeps the one
    the line named.

    Args:
        scratch: ``$TUNER_CHECKPOINT_DIR``.
        root: The folder the copies go in (removed with the trial's temporary files).
    """

    def __init__(self, scratch: str, root: str):
        self.scratch, self.root, self.count = scratch, root, 0
        os.makedirs(root, exist_ok=True)

    def take(self, found: dict[str, Any]) -> dict[str, Any]:
        """``found`` with its ``checkpoint`` marker replaced by the copy's folder (or dropped)."""
        marker = found.pop(CHECKPOINT_KEY, None)
        if marker in (None, False, 0, "", "0", "false"):
            return found
        source = self.scratch if marker in (True, 1, "1", "true") else os.path.join(self.scratch, str(marker))
        if not os.path.exists(source):
            logger.warning("the metrics line names checkpoint %r, which is not in $TUNER_CHECKPOINT_DIR; reported "
                           "without a checkpoint", marker)
            return found
        self.count += 1
        copy = os.path.join(self.root, f"checkpoint_{self.count:06d}")
        if os.path.isdir(source):
            shutil.copytree(source, copy)
        else:
            os.makedirs(copy)
            shutil.copy2(source, copy)
        if source != self.scratch:  # a named one: the copy is Ray's to take
            _remove(source)
        found[_SNAPSHOT] = copy
        return found


def _copy_lines(stream: IO[str], log: IO[str], out: queue.Queue | None, how: str,
                tail: collections.deque | None = None, snapshots: _Snapshots | None = None) -> None:
    """Copy a pipe to a log file line by line; metrics lines go on ``out`` too; ``None`` on ``out`` at the end."""
    try:
        for line in stream:
            log.write(line)
            log.flush()
            if tail is not None:
                tail.append(line.rstrip("\n"))
            if out is not None:
                found = parse_line(line, how)
                if found is not None:
                    out.put(snapshots.take(found) if snapshots is not None else found)
    except (OSError, ValueError):  # the pipe or the log closed under us: the trial is ending
        pass
    finally:
        if out is not None:
            out.put(None)


def _follow_file(path: Path, start: int, out: queue.Queue, done: threading.Event, snapshots: _Snapshots) -> None:
    """Read the lines appended to ``path`` after byte ``start`` until ``done`` is set (then once more)."""
    offset, rest = start, ""
    while True:
        finished = done.is_set()
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
        except FileNotFoundError:
            chunk = ""
        rest += chunk
        *lines, rest = rest.split("\n")
        if finished and rest.strip():
            lines, rest = [*lines, rest], ""
        for line in lines:
            found = parse_line(line, "file")
            if found is not None:
                out.put(snapshots.take(found))
        if finished:
            out.put(None)
            return
        done.wait(_POLL_S)


class _Program:
    """The program of one trial, under :mod:`tuner.run.command_leader`'s keeper.

    The keeper is no child of this process: it hears of the trial's end when this end of their socket
    closes (:meth:`stop`, or this process's death), and tells this process the program's exit code.
    """

    def __init__(self, argv: list[str], cwd: str, env: Mapping[str, str], grace_s: float, temporary: str = ""):
        ours, theirs = socket.socketpair()
        self.grace_s = grace_s
        self.keeper: int | None = None
        self.program: int | None = None
        self.code: int | None = None
        self.exited = threading.Event()  # the program's exit code is known (or never will be)
        self.ended = threading.Event()  # the keeper is gone
        try:
            self.leader = subprocess.Popen(
                [sys.executable, str(_LEADER), str(grace_s), str(theirs.fileno()), temporary, "--", *argv],
                pass_fds=(theirs.fileno(),), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace", bufsize=1)
        finally:
            theirs.close()
        self.sock = ours
        self.leader.wait()  # it forks the keeper and exits
        threading.Thread(target=self._listen, daemon=True, name="tuner-command-keeper").start()

    def _listen(self) -> None:
        try:
            for line in self.sock.makefile("r", encoding="utf-8"):
                word, _, value = line.strip().partition(" ")
                if word in ("keeper", "program", "exit") and value.lstrip("-").isdigit():
                    setattr(self, {"exit": "code"}.get(word, word), int(value))
                if word == "exit":
                    self.exited.set()
        except (OSError, ValueError):
            pass
        finally:
            self.exited.set()
            self.ended.set()

    def wait(self) -> int:
        """The program's exit code, once the keeper has ended it and all it started (in short waits, so that
        the trial's time limit reaches this thread); 137 if the keeper died without saying."""
        while not self.exited.wait(_POLL_S):
            pass
        return self.code if self.code is not None else 128 + signal.SIGKILL

    def stop(self) -> None:
        """End the program (SIGTERM, then SIGKILL after the grace period) and all it started; wait for that."""
        if not self.ended.is_set():
            try:
                self.sock.shutdown(socket.SHUT_WR)  # the keeper reads the end of the socket
            except OSError:
                pass
            if not self.ended.wait(self.grace_s + 5):  # the keeper is stuck: end it all here
                for pid, kill in ((self.program, os.killpg), (self.keeper, os.kill)):
                    if pid is not None:
                        try:
                            kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
        self.sock.close()


class CommandTrial:
    """The train function of a command trial (picklable; Ray sends it to the trial's worker).

    Args:
        command: The spec's ``trainable`` section.
        cwd: The program's working directory, absolute.
        metrics: The metrics a report must carry (the objectives'), or None.
        workers: ``resources.workers`` (run under torchrun), or None.
        name: The trial folders' prefix (``<name>_<trial id>``): the script's name.
        job_cwd: ``cwd`` relative to the Ray Job's working directory, when tuner runs in one
            (each node unpacks the working directory elsewhere), else None.

    Attributes:
        experiment_path: The experiment's folder (or URI), once :meth:`at` has set it; a trial writes
            its files into its folder there.
    """

    def __init__(self, command: CommandTrainable, cwd: str, metrics: tuple[str, ...] | None,
                 workers: int | None, name: str, job_cwd: str | None = None):
        self.command, self.cwd, self.metrics, self.workers = command, cwd, metrics, workers
        self.job_cwd = job_cwd
        self.experiment_path: str | None = None
        self.__name__ = self.__qualname__ = name

    def at(self, experiment_path: str) -> CommandTrial:
        """This command trial in the experiment at ``experiment_path`` (a folder or a cloud URI)."""
        bound = CommandTrial(self.command, self.cwd, self.metrics, self.workers, self.__name__, self.job_cwd)
        bound.experiment_path = experiment_path
        return bound

    def __call__(self, config: dict) -> None:
        run_command(self, config)

    def working_dir(self) -> str:
        """The program's working directory on this node."""
        if self.job_cwd is not None:
            base = os.environ.get("TUNE_ORIG_WORKING_DIR")  # Ray Tune's record of the node's job folder
            if base and Path(base, self.job_cwd).is_dir():
                return str(Path(base, self.job_cwd))
        return self.cwd

    def argv(self, config: Mapping[str, Any], builtins: Mapping[str, str | None], trial_dir: str) -> list[str]:
        """The program and its arguments for one trial (under torchrun with ``workers``)."""
        args = render_command(self.command.command, config, builtins)
        if self.command.runs_python:
            args[0] = sys.executable
        if self.workers is None:
            return args
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc-per-node={self.workers}", f"--log-dir={Path(trial_dir, TORCHRUN_LOGS)}", "--tee=3",
                "--local-ranks-filter=0", *args[1:]]


def command_trainable(spec) -> CommandTrial:
    """The train function of ``spec``'s command trial.

    Args:
        spec: A validated :class:`~tuner.spec.Spec` whose ``trainable`` is a command.

    Returns:
        A :class:`CommandTrial`, named after the script (``train_script`` for
        ``python train_script.py``; trial folders are ``<name>_<trial id>``).
    """
    from tuner.adapters.ray_internals import RAY_JOB_CONFIG

    command = spec.command
    cwd = command_cwd(spec)
    job_cwd = None
    if RAY_JOB_CONFIG in os.environ and cwd.is_relative_to(Path.cwd().resolve()):
        job_cwd = str(cwd.relative_to(Path.cwd().resolve()))
    metrics = tuple(o.metric for o in spec.objectives or ()) or None
    return CommandTrial(command, str(cwd), metrics, spec.resources.workers, _trial_name(command), job_cwd)


def _trial_name(command: CommandTrainable) -> str:
    """The trial folders' prefix: the script's (or module's, or program's) name, as a Python name."""
    words = command.command
    if command.runs_python and words[1:2] == ["-m"] and len(words) > 2:
        word = words[2].rsplit(".", 1)[-1]
    elif command.script is not None:
        word = Path(command.script).stem
    else:
        word = Path(words[0]).stem
    stem = re.sub(r"\W", "_", word)
    return stem if stem[:1].isalpha() else "command"


def _trial_folder(trial_: CommandTrial) -> tuple[str, str]:
    """``(trial id, the trial's folder)``: the experiment's own trial folder where this node sees it (so that a
    resumed trial appends to its logs), else Ray's local folder of the trial; outside Ray a temporary folder."""
    if not trial.in_tune():
        return "local", tempfile.mkdtemp(prefix="tuner-command-")
    from ray import tune

    from tuner.experiment.layout import trial_folder_name
    from tuner.experiment.storage import is_remote

    ctx = tune.get_context()
    trial_id = ctx.get_trial_id()
    experiment = trial_.experiment_path
    if experiment and not is_remote(experiment) and Path(experiment).is_dir():
        return trial_id, str(Path(experiment, trial_folder_name(trial_.__name__, trial_id)))
    return trial_id, ctx.get_trial_dir()


def _environment(trial_: CommandTrial, extra: Mapping[str, str | None]) -> dict[str, str]:
    env = {**os.environ, **trial_.command.env, "PYTHONUNBUFFERED": "1"}
    env.update({k: v for k, v in extra.items() if v is not None})
    for key in ("TUNER_RESTORE_DIR", "TUNER_METRICS_FILE"):
        if extra.get(key) is None:
            env.pop(key, None)
    return env


def run_command(trial_: CommandTrial, config: dict) -> None:
    """Run one command trial to its end (see the module docstring).

    Raises:
        CommandFailedError: The program exited with a code other than 0 (or was killed), or it
            exited without a metrics line while the spec has a metric.
        NonFiniteMetricError: A metrics line's tuned metric is NaN or inf.
    """
    import yaml

    from tuner.experiment.files import atomic_write

    trial_id, trial_dir = _trial_folder(trial_)
    Path(trial_dir).mkdir(parents=True, exist_ok=True)
    config_file = Path(trial_dir, COMMAND_CONFIG)
    atomic_write(config_file, yaml.safe_dump(config, sort_keys=False))
    temporary = tempfile.mkdtemp(prefix="tuner-command-")  # $TUNER_CHECKPOINT_DIR, and the checkpoints taken
    scratch = os.path.join(temporary, "checkpoint")
    os.makedirs(scratch)
    restore = trial.get_checkpoint()
    metrics_file = None
    if trial_.command.metrics_file is not None:
        metrics_file = Path(trial_dir, trial_.command.metrics_file)
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
    builtins = {"tuner.trial_id": trial_id, "tuner.trial_dir": trial_dir, "tuner.config_file": str(config_file),
                "tuner.checkpoint_dir": scratch, "tuner.restore_dir": restore,
                "tuner.metrics_file": str(metrics_file) if metrics_file else None}
    env = _environment(trial_, {"TUNER_CONFIG": str(config_file), "TUNER_TRIAL_ID": trial_id,
                                "TUNER_TRIAL_DIR": trial_dir, "TUNER_CHECKPOINT_DIR": scratch,
                                "TUNER_RESTORE_DIR": restore,
                                "TUNER_METRICS_FILE": str(metrics_file) if metrics_file else None})
    argv = trial_.argv(config, builtins, trial_dir)
    try:
        _run(trial_, argv, env, Path(trial_dir), _Snapshots(scratch, os.path.join(temporary, "taken")),
             metrics_file)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _run(trial_: CommandTrial, argv: list[str], env: dict[str, str], trial_dir: Path, snapshots: _Snapshots,
         metrics_file: Path | None) -> None:
    """Start the program, report its lines, and end it (and all it started) however this trial ends."""
    lines: queue.Queue = queue.Queue()
    tail: collections.deque = collections.deque(maxlen=STDERR_TAIL_LINES)
    out_log = open(trial_dir / COMMAND_STDOUT, "a", encoding="utf-8")
    err_log = open(trial_dir / COMMAND_STDERR, "a", encoding="utf-8")
    start = metrics_file.stat().st_size if metrics_file is not None and metrics_file.exists() else 0
    logger.info("command trial: %s (in %s)", " ".join(argv), trial_.working_dir())
    program = _Program(argv, trial_.working_dir(), env, trial_.command.stop_grace_s,
                       os.path.dirname(snapshots.scratch))
    done = threading.Event()
    how = trial_.command.line_format
    stdout_lines = None if metrics_file else lines
    readers = [threading.Thread(target=_copy_lines, args=(program.leader.stdout, out_log, stdout_lines, how, None,
                                                          snapshots), daemon=True, name="tuner-command-stdout"),
               threading.Thread(target=_copy_lines, args=(program.leader.stderr, err_log, None, how, tail),
                                daemon=True, name="tuner-command-stderr")]
    if metrics_file is not None:
        readers.append(threading.Thread(target=_follow_file, args=(metrics_file, start, lines, done, snapshots),
                                        daemon=True, name="tuner-command-metrics"))
    for reader in readers:
        reader.start()
    try:
        reports = _report_lines(_lines(lines, program, done, metrics_file is not None), trial_.metrics)
        code = program.wait()
        for reader in readers[:2]:  # the pipes end with the program's last process
            while reader.is_alive():
                reader.join(_POLL_S)
        if code != 0:
            raise CommandFailedError(_failure_text(argv, code, tail))
        if reports == 0 and trial_.metrics and trial.get_checkpoint() is None:
            raise CommandFailedError(
                f"the command exited 0 without a metrics line carrying {', '.join(trial_.metrics)}; "
                f"print one a line ({_example(trial_)}), or check {trial_dir / COMMAND_STDOUT}.")
    finally:
        program.stop()
        done.set()
        for reader in readers:
            reader.join(timeout=2)
        if not any(reader.is_alive() for reader in readers):  # else a pipe is still held open: leave it
            for f in (program.leader.stdout, program.leader.stderr, out_log, err_log):
                if f is not None:
                    f.close()


def _lines(lines: queue.Queue, program: _Program, done: threading.Event, from_file: bool) -> Iterator[dict]:
    """The metrics lines as they come, until the program has exited and its output is read.

    Waits in short steps, so that the trial's time limit (an exception raised in this thread)
    and Ray's stop of the trial reach it at once.
    """
    while True:
        try:
            item = lines.get(timeout=_POLL_S)
        except queue.Empty:
            if from_file and program.exited.is_set():
                done.set()  # the file's reader reads the rest, then ends
            continue
        if item is None:
            return
        yield item


def _report_lines(found: Iterator[dict], metrics: tuple[str, ...] | None) -> int:
    """Report each metrics line (merged as :class:`_Reports` does), with the checkpoint taken when its line was
    read; returns how many reports were made."""
    merge, made = _Reports(metrics), 0
    for values in found:
        report = merge.add(values)
        if report is None:
            continue
        taken = report.pop(_SNAPSHOT, None)
        try:
            trial.report(report, checkpoint_dir=taken)
        finally:
            if taken is not None:  # Ray has its copy now
                _remove(taken)
        made += 1
    merge.pending.pop(_SNAPSHOT, None)
    if merge.pending:
        logger.warning("the command's last metrics lines lack %s and were not reported: %s",
                       ", ".join(metrics or ()), merge.pending)
    return made


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def _example(trial_: CommandTrial) -> str:
    body = ", ".join(f'"{m}": 0.5' for m in trial_.metrics or ("loss",))
    return "{" + body + "}" if trial_.command.line_format != "kv" else " ".join(
        f"{m}=0.5" for m in trial_.metrics or ("loss",))


def _failure_text(argv: list[str], code: int, tail: collections.deque) -> str:
    what = f"was killed by {signal.Signals(code - 128).name}" if code > 128 and code - 128 in \
        signal.valid_signals() else f"exited with code {code}"
    if code == 127 and tail and tail[-1].startswith("tuner: cannot start"):
        what = "could not start"
    last = "\n".join(tail) if tail else "(nothing on stderr)"
    head = f"the command {what}: {' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}"
    return f"{head}\nlast {len(tail)} lines of its stderr:\n{last}"
