"""Where a schedule's buffers live: one static arena, every buffer at an offset.

A :class:`Layout` is the address plan a microcontroller runtime follows (TFLite Micro,
TinyEngine): each :class:`Buffer` that a step of the op list makes resident (the resident
state, a tensor from the step that makes it resident to its FREE, a workspace during its
COMPUTE, held weights from HOLD_WEIGHTS to DROP_WEIGHTS) at ``offset_bytes`` from the
arena's start. Lifetimes are step positions, half-open ``[start, end)``. A layout is valid
when every buffer lies within ``[0, arena_bytes)`` and no two buffers live at the same step
share a byte, except a tensor written in place into the buffer of the input it overwrites
(:attr:`Buffer.shares`, :meth:`~poetsim.schedule.replay.Replay.in_place`) and the two
buffers of a tensor that a MOVE step copies (compaction): its buffer before the MOVE,
live up to and including the MOVE's step, and the one after it, live from that step, may
overlap (the copy is a ``memmove``).

:mod:`poetsim.schedule.arena` plans layouts and checks a schedule file's layout against
the op list; schedule files carry it (:mod:`poetsim.schedule.io`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

__all__ = ["KINDS", "Buffer", "Layout", "check_layout"]

#: What a buffer holds.
KINDS = ("resident", "tensor", "workspace", "held")


@attrs.frozen
class Buffer:
    """One buffer of the arena: ``size_bytes`` at ``offset_bytes``, live over the step
    positions ``[start, end)``. ``op`` is the op whose output, workspace or held weights
    it is (-1 for the resident state)."""

    kind: str
    op: int
    start: int
    end: int
    size_bytes: int
    offset_bytes: int = 0
    #: a tensor written in place: the op whose tensor buffer it took over at ``start``
    #: (its bytes lie in that buffer's first ``size_bytes``); -1: none
    shares: int = -1

    @property
    def top_bytes(self) -> int:
        return self.offset_bytes + self.size_bytes

    def overlaps(self, other: Buffer) -> bool:
        """Live at the same step and sharing a byte."""
        return (self.start < other.end and other.start < self.end
                and self.offset_bytes < other.top_bytes and other.offset_bytes < self.top_bytes)

    def takes_over(self, other: Buffer) -> bool:
        """This tensor was written in place into ``other``'s buffer, and lies within it:
        the one overlap a layout allows."""
        return (self.shares == other.op and self.kind == other.kind == "tensor"
                and other.start <= self.start < other.end
                and other.offset_bytes <= self.offset_bytes
                and self.top_bytes <= other.top_bytes)

    def moved_from(self, other: Buffer) -> bool:
        """This tensor buffer is where a MOVE copied ``other``, the same tensor's buffer
        before it (both live at the MOVE's step): the two may overlap, a ``memmove``."""
        return (self.kind == other.kind == "tensor" and self.op == other.op
                and other.end == self.start + 1)


@attrs.frozen
class Layout:
    """A schedule's address plan: ``buffers`` placed in an arena of ``arena_bytes``."""

    arena_bytes: int
    buffers: tuple[Buffer, ...] = attrs.field(converter=tuple)

    @property
    def resident_bytes(self) -> int:
        """The resident state the layout keeps (at its own offset, for the whole run)."""
        return sum(b.size_bytes for b in self.buffers if b.kind == "resident")


def _name(buffer: Buffer, names: Sequence[str] | None) -> str:
    if buffer.op < 0:
        return "resident state"
    what = repr(names[buffer.op]) if names is not None else f"#{buffer.op}"
    return f"{buffer.kind} buffer of op {what}"


def check_layout(buffers: Iterable[Buffer], arena_bytes: int,
                 names: Sequence[str] | None = None) -> str | None:
    """The first problem of a layout, in one line, or None: a buffer outside
    ``[0, arena_bytes)`` or two buffers live at the same step that share a byte (ops
    named by ``names``, else by index)."""
    items = sorted(buffers, key=lambda b: (b.start, b.offset_bytes))
    for b in items:
        if b.offset_bytes < 0 or b.top_bytes > arena_bytes:
            return (f"{_name(b, names)} at [{b.offset_bytes}, {b.top_bytes}) lies outside "
                    f"the arena of {arena_bytes} B")
    # sweep over time: buffers live together are compared pairwise
    live: list[Buffer] = []
    for b in items:
        live = [a for a in live if a.end > b.start]
        for a in live:
            if a.overlaps(b) and not (b.takes_over(a) or a.takes_over(b)
                                      or b.moved_from(a) or a.moved_from(b)):
                return (f"{_name(a, names)} at [{a.offset_bytes}, {a.top_bytes}) and "
                        f"{_name(b, names)} at [{b.offset_bytes}, {b.top_bytes}) share bytes "
                        f"while both are live (from step {max(a.start, b.start)})")
        live.append(b)
    return None
