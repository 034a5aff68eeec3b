"""The fields of a board's spec classes: each numeric field with its unit, its range rule
and its plausible range, validated at construction with a :class:`BoardFieldError` that
names the field, the value and the rule.

Each numeric field declares, in its metadata,

* ``rule``: ``"positive"`` (> 0), ``"non_negative"`` (>= 0), ``"count"`` (integer >= 0),
  ``"positive_count"`` (integer >= 1), ``"factor"`` (>= 1) or ``"probability"`` (in [0, 1]),
* ``plausible``: a ``(low, high)`` range; a value outside it is almost always a unit slip
  (MHz written into ``clock_hz``, mW into ``_w``) and is rejected as such.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

from poetsim.errors import BoardFieldError

INF = math.inf

#: SD Physical Layer Simplified Specification: SPI mode is 25 MHz default, 50 MHz high speed.
SD_SPI_MAX_CLOCK_HZ = 50e6


def _check_number(rule: str, plausible: tuple[float, float], unit: str):
    def validate(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        name = attribute.name
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BoardFieldError(name, value, f"must be a number in {unit}")
        if math.isnan(value) or math.isinf(value):
            raise BoardFieldError(name, value, "must be finite")
        if rule in ("count", "positive_count") and not isinstance(value, int):
            raise BoardFieldError(name, value, "must be a whole number")
        if rule == "positive_count" and value < 1:
            raise BoardFieldError(name, value, f"must be >= 1 {unit}")
        if rule == "probability" and not (0 <= value <= 1):
            raise BoardFieldError(name, value, "must be a probability in [0, 1]")
        if rule == "factor" and value < 1:
            raise BoardFieldError(name, value, "must be >= 1 (a factor, 1 = no effect)")
        if rule == "positive" and value <= 0:
            raise BoardFieldError(name, value, f"must be > 0 {unit}")
        if rule in ("non_negative", "count") and value < 0:
            raise BoardFieldError(name, value, f"must be >= 0 {unit}")
        low, high = plausible
        if value != 0 and not (low <= value <= high):
            raise BoardFieldError(
                name, value,
                f"outside the plausible range [{low:g}, {high:g}] {unit}: check the unit",
            )

    return validate


def number_field(unit: str, rule: str = "positive", plausible: tuple[float, float] = (0.0, INF),
            optional: bool = False, doc: str = ""):
    """A numeric field with its unit, range rule and plausible range in metadata."""
    check = _check_number(rule, plausible, unit)
    meta = {"unit": unit, "rule": rule, "plausible": plausible, "doc": doc, "optional": optional}
    convert = _whole if rule in ("count", "positive_count") else None
    if optional:
        return attrs.field(default=None, validator=attrs.validators.optional(check),
                           converter=convert, metadata=meta)
    return attrs.field(validator=check, converter=convert, metadata=meta)


def _whole(value: Any) -> Any:
    """``4096.0`` -> ``4096``; anything else is left for the validator to judge."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def typed_field(kind: type, what: str):
    """A plain (unsourced) field of type ``kind``, with a BoardFieldError on mismatch."""
    def validate(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, kind) or (kind is str and not value.strip()):
            raise BoardFieldError(attribute.name, value, f"must be {what}")
    return attrs.field(validator=validate)


def numeric_fields(cls: type) -> list[attrs.Attribute]:
    """The numeric (sourced) fields of a spec class, in declaration order."""
    return [f for f in attrs.fields(cls) if "unit" in f.metadata]


def subsection_fields(cls: type) -> list[attrs.Attribute]:
    """The optional sub-tables of a spec class (``storage.write_busy``), in declaration
    order; each field's ``metadata["section"]`` is the spec class of the sub-table."""
    return [f for f in attrs.fields(cls) if "section" in f.metadata]


POWER_W = (1e-9, 500.0)       # from nanowatts to a large SBC
DEVICE_POWER_W = (1e-9, 20.0)  # a storage device or DMA engine, never tens of watts
LATENCY_S = (1e-9, 10.0)
THROUGHPUT_BYTES_PER_S = (1e2, 1e11)
BYTES = (1, 1e13)


def _enum_converter(enum_cls: type[enum.Enum], name: str):
    def convert(value: Any) -> enum.Enum:
        if isinstance(value, enum_cls):
            return value
        try:
            return enum_cls(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in enum_cls)
            raise BoardFieldError(name, value, f"must be one of {allowed}") from None
    return convert


def choice_field(enum_cls: type[enum.Enum], name: str):
    return attrs.field(converter=_enum_converter(enum_cls, name), metadata={"choice": enum_cls})


