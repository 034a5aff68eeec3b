"""The arena: every buffer a schedule keeps in RAM placed at an offset of one static region.

A microcontroller runtime (TFLite Micro, TinyEngine) gives each tensor an offset in one
preallocated arena, so a schedule whose byte peak fits the RAM can still fail to allocate
because of fragmentation. :func:`plan_arena` lays out the buffers of a schedule's replay
(:class:`~poetsim.schedule.replay.Replay`):

* the **resident state** (parameters, gradients, optimizer state the request keeps in
  RAM): one block at offset 0, live for the whole run;
* every **tensor** from the step that makes it resident (its COMPUTE or PAGE_IN, or the
  earlier step a prefetch starts at) to the FREE that releases it (or the end);
* every **workspace** (a COMPUTE's scratch, weight-slice buffers included) during its
  COMPUTE alone;
* every **hold** of weights from its HOLD_WEIGHTS to its DROP_WEIGHTS.

Lifetimes are step positions, half-open ``[start, end)``: a buffer is live while step
``p`` runs when ``start <= p < end``, so the bytes live at each step are the replay's RAM
column (:attr:`Replay.ram_bytes`) and the largest sum is the byte peak. Two buffers whose
lifetimes overlap may not share a byte.

Placing intervals at offsets with the least top address is dynamic storage allocation
(NP-hard). The planner tries several greedy orders, each placing a buffer at the lowest
offset free of every placed buffer that is live at the same time (TFLite Micro's
``GreedyMemoryPlanner`` orders by size), and keeps the lowest arena. The byte peak is a
lower bound: an arena equal to it is optimal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import numpy as np

from poetsim.memo import PerObject
from poetsim.schedule.ops import Action
from poetsim.schedule.replay import Replay, held_weight_bytes

__all__ = ["ArenaPlan", "Buffer", "check_layout", "plan_arena"]

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

    @property
    def top_bytes(self) -> int:
        return self.offset_bytes + self.size_bytes

    def overlaps(self, other: Buffer) -> bool:
        """Live at the same step and sharing a byte."""
        return (self.start < other.end and other.start < self.end
                and self.offset_bytes < other.top_bytes and other.offset_bytes < self.top_bytes)


@attrs.frozen
class ArenaPlan:
    """A layout: every buffer at its offset. ``arena_bytes`` is the highest top address
    (resident state included), ``peak_bytes`` the byte peak of the same buffers (a lower
    bound on any arena), ``fragmentation_bytes`` their difference; ``order`` names the
    greedy order that gave it."""

    buffers: tuple[Buffer, ...]
    arena_bytes: int
    peak_bytes: int
    order: str

    @property
    def fragmentation_bytes(self) -> int:
        return self.arena_bytes - self.peak_bytes

    @property
    def optimal(self) -> bool:
        """The arena equals the byte peak: no layout can be smaller."""
        return self.arena_bytes == self.peak_bytes

    def as_dict(self) -> dict[str, int | str]:
        return {"arena_bytes": self.arena_bytes, "arena_peak_bytes": self.peak_bytes,
                "fragmentation_bytes": self.fragmentation_bytes, "arena_order": self.order}


def _lifetimes(replay: Replay, prefetch_from: Mapping[int, int]) -> list[Buffer]:
    """The buffers of a finished replay, unplaced (see the module docstring)."""
    graph = replay.graph
    size = [op.output_bytes for op in graph.ops]
    workspace = [op.workspace_bytes for op in graph.ops]
    held_bytes = held_weight_bytes(graph)
    open_tensor: dict[int, int] = {}   # tensor -> start of its live buffer
    open_held: dict[int, int] = {}
    out: list[Buffer] = []
    n = len(replay.steps)
    for p, step in enumerate(replay.steps):
        k, action = step.op, step.action
        if action is Action.COMPUTE:
            open_tensor[k] = p
            if workspace[k] > 0:
                out.append(Buffer("workspace", k, p, p + 1, workspace[k]))
        elif action is Action.PAGE_IN:
            open_tensor[k] = prefetch_from.get(p, p)
        elif action is Action.FREE:
            out.append(Buffer("tensor", k, open_tensor.pop(k), p, size[k]))
        elif action is Action.HOLD_WEIGHTS:
            open_held[k] = p
        elif action is Action.DROP_WEIGHTS:
            out.append(Buffer("held", k, open_held.pop(k), p, held_bytes[k]))
    out += [Buffer("tensor", k, start, n, size[k]) for k, start in open_tensor.items()]
    out += [Buffer("held", k, start, n, held_bytes[k]) for k, start in open_held.items()]
    return [b for b in out if b.size_bytes > 0]


def _peak(buffers: list[Buffer], n: int) -> int:
    """The most bytes live at one step."""
    delta = np.zeros(n + 1, dtype=np.int64)
    for b in buffers:
        delta[b.start] += b.size_bytes
        delta[b.end] -= b.size_bytes
    return int(np.cumsum(delta).max(initial=0))


#: The greedy orders tried: name -> sort key of a buffer (placed in increasing key order).
_ORDERS = {
    "size": lambda b: (-b.size_bytes, b.start, b.op),
    "lifetime": lambda b: (-(b.end - b.start), -b.size_bytes, b.start, b.op),
    "area": lambda b: (-(b.end - b.start) * b.size_bytes, b.start, b.op),
    "start": lambda b: (b.start, -b.size_bytes, b.op),
}


def _conflicts(buffers: list[Buffer]) -> list[list[int]]:
    """For each buffer, the buffers live at some step with it (a sweep over the starts)."""
    near: list[list[int]] = [[] for _ in buffers]
    live: list[int] = []
    for i in sorted(range(len(buffers)), key=lambda i: buffers[i].start):
        start = buffers[i].start
        live = [j for j in live if buffers[j].end > start]
        for j in live:
            near[i].append(j)
            near[j].append(i)
        live.append(i)
    return near


def _place(buffers: list[Buffer], order: str,
           near: list[list[int]] | None = None) -> tuple[list[Buffer], int]:
    """Place ``buffers`` greedily in ``order``: each at the lowest offset free of the
    placed buffers live at the same time (``near``, :func:`_conflicts`). The placed
    buffers and the arena's top."""
    offsets, top = _offsets(buffers, order, _conflicts(buffers) if near is None else near)
    return [attrs.evolve(b, offset_bytes=o) for b, o in zip(buffers, offsets)], top


