"""The structure of a conditional ``param_space``: which parameter exists when.

A parameter with ``when: {parent: value}`` (or ``{parent: {in: [v1, v2]}}``; several keys are
AND-ed) is *active* only while each named parent is active and takes one of those values. A
*sub-space choice* (``type: choice`` whose values are mappings with a ``name``) picks one
branch, and each branch brings its own parameters. An inactive parameter is absent from the
trial's config: not None, not a default.

:func:`expand` turns a ``param_space`` into a :class:`Space`: one flat list of
:class:`Param` (a sub-space choice ``model`` becomes the choice ``model/name`` of its branch
names, and a branch's parameters ``model/<key>`` get the condition ``model/name == branch``),
each with its :class:`Condition` s, checked (every refusal raises with the field's path, so
:func:`tuner.spec.load_spec` reports ``file:line:col``). :meth:`Space.sample` draws a
config parents first; :meth:`Space.enumerate` lists every valid combination of a grid, each
once. No Ray here: the draws and the grid values come from the caller.

The model is ConfigSpace's conditions (``EqualsCondition``, ``InCondition``,
``AndConjunction``) and Optuna's define-by-run spaces, written as data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.spec.distributions import Choice, SubspaceChoice, BaseDistribution, param_label
from tuner.spec.errors import _allowed, _closest, _fail

if TYPE_CHECKING:
    from tuner.spec.model import Spec

__all__ = ["Condition", "Param", "Space", "expand", "PARENT_TYPES", "BRANCH_KEY", "param_distributions",
           "sampled_params"]

#: Joins the parts of a parameter's name (as :data:`tuner.core.params.NAME_SEP`, which imports it).
SEP = "/"
#: The key that names a branch of a sub-space choice, and the config key that holds the branch taken.
BRANCH_KEY = "name"
#: Distribution types a condition may name as its parent: the ones with countable values.
PARENT_TYPES = ("choice", "grid", "randint", "qrandint", "lograndint", "qlograndint")


@dataclass(frozen=True)
class Condition:
    """One condition of a parameter: its parent takes one of ``values``.

    Attributes:
        parent: The parent's name (``optimizer``, ``model/name``).
        values: The parent's values under which the condition holds.
        path: The condition's field in the spec (``param_space.momentum.when.optimizer``).
    """

    parent: str
    values: tuple
    path: str = ""

    def holds(self, value: Any) -> bool:
        """Whether the parent's ``value`` meets the condition (``True`` never equals ``1`` here)."""
        return any(same_value(value, v) for v in self.values)

    def describe(self) -> str:
        """``optimizer = sgd``, ``layers in [2, 3]``."""
        if len(self.values) == 1:
            return f"{self.parent} = {_show(self.values[0])}"
        return f"{self.parent} in [{', '.join(_show(v) for v in self.values)}]"


@dataclass(frozen=True)
class Param:
    """One parameter of the expanded space.

    Attributes:
        name: Its name, parts joined by ``/`` (``lr``, ``opt/lr``, ``model/channels``), unique
            in the space: what conditions name, and the searchers' name for it.
        path: Its field in the spec (``param_space.model.values.0.channels``).
        dist: Its distribution, or None for a constant of a sub-space branch.
        value: The constant (when ``dist`` is None).
        conditions: What must hold for it to be active (all of them); empty for an
            unconditional parameter.
        key: Its key in a trial's config, parts joined by ``/`` (``results.csv``'s
            ``config/<key>`` column): the name, except for a parameter that two branches of
            a sub-space choice define differently (``lr`` with another range under ``adam``),
            whose later versions are named ``optimizer/lr@adam`` and keyed ``optimizer/lr``
            (at most one of them is active).
    """

    name: str
    path: str
    dist: BaseDistribution | None
    value: Any = None
    conditions: tuple[Condition, ...] = ()
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)

    @property
    def dotted(self) -> str:
        """The key with ``.`` (``model.channels``), as ``oom_backoff`` and ``scheduler.mutations`` name it."""
        return self.key.replace(SEP, ".")


