"""The translation of pydantic's validation errors into :class:`~tuner.spec.errors.SpecIssue` s:
the field path as the spec writes it, the value's ``line:col`` in the file (or the ``--set``
that gave it), and a message in the spec's words (the closest key to a typo, the allowed
values, why a quoted number or a YAML boolean is refused).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from tuner.spec.errors import SpecIssue, _allowed, _closest
from tuner.spec.fields import _NON_BLANK
from tuner.spec.model import _origin_of
from tuner.spec.sections import SCHEDULER_TYPES, SEARCH_ALGORITHMS


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _issue_from_pydantic(err: Mapping[str, Any], data: Any, marks: dict,
                         origins: Mapping[tuple, str] | None = None) -> SpecIssue:
    """Convert one pydantic error into a SpecIssue with a field path and a position.

    The position is the value's ``line:col`` in the file, or, for a value given by a
    ``--set`` or a command-line option, that option (``origins``: path -> option).
    """
    path: list = []
    node = data
    for part in err["loc"]:
        if isinstance(node, Mapping) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        # else: a union tag or validator name that pydantic puts in the location
    ctx = err.get("ctx") or {}
    etype = err["type"]
    extra = ctx.get("field")
    loc = list(err["loc"])
    # A mapping's key is wrong, not its value (pydantic's location ends "..., key, '[key]'").
    bad_key = "[key]" in loc and loc.index("[key]") > 0 and path[-1:] == [loc[loc.index("[key]") - 1]]
    key_mark = bad_key
    if extra:
        path.extend(int(p) if p.isdigit() else p for p in extra.split("."))  # a list index is a number
        key_mark = bool(ctx.get("key"))
    msg = err["msg"]
    value = err.get("input")
    if etype == "missing":
        missing = err["loc"][-1]
        path.append(missing)
        msg = f"required key '{missing}' is missing."
    elif etype in ("union_tag_invalid", "union_tag_not_found"):
        disc = ctx.get("discriminator", "").strip("'")
        tags = [t.strip().strip("'") for t in ctx.get("expected_tags", "").split(",") if t.strip()]
        kind = {"algorithm": "search algorithm", "type": "scheduler type" if path[:1] == ["scheduler"]
                else "distribution type"}.get(disc, disc)
        if etype == "union_tag_not_found":
            path.append(disc)
            tags = tags or list({"algorithm": SEARCH_ALGORITHMS, "type": SCHEDULER_TYPES}.get(disc, ()))
            msg = f"missing '{disc}'; allowed: {_allowed(tags)}."
        else:
            tag = ctx.get("tag")
            path.append(disc)
            hint = _closest(tag, tags)
            guess = f"; did you mean '{hint}'?" if hint else "."
            msg = f"unknown {kind} '{tag}'{guess} Allowed: {_allowed(tags)}."
    elif etype == "literal_error":
        msg = f"must be one of {ctx.get('expected')}, but got {value!r}."
    elif etype.startswith("tuner_"):
        pass
    elif etype == "string_pattern_mismatch" and ctx.get("pattern") == _NON_BLANK:
        msg = f"must not be empty or blank, but got {value!r}."
    elif etype in ("model_type", "model_attributes_type", "dict_type"):
        msg = f"must be a mapping (key: value), but got {type(value).__name__} {value!r}."
    else:
        msg = msg.replace("Input should be", "must be").split(", got ")[0].split(", unable to")[0]
        if not isinstance(value, (Mapping, list)) and not (etype == "model_type"):
            msg += f", but got {value!r} ({type(value).__name__})."
        else:
            msg += f", but got a {type(value).__name__}." if etype.endswith("_type") else "."
        if isinstance(value, bool) and etype in ("int_type", "float_type"):
            msg = msg[:-1] + "; YAML reads yes, no, on, off, true and false as booleans, so write a number."
        elif isinstance(value, str) and etype in ("int_type", "float_type") and _looks_numeric(value):
            msg = msg[:-1] + ("; write the number unquoted (PyYAML's own safe_load also reads 1e-4 as a string: "
                              "give tuner the file, or tuner.spec.parse_yaml's result).")
    if bad_key:
        msg = f"a key {msg}"
    dotted = ".".join(str(p) for p in (path[:-1] if bad_key else path))
    key = tuple(path)
    origin = _origin_of(key, origins or {})
    if origin is not None:
        return SpecIssue(dotted, msg, source=origin)
    pos = marks.get(("<key>",) + key) if key_mark else None
    while pos is None and key:
        pos = marks.get(key)
        key = key[:-1]
    pos = pos or marks.get(())
    return SpecIssue(dotted, msg, *(pos or (None, None)))