def _offsets(buffers: list[Buffer], order: str, near: list[list[int]]
             ) -> tuple[list[int], int]:
    """:func:`_place`'s offsets, in the buffers' order, and the top."""
    key = _ORDERS[order]
    size = [b.size_bytes for b in buffers]
    offset = [-1] * len(buffers)
    top = 0
    for i in sorted(range(len(buffers)), key=lambda i: key(buffers[i])):
        taken = sorted((offset[j], offset[j] + size[j]) for j in near[i] if offset[j] >= 0)
        low, need = 0, size[i]
        for a, z in taken:
            if a >= low + need:
                break  # the gap below this one holds it
            if z > low:
                low = z
        offset[i] = low
        top = max(top, low + need)
    return offset, top


#: Layouts of schedules still alive, per resident state and prefetches: a Monte
#: Carlo, compare and regress simulate the same schedule again and again, and the layout is
#: most of a short simulation's set-up.
_PLANS: PerObject[dict[tuple, ArenaPlan]] = PerObject()


def plan_arena(replay: Replay, *, resident_bytes: int = 0,
               prefetch_from: Mapping[int, int] | None = None) -> ArenaPlan:
    """A layout of a finished ``replay``'s buffers (see the module docstring), the resident
    state at offset 0 below them. ``prefetch_from`` maps a PAGE_IN's position to the
    earlier step its buffer is taken at (the transfer planner's trigger)."""
    prefetch_from = prefetch_from or {}
    if replay.schedule is None:
        return _plan(replay, resident_bytes, prefetch_from)
    plans = _PLANS(replay.schedule, lambda _schedule: {})
    # the replay checked that the schedule's fingerprint is its graph's
    key = (resident_bytes, tuple(sorted(prefetch_from.items())))
    if key not in plans:
        plans[key] = _plan(replay, resident_bytes, prefetch_from)
    return plans[key]


def _plan(replay: Replay, resident_bytes: int, prefetch_from: Mapping[int, int]) -> ArenaPlan:
    buffers = _lifetimes(replay, prefetch_from)
    n = len(replay.steps)
    peak = _peak(buffers, n)
    near = _conflicts(buffers)
    best: tuple[int, str, list[int]] | None = None
    for order in _ORDERS:
        offsets, top = _offsets(buffers, order, near)
        if best is None or top < best[0]:
            best = (top, order, offsets)
        if top == peak:  # as low as any layout can be
            break
    assert best is not None
    top, order, offsets = best
    base = [Buffer("resident", -1, 0, n, resident_bytes)] if resident_bytes > 0 else []
    placed = [attrs.evolve(b, offset_bytes=o + resident_bytes)
              for b, o in zip(buffers, offsets)]
    return ArenaPlan(tuple(sorted(base + placed, key=lambda b: (b.start, b.offset_bytes))),
                     resident_bytes + top, resident_bytes + peak, order)


def check_layout(buffers: Iterable[Buffer], arena_bytes: int) -> str | None:
    """The first problem of a layout, in one line, or None: a buffer outside
    ``[0, arena_bytes)`` or two buffers live at the same step that share a byte."""
    items = sorted(buffers, key=lambda b: (b.start, b.offset_bytes))
    for b in items:
        if b.offset_bytes < 0 or b.top_bytes > arena_bytes:
            return (f"{b.kind} buffer of op #{b.op} at [{b.offset_bytes}, {b.top_bytes}) lies "
                    f"outside the arena of {arena_bytes} B")
    # sweep over time: buffers live together are compared pairwise
    live: list[Buffer] = []
    for b in items:
        live = [a for a in live if a.end > b.start]
        for a in live:
            if a.overlaps(b):
                return (f"{a.kind} buffer of op #{a.op} at [{a.offset_bytes}, {a.top_bytes}) "
                        f"and {b.kind} buffer of op #{b.op} at [{b.offset_bytes}, "
                        f"{b.top_bytes}) share bytes while both are live (from step "
                        f"{max(a.start, b.start)})")
        live.append(b)
    return None
