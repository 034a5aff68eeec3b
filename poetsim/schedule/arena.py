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

An in-place COMPUTE (:meth:`~poetsim.schedule.replay.Replay.in_place`) writes its output
into the buffer of the input it overwrites: the two tensor buffers are placed at the same
offset, and they alone may share bytes, from that COMPUTE until the input's FREE
(:attr:`Buffer.shares`). A MOVE step (compaction) splits its tensor's buffer in two: the
one before it, live through the MOVE's step, at the MOVE's source offset, and the one
after it, live from that step, at its destination; both are pinned to those offsets (the
op list says where they are) and the planner places every other buffer around them.
:func:`poetsim.schedule.compaction.compact` writes such MOVEs.

Lifetimes are step positions, half-open ``[start, end)``: a buffer is live while step
``p`` runs when ``start <= p < end``, so the bytes live at each step are the replay's RAM
column (:attr:`Replay.ram_bytes`) and the largest sum is the byte peak. Two buffers whose
lifetimes overlap may not share a byte.

Placing intervals at offsets with the least top address is dynamic storage allocation
(NP-hard). The planner tries several greedy orders, each placing a buffer at the lowest
offset free of every placed buffer that is live at the same time (TFLite Micro's
``GreedyMemoryPlanner`` orders by size), then improves the best order by a local search
(the simulator stops once the arena fits its RAM limit), and keeps the lowest arena; a
small layout still above the RAM limit then goes to an exact search in SCIP. Those
searches are :mod:`poetsim.schedule.placement`'s. The byte peak is a lower bound: an
arena equal to it is optimal. When
prefetched buffers, taken at their transfer's trigger, crowd a layout that does not fit,
the buffers are laid out from their own steps and each prefetch starts as early as the
layout leaves its bytes free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from poetsim.memo import PerObject
from poetsim.schedule.layout import Buffer, Layout, check_layout
from poetsim.schedule.ops import Action, Step
from poetsim.schedule.placement import (
    EXACT_GROUPS,
    ORDERS,
    Buffers,
    conflicts,
    exact_search,
    improve,
    offsets_for,
    peak_bytes,
    sequence_of,
)
from poetsim.schedule.replay import (
    ContractViolation,
    Replay,
    Violation,
    held_weight_bytes,
    move_extra_bytes,
)

__all__ = ["ArenaPlan", "Buffer", "Layout", "adopt_layout", "check_layout", "plan_arena"]


@attrs.frozen
class ArenaPlan:
    """A layout: every buffer at its offset. ``arena_bytes`` is the highest top address
    (resident state included), ``peak_bytes`` the byte peak of the same buffers (a lower
    bound on any arena), ``fragmentation_bytes`` their difference; ``order`` names the
    greedy order that gave it (``"file"``: the schedule file's, :func:`adopt_layout`).
    ``prefetch_from`` maps a PAGE_IN's position to the earlier step its buffer is live
    from, where a transfer may start."""

    buffers: tuple[Buffer, ...]
    arena_bytes: int
    peak_bytes: int
    order: str
    prefetch_from: Mapping[int, int] = attrs.field(factory=dict, converter=dict, eq=False)

    @property
    def layout(self) -> Layout:
        """The address plan a schedule file records."""
        return Layout(self.arena_bytes, self.buffers)

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


def _lifetimes(replay: Replay, prefetch_from: Mapping[int, int]) -> Buffers:
    """The buffers of a finished replay, unplaced (see the module docstring)."""
    graph = replay.graph
    size = [op.output_bytes for op in graph.ops]
    workspace = [op.workspace_bytes for op in graph.ops]
    held_bytes = held_weight_bytes(graph)
    overwrites = replay.overwrites
    # tensor -> (start of its live buffer, its group, the op it took over or -1)
    open_tensor: dict[int, tuple[int, int, int]] = {}
    open_held: dict[int, int] = {}
    taken: dict[int, tuple[int, int]] = {}  # tensor -> (step, bytes) of an in-place output
    out: list[Buffer] = []
    group_of: list[int] = []
    shared: list[tuple[int, int, int]] = []
    groups = 0

    def close(k: int, end: int) -> None:
        start, group, into = open_tensor.pop(k)
        out.append(Buffer("tensor", k, start, end, size[k], shares=into))
        group_of.append(group)
        if k in taken:
            at, nbytes = taken.pop(k)
            shared.append((at, end, nbytes))

    def alone(buffer: Buffer) -> None:
        nonlocal groups
        out.append(buffer)
        group_of.append(groups)
        groups += 1

    n = len(replay.steps)
    for p, step in enumerate(replay.steps):
        k, action = step.op, step.action
        if action is Action.COMPUTE:
            into = overwrites.get(p, -1)
            if into >= 0:
                taken[into] = (p, size[k])
                open_tensor[k] = (p, open_tensor[into][1], into)
            else:
                open_tensor[k] = (p, groups, -1)
                groups += 1
            if workspace[k] > 0:
                alone(Buffer("workspace", k, p, p + 1, workspace[k]))
        elif action is Action.PAGE_IN:
            open_tensor[k] = (prefetch_from.get(p, p), groups, -1)
            groups += 1
        elif action is Action.FREE:
            close(k, p)
        elif action is Action.MOVE:  # the source stays live through the copy (pins: _pins)
            close(k, p + 1)
            shared.extend(_memmove_shared(p, step, size[k]))
            open_tensor[k] = (p, groups, -1)
            groups += 1
        elif action is Action.HOLD_WEIGHTS:
            open_held[k] = p
        elif action is Action.DROP_WEIGHTS:
            alone(Buffer("held", k, open_held.pop(k), p, held_bytes[k]))
    for k in list(open_tensor):
        close(k, n)
    for k, start in open_held.items():
        alone(Buffer("held", k, start, n, held_bytes[k]))
    return _grouped(out, group_of, shared, _pins(replay, out, group_of))


