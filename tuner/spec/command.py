"""Command trials: a training script (any program) as the trial, described under ``trainable:``.

The spec's side of them: :class:`CommandTrainable` (the ``trainable: {command: ...}`` section,
validated when it is built), its ``{name}`` placeholders (:func:`placeholders`) and the rule that
turns the command and a trial's config into the process's argument list (:func:`render_command`).
Running the process is :mod:`tuner.run.command`'s job.

The placeholder rule, in full:

* ``{lr}`` is replaced by the trial's value of ``lr``; a nested parameter is dotted
  (``{optimizer.lr}``). An argument may hold several placeholders and other text
  (``--lr={lr}``). ``{{`` and ``}}`` are literal braces.
* A string, an integer or a float is written as Python's ``str()`` writes it (``0.001``,
  ``1e-05``, ``64``), ``true``/``false`` as ``True``/``False``, a list or a mapping as JSON.
* An argument whose placeholder has no value in the trial's config (a conditional parameter
  that is inactive: its ``when`` fails, or another branch of a sub-space choice was drawn) is
  left out; when it is a value (it does not start with ``-``), so is the argument just before it
  if that one is a flag (it starts with ``-``, is not a number, and holds no placeholder):
  ``[--momentum, "{momentum}"]`` vanishes as a pair, ``[--verbose, "--momentum={momentum}"]``
  keeps ``--verbose``.
* ``{tuner.<name>}`` are tuner's own values (:data:`BUILTIN_PLACEHOLDERS`); ``{tuner.restore_dir}``
  has a value only when the trial restores a checkpoint, so ``[--resume, "{tuner.restore_dir}"]``
  is left out of a fresh start.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from typing import Any
from collections.abc import Mapping, Sequence

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tuner.spec.errors import _allowed, _fail
from tuner.spec.fields import Float, NonBlank, _Model

#: The metrics formats that are not a file path.
METRICS_FORMATS = ("json", "kv")

#: ``{tuner.<name>}``: what tuner itself fills in, and what each is.
BUILTIN_PLACEHOLDERS = {
    "tuner.trial_id": "the trial's id (Ray's)",
    "tuner.trial_dir": "the trial's folder (local)",
    "tuner.config_file": "the YAML file of the trial's config (also $TUNER_CONFIG)",
    "tuner.checkpoint_dir": "the folder a checkpoint is written to (also $TUNER_CHECKPOINT_DIR)",
    "tuner.restore_dir": "the checkpoint to restore, when there is one (also $TUNER_RESTORE_DIR)",
    "tuner.metrics_file": "the metrics file, with `metrics: FILE` (also $TUNER_METRICS_FILE)",
}

#: Read left to right as ``str.format`` reads: ``{{``, ``}}``, or a placeholder ``{name}``.
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
#: The first words that mean "the Python that runs tuner" (``sys.executable`` in the trial).
PYTHON_WORDS = ("python", "python3")


def placeholders(arg: str) -> list[str]:
    """The ``{name}`` placeholders of one argument, in order (``{{``/``}}`` are literal braces).

    Args:
        arg: One argument of the command, e.g. ``"--lr={lr}"``.

    Returns:
        The names, e.g. ``["lr"]``; a malformed one (``{}``, ``{a b}``) is returned as written,
        for :class:`CommandTrainable` to refuse.
    """
    return [m.group(1) for m in _TOKEN.finditer(arg) if m.group(1) is not None]


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and not _NUMBER.match(arg) and not placeholders(arg)


def format_value(value: Any) -> str:
    """A config value as it is written into an argument (see the module's rule)."""
    if isinstance(value, (list, tuple, Mapping)):
        return json.dumps(value)
    return str(value)


def _lookup(config: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """``(True, value)`` for a parameter ``name`` (dotted for a nested one) of ``config``; else ``(False, None)``."""
    if name in config:
        return True, config[name]
    node: Any = config
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _fill(values: Mapping[str, Any], match: re.Match) -> str:
    if match.group(1) is None:  # a literal brace
        return match.group(0)[0]
    return format_value(values[match.group(1)])


def render_command(command: Sequence[str], config: Mapping[str, Any],
                   builtins: Mapping[str, str | None] | None = None) -> list[str]:
    """The argument list of one trial: ``command`` with its placeholders filled in from ``config``.

    Args:
        command: The spec's command, as a list of arguments.
        config: The trial's config (nested, as the train function of a function trial gets it).
        builtins: The values of ``{tuner.<name>}`` (:data:`BUILTIN_PLACEHOLDERS`); None: no value.

    Returns:
        The arguments, with the arguments of inactive parameters (and their flags) left out.
    """
    builtins = builtins or {}
    out: list[str] = []
    flag_before = False  # whether out[-1] is a flag kept for the argument that follows it
    for arg in command:
        names = placeholders(arg)
        values = {}
        for name in names:
            found, value = _lookup(config, name)
            if not found and name in builtins and builtins[name] is not None:
                found, value = True, builtins[name]
            if found:
                values[name] = value
        if len(values) < len(set(names)):
            if flag_before and not arg.startswith("-"):  # a value: its flag goes with it (`--x={a}` has its own)
                out.pop()
            flag_before = False
            continue
        out.append(_TOKEN.sub(functools.partial(_fill, values), arg))
        flag_before = _is_flag(arg)
    return out


class CommandTrainable(_Model):
    """A command trial: each trial runs a program (a training script) as a process.

    The config reaches it through ``{name}`` placeholders in ``command`` (the rule is in
    :mod:`tuner.spec.command`) and as a YAML file named by ``$TUNER_CONFIG``; its metrics come
    back as lines, each line one report (one ``training_iteration``, unless the line gives it).
    Run by :mod:`tuner.run.command`.

    Attributes:
        command: The program and its arguments: a list, or one string split as a shell splits it
            (``shlex``; never run by a shell). ``python`` (or ``python3``) as the first word is the
            Python that runs tuner. With ``resources.workers: N`` it runs under ``torchrun`` with
            N processes, so the command must be ``python SCRIPT ...`` or ``python -m MODULE ...``.
        metrics: How reports come back: ``json`` (a line of stdout that is one JSON object),
            ``kv`` (Katib's ``name=value`` pairs on a line of stdout), or a file path the script
            appends such lines to (relative: inside each trial's folder; its path is in
            ``$TUNER_METRICS_FILE``). A line without the spec's metric adds its values to the
            next report that has it. ``"checkpoint": true`` in a line (or ``checkpoint=1``) marks
            ``$TUNER_CHECKPOINT_DIR`` as that report's checkpoint; a string names a file or folder
            inside it.
        cwd: The working directory of the process; relative to the spec's folder. Default: the
            spec's folder (the current folder for a spec given as a mapping).
        env: Environment variables set for the process, on top of the trial's own.
        stop_grace_s: Seconds a process has to exit after SIGTERM (a scheduler stopped the trial,
            or it timed out) before it and its children get SIGKILL.
    """

    command: list[NonBlank] = Field(min_length=1)
    metrics: NonBlank = "json"
    cwd: NonBlank | None = None
    env: dict[NonBlank, str] = Field(default_factory=dict)
    stop_grace_s: Float = Field(default=10.0, ge=0)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError as err:
                raise PydanticCustomError("tuner_spec", f"command {value!r} cannot be split into arguments as a "
                                          f"shell would: {err}; write it as a list.") from None
            if not value:
                raise PydanticCustomError("tuner_spec", "command is empty; give the program and its arguments, "
                                          "e.g. [python, train.py, --lr, '{lr}'].")
        if isinstance(value, list):
            for i, arg in enumerate(value):
                if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
                    raise _fail(str(i), f"each argument of the command is text (or a number), but got {arg!r}; "
                                "quote it.")
            return [a if isinstance(a, str) else str(a) for a in value]
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_text(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            for key, v in value.items():
                if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                    raise _fail(str(key), f"an environment variable's value is text or a number, but got {v!r}.")
            return {k: v if isinstance(v, str) else str(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check_placeholders(self):
        for i, arg in enumerate(self.command):
            for name in placeholders(arg):
                if not _NAME.match(name):
                    raise _fail(f"command.{i}", f"{{{name}}} is not a placeholder: one names a parameter, e.g. "
                                "{lr} or {optimizer.lr}; write {{ and }} for literal braces.")
                if name.startswith("tuner.") and name not in BUILTIN_PLACEHOLDERS:
                    raise _fail(f"command.{i}", f"{{{name}}} is not one of tuner's placeholders: "
                                f"{_allowed('{' + n + '}' for n in BUILTIN_PLACEHOLDERS)}.")
                if name == "tuner.metrics_file" and self.metrics in METRICS_FORMATS:
                    raise _fail(f"command.{i}", f"{{tuner.metrics_file}} has a value with `metrics: FILE` only, "
                                f"but metrics is {self.metrics!r}.")
        return self

    @property
    def metrics_file(self) -> str | None:
        """The metrics file's path as the spec gives it, or None for ``json``/``kv`` on stdout."""
        return None if self.metrics in METRICS_FORMATS else self.metrics

    @property
    def line_format(self) -> str:
        """``json`` or ``kv``: how a stdout line is read; ``file`` for a metrics file (JSON or ``kv`` per line)."""
        return self.metrics if self.metrics in METRICS_FORMATS else "file"

    def placeholder_names(self) -> list[tuple[int, str]]:
        """Every placeholder of the command that names a parameter: ``[(argument index, name), ...]``."""
        return [(i, n) for i, arg in enumerate(self.command) for n in placeholders(arg) if not n.startswith("tuner.")]

    @property
    def script(self) -> str | None:
        """The script of ``python SCRIPT ...`` as written (relative to ``cwd``); None for ``python -m MODULE``,
        ``python -c ...`` or another program."""
        words = self.command
        return words[1] if self.runs_python and len(words) > 1 and not words[1].startswith("-") else None

    @property
    def runs_python(self) -> bool:
        """Whether the first word is ``python``/``python3`` (run as tuner's own Python)."""
        return self.command[0] in PYTHON_WORDS