@dataclass(frozen=True)
class Space:
    """A ``param_space``'s parameters and their conditions (see the module docstring).

    Attributes:
        params: Every sampled parameter and every constant of a branch, in spec order
            (a sub-space choice's ``name`` first, then its branches' parameters).
        order: The same parameters with every parent before its children: the order a
            config is drawn in.
    """

    params: tuple[Param, ...]
    order: tuple[Param, ...] = field(default=())

    @property
    def conditional(self) -> bool:
        """Whether any parameter has a condition (or the space has a sub-space choice)."""
        return any(p.conditions for p in self.params)

    @property
    def parents(self) -> frozenset[str]:
        """Names of the parameters that some condition names."""
        return frozenset(c.parent for p in self.params for c in p.conditions)

    @property
    def conditional_names(self) -> frozenset[str]:
        """Names of the parameters that take part in a condition: the parents and their children."""
        return frozenset(p.name for p in self.params if p.conditions) | self.parents

    def get(self, name: str) -> Param | None:
        """The parameter called ``name`` (``/``-joined), or None."""
        return next((p for p in self.params if p.name == name), None)

    def is_active(self, param: Param, config: Mapping[str, Any]) -> bool:
        """Whether ``param`` is active given the values of its parents in ``config``.

        Args:
            param: One of :attr:`params`.
            config: Flat config (``/``-joined names -> values) holding the active parents;
                a parent absent from it is inactive, and so is every child of it.
        """
        return all(c.parent in config and c.holds(config[c.parent]) for c in param.conditions)

    def sample(self, draw: Callable[[Param], Any], fixed: Mapping[str, Any] | None = None,
               names: frozenset[str] | None = None) -> dict[str, Any]:
        """Draw one config: parents first, then only the children their values make active.

        Args:
            draw: Draws a value for a sampled parameter (a constant's value is taken as is).
            fixed: Values to keep (a point to evaluate), flat, by config key; an inactive one is dropped.
            names: Only these parameters (and the parents they need); default every one.

        Returns:
            Flat config: ``/``-joined names -> values, active parameters only (:meth:`keyed`
            makes it a config).
        """
        config: dict[str, Any] = {}
        for p in self.order:
            if names is not None and p.name not in names:
                continue
            if not self.is_active(p, config):
                continue
            if fixed is not None and p.key in fixed:
                config[p.name] = fixed[p.key]
            else:
                config[p.name] = draw(p) if p.dist is not None else p.value
        return config

    def versions(self, key: str) -> list[Param]:
        """The parameters under a config ``key``: one, or one per branch that defines the key its own
        way (``optimizer/lr``, ``optimizer/lr@adam``); empty for an unknown key."""
        return [p for p in self.params if p.key == key]

    def condition(self, key: str) -> str | None:
        """When the config ``key`` is present, as text: ``optimizer = sgd``, ``model/name = cnn and
        layers in [2, 3]``; for a key with a version per branch, each version's joined by ``or``.
        None for a key that is always present (or unknown)."""
        versions = self.versions(key)
        if not versions or any(not p.conditions for p in versions):
            return None
        texts = [" and ".join(c.describe() for c in p.conditions) for p in versions]
        if len(texts) == 1:
            return texts[0]
        return " or ".join(f"({t})" if " and " in t else t for t in texts)

    def keyed(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A flat config by parameter name (:meth:`sample`, :meth:`enumerate`) -> by config key."""
        keys = {p.name: p.key for p in self.params}
        return {keys.get(name, name): value for name, value in config.items()}

    def enumerate(self, values: Callable[[Param], list], names: frozenset[str] | None = None) -> list[dict[str, Any]]:
        """Every valid combination of a grid, each once (no two differ only in inactive parameters).

        Args:
            values: A sampled parameter's grid values (:func:`tuner.search.space.grid_values`).
            names: Only these parameters (and their parents); default every one.

        Returns:
            Flat configs, the first parameter's values varying slowest.
        """
        order = [p for p in self.order if names is None or p.name in names]

        def walk(i: int, config: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if i == len(order):
                yield dict(config)
                return
            p = order[i]
            if not self.is_active(p, config):
                yield from walk(i + 1, config)
                return
            for v in (values(p) if p.dist is not None else [p.value]):
                config[p.name] = v
                yield from walk(i + 1, config)
                del config[p.name]

        return list(walk(0, {}))

    def tree(self) -> list[str]:
        """The space as an indented tree, each child under the deepest of its parents (the last one
        drawn), with all of its conditions:
        ``  momentum  uniform [0.5, 0.99)  when optimizer = sgd``."""
        lines: list[str] = []
        shown: set[str] = set()
        rank = {p.name: i for i, p in enumerate(self.order)}
        under = {p.name: max((c.parent for c in p.conditions), key=lambda n: rank.get(n, -1))
                 for p in self.params if p.conditions}

        def show(p: Param, depth: int) -> None:
            what = param_label(p.dist) if p.dist is not None else f"= {_show(p.value)}"
            when = f"  when {' and '.join(c.describe() for c in p.conditions)}" if p.conditions else ""
            lines.append(f"{'  ' * depth}{p.name}  {what}{when}")
            shown.add(p.name)
            for child in self.params:
                if child.name not in shown and under.get(child.name) == p.name:
                    show(child, depth + 1)

        for p in self.params:
            if p.name not in shown and not p.conditions:
                show(p, 0)
        for p in self.params:  # a child whose first parent is itself shown later in spec order
            if p.name not in shown:
                show(p, 0)
        return lines


def same_value(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _show(v: Any) -> str:
    return str(v) if not isinstance(v, str) else v


def _in_domain(dist: BaseDistribution, value: Any) -> bool:
    """Whether a parent distribution can take ``value`` (a choice's or grid's values, a range's integers)."""
    if dist.type in ("choice", "grid"):
        return any(same_value(value, v) for v in dist.values)
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    q = getattr(dist, "q", 1) or 1
    if q == 1:  # randint, lograndint: high exclusive; qrandint/qlograndint with q=1 too (Ray's sampling)
        return dist.low <= value < dist.high
    return dist.low <= value <= dist.high and value % q == 0


def _domain_text(dist: BaseDistribution) -> str:
    if dist.type in ("choice", "grid"):
        return f"one of {list(dist.values)}"
    q = getattr(dist, "q", 1) or 1
    if q == 1:
        return f"an integer in [{dist.low}, {dist.high})"
    return f"a multiple of {q} in [{dist.low}, {dist.high}]"


@dataclass
class _Raw:
    """A parameter while the space is being expanded: its own `when` still unresolved."""

    name: str
    path: str
    dist: BaseDistribution | None
    value: Any
    scope: str  # the name prefix its `when` keys are looked up in first
    inherited: list[Condition]
    when: dict[str, Any]
    key: str = ""  # its config key, when not its name (another branch's version of the same key)
    scope_names: dict[str, _Raw] = field(default_factory=dict)  # in a branch: its siblings, by key


def expand(space: Mapping[str, Any], root: str = "param_space") -> Space:
    """Expand and check a ``param_space``: sub-space choices, ``when`` conditions, the order.

    Args:
        space: The validated ``param_space`` (distributions already built).
        root: The path of ``space`` in the spec, for error paths.

    Returns:
        The :class:`Space`.

    Raises:
        pydantic_core.PydanticCustomError: A condition naming an unknown parameter, a
            constant, or a continuous one (a condition needs countable values); a value
            the parent cannot take; a cycle; a sub-space choice whose branches lack
            distinct names; a parameter in two branches with different distributions.
            The error's field is the spec path of the faulty key.
    """
    raws: list[_Raw] = []
    constants: dict[str, str] = {}  # name -> path, for "a constant cannot be a parent"
    choices: dict[str, str] = {}  # a sub-space choice's name -> the name of its branch-name parameter

    def walk(out: list[_Raw], tree: Mapping[str, Any], prefix: str, path: str, inherited: list[Condition]) -> None:
        for key, value in tree.items():
            name, here = f"{prefix}{key}", f"{path}.{key}"
            if isinstance(value, SubspaceChoice):
                label = f"{name}{SEP}{BRANCH_KEY}"
                choices[name] = label
                choice = Choice(type="choice", values=[b[BRANCH_KEY] for b in value.values])
                out.append(_Raw(label, here, choice, None, prefix, list(inherited), dict(value.when or {})))
                versions: dict[str, list[_Raw]] = {}
                for i, branch in enumerate(value.values):
                    cond = Condition(label, (branch[BRANCH_KEY],), f"{here}.values.{i}")
                    sub: list[_Raw] = []
                    walk(sub, {k: v for k, v in branch.items() if k != BRANCH_KEY}, f"{name}{SEP}",
                         f"{here}.values.{i}", [*inherited, cond])
                    scope: dict[str, _Raw] = {}  # key -> this branch's version: what its `when` keys name
                    for r in sub:
                        original = r.name
                        scope[original], new = _share(versions.setdefault(original, []), r, len(inherited), name)
                        if new:
                            out.append(r)
                    for r in sub:
                        r.scope_names = scope
            elif isinstance(value, BaseDistribution):
                out.append(_Raw(name, here, value, None, prefix, list(inherited), dict(value.when or {})))
            elif isinstance(value, Mapping):
                walk(out, value, f"{name}{SEP}", here, inherited)
            elif inherited:  # a constant inside a branch: present only when the branch is taken
                out.append(_Raw(name, here, None, value, prefix, list(inherited), {}))
            else:
                constants[name] = here

    walk(raws, space, "", root, [])
    by_name = {r.name: r for r in raws}
    params = [_resolve(r, by_name, choices, constants) for r in raws]
    return Space(tuple(params), tuple(_topological(params)))


def _share(versions: list[_Raw], again: _Raw, depth: int, choice: str) -> tuple[_Raw, bool]:
    """A key met in a branch of a sub-space choice, with its ``versions`` in the earlier branches.

    The same distribution (or constant, with the same ``when``) as an earlier version: one
    parameter, active in either branch (its branch condition widens to an ``in``). A different
    one: its own parameter, named ``<key>@<branch>`` and keyed as the config sees it. A nested
    group or sub-space choice that differs between branches is refused: give it another key.

    Returns:
        The version that stands for ``again`` in its branch, and whether it is new.
    """
    label = again.inherited[depth].values[0]
    for first in versions:
        if (first.dist, first.value, first.when, len(first.inherited)) == \
                (again.dist, again.value, again.when, len(again.inherited)):
            mine = first.inherited[depth]
            first.inherited[depth] = Condition(mine.parent, (*mine.values, label), mine.path)
            return first, False
    if versions:
        if SEP in again.name[len(choice) + 1:]:
            raise _fail(again.path, f"{again.name[len(choice) + 1:]!r} is also in branch "
                        f"{versions[0].inherited[depth].values[0]!r} ({versions[0].path}), differently; branches may "
                        "define a parameter of their own under the same key, but not a group or a choice among "
                        "sub-spaces: give it another key in one of them.")
        again.key, again.name = again.name, f"{again.name}@{label}"
    versions.append(again)
    return again, True


def _resolve(r: _Raw, by_name: Mapping[str, _Raw], choices: Mapping[str, str], constants: Mapping[str, str]) -> Param:
    """``when``'s keys -> conditions: a key names a sibling first (``kernel`` in a branch), then a
    parameter by its dotted path (``opt.name``); a sub-space choice stands for its branch name."""
    conditions = list(r.inherited)
    for key, want in r.when.items():
        where = f"{r.path}.when.{key}"
        parent = None
        mine = r.scope_names.get(f"{r.scope}{key}")
        for candidate in ((mine.name if mine else f"{r.scope}{key}"), key.replace(".", SEP)):
            candidate = choices.get(candidate, candidate)
            if candidate in by_name or candidate in constants:
                parent = candidate
                break
        sampled = [p.name.replace(SEP, ".") for p in by_name.values()
                   if p.dist is not None and p.dist.type in PARENT_TYPES and p.name != r.name]
        if parent is None:
            hint = _closest(key, sampled)
            guess = f"; did you mean '{hint}'?" if hint else "."
            raise _fail(where, f"when names {key!r}, which is not a parameter of param_space{guess} A condition's "
                        f"parent must be a choice, grid or integer parameter: {_allowed(sampled) or '(none)'}.")
        if parent == r.name:
            raise _fail(where, f"{r.name.replace(SEP, '.')} cannot depend on itself: a condition names another "
                        "parameter.")
        if parent in constants:
            raise _fail(where, f"when names {key!r}, a constant, which is always the same: a condition's parent "
                        f"must be a sampled choice, grid or integer parameter: {_allowed(sampled) or '(none)'}.")
        dist = by_name[parent].dist
        if dist is None:
            raise _fail(where, f"when names {key!r}, a constant of a branch: name the sub-space choice itself "
                        "(its value is the branch's name) instead.")
        if dist.type not in PARENT_TYPES:
            raise _fail(where, f"when names {key!r}, a {dist.type} parameter: a condition needs a parent with "
                        "countable values (choice, grid, randint, qrandint, lograndint, qlograndint, or a sub-space "
                        f"choice), since a {dist.type} value matches a given one with probability zero.")
        if isinstance(want, Mapping):
            values, at = tuple(want["in"]), [f"{where}.in.{i}" for i in range(len(want["in"]))]
        else:
            values, at = (want,), [where]
        for v, place in zip(values, at):
            if not _in_domain(dist, v):
                raise _fail(place, f"{key} is {_domain_text(dist)}, so it can never be {v!r}; a condition's "
                            "values must be values its parent takes.")
        conditions.append(Condition(parent, values, where))
    return Param(r.name, r.path, r.dist, r.value, tuple(conditions), r.key or r.name)


def _topological(params: list[Param]) -> list[Param]:
    """Parents before children, else spec order (Kahn's algorithm); a cycle is refused."""
    by_name = {p.name: p for p in params}
    done: list[Param] = []
    placed: set[str] = set()
    left = list(params)
    while left:
        ready = [p for p in left if all(c.parent in placed for c in p.conditions)]
        if not ready:
            cycle = _find_cycle(left, by_name)
            first = by_name[cycle[0]]
            where = next(c.path for c in first.conditions if c.parent == cycle[1])
            raise _fail(where, f"the conditions form a cycle: {' -> '.join(n.replace(SEP, '.') for n in cycle)}; "
                        "each parameter can depend only on parameters that do not depend on it.")
        for p in ready:
            placed.add(p.name)
            done.append(p)
        left = [p for p in left if p.name not in placed]
    return done


def _find_cycle(left: list[Param], by_name: Mapping[str, Param]) -> list[str]:
    """A cycle among parameters none of which could be placed: follow first unplaced parents."""
    names = {p.name for p in left}
    node = left[0].name
    seen: list[str] = []
    while node not in seen:
        seen.append(node)
        node = next(c.parent for c in by_name[node].conditions if c.parent in names)
    cycle = seen[seen.index(node):]
    return [*cycle, cycle[0]]


def param_distributions(space: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The sampled parameters of a ``param_space``, by name: ``[("opt/lr", LogUniform(...)), ...]``.

    Constants are left out. In spec order. A choice among sub-spaces ``model`` gives the
    choice ``model/name`` of its branch names, then each branch's parameters
    (``model/channels``; :func:`expand`); a conditional parameter is
    listed as any other (a trial's config may lack it).
    """
    out: dict[str, Any] = {}
    for p in expand(space).params:  # a key that branches define differently: its first version
        if p.dist is not None:
            out.setdefault(p.key, p.dist)
    return list(out.items())


def sampled_params(spec: Spec) -> list[str]:
    """Names of the parameters that the searcher varies, in spec order.

    Args:
        spec: A :class:`tuner.spec.Spec`.
    """
    return list(dict.fromkeys(p.key for p in spec.space.params if p.dist is not None))