def _pins(replay: Replay, out: Sequence[Buffer], group_of: Sequence[int]) -> dict[int, int]:
    """Group -> the arena offset a MOVE step fixes it at: the moved tensor's buffer before
    the MOVE at its source, the one after it at its destination."""
    if not replay.move_positions:
        return {}
    before = {(b.op, b.end): g for b, g in zip(out, group_of) if b.kind == "tensor"}
    after = {(b.op, b.start): g for b, g in zip(out, group_of) if b.kind == "tensor"}
    pins: dict[int, int] = {}
    for p in replay.move_positions:
        step = replay.steps[p]
        pins[before[(step.op, p + 1)]] = step.from_offset_bytes
        pins[after[(step.op, p)]] = step.to_offset_bytes
    return pins


def _memmove_shared(p: int, step: Step, size_bytes: int) -> list[tuple[int, int, int]]:
    """The bytes a MOVE at ``p``'s source and destination share while it copies."""
    overlap = size_bytes - move_extra_bytes(step, size_bytes)
    return [(p, p + 1, overlap)] if overlap > 0 else []


def _grouped(out: list[Buffer], group_of: list[int], shared: list[tuple[int, int, int]],
             pins: Mapping[int, int]) -> Buffers:
    """The buffers with bytes, each group's members by their index among them, and the
    pins by those groups' new numbers."""
    members: dict[int, list[int]] = {}
    buffers: list[Buffer] = []
    for b, g in zip(out, group_of):
        if b.size_bytes > 0:
            members.setdefault(g, []).append(len(buffers))
            buffers.append(b)
    number = {g: i for i, g in enumerate(members)}
    return Buffers(buffers, list(members.values()), shared,
                    {number[g]: o for g, o in pins.items() if g in number})


#: Layouts of schedules still alive, per resident state and prefetches (planned), or per
#: resident state (the schedule file's own, checked by :func:`adopt_layout`): a Monte
#: Carlo, compare and regress simulate the same schedule again and again, and the layout is
#: most of a short simulation's set-up.
_PLANS: PerObject[dict[tuple, ArenaPlan]] = PerObject()


def plan_arena(replay: Replay, *, resident_bytes: int = 0,
               prefetch_from: Mapping[int, int] | None = None,
               fit_bytes: int | None = None) -> ArenaPlan:
    """A layout of a finished ``replay``'s buffers (see the module docstring), the resident
    state at offset 0 below them. ``prefetch_from`` maps a PAGE_IN's position to the
    earlier step its buffer is taken at (the transfer planner's trigger; the plan's
    ``prefetch_from`` says where each starts). The local search runs only while the arena
    is above ``fit_bytes`` (None: until its moves are spent or it reaches the byte peak):
    a layout that fits the RAM needs no more search."""
    prefetch_from = prefetch_from or {}
    if replay.schedule is None:
        return _plan(replay, resident_bytes, prefetch_from, fit_bytes)
    plans = _PLANS(replay.schedule, lambda _schedule: {})
    # the replay checked that the schedule's fingerprint is its graph's
    key = (resident_bytes, tuple(sorted(prefetch_from.items())), fit_bytes)
    if key not in plans:
        plans[key] = _plan(replay, resident_bytes, prefetch_from, fit_bytes)
    return plans[key]


