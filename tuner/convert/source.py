"""Reading a source file for ``tuner convert``: its YAML with each key's ``line:col``
(:class:`Source`), the notes on what does not map exactly (:class:`Note`), and the one error
kind of a source that cannot be converted (:class:`ConvertError`).

The converters (:mod:`tuner.convert.wandb`, :mod:`tuner.convert.katib`) read the source's data
through a :class:`Source`, so that every error and every note names the source's key path
(``parameters.lr.distribution``) and its position in the file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable, Mapping

from tuner.errors import InputError
from tuner.spec import MAX_SPEC_BYTES, parse_yaml


class ConvertError(InputError):
    """A source that ``tuner convert`` cannot turn into a spec; nothing is written.

    The message reads ``file:line:col: key.path: what is wrong, and what is allowed``, one
    paragraph. Raised by :func:`tuner.convert.convert` for a source that is not YAML, is
    neither a W&B sweep configuration nor a Katib ``Experiment``, misses a required key, or
    uses something tuner has no equivalent for (a distribution, an algorithm, a metrics
    collector); ``tuner convert`` exits with code 2 (an :class:`~tuner.errors.InputError`).

    Args:
        message: What is wrong and what is allowed.
        source: The file (or ``<text>``).
        path: The key path in the source, dotted (list items by index); empty for the whole file.
        line: 1-based line, or None.
        col: 1-based column, or None.

    Attributes:
        source: As given.
        path: As given.
        line: As given.
        col: As given.
    """

    def __init__(self, message: str, source: str = "<text>", path: str = "", line: int | None = None,
                 col: int | None = None):
        self.source, self.path, self.line, self.col = source, path, line, col
        where = f"{source}:{line}:{col}" if line is not None else source
        super().__init__(f"{path}: {message}" if path else message, where)


@dataclass(frozen=True)
class Note:
    """Something of the source that the spec does not say exactly, and what it says instead.

    Attributes:
        where: The spec's key path the note is about, e.g. ``("search",)`` or
            ``("param_space", "lr")``; the written spec shows the note as a comment above it.
        path: The source's key path, dotted (``method``, ``parameters.lr.distribution``).
        line: 1-based line of that key in the source, or None.
        message: What was approximated or dropped, and the equivalent used.
    """

    where: tuple[str, ...]
    path: str
    line: int | None
    message: str

    def text(self) -> str:
        """The note as one line: ``key.path: message``."""
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass
class Source:
    """A parsed source file: its data, each key's position, and the notes collected on it.

    Build it with :func:`read_source`.

    Attributes:
        data: The YAML document (a mapping, for a source that can be converted).
        marks: Key path tuple -> 1-based ``(line, col)`` (:func:`tuner.spec.parse_yaml`'s marks).
        name: The file as messages name it (``<text>`` for text given directly).
        notes: The notes collected so far, in order.
        origins: A spec key path -> the source key path it was converted from (``("param_space", "lr")``
            -> ``("parameters", "lr")``), so that a converted spec that does not validate is reported
            at the source's key.
    """

    data: Any
    marks: dict
    name: str
    notes: list[Note] = field(default_factory=list)
    origins: dict[tuple, tuple] = field(default_factory=dict)

    def position(self, path: Iterable[Any]) -> tuple[int | None, int | None]:
        """``(line, col)`` of the key at ``path`` (or of its value, or the nearest key above it)."""
        path = tuple(path)
        for i in range(len(path), -1, -1):
            found = self.marks.get(("<key>",) + path[:i]) or self.marks.get(path[:i])
            if found:
                return found
        return None, None

    def error(self, path: Iterable[Any], message: str) -> ConvertError:
        """A :class:`ConvertError` at the key ``path`` (a tuple of keys and list indexes)."""
        path = tuple(path)
        line, col = self.position(path)
        return ConvertError(message, self.name, dotted(path), line, col)

    def note(self, where: tuple[str, ...], path: Iterable[Any], message: str) -> None:
        """Record a :class:`Note` about the spec's ``where`` from the source's key ``path``."""
        path = tuple(path)
        self.notes.append(Note(where, dotted(path), self.position(path)[0], message))

    def mapping(self, value: Any, path: tuple, what: str = "a mapping") -> Mapping:
        """``value`` if it is a mapping, else a :class:`ConvertError` saying it must be ``what``."""
        if not isinstance(value, Mapping):
            raise self.error(path, f"must be {what}, but got {_shown(value)}.")
        return value

    def text(self, value: Any, path: tuple) -> str:
        """``value`` if it is a non-blank string, else a :class:`ConvertError`."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(path, f"must be a non-blank string, but got {_shown(value)}.")
        return value

    def number(self, value: Any, path: tuple, *, integer: bool = False, parse: bool = False) -> float | int:
        """``value`` as a finite number (an integer where ``integer``), else a :class:`ConvertError`.

        Args:
            value: The source's value.
            path: Its key path.
            integer: Whether it must be a whole number.
            parse: Whether a string holding a number is taken (Katib writes numbers as strings).
        """
        if parse and isinstance(value, str):
            try:
                value = int(value.strip()) if _is_int_text(value) else float(value.strip())
            except ValueError:
                raise self.error(path, f"must be a number, but got {value!r}.") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(path, f"must be a {'whole ' if integer else ''}number, but got {_shown(value)}.")
        if integer:
            if value != int(value):
                raise self.error(path, f"must be a whole number, but got {value!r}.")
            return int(value)
        return value

    def integer(self, value: Any, path: tuple, *, parse: bool = False) -> int:
        """``value`` as a whole number (see :meth:`number`), else a :class:`ConvertError`."""
        return int(self.number(value, path, integer=True, parse=parse))

    def required(self, mapping: Mapping, path: tuple, key: str, what: str) -> Any:
        """``mapping[key]``, or a :class:`ConvertError` naming the missing key and what it holds."""
        if key not in mapping or mapping[key] is None:
            raise self.error((*path, key), f"is missing; it is required ({what}).")
        return mapping[key]

    def choice(self, value: Any, path: tuple, allowed: Iterable[str], what: str) -> str:
        """``value`` if it is one of ``allowed``, else a :class:`ConvertError` listing them."""
        allowed = list(allowed)
        if value not in allowed:
            raise self.error(path, f"{what} {_shown(value)} is not one tuner can convert; allowed: "
                             f"{', '.join(allowed)}.")
        return value


def dotted(path: Iterable[Any]) -> str:
    """A key path as text: ``("parameters", "lr", "min")`` -> ``parameters.lr.min``."""
    return ".".join(str(p) for p in path)


def _is_int_text(text: str) -> bool:
    body = text.strip()
    return body.lstrip("+-").isdigit()


def _shown(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def read_source(path_or_text: str | os.PathLike, name: str | None = None) -> Source:
    """Parse a source file (or YAML text) into a :class:`Source`.

    Args:
        path_or_text: A path of an existing file, or the YAML text itself (text holding a newline,
            or any string that names no file).
        name: How messages name the source; default the path, or ``<text>``.

    Returns:
        The source, whose ``data`` is a mapping.

    Raises:
        ConvertError: The file cannot be read, is larger than :data:`tuner.spec.MAX_SPEC_BYTES`,
            or its document is not a mapping.
        tuner.spec.SpecError: Its YAML is invalid (``file:line:col`` of the syntax error),
            holds a duplicate key or a tag other than plain YAML's; an input error too (exit 2).
    """
    text: str
    if isinstance(path_or_text, os.PathLike) or ("\n" not in path_or_text and os.path.exists(path_or_text)):
        file = os.fspath(path_or_text)
        name = name or file
        try:
            if os.path.getsize(file) > MAX_SPEC_BYTES:
                raise ConvertError(f"the file is larger than {MAX_SPEC_BYTES:,} bytes; a sweep or experiment "
                                   "file is much smaller.", name)
            with open(file, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as err:
            raise ConvertError(f"cannot read the file: {err}.", name) from None
    elif "\n" not in path_or_text and path_or_text.strip().lower().endswith((".yaml", ".yml", ".json")):
        raise ConvertError("file not found; give the path of a W&B sweep configuration or a Katib Experiment.",
                           name or path_or_text)
    else:
        text, name = str(path_or_text), name or "<text>"
    data, marks = parse_yaml(text, name)
    if not isinstance(data, Mapping):
        raise ConvertError(f"the file holds {_shown(data)}, not a mapping: expected a W&B sweep configuration "
                           "(`method:` and `parameters:`) or a Katib Experiment (`apiVersion: kubeflow.org/v1beta1`, "
                           "`kind: Experiment`).", name, "", 1, 1)
    return Source(data, marks, name)


def clean_float(value: float) -> float:
    """A computed bound without float noise: 12 significant digits (``exp(log(1e-4))`` -> ``0.0001``)."""
    return float(f"{value:.12g}")
