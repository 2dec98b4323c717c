"""Loading a spec: :func:`load_spec` reads a YAML file (or takes a mapping or a Spec), sets the
``--set`` items (:func:`parse_set`, :class:`Override`) and keyword overrides, bounds its nesting
and validates it into a :class:`~tuner.spec.model.Spec`, every problem found becoming one
:class:`~tuner.spec.errors.SpecError`. A file holds at most :data:`MAX_SPEC_BYTES`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin
from collections.abc import Iterable, Mapping

import yaml
from pydantic import BaseModel, ValidationError

from tuner.spec.errors import SpecError, SpecIssue, _allowed, _closest
from tuner.spec.messages import _issue_from_pydantic
from tuner.spec.model import Spec, _origin_of
from tuner.spec.yaml_positions import (MAX_NESTING, _TOO_DEEP, _dotted, _line_col, _load, _reader_message,
                                       _syntax_message, _YAMLIssue, parse_yaml)


MAX_SPEC_BYTES = 1 << 20
"""The largest spec file read, in bytes (1 MiB): PyYAML reads about 0.3 MB a second."""


def _validate(data: Any, marks: dict, source: str | None, origins: Mapping[tuple, str] | None = None,
              require_trainable: bool = True) -> Spec:
    if data is None:
        raise SpecError([SpecIssue("", "the spec is empty; it must be a mapping with at least `trainable:`.",
                                   *((1, 1) if source else (None, None)))], source)
    if not isinstance(data, Mapping):
        pos = marks.get(()) or (None, None)
        raise SpecError([SpecIssue("", f"the spec must be a mapping (key: value lines), but got a "
                                   f"{type(data).__name__}.", *pos)], source)
    try:
        spec = Spec.model_validate(data, context={"require_trainable": require_trainable})
    except ValidationError as exc:
        issues = [_issue_from_pydantic(e, data, marks, origins) for e in exc.errors()]
        issues.sort(key=lambda i: (i.source is not None, i.line or 0, i.col or 0))
        raise SpecError(issues, source) from None
    spec._source = source
    spec._marks = {k: v for k, v in marks.items() if k[:1] != ("<key>",)}
    spec._origins = dict(origins or {})
    return spec


@dataclass(frozen=True)
class Override:
    """One spec value given outside the spec file: a ``--set KEY=VALUE`` or a command-line option.

    Attributes:
        path: The field path, split at its dots: ``("scheduler", "max_t")``.
        value: The value (a ``--set`` VALUE read as YAML).
        origin: What error messages name as the value's source, e.g.
            ``--set scheduler.max_t=5`` or ``--num-samples 4``.
    """

    path: tuple[str, ...]
    value: Any
    origin: str


def parse_set(item: str) -> Override:
    """Read one ``--set KEY=VALUE``: KEY a dotted field path, VALUE read as YAML.

    Args:
        item: The ``KEY=VALUE`` text, e.g. ``scheduler.max_t=5`` or
            ``param_space.lr={type: loguniform, low: 1e-4, high: 1e-2}``; an empty VALUE
            is the empty string.

    Returns:
        The :class:`Override`, whose origin is ``--set KEY=VALUE``.

    Raises:
        SpecError: Naming the ``--set`` item, for one without ``=``, a KEY with an empty
            part, or a VALUE that is not valid YAML (or past :func:`parse_yaml`'s bounds).
    """
    key, sep, raw = item.partition("=")
    parts = tuple(key.strip().split("."))
    if parts == ("storage",):  # a URI's query and user info (endpoints, keys) stay out of messages
        from tuner.experiment.storage import display

        origin = f"--set {key}={display(raw.strip())}"
    else:
        origin = f"--set {item}"
    usage = "--set takes KEY=VALUE with a dotted KEY such as scheduler.max_t=5"
    if not sep:
        raise SpecError([SpecIssue("", f"{usage}, but this one has no '='.")], origin)
    if not all(parts):
        raise SpecError([SpecIssue("", f"{usage}, but its KEY {key!r} has an empty part.")], origin)
    try:
        data, _ = _load(f"v: {raw}" if raw.strip() else "v: ''")
    except _YAMLIssue as exc:
        problem = exc.issue.message
    except yaml.MarkedYAMLError as exc:
        for mark in {id(m): m for m in (exc.context_mark, exc.problem_mark) if m is not None}.values():
            if mark.line == 0:
                mark.column -= len("v: ")  # positions within the VALUE
        problem = "YAML syntax error: " + _syntax_message(exc, here=False)[0]
    except yaml.YAMLError as exc:
        problem = f"YAML syntax error: {_reader_message(exc)}."
    else:
        if isinstance(data, dict) and list(data) == ["v"]:
            return Override(parts, data["v"], origin)
        problem = "it holds more than one value; quote it, or give a flow mapping {key: value, ...}."
    raise SpecError([SpecIssue(".".join(parts), f"the value cannot be read as YAML: {problem}")], origin)


def _section_models(annotation: Any) -> list[type[BaseModel]]:
    """The spec sections a field's annotation takes; ``[]`` for a free-form mapping or a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (dict, list):
        return []
    return [model for arg in get_args(annotation) for model in _section_models(arg)]


def _override_path_issue(data: Mapping, parts: tuple) -> SpecIssue | None:
    """Why ``parts`` is no path to set in ``data``, or None.

    A path may end in a new key, and may pass through a spec section or field that the
    spec leaves out (``scheduler.max_t`` on a spec without ``scheduler:``), but may not
    create a mapping on the way under a mapping the spec gives: ``param_space.lrr.low``
    on a spec with ``param_space.lr`` is a typo, not a new group.
    """
    node: Any = data
    models: list[type[BaseModel]] = [Spec]
    given = True  # whether node is a mapping of the spec (rather than one the path creates)
    for i, part in enumerate(parts[:-1]):
        here = ".".join(parts[: i + 1])
        known = {name for model in models for name in model.model_fields}
        child = node.get(part) if isinstance(node, Mapping) else None
        if child is not None and not isinstance(child, Mapping):
            return SpecIssue(here, f"{here} is {child!r} ({type(child).__name__}), not a mapping, so it has no key "
                             f"'{parts[i + 1]}'; set {here} itself instead (--set {here}={{...}}).")
        if given and part not in known and not (isinstance(node, Mapping) and part in node):
            where = ".".join(parts[:i]) or "the spec"
            keys = sorted({str(k) for k in node} | known)
            hint = _closest(part, keys)
            guess = f"; did you mean '{hint}'?" if hint else "."
            return SpecIssue(here, f"{where} has no key '{part}'{guess} A --set path may end in a new key, but not "
                             f"create a mapping on the way; the keys in {where}: {_allowed(keys) or '(none)'}.")
        models = [sub for model in models if part in model.model_fields
                  for sub in _section_models(model.model_fields[part].annotation)]
        node, given = child, isinstance(child, Mapping)
    return None


def _apply_override(data: Mapping, override: Override, marks: dict, origins: dict) -> dict:
    """``data`` with ``override`` set (a mapping value is merged into a mapping there).

    ``marks`` lose the positions below its path, and ``origins`` gain the path (and the
    mappings it creates on the way), so that an error in what it set, or in a mapping it
    merged into, names the option instead of a line of the file.

    Raises:
        SpecError: If the path cannot be set (see :func:`_override_path_issue`).
    """
    parts, origin = override.path, override.origin
    issue = _override_path_issue(data, parts)
    if issue is not None:
        raise SpecError([issue], origin)
    out = dict(data)
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, Mapping):
            child = dict(child)
        else:  # absent or null: the path creates it
            child = {}
            _record_origin(parts[: i + 1], origin, marks, origins)
        node[part] = child
        node = child
    old = node.get(parts[-1])
    merge = isinstance(override.value, Mapping) and isinstance(old, Mapping)
    node[parts[-1]] = _deep_merge(old, override.value) if merge else override.value
    _record_origin(parts, origin, marks, origins)
    return out


