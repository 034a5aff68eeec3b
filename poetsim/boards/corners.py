"""Ranges of board numbers and the corners a schedule is judged at.

A board number whose public measurements disagree with its nominal value may be a range:
in a board file, ``{ value = typical, min = ..., max = ..., source, ref }``. Only numbers
that change what a schedule costs may have one (:data:`RANGE_EFFECTS`: throughputs,
latencies, powers), and ``min <= value <= max``.

A **corner** is the board with every range at one end. ``typical`` is the board as given;
``slow`` puts each range at the end that costs time (the lower throughput, the longer
latency; a power does not change the time, so it stays typical); ``costly`` at the end
that costs energy (the lower throughput and the longer latency too, since the parts draw
power for longer, and the higher power). A PASS at the typical corner that FAILs at the
slow one is a PASS on a board as nominal as its datasheet, not on every board of its
kind. :func:`corner_board` makes one; every corner of a board file is built when the file
is read, so a range that would make an inconsistent board (an idle power above the active
one at the costly corner) is a one-line error there; so is the board with every range
at the end no corner uses (the higher throughput, the shorter latency, the lower power:
:func:`check_ranges`), so that no end of a range goes unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from poetsim.boards.spec import Board, BoardFieldError, Source

__all__ = ["CORNERS", "RANGE_EFFECTS", "check_range", "check_ranges", "corner_board",
           "corner_boards"]

#: The corners, typical first.
CORNERS = ("typical", "slow", "costly")

#: The numbers that may be ranges, with the end of the range that costs time and the end
#: that costs energy (None: the number does not change that figure).
RANGE_EFFECTS: Mapping[str, tuple[str | None, str]] = {
    "cpu.flops_per_s": ("min", "min"),
    "cpu.int8_ops_per_s": ("min", "min"),
    "cpu.fp16_flops_per_s": ("min", "min"),
    "cpu.active_power_w": (None, "max"),
    "cpu.idle_power_w": (None, "max"),
    "cpu.sleep_power_w": (None, "max"),
    "ram.bandwidth_bytes_per_s": ("min", "min"),
    "dma.active_power_w": (None, "max"),
    "storage.read_throughput_bytes_per_s": ("min", "min"),
    "storage.write_throughput_bytes_per_s": ("min", "min"),
    "storage.read_latency_s": ("max", "max"),
    "storage.write_latency_s": ("max", "max"),
    "storage.read_power_w": (None, "max"),
    "storage.write_power_w": (None, "max"),
    "storage.idle_power_w": (None, "max"),
    "storage.sleep_power_w": (None, "max"),
    "storage.wakeup_latency_s": ("max", "max"),
    "storage.wakeup_energy_j": (None, "max"),
    "bus.compute_slowdown": ("max", "max"),
}


def check_range(key: str, low: object, typical: float, high: object) -> tuple[float, float]:
    """``(min, max)`` of the range of board number ``key`` (dotted), or a one-line
    :class:`BoardFieldError` naming the key, the value and the rule."""
    if key not in RANGE_EFFECTS:
        raise BoardFieldError(key, typical, "cannot be a range (min/max): it does not change "
                              "what a schedule costs; ranges are for "
                              + ", ".join(sorted(RANGE_EFFECTS)))
    ends = {}
    for name, end in (("min", low), ("max", high)):
        if isinstance(end, bool) or not isinstance(end, (int, float)) or end != end:
            raise BoardFieldError(f"{key}.{name}", end, "must be a number")
        ends[name] = float(end)
    if not ends["min"] <= typical <= ends["max"]:
        raise BoardFieldError(key, typical, f"must lie within its range: min = {low!r} <= "
                              f"value <= max = {high!r}")
    return ends["min"], ends["max"]


def corner_board(board: Board, corner: str) -> Board:
    """``board`` with every range at ``corner``'s end (:data:`CORNERS`); the typical
    corner is ``board`` itself. Each moved number's source says which end it is."""
    if corner not in CORNERS:
        raise ValueError(f"corner = {corner!r}: must be one of {', '.join(CORNERS)}")
    if corner == "typical" or not board.ranges:
        return board
    index = 0 if corner == "slow" else 1
    return _at_ends(board, {key: RANGE_EFFECTS[key][index] for key in board.ranges}, corner)


def _at_ends(board: Board, ends: Mapping[str, str | None], corner: str,
             why: str = "") -> Board:
    """``board`` with each range at its end in ``ends`` ("min", "max"; None: typical),
    errors naming ``corner`` (and ``why`` it is built)."""
    changes: dict[str, dict[str, float]] = {}
    sources = dict(board.sources)
    for key, (low, high) in board.ranges.items():
        end = ends[key]
        if end is None:
            continue
        section, field = key.split(".")
        changes.setdefault(section, {})[field] = low if end == "min" else high
        source = board.sources.get(key)
        if source is not None:
            sources[key] = Source(source.kind, f"{source.ref} [{corner} corner: the {end} of "
                                               "its range]")
    sections = {}
    try:
        for name, fields in changes.items():
            try:
                sections[name] = attrs.evolve(getattr(board, name), **fields)
            except BoardFieldError as err:
                raise err.within(name) from None
        return attrs.evolve(board, sources=sources, **sections)
    except BoardFieldError as err:
        raise BoardFieldError(err.field, err.value,
                              f"{err.rule} (at the {corner} corner of the board's ranges"
                              f"{why})") from None


def check_ranges(board: Board) -> None:
    """Build every corner of ``board`` and the board at the ends no corner uses (the
    opposite of the costly end: the higher throughput, the shorter latency, the lower
    power); a one-line :class:`BoardFieldError` if one is not a consistent board."""
    corner_boards(board)
    _at_ends(board, {key: "min" if RANGE_EFFECTS[key][1] == "max" else "max"
                     for key in board.ranges}, "best",
             ": every range at the end no judged corner uses")


def corner_boards(board: Board) -> dict[str, Board]:
    """Every corner of ``board`` by name, typical first."""
    return {corner: corner_board(board, corner) for corner in CORNERS}
