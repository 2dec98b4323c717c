"""Reading a spec's YAML into plain data and the ``line:col`` of every value in it, so that an
error can point at the value; a document that PyYAML refuses, or that is past the bounds
below, becomes a :class:`~tuner.spec.errors.SpecError` that says where and why.

Reading is YAML 1.1 ``safe_load`` semantics with two fixes that users of PyYAML trip
over: ``1e-4`` is a float (YAML 1.2 reading), and a key given twice is an error instead
of a silent overwrite. What a hostile document can cost is bounded while it is read:
aliases expand to at most :data:`MAX_YAML_NODES` nodes, lists and mappings nest at most
:data:`MAX_NESTING` deep.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Iterable

import yaml

from tuner.spec.errors import SpecError, SpecIssue


MAX_YAML_NODES = 100_000
"""The most YAML nodes (keys, values, lists, mappings) a spec may hold, each alias counted in full."""
MAX_NESTING = 32
"""The deepest a spec may nest lists and mappings; the top-level mapping is level 1."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TOO_DEEP = f"nest lists and mappings more than {MAX_NESTING} levels deep here; a spec may nest at most {MAX_NESTING}."


class _YAMLIssue(Exception):
    """A problem found while reading YAML, before the caller knows the source to name."""

    def __init__(self, issue: SpecIssue):
        super().__init__(issue.message)
        self.issue = issue

    def __reduce__(self):
        return type(self), (self.issue,)  # its args hold the message, not the issue its constructor takes