def _plan(replay: Replay, resident_bytes: int, prefetch_from: Mapping[int, int],
          fit_bytes: int | None) -> ArenaPlan:
    n = len(replay.steps)
    plan = _placed(_lifetimes(replay, prefetch_from), n, resident_bytes, prefetch_from,
                   fit_bytes)
    if prefetch_from and fit_bytes is not None and plan.arena_bytes > fit_bytes:
        # prefetched buffers taken early crowd the layout: lay every buffer out from its
        # own step, then let each prefetch start as early as its place stays free (its
        # transfer may then stall its reader; a layout that fits comes first)
        found = _lifetimes(replay, {})
        late = _placed(found, n, resident_bytes, {}, fit_bytes)
        late = _prefetch_into_free_space(late, replay, prefetch_from, found.shared)
        if late.arena_bytes < plan.arena_bytes:
            plan = late
    return plan


def _placed(found: Buffers, n: int, resident_bytes: int, prefetch_from: Mapping[int, int],
            fit_bytes: int | None) -> ArenaPlan:
    if found.pins:  # the planner places buffers above the resident state
        found = _pinned_above(found, resident_bytes)
    buffers = found.buffers
    peak = peak_bytes(found, n)
    near = conflicts(buffers)
    best: tuple[int, str, list[int]] | None = None
    for order in ORDERS:
        sequence = sequence_of(found, order)
        offsets, tops = offsets_for(found, sequence, near)
        top = max(tops, default=0)
        if best is None or top < best[0]:
            best, best_sequence = (top, order, offsets), sequence
        if top == peak:  # as low as any layout can be
            break
    assert best is not None
    # then a local search from the best order (which of two buffers goes first decides
    # much of the fragmentation), while the arena is above the peak or what fits
    goal = peak if fit_bytes is None else max(peak, fit_bytes - resident_bytes)
    if best[0] > goal:
        offsets, top, improved = improve(found, best_sequence, near, goal)
        if improved:
            best = (top, f"{best[1]}, improved ({improved} moves)", offsets)
    if fit_bytes is not None and best[0] > goal and len(found.groups) <= EXACT_GROUPS:
        # a tight case: the layout misses the RAM limit
        exact = exact_search(found, near, best[2], best[0], peak)
        if exact is not None:
            offsets, top, proved = exact
            best = (top, "exact (SCIP" + (", proven least)" if proved else ")"), offsets)
    top, order, offsets = best
    base = [Buffer("resident", -1, 0, n, resident_bytes)] if resident_bytes > 0 else []
    placed = [attrs.evolve(b, offset_bytes=o + resident_bytes)
              for b, o in zip(buffers, offsets)]
    if found.pins:  # two MOVEs may pin buffers live at once on the same bytes
        problem = check_layout(placed, resident_bytes + top)
        if problem is not None:
            raise ContractViolation(Violation(-1, None, "layout_overlap",
                                              f"the MOVE steps' offsets: {problem}"))
    return ArenaPlan(tuple(sorted(base + placed, key=lambda b: (b.start, b.offset_bytes))),
                     resident_bytes + top, resident_bytes + peak, order, prefetch_from)


def _pinned_above(found: Buffers, resident_bytes: int) -> Buffers:
    """``found`` with its MOVE pins relative to the end of the resident state."""
    low = min(found.pins.values())
    if low < resident_bytes:
        raise ContractViolation(Violation(
            -1, None, "move_mismatch",
            f"a MOVE step's offset {low} lies in the resident state (its first "
            f"{resident_bytes} B)"))
    return attrs.evolve(found, pins={g: o - resident_bytes for g, o in found.pins.items()})


def _prefetch_into_free_space(plan: ArenaPlan, replay: Replay,
                              prefetch_from: Mapping[int, int],
                              shared: list[tuple[int, int, int]]) -> ArenaPlan:
    """``plan`` (laid out without prefetches) with each PAGE_IN's buffer taken earlier, up
    to the step ``prefetch_from`` wants, while no other buffer is live in its bytes;
    ``shared``: the in-place intervals of its buffers (:class:`Buffers`)."""
    buffers = list(plan.buffers)
    steps = replay.steps
    index = {(b.op, b.start): i for i, b in enumerate(buffers) if b.kind == "tensor"}
    earliest: dict[int, int] = {}
    for p in sorted(prefetch_from):
        i = index[(steps[p].op, p)]
        b = buffers[i]
        top = b.offset_bytes + b.size_bytes
        below = [c for j, c in enumerate(buffers) if j != i and c.start < p
                 and c.offset_bytes < top and b.offset_bytes < c.offset_bytes + c.size_bytes]
        start = p
        while start > prefetch_from[p] and not any(c.start < start <= c.end for c in below):
            start -= 1
        if start < p:
            buffers[i] = attrs.evolve(b, start=start)
            earliest[p] = start
    resident = [b.size_bytes for b in buffers if b.op < 0]
    peak = peak_bytes(Buffers([b for b in buffers if b.op >= 0], [], shared), len(steps))
    return ArenaPlan(tuple(sorted(buffers, key=lambda b: (b.start, b.offset_bytes))),
                     plan.arena_bytes, peak + sum(resident), plan.order + ", prefetch fitted",
                     earliest)


