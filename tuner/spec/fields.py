"""The field types of the spec's models: strict numbers (:data:`Int`, :data:`Float`: never a YAML
boolean, never text, never NaN or inf; a whole float is fine where an integer is wanted),
:data:`NonBlank` names, and :class:`_Model`, the frozen base of every section, which refuses an
unknown key with a hint.
"""

from __future__ import annotations

from typing import Annotated, Any
from collections.abc import Mapping

from pydantic import BeforeValidator, BaseModel, ConfigDict, StrictFloat, StrictInt, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from tuner.spec.errors import _allowed, _closest


_NON_BLANK = r"\S"
NonBlank = Annotated[str, StringConstraints(pattern=_NON_BLANK)]
"""A string with at least one non-space character: names, metrics, keys (never ``""``)."""


def _integral(value: Any) -> Any:
    """A whole number written as a float (``4.0``, ``1e3``) or a numpy scalar is that number;
    anything else (a bool, a string, ``4.5``) is left for the strict type to refuse."""
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _real(value: Any) -> Any:
    """A numpy scalar is its Python number; anything else is left for the strict type."""
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value


# Numbers in the spec: never a bool (YAML's yes/no/on/off), never a string, never NaN or inf
# (ConfigDict(allow_inf_nan=False)); a whole float is fine where an integer is wanted.
Int = Annotated[StrictInt, BeforeValidator(_integral)]
Float = Annotated[StrictFloat, BeforeValidator(_real)]

# Numbers are pydantic's strict types, so a YAML boolean (``yes``, ``on``, ``true``) is never
# read as 1, nor text as a number; and every float is finite (``allow_inf_nan=False`` below).


class _Model(BaseModel):
    """Base of every spec section: frozen, and unknown keys are refused with a hint."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = sorted(cls.model_fields, key=lambda k: k not in ("type", "algorithm"))
            for key in data:
                if key not in cls.model_fields:
                    hint = _closest(key, known)
                    guess = f"; did you mean '{hint}'?" if hint else "."
                    raise PydanticCustomError(
                        "tuner_unknown_key",
                        f"unknown key '{key}'{guess} Allowed keys: {_allowed(known)}."
                        .replace("{", "{{").replace("}", "}}"),
                        {"field": str(key), "key": True},
                    )
        return data
