"""Writing a converted spec as YAML text, with each :class:`~tuner.convert.source.Note` as a
``# ...`` comment above the key it is about.

The layout is a spec's usual one: top-level keys in block style, ``trainable`` and
``param_space`` (and its groups) one key a line, every other section and each distribution
in flow style on one line (``lr: {type: loguniform, low: 0.0001, high: 0.1}``). The text reads
back (``yaml.safe_load``) as the same mapping.
"""

from __future__ import annotations

import textwrap
from typing import Any
from collections.abc import Iterable, Mapping

import yaml

from tuner.convert.source import Note

#: The width comments are wrapped at.
COMMENT_WIDTH = 116


def _flow(value: Any) -> str:
    """One value in YAML's flow style, on one line."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30, allow_unicode=True)
    text = text.strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    elif text.endswith("..."):
        text = text[: -len("...")].rstrip()
    return text


def _key(key: str) -> str:
    """A mapping key as YAML writes it (quoted where a plain key would not read back)."""
    text = yaml.safe_dump({key: 0}, default_flow_style=False, width=1 << 30, allow_unicode=True).strip()
    return text[: -len(": 0")]


def _is_block(path: tuple[str, ...], value: Any) -> bool:
    """Whether the mapping at ``path`` is written one key a line."""
    if not isinstance(value, Mapping) or not value:
        return False
    if path in (("trainable",), ("param_space",)):
        return True
    return len(path) >= 2 and path[0] == "param_space" and "type" not in value


def _line_paths(spec: Mapping, path: tuple[str, ...] = ()) -> Iterable[tuple[str, ...]]:
    """Every key path written on a line of its own."""
    for key, value in spec.items():
        here = (*path, key)
        yield here
        if _is_block(here, value):
            yield from _line_paths(value, here)


def _comments(notes: list[Note], indent: int) -> list[str]:
    pad = " " * indent
    lines = []
    for note in notes:
        lines.extend(textwrap.wrap(note.text(), COMMENT_WIDTH - indent, initial_indent=pad + "# ",
                                   subsequent_indent=pad + "#   ", break_long_words=False, break_on_hyphens=False))
    return lines


def render(spec: Mapping, notes: Iterable[Note], header: Iterable[str] = ()) -> str:
    """The spec as YAML text: ``header`` comment lines, then each key with its notes above it.

    Args:
        spec: The converted spec, a mapping in the order its keys are written.
        notes: The notes; each goes above the nearest key on its own line that is ``note.where``
            or above it (a note about ``trainable.command`` above ``command:``).
        header: Lines written as comments at the top.

    Returns:
        The YAML text, ending with a newline.
    """
    lines = _comments([Note((), "", None, line) for line in header], 0) if header else []
    placed = set(_line_paths(spec))
    by_path: dict[tuple[str, ...], list[Note]] = {}
    for note in notes:
        where = note.where
        while where and where not in placed:
            where = where[:-1]
        by_path.setdefault(where, []).append(note)
    lines += _comments(by_path.pop((), []), 0)
    _write(spec, (), 0, by_path, lines)
    return "\n".join(lines) + "\n"


def _write(mapping: Mapping, path: tuple[str, ...], indent: int, notes: dict, lines: list[str]) -> None:
    pad = " " * indent
    for key, value in mapping.items():
        here = (*path, key)
        lines += _comments(notes.get(here, []), indent)
        if _is_block(here, value):
            lines.append(f"{pad}{_key(key)}:")
            _write(value, here, indent + 2, notes, lines)
        else:
            lines.append(f"{pad}{_key(key)}: {_flow(value)}")
