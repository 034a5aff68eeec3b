"""Compaction: a schedule whose buffers fit the RAM in bytes but not in any layout the
planner finds is laid out again with MOVE steps that close the gaps.

:func:`compact` walks the op list (its one replay, :class:`~poetsim.schedule.replay.Replay`)
with an allocator over an arena of ``room_bytes`` above the resident state: each buffer a
step makes resident goes into the smallest free gap that holds it (best fit: it leaves
the large gaps for large buffers). When a step's buffers find no gap though the free bytes
would hold them, the live tensors slide down, lowest first, each to the lowest address
free of the buffers that cannot move (held weights), one MOVE step each (right before
that step, in its stage); then the step's buffers are placed again. A HOLD_WEIGHTS or
READ_WEIGHTS and the COMPUTE it belongs to are placed together, the MOVEs before them all
(the contract keeps them adjacent). A MOVE's destination lies below its source, so the
copy never crosses a live buffer: the bytes between are free. The result carries its
layout (every buffer, the moved tensors in two pieces), and the contract's checker judges
both (:func:`~poetsim.schedule.arena.adopt_layout`).

Only tensors move: a workspace lives during its COMPUTE alone, and held weights are
loaded by a run of their owner, where a runtime keeps them. An in-place output shares its
input's bytes between its COMPUTE and the input's FREE, where RAM does not grow, so no
MOVE is ever needed there.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from poetsim.schedule.arena import adopt_layout
from poetsim.schedule.layout import Buffer, Layout
from poetsim.schedule.ops import Action, Schedule, Step
from poetsim.schedule.replay import ContractViolation, Replay, held_weight_bytes, replay

__all__ = ["compact"]

#: The steps bound to the COMPUTE after them (no step may come between).
_BOUND = frozenset({Action.HOLD_WEIGHTS, Action.READ_WEIGHTS})


@attrs.define
class _Live:
    """A buffer live now: where, how large, since which step (of the new list)."""

    kind: str
    op: int
    offset_bytes: int
    size_bytes: int
    start: int
    shares: int = -1


class _Arena:
    """The allocator of :func:`compact`: live buffers, the new steps and the closed
    buffers of the layout, offsets relative to the end of the resident state."""

    def __init__(self, room_bytes: int) -> None:
        self.room = room_bytes
        self.live: dict[tuple[str, int], _Live] = {}
        self.steps: list[Step] = []
        self.closed: list[Buffer] = []
        self.moves = 0

    def _gaps(self, extra: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The free ranges ``[a, z)`` of the arena, the live buffers and ``extra`` taken."""
        taken = sorted([(b.offset_bytes, b.offset_bytes + b.size_bytes)
                        for b in self.live.values()] + extra)
        gaps, low = [], 0
        for a, z in taken:
            if a > low:
                gaps.append((low, a))
            low = max(low, z)
        if low < self.room:
            gaps.append((low, self.room))
        return gaps

    def fit(self, sizes: list[int]) -> list[int] | None:
        """Offsets for ``sizes`` (placed largest first, each in the smallest gap that
        holds it), or None."""
        placed: list[tuple[int, int]] = []
        at = [0] * len(sizes)
        for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
            need = sizes[i]
            if need == 0:
                continue
            holds = [(z - a, a) for a, z in self._gaps(placed) if z - a >= need]
            if not holds:
                return None
            at[i] = min(holds)[1]
            placed.append((at[i], at[i] + need))
        return at

    def slide(self, stage: int, base: int) -> None:
        """Every live tensor slid down as far as the buffers that stay allow, lowest
        first, one MOVE step each (``base``: the resident state's bytes). A tensor
        sharing bytes in place with another stays too (never the case where RAM grows)."""
        live = self.live.values()
        shared = {b.shares for b in live if b.shares >= 0 and ("tensor", b.shares) in self.live}
        movable = [b for b in live if b.kind == "tensor" and b.size_bytes > 0
                   and b.op not in shared and ("tensor", b.shares) not in self.live]
        fixed = sorted((b.offset_bytes, b.offset_bytes + b.size_bytes)
                       for b in live if not any(b is m for m in movable))
        cursor = 0
        for b in sorted(movable, key=lambda b: b.offset_bytes):
            new = cursor
            for a, z in fixed:
                if a < new + b.size_bytes and new < z:
                    new = z
            if new < b.offset_bytes:
                self.move(b, new, stage, base)
            cursor = b.offset_bytes + b.size_bytes

    def move(self, b: _Live, to: int, stage: int, base: int) -> None:
        """A MOVE of tensor ``b`` to ``to``: its buffer so far closes after the copy."""
        p = len(self.steps)
        self.steps.append(Step.move(b.op, stage, b.offset_bytes + base, to + base))
        self.closed.append(Buffer(b.kind, b.op, b.start, p + 1, b.size_bytes,
                                  b.offset_bytes + base, b.shares))
        b.offset_bytes, b.start, b.shares = to, p, -1
        self.moves += 1

    def open(self, kind: str, op: int, offset: int, size: int, start: int,
             shares: int = -1) -> None:
        self.live[(kind, op)] = _Live(kind, op, offset, size, start, shares)

    def close(self, kind: str, op: int, end: int, base: int) -> None:
        b = self.live.pop((kind, op), None)
        if b is not None:
            self.closed.append(Buffer(b.kind, b.op, b.start, end, b.size_bytes,
                                      b.offset_bytes + base, b.shares))


