"""The errors of a spec: :class:`SpecIssue` (one problem, and where it is) and :class:`SpecError`
(every problem of one spec, one ``file:line:col: field.path: message`` line each), with the small
helpers that the checks build their messages with.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from collections.abc import Iterable

from pydantic_core import PydanticCustomError

from tuner.errors import InputError


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in a spec.

    Attributes:
        path: Dotted field path, e.g. ``param_space.lr.low``; empty for the whole file.
        message: One sentence saying what is wrong and what is allowed.
        line: 1-based line in the spec file, or None for a spec given as a dict.
        col: 1-based column, or None.
        source: Where the faulty value came from when not from the spec file, e.g.
            ``--set scheduler.max_t=0``; None for the :class:`SpecError`'s own source.
    """

    path: str
    message: str
    line: int | None = None
    col: int | None = None
    source: str | None = None


class SpecError(InputError, ValueError):
    """A spec that cannot be run. ``str()`` gives one line per problem.

    Each line reads ``file:line:col: field.path: message``. Raised by :func:`load_spec`
    (and ``--set``), and wherever a spec field is checked against the train function, the
    resources, the cluster's nodes, the experiment folders (``name``) or, on resume, the
    experiment's own spec. The CLI prints it and exits with code 2 (an
    :class:`~tuner.errors.InputError`, also a ``ValueError``); nothing has been started or
    written when it is raised.

    Attributes:
        issues: The problems, in file order.
        source: The spec file, or None for a spec given as a mapping.
    """

    def __init__(self, issues: Iterable[SpecIssue], source: str | os.PathLike | None = None):
        self.issues = list(issues)
        self.source = os.fspath(source) if source is not None else None
        super().__init__(self.format())

    def format(self) -> str:
        """Return the error text: one ``file:line:col: path: message`` line per issue."""
        lines = []
        for issue in self.issues:
            where = issue.source or self.source or "<spec>"
            if issue.line is not None:
                where += f":{issue.line}:{issue.col}"
            head = f"{where}: {issue.path}: " if issue.path else f"{where}: "
            lines.append(head + issue.message)
        return "\n".join(lines)


def _fail(field: str, message: str) -> PydanticCustomError:
    """Build a validation error that points at ``field`` below the current model.

    The message is shown as given: pydantic fills in only ``{field}`` (a key of the error's
    context) and leaves other braces, such as YAML's ``{in: [2, 3]}``, alone.
    """
    return PydanticCustomError("tuner_spec", message, {"field": field})


def _closest(word: str, choices: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def _allowed(choices: Iterable[str]) -> str:
    return ", ".join(choices)
