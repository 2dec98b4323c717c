"""The distributions that a ``param_space`` parameter is drawn from, with Ray Tune's names and
meanings (``uniform``, ``loguniform``, ``randint``, ``choice``, ``grid``, ...). Each validates
itself when it is built (the model of ``optuna/distributions.py``); :data:`Distribution` picks
one by its ``type``, and :data:`ParamValue` is one ``param_space`` entry: a distribution, a
nested group of entries, or a constant.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union
from collections.abc import Mapping

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypeAliasType

from tuner.spec.errors import _fail
from tuner.spec.fields import Float, Int, _Model

#: A parameter's name in param_space: a letter or '_' first, then letters, digits, '_', '.', '-'.
PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool))


def _check_when(when: dict[str, Any] | None) -> None:
    """``when``: one or more ``parent: value`` or ``parent: {in: [values]}`` conditions (AND-ed).

    Which parents exist and which values they take is checked with the whole space
    (:func:`tuner.spec.conditions.expand`).
    """
    if when is None:
        return
    if not when:
        raise _fail("when", "when needs at least one condition, e.g. when: {optimizer: sgd}.")
    for key, want in when.items():
        if isinstance(want, Mapping):
            values = want.get("in")
            if set(want) != {"in"} or not isinstance(values, list) or not values:
                raise _fail(f"when.{key}", f"a condition is `{key}: VALUE` or `{key}: {{in: [VALUE, ...]}}` (a "
                            f"non-empty list), but got {dict(want)!r}.")
            for i, v in enumerate(values):
                if not _scalar(v):
                    raise _fail(f"when.{key}.in.{i}", f"a condition's values are plain values (text, numbers, "
                                f"true/false), but got {v!r}.")
        elif isinstance(want, list):
            raise _fail(f"when.{key}", f"to match several values write `{key}: {{in: {want!r}}}`; a bare list "
                        "would be one value.")
        elif not _scalar(want):
            raise _fail(f"when.{key}", f"a condition's value is a plain value (text, a number, true/false) or "
                        f"{{in: [...]}}, but got {want!r}.")


def _check_multiple(name: str, value: float, q: float) -> None:
    if not math.isclose(value / q, round(value / q), rel_tol=1e-9, abs_tol=1e-12):
        raise _fail(name, f"{name} must be a multiple of q, but got ({name}={value}, q={q}).")


class BaseDistribution(_Model):
    """Common base of the distributions: the same names and meanings as Ray Tune's.

    Every distribution may carry ``when``: the conditions under which the parameter exists
    (:mod:`tuner.spec.conditions`).

    Attributes:
        when: The conditions under which the parameter exists, ``{parent: value}`` or
            ``{parent: {in: [values]}}``, AND-ed; where they fail it is absent from the config.
            None: always.
    """

    when: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _when(self):
        _check_when(self.when)
        return self

    @model_validator(mode="after")
    def _range(self):
        """Ranges: ``low < high``; quantized ones: ``low`` and ``high`` multiples of ``q``."""
        low, high = getattr(self, "low", None), getattr(self, "high", None)
        if low is None or high is None:
            return self
        if not low < high:
            raise _fail("low", f"`low < high` must hold, but got (low={low}, high={high}).")
        q = getattr(self, "q", None)
        if q is not None:
            _check_multiple("low", low, q)
            _check_multiple("high", high, q)
        return self

    @property
    def is_numeric_range(self) -> bool:
        """Whether the distribution is a numeric range (enumerated by ``grid_points``)."""
        return hasattr(self, "grid_points")

    if TYPE_CHECKING:  # the subclasses' fields (type, low, high, q, values, ...), read through the base
        def __getattr__(self, name: str) -> Any: ...


class _Range(BaseDistribution):
    """A float range.

    Attributes:
        low: The lower bound, inclusive.
        high: The upper bound, exclusive; ``low < high``.
        grid_points: Under search grid: the range as N evenly spaced points from ``low`` to
            ``high`` (log-spaced for log types); None: search grid refuses the range.
    """

    low: Float
    high: Float
    grid_points: Int | None = Field(default=None, ge=2)


class Uniform(_Range):
    """Float uniformly in ``[low, high)``; wraps ``tune.uniform``."""

    type: Literal["uniform"]


class QUniform(_Range):
    """Float uniformly in ``[low, high]`` rounded to a multiple of ``q``; ``tune.quniform``.

    Attributes:
        low: The lower bound, inclusive; a multiple of ``q``.
        high: The upper bound, inclusive; a multiple of ``q``, ``low < high``.
        grid_points: Under search grid: N evenly spaced points from ``low`` to ``high``, rounded
            to multiples of ``q``; None: search grid refuses the range.
        q: The step: every value is a multiple of it.
    """

    type: Literal["quniform"]
    q: Float = Field(gt=0)


class LogUniform(_Range):
    """Float log-uniformly in ``[low, high)``, ``low > 0``; ``tune.loguniform``.

    ``base`` is accepted for compatibility and has no effect: a log-uniform
    distribution is the same in every base.

    Attributes:
        low: The lower bound, inclusive; > 0.
        high: The upper bound, exclusive; ``low < high``.
        base: The logarithm's base; no effect (any base gives the same distribution).
    """

    type: Literal["loguniform"]
    base: Float = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _positive(self):
        if self.low <= 0:
            raise _fail("low", f"low must be > 0 for a log scale, but got low={self.low}.")
        return self


class QLogUniform(LogUniform):
    """Float log-uniformly in ``[low, high]`` rounded to a multiple of ``q``; ``tune.qloguniform``.

    Attributes:
        low: The lower bound, inclusive; > 0 and a multiple of ``q``.
        high: The upper bound, inclusive; a multiple of ``q``, ``low < high``.
        grid_points: Under search grid: N log-spaced points from ``low`` to ``high``, rounded to
            multiples of ``q``; None: search grid refuses the range.
        q: The step: every value is a multiple of it.
    """

    type: Literal["qloguniform"]  # type: ignore[assignment]
    q: Float = Field(gt=0)


class RandN(BaseDistribution):
    """Float from a normal distribution, unbounded; ``tune.randn``.

    Attributes:
        mean: The normal distribution's mean.
        sd: Its standard deviation; > 0.
    """

    type: Literal["randn"]
    mean: Float = 0.0
    sd: Float = Field(default=1.0, gt=0)


class QRandN(RandN):
    """Normal float rounded to a multiple of ``q``; ``tune.qrandn``.

    Attributes:
        q: The step: every value is a multiple of it.
    """

    type: Literal["qrandn"]  # type: ignore[assignment]
    q: Float = Field(gt=0)


class _IntRange(BaseDistribution):
    """An integer range.

    Attributes:
        low: The lower bound, inclusive.
        high: The upper bound, exclusive; ``low < high``.
        grid_points: Under search grid: N evenly spaced points (log-spaced for log types) from
            ``low`` to the largest value taken, rounded (to multiples of ``q`` where there is one),
            repeats dropped; None: search grid refuses the range.
    """

    low: Int
    high: Int
    grid_points: Int | None = Field(default=None, ge=2)


class RandInt(_IntRange):
    """Integer uniformly in ``[low, high)`` (high exclusive); ``tune.randint``."""

    type: Literal["randint"]


class QRandInt(_IntRange):
    """Integer multiple of ``q`` in ``[low, high]`` (high inclusive, exclusive for q=1); ``tune.qrandint``.

    Attributes:
        low: The lower bound, inclusive; a multiple of ``q``.
        high: The upper bound, inclusive (exclusive when ``q`` is 1); a multiple of ``q``.
        q: The step: every value is a multiple of it.
    """

    type: Literal["qrandint"]
    q: Int = Field(default=1, ge=1)


class LogRandInt(_IntRange):
    """Integer log-uniformly in ``[low, high)``, ``low >= 1``; ``tune.lograndint``.

    Attributes:
        low: The lower bound, inclusive; >= 1.
        base: The logarithm's base; no effect (any base gives the same distribution).
    """

    type: Literal["lograndint"]
    base: Float = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _positive(self):
        if self.low < 1:
            raise _fail("low", f"low must be >= 1 for a log scale, but got low={self.low}.")
        return self


class QLogRandInt(LogRandInt):
    """Integer multiple of ``q`` log-uniformly in ``[low, high]``; ``tune.qlograndint``.

    Attributes:
        low: The lower bound, inclusive; >= 1 and a multiple of ``q``.
        high: The upper bound, inclusive (exclusive when ``q`` is 1); a multiple of ``q``.
        q: The step: every value is a multiple of it.
    """

    type: Literal["qlograndint"]  # type: ignore[assignment]
    q: Int = Field(default=1, ge=1)


class _Values(BaseDistribution):
    values: list[Any]

    @field_validator("values")
    @classmethod
    def _non_empty(cls, values: list[Any]) -> list[Any]:
        if not values:
            raise PydanticCustomError("tuner_spec", "values must hold at least one value, but got [].")
        return values

    @property
    def is_numeric_range(self) -> bool:
        return False


class Choice(_Values):
    """One of ``values``, uniformly; ``tune.choice``. Enumerated under grid search.

    Attributes:
        values: The values to choose from; search grid runs each of them.
    """

    type: Literal["choice"]


class Grid(_Values):
    """Every one of ``values`` in turn; ``tune.grid_search``.

    Attributes:
        values: The values, each run in turn (``num_samples`` times each).
    """

    type: Literal["grid"]


_DISTRIBUTIONS = (Uniform, QUniform, LogUniform, QLogUniform, RandN, QRandN,
                  RandInt, QRandInt, LogRandInt, QLogRandInt, Choice, Grid)
DISTRIBUTION_TYPES: tuple[str, ...] = tuple(
    c.model_fields["type"].annotation.__args__[0] for c in _DISTRIBUTIONS
)
"""Names allowed as a parameter's ``type``, as in Ray Tune's sampling functions."""

# A Union over a tuple is what lets pydantic discriminate on `type`; `X | Y` cannot be spread from a tuple.
Distribution = Annotated[Union[_DISTRIBUTIONS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007


class SubspaceChoice(_Model):
    """A choice among sub-spaces (NNI's nested choice): each branch is a mapping with a ``name``
    and its own parameters (distributions, constants, groups, further sub-space choices).

    The trial's config holds the branch taken, ``{"name": "cnn", "channels": 17, ...}``, with
    only that branch's parameters. :func:`tuner.spec.conditions.expand` turns it into the
    choice ``<key>/name`` of the branch names, and each branch's parameters into children
    active when that branch is taken.
    """

    type: Literal["choice"]
    values: list[dict[str, ParamValue]]
    when: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _branches(self):
        _check_when(self.when)
        if not self.values:
            raise _fail("values", "values must hold at least one branch, but got [].")
        seen: dict[str, int] = {}
        for i, branch in enumerate(self.values):
            label = branch.get("name")
            if not isinstance(label, str) or not label.strip():
                raise _fail(f"values.{i}", "each branch of a choice among sub-spaces needs `name: TEXT` (the value the "
                            f"config's `name` takes when the branch is picked), but got {label!r}.")
            if label in seen:
                raise _fail(f"values.{i}.name", f"branch name {label!r} is also branch {seen[label]}'s; each branch "
                            "needs its own name.")
            seen[label] = i
            for key in branch:
                if not PARAM_NAME.match(key):
                    raise _fail(f"values.{i}.{key}", "parameter names must start with a letter or '_' and hold only "
                                f"letters, digits, '_', '.' and '-', but got {key!r}.")
        return self


def _is_subspace_choice(value: Mapping) -> bool:
    """A ``choice`` whose values are mappings that are named or hold a distribution; a choice of
    plain, unnamed constant mappings stays a :class:`Choice` (Ray's ``tune.choice`` of dicts)."""
    values = value.get("values")
    if value.get("type") != "choice" or not isinstance(values, list) or not values:
        return False
    if not all(isinstance(v, Mapping) for v in values):
        return any(isinstance(v, Mapping) and "name" in v for v in values)
    return all("name" in v for v in values) or any(
        isinstance(x, Mapping) and "type" in x for v in values for x in v.values())


def _param_kind(value: Any) -> str:
    if isinstance(value, SubspaceChoice):
        return "<subspaces>"
    if isinstance(value, BaseDistribution):
        return "<dist>"
    if isinstance(value, Mapping):
        if "type" not in value:
            return "<nested>"
        return "<subspaces>" if _is_subspace_choice(value) else "<dist>"
    return "<const>"


def param_label(dist: BaseDistribution) -> str:
    """A distribution in a few words: ``uniform [0.5, 0.99)``, ``choice [sgd, adam]``."""
    if dist.type in ("choice", "grid"):
        return f"{dist.type} [{', '.join(str(v) for v in dist.values)}]"
    if dist.type in ("randn", "qrandn"):
        return f"{dist.type} (mean {dist.mean:g}, sd {dist.sd:g})"
    q = getattr(dist, "q", None)
    close = "]" if q and not (dist.type.endswith("randint") and q == 1) else ")"
    step = f" step {q:g}" if q and q != 1 else ""
    return f"{dist.type} [{dist.low:g}, {dist.high:g}{close}{step}"


if TYPE_CHECKING:  # a recursive pydantic alias that mypy cannot resolve
    ParamValue = Any
else:
    ParamValue = TypeAliasType(
        "ParamValue",
        Annotated[
            Annotated[Distribution, Tag("<dist>")]
            | Annotated[SubspaceChoice, Tag("<subspaces>")]
            | Annotated[dict[str, "ParamValue"], Tag("<nested>")]
            | Annotated[Any, Tag("<const>")],
            Discriminator(_param_kind),
        ],
    )

SubspaceChoice.model_rebuild()

_DIST_KEYS = {k for c in _DISTRIBUTIONS for k in c.model_fields}