def adopt_layout(replay: Replay, layout: Layout, *, resident_bytes: int | None = 0
                 ) -> ArenaPlan:
    """A schedule file's ``layout`` as the arena of a finished ``replay``, checked.

    The layout must hold exactly the buffers the op list makes resident (the resident
    state of ``resident_bytes`` among them; None: whatever resident state the layout
    keeps), each over its lifetime: a PAGE_IN's tensor may
    start earlier (the step its prefetch may start at), every other buffer at its step
    [``layout_mismatch``]. Every buffer must lie within the arena [``layout_outside``] and
    no two live at the same step may share a byte but an in-place output and its input, or
    a MOVE's source and destination [``layout_overlap``]; each MOVE's tensor lies at its
    source offset up to the MOVE and at its destination from it [``move_mismatch``].
    Raises :class:`ContractViolation` naming the buffers and the step.
    """
    schedule = replay.schedule
    if schedule is None or layout is not schedule.layout:
        return _adopt(replay, layout, resident_bytes)
    plans = _PLANS(schedule, lambda _schedule: {})
    # the replay checked that the schedule's fingerprint is its graph's
    key = ("file", resident_bytes)
    if key not in plans:
        plans[key] = _adopt(replay, layout, resident_bytes)
    return plans[key]


def _adopt(replay: Replay, layout: Layout, resident_bytes: int | None) -> ArenaPlan:
    graph, steps = replay.graph, replay.steps
    names = [op.name for op in graph.ops]
    need = _lifetimes(replay, {})
    n = len(steps)
    required = list(need.buffers)
    if resident_bytes is None:
        resident_bytes = layout.resident_bytes
    if resident_bytes > 0:
        required.append(Buffer("resident", -1, 0, n, resident_bytes))

    def mismatch(detail: str) -> ContractViolation:
        return ContractViolation(Violation(-1, None, "layout_mismatch", f"layout: {detail}"))

    def key(b: Buffer) -> tuple[str, int, int, int]:
        return (b.kind, b.op, b.end, b.size_bytes)

    wanted = {key(b): b for b in required}
    adopted: list[Buffer] = []
    prefetch_from: dict[int, int] = {}
    for b in layout.buffers:
        match = wanted.pop(key(b), None)
        late = match is not None and b.start != match.start and not (
            b.start < match.start and b.kind == "tensor"
            and steps[match.start].action is Action.PAGE_IN)
        if match is None or late:
            where = "resident state" if b.op < 0 else f"{b.kind} buffer of op {names[b.op]!r}"
            raise mismatch(f"{where} over steps [{b.start}, {b.end}) of {b.size_bytes} B is "
                           "not a buffer this op list keeps (a layout for another schedule, "
                           "graph or resident state)")
        if b.start < match.start:
            prefetch_from[match.start] = b.start
        adopted.append(attrs.evolve(b, shares=match.shares))
    if wanted:
        b = min(wanted.values(), key=lambda b: (b.start, b.op))
        where = "the resident state" if b.op < 0 else f"{b.kind} buffer of op {names[b.op]!r}"
        raise mismatch(f"no offset for {where} over steps [{b.start}, {b.end}) of "
                       f"{b.size_bytes} B")
    _check_moves(replay, adopted, names)
    problem = check_layout(adopted, layout.arena_bytes, names)
    if problem is not None:
        rule = "layout_outside" if "outside the arena" in problem else "layout_overlap"
        raise ContractViolation(Violation(-1, None, rule, f"layout: {problem}"))
    found = Buffers([b for b in adopted if b.op >= 0], [], need.shared)
    peak = peak_bytes(found, n) + resident_bytes
    return ArenaPlan(tuple(adopted), layout.arena_bytes, peak, "file", prefetch_from)


def _check_moves(replay: Replay, adopted: Sequence[Buffer], names: Sequence[str]) -> None:
    """Every MOVE's offsets are where the layout keeps its tensor before and after it."""
    if not replay.move_positions:
        return
    before = {(b.op, b.end): b for b in adopted if b.kind == "tensor"}
    after = {(b.op, b.start): b for b in adopted if b.kind == "tensor"}
    for p in replay.move_positions:
        step = replay.steps[p]
        k = step.op
        source, target = before.get((k, p + 1)), after.get((k, p))
        if source is None or target is None:
            continue  # a tensor of no bytes has no buffer to move
        if (source.offset_bytes, target.offset_bytes) != (step.from_offset_bytes,
                                                          step.to_offset_bytes):
            raise ContractViolation(Violation(
                p, step, "move_mismatch",
                f"step {p} ({step.describe(replay.graph)}): the layout keeps tensor "
                f"{names[k]!r} at {source.offset_bytes} before the move and at "
                f"{target.offset_bytes} after it", k))
