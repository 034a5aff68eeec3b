"""Placing a schedule's buffers at arena offsets: the greedy orders, the local search
and the exact search in SCIP that :mod:`poetsim.schedule.arena` runs.

Placing intervals at offsets with the least top address is dynamic storage allocation
(NP-hard). :func:`place` puts each buffer, in one greedy order (:data:`ORDERS`), at the
lowest offset free of every placed buffer live at the same time; :func:`improve` moves a
buffer that reaches the top earlier in the order (seeded, a counted number of moves:
deterministic); :func:`exact_search` searches a small layout in SCIP (OLLA's formulation, a
counted number of nodes) and may prove it the least. The byte peak (:func:`peak_bytes`)
is a lower bound: an arena equal to it is optimal.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import numpy as np

from poetsim.clock import Ticker, stop_at
from poetsim.schedule.layout import Buffer

__all__ = ["EXACT_GROUPS", "ORDERS", "Buffers", "conflicts", "exact_search", "hull", "improve",
           "offsets_for", "peak_bytes", "place", "sequence_of"]


@attrs.frozen
class Buffers:
    """A replay's buffers, unplaced: ``groups`` lists the buffers placed at one offset
    (an input and the outputs written in place into it), ``shared`` the intervals
    ``(start, end, bytes)`` where an in-place output lies within its input's buffer."""

    buffers: list[Buffer]
    groups: list[list[int]]
    shared: list[tuple[int, int, int]]
    #: group -> the arena offset a MOVE step fixes it at (resident state included)
    pins: dict[int, int] = attrs.field(factory=dict)

    def group_of(self) -> list[int]:
        """Each buffer's group."""
        out = [0] * len(self.buffers)
        for g, members in enumerate(self.groups):
            for i in members:
                out[i] = g
        return out


def peak_bytes(found: Buffers, n: int) -> int:
    """The most bytes live at one step (an in-place output counted once)."""
    delta = np.zeros(n + 1, dtype=np.int64)
    for b in found.buffers:
        delta[b.start] += b.size_bytes
        delta[b.end] -= b.size_bytes
    for start, end, nbytes in found.shared:
        delta[start] -= nbytes
        delta[end] += nbytes
    return int(np.cumsum(delta).max(initial=0))


#: The greedy orders tried: name -> sort key of a buffer (placed in increasing key order).
ORDERS = {
    "size": lambda b: (-b.size_bytes, b.start, b.op),
    "lifetime": lambda b: (-(b.end - b.start), -b.size_bytes, b.start, b.op),
    "area": lambda b: (-(b.end - b.start) * b.size_bytes, b.start, b.op),
    "start": lambda b: (b.start, -b.size_bytes, b.op),
}


def conflicts(buffers: list[Buffer]) -> list[list[int]]:
    """For each buffer, the buffers live at some step with it (a sweep over the starts)."""
    near: list[list[int]] = [[] for _ in buffers]
    live: list[int] = []
    # quadratic when many buffers live at once (a long chain): a run's limit cuts it short
    watch = Ticker(stop_at(), every=4096)
    for i in sorted(range(len(buffers)), key=lambda i: buffers[i].start):
        start = buffers[i].start
        watch.tick(len(live) + 1)
        live = [j for j in live if buffers[j].end > start]
        for j in live:
            near[i].append(j)
            near[j].append(i)
        live.append(i)
    return near


def place(buffers: list[Buffer], order: str) -> tuple[list[Buffer], int]:
    """Place ``buffers`` (each alone) greedily in ``order``; the placed buffers and the
    arena's top (for tests)."""
    found = Buffers(buffers, [[i] for i in range(len(buffers))], [])
    sequence = sequence_of(found, order)
    at, tops = offsets_for(found, sequence, conflicts(buffers))
    return [attrs.evolve(b, offset_bytes=o) for b, o in zip(buffers, at)], max(tops, default=0)


def hull(buffers: list[Buffer], members: list[int]) -> Buffer:
    """One buffer covering a group (its sort key's stand-in)."""
    if len(members) == 1:
        return buffers[members[0]]
    first = buffers[members[0]]
    return attrs.evolve(first, start=min(buffers[i].start for i in members),
                        end=max(buffers[i].end for i in members),
                        size_bytes=max(buffers[i].size_bytes for i in members))


def sequence_of(found: Buffers, order: str) -> list[int]:
    """The groups in ``order`` (:data:`ORDERS`), by their hulls."""
    key = ORDERS[order]
    keys = [key(hull(found.buffers, members)) for members in found.groups]
    return sorted((g for g in range(len(found.groups)) if g not in found.pins),
                  key=keys.__getitem__)


def offsets_for(found: Buffers, sequence: Sequence[int], near: list[list[int]]
             ) -> tuple[list[int], list[int]]:
    """Place ``found``'s groups one by one in ``sequence``, each at the lowest offset
    free of the placed buffers live at the same time as one of its members (``near``,
    :func:`conflicts`), taking the group's largest size. The offset of every buffer, and
    the top address of every group."""
    buffers, groups = found.buffers, found.groups
    size = [b.size_bytes for b in buffers]
    group_of = found.group_of()
    at = [-1] * len(groups)
    tops = [0] * len(groups)
    for g, pin in found.pins.items():  # a MOVE's buffers are where the op list says
        at[g], tops[g] = pin, pin + max(size[i] for i in groups[g])
    watch = Ticker(stop_at(), every=4096)
    for g in sequence:
        watch.tick(sum(len(near[i]) for i in groups[g]) + 1)
        if g in found.pins:
            continue
        taken = sorted((at[group_of[j]], at[group_of[j]] + size[j])
                       for i in groups[g] for j in near[i]
                       if at[group_of[j]] >= 0 and group_of[j] != g)
        low, need = 0, max(size[i] for i in groups[g])
        for a, z in taken:
            if a >= low + need:
                break  # the gap below this one holds it
            if z > low:
                low = z
        at[g] = low
        tops[g] = low + need
    return [at[g] for g in group_of], tops


