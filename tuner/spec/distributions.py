"""The distributions that a ``param_space`` parameter is drawn from, with Ray Tune's names and
meanings (``uniform``, ``loguniform``, ``randint``, ``choice``, ``grid``, ...). Each validates
itself when it is built (the model of ``optuna/distributions.py``); :data:`Distribution` picks
one by its ``type``, and :data:`ParamValue` is one ``param_space`` entry: a distribution, a
nested group of entries, or a constant.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union
from collections.abc import Mapping

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypeAliasType

from tuner.spec.errors import _fail
from tuner.spec.fields import Float, Int, _Model


def _check_multiple(name: str, value: float, q: float) -> None:
    if not math.isclose(value / q, round(value / q), rel_tol=1e-9, abs_tol=1e-12):
        raise _fail(name, f"{name} must be a multiple of q, but got ({name}={value}, q={q}).")


class _Dist(_Model):
    """Common base of the distributions: the same names and meanings as Ray Tune's."""

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


class _Range(_Dist):
    low: Float
    high: Float
    grid_points: Int | None = Field(default=None, ge=2)


class Uniform(_Range):
    """Float uniformly in ``[low, high)``; wraps ``tune.uniform``."""

    type: Literal["uniform"]


class QUniform(_Range):
    """Float uniformly in ``[low, high]`` rounded to a multiple of ``q``; ``tune.quniform``."""

    type: Literal["quniform"]
    q: Float = Field(gt=0)


class LogUniform(_Range):
    """Float log-uniformly in ``[low, high)``, ``low > 0``; ``tune.loguniform``.

    ``base`` is accepted for compatibility and has no effect: a log-uniform
    distribution is the same in every base.
    """

    type: Literal["loguniform"]
    base: Float = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _positive(self):
        if self.low <= 0:
            raise _fail("low", f"low must be > 0 for a log scale, but got low={self.low}.")
        return self


class QLogUniform(LogUniform):
    """Float log-uniformly in ``[low, high]`` rounded to a multiple of ``q``; ``tune.qloguniform``."""

    type: Literal["qloguniform"]  # type: ignore[assignment]
    q: Float = Field(gt=0)


class RandN(_Dist):
    """Float from a normal distribution, unbounded; ``tune.randn``."""

    type: Literal["randn"]
    mean: Float = 0.0
    sd: Float = Field(default=1.0, gt=0)


class QRandN(RandN):
    """Normal float rounded to a multiple of ``q``; ``tune.qrandn``."""

    type: Literal["qrandn"]  # type: ignore[assignment]
    q: Float = Field(gt=0)


class _IntRange(_Dist):
    low: Int
    high: Int
    grid_points: Int | None = Field(default=None, ge=2)


class RandInt(_IntRange):
    """Integer uniformly in ``[low, high)`` (high exclusive); ``tune.randint``."""

    type: Literal["randint"]


class QRandInt(_IntRange):
    """Integer multiple of ``q`` in ``[low, high]`` (high inclusive, exclusive for q=1); ``tune.qrandint``."""

    type: Literal["qrandint"]
    q: Int = Field(default=1, ge=1)


class LogRandInt(_IntRange):
    """Integer log-uniformly in ``[low, high)``, ``low >= 1``; ``tune.lograndint``."""

    type: Literal["lograndint"]
    base: Float = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _positive(self):
        if self.low < 1:
            raise _fail("low", f"low must be >= 1 for a log scale, but got low={self.low}.")
        return self


class QLogRandInt(LogRandInt):
    """Integer multiple of ``q`` log-uniformly in ``[low, high]``; ``tune.qlograndint``."""

    type: Literal["qlograndint"]  # type: ignore[assignment]
    q: Int = Field(default=1, ge=1)


class _Values(_Dist):
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
    """One of ``values``, uniformly; ``tune.choice``. Enumerated under grid search."""

    type: Literal["choice"]


class Grid(_Values):
    """Every one of ``values`` in turn; ``tune.grid_search``."""

    type: Literal["grid"]


_DISTRIBUTIONS = (Uniform, QUniform, LogUniform, QLogUniform, RandN, QRandN,
                  RandInt, QRandInt, LogRandInt, QLogRandInt, Choice, Grid)
DISTRIBUTION_TYPES: tuple[str, ...] = tuple(
    c.model_fields["type"].annotation.__args__[0] for c in _DISTRIBUTIONS
)
"""Names allowed as a parameter's ``type``, as in Ray Tune's sampling functions."""

# A Union over a tuple is what lets pydantic discriminate on `type`; `X | Y` cannot be spread from a tuple.
Distribution = Annotated[Union[_DISTRIBUTIONS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007


def _param_kind(value: Any) -> str:
    if isinstance(value, _Dist):
        return "<dist>"
    if isinstance(value, Mapping):
        return "<dist>" if "type" in value else "<nested>"
    return "<const>"


if TYPE_CHECKING:  # a recursive pydantic alias that mypy cannot resolve
    ParamValue = Any
else:
    ParamValue = TypeAliasType(
        "ParamValue",
        Annotated[
            Annotated[Distribution, Tag("<dist>")]
            | Annotated[dict[str, "ParamValue"], Tag("<nested>")]
            | Annotated[Any, Tag("<const>")],
            Discriminator(_param_kind),
        ],
    )

_DIST_KEYS = {k for c in _DISTRIBUTIONS for k in c.model_fields}