def _needs(replayed: Replay, position: int, step: Step, held: list[int]
           ) -> list[tuple[str, int]]:
    """The buffers step ``position`` opens: (kind, bytes), the output first."""
    graph = replayed.graph
    k = step.op
    if step.action is Action.COMPUTE:
        out = [] if position in replayed.overwrites else [("tensor", graph.ops[k].output_bytes)]
        return out + [("workspace", graph.ops[k].workspace_bytes)]
    if step.action is Action.PAGE_IN:
        return [("tensor", graph.ops[k].output_bytes)]
    if step.action is Action.HOLD_WEIGHTS:
        return [("held", held[k])]
    return []


def compact(replayed: Replay, *, room_bytes: int, resident_bytes: int = 0) -> Schedule | None:
    """The finished ``replayed`` schedule with MOVE steps and a layout whose arena is at
    most ``resident_bytes + room_bytes`` (see the module docstring), checked by the
    contract; None when the allocator finds no room for a step even after sliding every
    tensor down (or the schedule has MOVEs already, or no schedule)."""
    schedule = replayed.schedule
    if schedule is None or replayed.move_positions or not replayed.finished:
        return None
    held = held_weight_bytes(replayed.graph)
    arena = _Arena(room_bytes)
    base = resident_bytes
    steps, i = replayed.steps, 0
    while i < len(steps):
        j = _run_end(steps, i)
        if not _place(arena, replayed, range(i, j + 1), held, base):
            return None
        i = j + 1
    n = len(arena.steps)
    for kind, op in list(arena.live):
        arena.close(kind, op, n, base)
    buffers = [b for b in arena.closed if b.size_bytes > 0]
    if resident_bytes > 0:
        buffers.append(Buffer("resident", -1, 0, n, resident_bytes))
    top = max((b.top_bytes for b in buffers), default=0)
    moved = attrs.evolve(schedule, steps=arena.steps,
                         layout=Layout(top, sorted(buffers, key=lambda b: (b.start,
                                                                           b.offset_bytes))))
    try:  # the contract and the layout's rules judge what the allocator did
        adopt_layout(replay(replayed.graph, moved), moved.layout,  # type: ignore[arg-type]
                     resident_bytes=resident_bytes)
    except ContractViolation as err:  # pragma: no cover - a bug of the allocator
        raise AssertionError(f"compaction made a layout the checker rejects: "
                             f"{err.violation.message}") from None
    return moved.with_metadata(arena_moves=arena.moves)


def _run_end(steps: Sequence[Step], i: int) -> int:
    """The last position of the run that starts at ``i``: a HOLD_WEIGHTS or READ_WEIGHTS
    and the steps up to its COMPUTE, which the contract keeps together (a MOVE goes before
    them all), else ``i`` alone."""
    j = i
    while steps[j].action in _BOUND and j + 1 < len(steps):
        j += 1
    return j


def _place(arena: _Arena, replayed: Replay, run: range, held: list[int], base: int) -> bool:
    """The old list's steps at ``run`` appended to the new one, their buffers opened
    (placed together, sliding the tensors down first if they find no gap) and closed;
    False: no room."""
    steps = replayed.steps
    needs = [(position, kind, size) for position in run
             for kind, size in _needs(replayed, position, steps[position], held)]
    sizes = [size for _, _, size in needs]
    at = arena.fit(sizes) if needs else []
    if at is None:
        arena.slide(steps[run.start].stage, base)
        at = arena.fit(sizes)
        if at is None:
            return False
    for position in run:
        step = steps[position]
        p = len(arena.steps)
        arena.steps.append(step)
        k, action = step.op, step.action
        into = replayed.overwrites.get(position, -1)
        if into >= 0:  # in place: the output takes its input's offset
            source = arena.live[("tensor", into)]
            arena.open("tensor", k, source.offset_bytes, replayed.graph.ops[k].output_bytes,
                       p, shares=into)
        for (where, kind, size), offset in zip(needs, at):
            if where != position:
                continue
            if kind == "workspace":
                if size > 0:
                    arena.closed.append(Buffer("workspace", k, p, p + 1, size, offset + base))
            else:
                arena.open(kind, k, offset, size, p)
        if action is Action.FREE:
            arena.close("tensor", k, p, base)
        elif action is Action.DROP_WEIGHTS:
            arena.close("held", k, p, base)
    return True