def _record_origin(path: tuple, origin: str, marks: dict, origins: dict) -> None:
    """The value at ``path`` (and all below it) now comes from ``origin``, not the file."""
    n = len(path)
    for table in (marks, origins):
        for key in [k for k in table if k[:n] == path or (k[:1] == ("<key>",) and k[1:n + 1] == path)]:
            del table[key]
    origins[path] = origin


def _deep_merge(base: Mapping, extra: Mapping) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_spec(spec: str | os.PathLike | Mapping | Spec, *, sets: Iterable[Override] = (),
              require_trainable: bool = True, **overrides: Any) -> Spec:
    """Load and validate a spec from a YAML file, a mapping or a Spec.

    Args:
        spec: Path of a YAML file, a mapping with the same keys, or a Spec.
        sets: Values set by dotted path, in order (``--set`` items from
            :func:`parse_set`, and command-line options); an error in one names it
            instead of a line of the file.
        require_trainable: Whether the spec must name its ``trainable``; False when the
            caller passes the trainable itself (``tune_model(spec, trainable=fn)``).
        **overrides: Top-level keys that replace the spec's (mappings are merged
            key by key), e.g. ``num_samples=4`` or ``scheduler={"max_t": 2}``.
            ``None`` values are ignored.

    Returns:
        The validated, frozen Spec.

    Raises:
        SpecError: For a missing or unreadable file, invalid YAML, a ``sets`` path that
            goes through a key the spec does not have, or any field that fails
            validation. Nothing has been started or written.
    """
    overrides = {k: v for k, v in overrides.items() if v is not None}
    sets = tuple(sets)
    source: str | None = None
    marks: dict = {}
    origins: dict = {}
    if isinstance(spec, Spec):
        if not overrides and not sets:
            return spec
        require_trainable = False  # validated already, with or without one
        data: Any = spec.model_dump(exclude_unset=True)
        source, marks, origins = spec._source, dict(spec._marks), dict(spec._origins)
    elif isinstance(spec, Mapping):
        data = dict(spec)
    else:
        source = os.fspath(spec)
        path = Path(source)
        if not path.is_file():
            why = "is a folder, not a file" if path.is_dir() else "not found"
            raise SpecError([SpecIssue("", f"spec file {why}; give the path of a YAML spec, "
                                       "e.g. search_spaces/mnist_asha.yaml.")], source)
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError([SpecIssue("", f"the file holds {size:,} bytes; a spec may hold at most "
                                       f"{MAX_SPEC_BYTES:,} (it is a short YAML text file).")], source)
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            head = raw[: exc.start].decode("utf-8", "replace")
            raise SpecError([SpecIssue("", f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                                       "a spec is a YAML text file.", *_line_col(head, len(head)))], source) from None
        if "\x00" in text:
            raise SpecError([SpecIssue("", "the file holds NUL bytes (binary data); a spec is a YAML text file.",
                                       *_line_col(text, text.index("\x00")))], source)
        data, marks = parse_yaml(text, source)
    if isinstance(data, Mapping):
        for override in sets:
            data = _apply_override(data, override, marks, origins)
        if overrides:
            data = _deep_merge(data, overrides)
    _check_nesting(data, source, origins)
    return _validate(data, marks, source, origins, require_trainable)


def _check_nesting(data: Any, source: str | None, origins: Mapping[tuple, str]) -> None:
    """Refuse data that nests lists and mappings deeper than :data:`MAX_NESTING`.

    YAML is bounded as it is read (:func:`parse_yaml`); this bounds a spec given as a
    mapping, and ``**overrides``, alike (a mapping that holds itself nests forever).
    Shared values are walked once per depth, not once per reference.

    Raises:
        SpecError: At the first list or mapping past the bound (naming the ``--set``
            that put it there, if one did).
    """
    deepest: dict[int, int] = {}
    stack: list[tuple[Any, int, tuple]] = [(data, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if not isinstance(value, (Mapping, list, tuple)) or deepest.get(id(value), 0) >= depth:
            continue
        if depth > MAX_NESTING:
            raise SpecError([SpecIssue(_dotted(path), f"the spec would {_TOO_DEEP}",
                                       source=_origin_of(path, origins))], source)
        deepest[id(value)] = depth
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        stack.extend((sub, depth + 1, path + (key,)) for key, sub in items)
