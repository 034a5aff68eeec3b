"""Parsing and formatting of physical quantities (bytes, seconds, joules, watts)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from poetsim.errors import InputError

__all__ = ["format_bytes", "format_quantity", "parse_bytes", "split_quantity", "table_cell"]

_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30,
}


_QUANTITY = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z%]*)\s*")


def split_quantity(text: str) -> tuple[float, str] | None:
    """``"1.5x"`` -> ``(1.5, "x")``, ``"256 KiB"`` -> ``(256.0, "KiB")``: a non-negative
    number and the unit written after it (``""`` without one); None if it is not that."""
    match = _QUANTITY.fullmatch(text)
    return None if match is None else (float(match.group(1)), match.group(2))


def parse_bytes(text: str, *, what: str = "size") -> int:
    """``"256KiB"`` -> 262144, ``"1.5 MB"`` -> 1500000, ``"4096"`` -> 4096.

    KB, MB and GB are powers of 1000; KiB, MiB and GiB powers of 1024.
    """
    quantity = split_quantity(text)
    if quantity is None or quantity[1].lower() not in _BYTE_UNITS:
        raise InputError(f"{what} = {text!r}: expected a number of bytes such as 4096, 256KiB "
                         "or 1.5MB")
    value = quantity[0] * _BYTE_UNITS[quantity[1].lower()]
    if value <= 0 or not math.isfinite(value):
        raise InputError(f"{what} = {text!r}: must be a positive number of bytes")
    return math.ceil(value)


#: Relative slack of a deadline: a makespan summed from thousands of float durations can
#: exceed a deadline equal to it by rounding alone (1e-19 s on a 2.5 ms run).
DEADLINE_RTOL = 1e-9


def meets_deadline(makespan_s: float, deadline_s: float) -> bool:
    """Whether ``makespan_s`` is within ``deadline_s`` (up to :data:`DEADLINE_RTOL`)."""
    return makespan_s <= deadline_s * (1.0 + DEADLINE_RTOL)


def energy_overhead(energy_j: float | None, reference_j: float | None) -> float | None:
    """The energy overhead of ``energy_j`` over ``reference_j`` (every op once): their
    ratio less one; None without both (or with a reference of no energy)."""
    if energy_j is None or not reference_j or reference_j <= 0:
        return None
    return energy_j / reference_j - 1


def format_bytes(nbytes: float) -> str:
    """Binary units for memory: ``262144`` -> ``"256.0 KiB"``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_PREFIXES = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
             (1e-6, "µ"), (1e-9, "n"), (1e-12, "p")]


def format_quantity(value: float, unit: str, digits: int = 4) -> str:
    """SI prefix formatting: ``format_quantity(0.0123, "J")`` -> ``"12.3 mJ"``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def table_cell(value: Any, width: int, show: Callable[[Any], str] = str) -> str:
    """One right-aligned cell of a printed table: ``-`` for a missing figure (None or
    NaN), yes/no for a flag, else ``show(value)`` (say, :func:`format_quantity` with its
    unit)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(width)
    if isinstance(value, bool):
        return ("yes" if value else "no").rjust(width)
    return show(value).rjust(width)