def _at(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _dotted(path: Iterable) -> str:
    return ".".join(str(p) for p in path if p is not None)


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads YAML 1.2 floats such as ``1e-4``, with aliases and nesting bounded.

    While it composes the node graph, it keeps every node's size with each alias expanded
    and its height (levels of lists and mappings), memoised per node. So a document of
    aliases of aliases (a "billion laughs") is refused at the alias that takes it past
    :data:`MAX_YAML_NODES`, nesting past :data:`MAX_NESTING` where it happens (PyYAML's
    composer recurses once per level), and an alias inside its own anchor as a cycle: all
    before anything walks, constructs or validates the expanded graph.

    Raises:
        _YAMLIssue: From ``get_single_node``, for any of those.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self._expanded: dict[int, tuple[int, int]] = {}  # id(node) -> (size, height); nodes outlive the loader's use
        self._total = 0  # nodes composed so far, each alias counted in full
        self._depth = 0  # lists and mappings open around the node being composed
        self._path: list = []  # the keys and indexes down to it; None for a mapping's key

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if isinstance(parent, yaml.MappingNode):
            self._path.append(index.value if isinstance(index, yaml.ScalarNode) else None)
        elif isinstance(parent, yaml.SequenceNode):
            self._path.append(index)
        try:
            if self.check_event(yaml.AliasEvent):
                return self._compose_alias(parent, index)
            return self._compose_new(parent, index)
        finally:
            if parent is not None:
                self._path.pop()

    def _compose_new(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection and self._depth >= MAX_NESTING:
            self._refuse(f"the spec would {_TOO_DEEP}", event.start_mark)
        self._count(1, event.start_mark, None)
        self._depth += collection
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        sizes = [self._expanded[id(child)] for child in children]
        self._expanded[id(node)] = (1 + sum(size for size, _ in sizes),
                                    collection + max((height for _, height in sizes), default=0))
        return node

    def _compose_alias(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        node = super().compose_node(parent, index)  # the anchored node; refuses an undefined alias
        expanded = self._expanded.get(id(node))
        if expanded is None:  # its anchor is still being composed: the alias lies inside it
            kind = getattr(node, "id", "node")  # "mapping" or "sequence"
            self._refuse(f"the alias *{event.anchor} lies inside the {kind} it names (a cycle); a spec cannot "
                         "hold one.", event.start_mark)
        size, height = expanded
        if self._depth + height > MAX_NESTING:
            self._refuse(f"the alias *{event.anchor} would {_TOO_DEEP}", event.start_mark)
        self._count(size, event.start_mark, event.anchor)
        return node

    def _count(self, size: int, mark: yaml.Mark, alias: str | None) -> None:
        self._total += size
        if self._total <= MAX_YAML_NODES:
            return
        if alias is None:
            self._refuse(f"the spec holds more than {MAX_YAML_NODES:,} YAML nodes (keys, values, lists and "
                         f"mappings) by here; a spec may hold at most {MAX_YAML_NODES:,}.", mark)
        self._refuse(f"the alias *{alias} expands the spec to more than {MAX_YAML_NODES:,} YAML nodes (keys, "
                     f"values, lists and mappings, each alias counted in full); a spec may hold at most "
                     f"{MAX_YAML_NODES:,}, so use fewer or smaller aliases.", mark)

    def _refuse(self, message: str, mark: yaml.Mark) -> None:
        raise _YAMLIssue(SpecIssue(_dotted(self._path), message, mark.line + 1, mark.column + 1))


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _collect_marks(node: yaml.Node, path: tuple, marks: dict) -> None:
    """Record ``path -> (line, col)`` for every node, refusing duplicate keys.

    The keys a merge (``<<: *base``) brings into a mapping are recorded where the merged
    mapping gives them, unless the mapping sets them itself (as PyYAML merges).
    """
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        merged, entries = _split_merges(node)
        for key, key_node, value_node in entries:
            if key in seen:
                first = seen[key].start_mark
                raise _YAMLIssue(SpecIssue(
                    _dotted(path + (key,)), f"duplicate key '{key}' (first given on line {first.line + 1}); "
                    "a key may appear once in a mapping.",
                    key_node.start_mark.line + 1, key_node.start_mark.column + 1))
            seen[key] = key_node
            _collect_entry(key, key_node, value_node, path, marks)
        _collect_merged(merged, path, seen, marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect_marks(item, path + (i,), marks)


def _split_merges(node: yaml.MappingNode) -> tuple[list[yaml.Node], list[tuple[Any, yaml.Node, yaml.Node]]]:
    """A mapping's ``<<`` values, and its other entries as ``(key, key node, value node)``, in order."""
    merged, entries = [], []
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            merged.append(value_node)
        else:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            entries.append((key, key_node, value_node))
    return merged, entries


def _collect_entry(key: Any, key_node: yaml.Node, value_node: yaml.Node, path: tuple, marks: dict) -> None:
    marks[("<key>",) + path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
    _collect_marks(value_node, path + (key,), marks)


def _collect_merged(values: list[yaml.Node], path: tuple, seen: dict, marks: dict) -> None:
    """Marks of the keys merged into the mapping at ``path`` from ``<<`` values (a mapping or a list of them)."""
    for value_node in values:
        for source in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
            if not isinstance(source, yaml.MappingNode):
                continue  # the constructor refuses it ("expected a mapping for merging")
            inner, entries = _split_merges(source)
            for key, key_node, sub in entries:
                if key not in seen:
                    seen[key] = key_node
                    _collect_entry(key, key_node, sub, path, marks)
            _collect_merged(inner, path, seen, marks)


_CONSTRUCTS = {"simple key": "key", "quoted scalar": "quoted string", "double-quoted scalar": "double-quoted string",
               "block collection": "block sequence"}
_NOT_CLOSED = ("expected ',' or", "found unexpected end of stream", "found unexpected document separator")


def _syntax_message(exc: yaml.MarkedYAMLError, here: bool = True) -> tuple[str, yaml.Mark | None]:
    """One sentence for a PyYAML error, naming where the broken construct began and where
    the parser gave up, and the mark to report it at.

    Args:
        exc: The error (``context``/``context_mark``: the construct being read;
            ``problem``/``problem_mark``: what was wrong, where).
        here: Whether the returned mark is shown before the sentence (``file:line:col:``),
            so the sentence may say "here" for it.

    Returns:
        ``(sentence, mark)``; the mark is None when PyYAML gives none.
    """
    problem = (exc.problem or "").strip().replace(", but got ", ", but found ")
    context = (exc.context or "").strip()
    pmark, cmark = exc.problem_mark, exc.context_mark
    if "could not determine a constructor" in problem:
        tag = problem.split("tag", 1)[-1].strip().replace("tag:yaml.org,2002:", "!!")
        return f"tag {tag} is not allowed; a spec holds only plain YAML values (safe_load).", pmark
    if problem == "found character '\\t' that cannot start any token":
        return "found a tab, which YAML does not allow for indentation; indent with spaces.", pmark
    alias = re.match(r"found undefined alias '(.+)'$", problem)
    if alias:
        return f"the alias *{alias.group(1)} names no anchor; define &{alias.group(1)} before it.", pmark
    two_places = cmark is not None and pmark is not None and (cmark.line, cmark.column) != (pmark.line, pmark.column)
    if two_places and context.startswith("while ") and len(context.split(" ", 2)) == 3:
        what = context.split(" ", 2)[2]
        what = what.split(" ", 1)[1] if what.startswith(("a ", "an ")) else what
        what = _CONSTRUCTS.get(what, what)
        start = f"here ({_at(cmark)})" if here else f"at {_at(cmark)}"
        if problem.startswith(_NOT_CLOSED):
            return f"the {what} that starts {start} is not closed: {problem} at {_at(pmark)}.", cmark
        if problem == "could not find expected ':'":
            return f"the {what} that starts {start} has no ':' after it (the parser looked for one up to " \
                   f"{_at(pmark)}).", cmark
        return f"{problem} {'here' if here else 'at ' + _at(pmark)}, in the {what} that starts at {_at(cmark)}.", pmark
    if two_places and context == "expected a single document in the stream":
        return (f"a spec is a single YAML document, but a second one starts {'here' if here else 'at ' + _at(pmark)} "
                f"(the first starts at {_at(cmark)}); remove the '---' or '...' line.", pmark)
    anchor = re.match(r"found duplicate anchor '(.+)'; first occurrence$", context)
    if two_places and anchor:
        return (f"the anchor &{anchor.group(1)} is defined twice, {'here' if here else 'at ' + _at(pmark)} and at "
                f"{_at(cmark)}; give each anchor its own name.", pmark)
    text = f"{context}, {problem}" if context and problem else (problem or context or "invalid YAML")
    return f"{text}.", pmark or cmark


def _load(text: str) -> tuple[Any, dict]:
    """Compose, mark and construct one YAML document (see :func:`parse_yaml`).

    Raises:
        _YAMLIssue: A duplicate key, or a document past the alias and nesting bounds.
        yaml.YAMLError: Whatever PyYAML refuses.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        marks: dict = {}
        _collect_marks(node, (), marks)
        return loader.construct_document(node), marks
    finally:
        loader.dispose()


def parse_yaml(text: str, source: str | None = None) -> tuple[Any, dict]:
    """Parse YAML text with safe-load semantics, ``1e-4`` floats and no duplicate keys.

    Anchors, aliases and merge keys (``<<: *base``) work as in PyYAML, within bounds: a
    document that holds more than :data:`MAX_YAML_NODES` nodes once its aliases are
    expanded, or nests lists and mappings deeper than :data:`MAX_NESTING`, is refused
    while it is read, at the alias or node that crosses the bound.

    Args:
        text: The YAML document.
        source: File name used in error messages.

    Returns:
        ``(data, marks)``: the plain Python data and a map of path tuples to 1-based
        ``(line, col)``.

    Raises:
        SpecError: On a syntax error (naming where the broken construct began and where
            the parser gave up), a tag other than the standard ones (for example
            ``!!python/object``), a duplicate key, more than one document, an alias
            inside its own anchor, or a document past the bounds above.
    """
    try:
        return _load(text)
    except _YAMLIssue as exc:
        raise SpecError([exc.issue], source) from None
    except yaml.MarkedYAMLError as exc:
        message, mark = _syntax_message(exc)
        line_col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise SpecError([SpecIssue("", f"YAML syntax error: {message}", *line_col)], source) from None
    except yaml.YAMLError as exc:  # reader errors (control characters) carry an offset
        line_col = _line_col(text, getattr(exc, "position", None))
        raise SpecError([SpecIssue("", f"YAML syntax error: {_reader_message(exc)}.", *line_col)], source) from None


def _reader_message(exc: yaml.YAMLError) -> str:
    """What PyYAML's reader refused (a character YAML does not allow), without a trailing period."""
    char = getattr(exc, "character", None)
    char = chr(char) if isinstance(char, int) else char
    shown = f" {char!r}" if isinstance(char, str) else ""
    return f"the character{shown} is not allowed in YAML" if getattr(exc, "position", None) is not None else str(exc)


def _line_col(text: str, offset: int | None) -> tuple[int | None, int | None]:
    """1-based line and column of a character offset in ``text``."""
    if offset is None:
        return None, None
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1