#: The local search after the greedy orders (:func:`improve`): at most this many moves,
#: at most this many visits of a pair of buffers live at once in all its placements (a
#: placement visits every such pair), and no more than this many moves in a row that do
#: not lower the arena: a counted effort, so deterministic.
_MAX_MOVES = 400
_MOVE_PAIR_VISITS = 4_000_000
_STALE_MOVES = 150


def improve(found: Buffers, sequence: list[int], near: list[list[int]], goal: int
             ) -> tuple[list[int], int, int]:
    """A local search over the placing order from ``sequence``: move one group that
    reaches the top to a random earlier place (seeded) and keep the new order unless its
    arena is higher, until the arena reaches ``goal``, the moves are spent or
    :data:`_STALE_MOVES` in a row did not lower it. The best offsets, their top and the
    moves that improved it."""
    offsets, tops = offsets_for(found, sequence, near)
    top, best = max(tops, default=0), (offsets, max(tops, default=0))
    rng = random.Random(0)
    improved = stale = 0
    moves = min(_MAX_MOVES, _MOVE_PAIR_VISITS // max(sum(map(len, near)), 1))
    for _ in range(moves if top > goal else 0):
        stale += 1
        if stale > _STALE_MOVES:
            break
        highest = [p for p, g in enumerate(sequence) if tops[g] == top]
        if not highest:  # a buffer a MOVE pins reaches the top: no order lowers it
            break
        position = highest[rng.randrange(len(highest))]
        moved = list(sequence)
        g = moved.pop(position)
        moved.insert(rng.randrange(position + 1), g)
        offsets, new_tops = offsets_for(found, moved, near)
        new_top = max(new_tops)
        if new_top <= top:  # sideways moves too: the search walks plateaus
            sequence, tops, top = moved, new_tops, new_top
            if top < best[1]:
                best, improved, stale = (offsets, top), improved + 1, 0
                if top <= goal:
                    break
    return best[0], best[1], improved


#: The exact search (:func:`exact`) runs on layouts of at most this many groups that the
#: greedy orders and the local search leave above the RAM limit, for at most this many
#: branch-and-bound nodes (a counted effort: deterministic).
EXACT_GROUPS = 60
_EXACT_NODES = 2_000


def exact_search(found: Buffers, near: list[list[int]], offsets: list[int], top: int, peak: int
           ) -> tuple[list[int], int, bool] | None:
    """The least arena of ``found``'s groups by SCIP (OLLA's formulation: an offset per
    group and, for each two groups live at one step, a binary for which lies below),
    started from the layout ``offsets`` of arena ``top``, with the byte peak as its lower
    bound. The offsets, their top and whether SCIP proved it the least; None when it
    found nothing lower and proved nothing."""
    from poetsim.interrupt import scip_model, solving

    buffers, groups = found.buffers, found.groups
    group_of = found.group_of()
    size = [max(buffers[i].size_bytes for i in members) for members in groups]
    at = [0] * len(groups)
    for i, o in enumerate(offsets):
        at[group_of[i]] = o
    pairs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, others in enumerate(near):
        for j in others:
            g, h = group_of[i], group_of[j]
            if g < h:
                pairs.setdefault((g, h), []).append((i, j))
    model = scip_model("arena")
    model.setParam("limits/totalnodes", _EXACT_NODES)
    model.setParam("parallel/maxnthreads", 1)
    o = [model.addVar(f"o{g}", vtype="I", lb=found.pins.get(g, 0),
                      ub=found.pins.get(g, top - size[g])) for g in range(len(groups))]
    arena = model.addVar("arena", lb=peak, ub=top)
    below = {}
    for (g, h), members in sorted(pairs.items()):
        x = below[g, h] = model.addVar(f"x{g}_{h}", vtype="B")  # 1: g lies below h
        for i, j in members:
            model.addCons(o[g] + buffers[i].size_bytes <= o[h] + top * (1 - x))
            model.addCons(o[h] + buffers[j].size_bytes <= o[g] + top * x)
    for g in range(len(groups)):
        model.addCons(o[g] + size[g] <= arena)
    model.setObjective(arena)
    start = model.createSol()
    for g in range(len(groups)):
        model.setSolVal(start, o[g], at[g])
    for (g, h), x in below.items():
        model.setSolVal(start, x, 1 if at[g] < at[h] else 0)
    model.setSolVal(start, arena, top)
    model.addSol(start, free=True)
    with solving():
        model.optimize()
    proved = model.getStatus() == "optimal"
    best = model.getBestSol()
    new_top = round(model.getSolVal(best, arena)) if best is not None else top
    if new_top >= top and not proved:
        return None
    placed = [round(model.getSolVal(best, o[g])) for g in range(len(groups))]
    new_top = max(p + s for p, s in zip(placed, size))
    return [placed[group_of[i]] for i in range(len(buffers))], new_top, proved
