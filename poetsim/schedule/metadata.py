"""A schedule's metadata as a typed, validated record.

A schedule file's ``metadata`` object says how the schedule was made: the method, its
status, and the request it was made for (board, accounting, the user's ``ram`` and
``deadline`` words, and their resolved bytes and seconds), with the method's predictions.
:func:`parse_metadata` checks every known field's type and range when a file is read, so
a bad value is a one-line error naming the field, never a crash later. Unknown fields are
kept in ``extra``.

The figures are recorded for people and are never trusted: poetsim recomputes the
resident state from the graph and the budget and deadline from the request, and
:func:`disagreements` lists every recorded figure that differs from what it recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from poetsim.errors import InputError, InternalError
from poetsim.graph.graph import OPTIMIZER_STATE_COPIES
from poetsim.schedule.ops import Schedule

__all__ = ["EXPECTED_FIELDS", "ScheduleMetadata", "disagreements", "parse_metadata", "stamped"]

_TEXT = ("method", "status", "board", "accounting", "ram", "deadline", "optimizer", "case",
         "model", "graph_file", "digest")
_BYTES = ("budget_bytes", "budget_activation_bytes", "resident_bytes", "flash_weight_bytes",
          "streamed_weight_bytes", "planned_activation_bytes",
          "predicted_peak_ram_bytes")
_SECONDS_OR_JOULES = ("deadline_s", "solver_deadline_s", "predicted_energy_j",
                      "predicted_time_s", "bound_j")
_FRACTIONS = ("gap",)
#: The largest figure a metadata field may hold (bytes, seconds, joules).
_MAX = 2.0**62
#: A golden schedule's expected figures (:mod:`poetsim.regress`), and their kinds.
EXPECTED_FIELDS = {"energy_j": "number", "peak_total_bytes": "bytes", "arena_bytes": "bytes",
                   "makespan_s": "number",
                   "verdict": "verdict", "objective_j": "number", "bound_j": "number"}


@attrs.frozen
class ScheduleMetadata:
    """The known metadata fields (None when absent) and everything else in ``extra``."""

    method: str | None = None
    status: str | None = None
    board: str | None = None
    accounting: str | None = None
    ram: str | None = None
    deadline: str | None = None
    optimizer: str | None = None
    budget_bytes: int | None = None
    budget_activation_bytes: int | None = None
    resident_bytes: int | None = None
    flash_weight_bytes: int | None = None
    streamed_weight_bytes: int | None = None
    predicted_peak_ram_bytes: int | None = None
    #: the activation budget the method planned against when lowered below the request's
    #: so that its buffers lay out in the arena (:mod:`poetsim.runs`)
    planned_activation_bytes: int | None = None
    deadline_s: float | None = None
    solver_deadline_s: float | None = None
    predicted_energy_j: float | None = None
    predicted_time_s: float | None = None
    bound_j: float | None = None
    gap: float | None = None
    case: str | None = None
    model: str | None = None
    #: the graph file the schedule's graph was read from (absolute), for a graph no zoo model
    graph_file: str | None = None
    #: SHA-256 of the file's content as written (:func:`poetsim.schedule.io.content_digest`)
    digest: str | None = None
    model_options: Mapping[str, int] | None = None
    solver: Mapping[str, Any] | None = None
    expected: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not (0 <= value <= _MAX):
        raise InputError(f"metadata.{name} = {value!r}: must be a number in [0, {_MAX:.3g}]")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"metadata.{name} = {value!r}: must be a string")
    if name == "accounting" and value not in ("physical", "paper"):
        raise InputError(f"metadata.accounting = {value!r}: must be 'physical' or 'paper'")
    if name == "optimizer" and value not in OPTIMIZER_STATE_COPIES:
        raise InputError(f"metadata.optimizer = {value!r}: must be one of "
                         f"{', '.join(OPTIMIZER_STATE_COPIES)}")
    return value


def _bytes(name: str, value: Any) -> int:
    if _number(name, value) != int(value):
        raise InputError(f"metadata.{name} = {value!r}: must be a whole number of bytes")
    return int(value)


def _fraction(name: str, value: Any) -> float:
    if _number(name, value) > 1:
        raise InputError(f"metadata.{name} = {value!r}: must be in [0, 1]")
    return float(value)


def _model_options(name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in value.items()):
        raise InputError(f"metadata.model_options = {value!r}: must map option names to "
                         "whole numbers")
    return dict(value)


def _solver(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"metadata.solver = {value!r}: must be a table")
    return dict(value)


def _reader(name: str) -> Callable[[str, Any], Any] | None:
    """How the field ``name`` is checked and typed (None: a field poetsim keeps as is)."""
    if name in _TEXT:
        return _text
    if name in _BYTES:
        return _bytes
    if name in _SECONDS_OR_JOULES:
        return lambda field, value: float(_number(field, value))
    if name in _FRACTIONS:
        return _fraction
    return _STRUCTURED.get(name)


def parse_metadata(raw: Mapping[str, Any], *, source: str | None = None) -> ScheduleMetadata:
    """Check and type ``raw`` (a schedule's metadata object); errors start with ``source``
    when given."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    try:
        for name, value in raw.items():
            if value is None:
                continue
            read = _reader(name)
            if read is None:
                extra[name] = value
            else:
                fields[name] = read(name, value)
        # the words are resolved again on the graph: they must be words poetsim reads
        from poetsim.request import check_request_words

        try:
            check_request_words(fields.get("ram"), fields.get("deadline"))
        except InputError as err:
            raise InputError(f"metadata.{err}") from None
    except InputError as err:
        if source is None:
            raise
        raise InputError(f"{source}: {err}") from None
    return ScheduleMetadata(**fields, extra=extra)


def _expected(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"metadata.expected = {value!r}: must be a table of "
                         f"{', '.join(EXPECTED_FIELDS)}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        kind = EXPECTED_FIELDS.get(key)
        where = f"expected.{key}"
        if kind is None:
            raise InputError(f"metadata.{where}: unknown field; allowed: "
                             f"{', '.join(EXPECTED_FIELDS)}")
        if item is None:
            out[key] = None
        elif kind == "verdict":
            if item not in ("PASS", "FAIL"):
                raise InputError(f"metadata.{where} = {item!r}: must be 'PASS' or 'FAIL'")
            out[key] = item
        elif kind == "bytes":
            if _number(where, item) != int(item):
                raise InputError(f"metadata.{where} = {item!r}: must be a whole number of bytes")
            out[key] = int(item)
        else:
            out[key] = float(_number(where, item))
    return out


def disagreements(meta: ScheduleMetadata, recomputed: Mapping[str, Any]) -> list[str]:
    """One line per recorded field that differs from ``recomputed`` (the request's
    :meth:`~poetsim.request.Request.metadata`), saying which value poetsim uses."""
    lines = []
    for name in ("board", "accounting", "budget_bytes", "budget_activation_bytes",
                 "resident_bytes", "flash_weight_bytes", "streamed_weight_bytes", "deadline_s"):
        recorded = getattr(meta, name)
        if recorded is None:
            continue
        now = recomputed.get(name)
        same = (recorded == now if not isinstance(recorded, float) or now is None
                else math.isclose(recorded, now, rel_tol=1e-12, abs_tol=0.0))
        if not same:
            lines.append(f"the schedule file says {name} = {recorded!r}, poetsim uses {now!r} "
                         "(recomputed from the graph, the board and the request)")
    return lines


#: The readers of the metadata fields that are tables.
_STRUCTURED: dict[str, Callable[[str, Any], Any]] = {
    "model_options": _model_options, "solver": _solver,
    "expected": lambda _name, value: _expected(value)}


def stamped(schedule: Schedule, *, method: str, request: Mapping[str, Any] | None = None,
            **fields: Any) -> Schedule:
    """The one writer of a schedule's metadata: ``schedule`` with the request it was made
    for (``request``: :meth:`poetsim.request.Request.metadata`), ``method`` and the
    method's ``fields`` (status, predicted figures, gap, bound, ...) merged in, in that
    order. The result must read back (:func:`parse_metadata`): a writer that records a
    figure no reader accepts is a bug of poetsim's, found here rather than in the file."""
    out = schedule.with_metadata(**(request or {}), method=method, **fields)
    try:
        parse_metadata(out.metadata)
    except InputError as err:
        raise InternalError(f"{method} recorded metadata that does not read back: {err}"
                            ) from None
    return out
