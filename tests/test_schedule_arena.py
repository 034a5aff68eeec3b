"""The arena layout of a schedule's buffers (poetsim.schedule.arena)."""

from __future__ import annotations

import itertools

import attrs
import pytest
from test_sim_support import PAGE_BOTH, PAGE_R, PAGE_X, hand

from poetsim.schedule import check_schedule, plain_schedule
from poetsim.schedule.arena import Buffer, check_layout, plan_arena
from poetsim.schedule.replay import replay


@pytest.mark.parametrize("lines", [PAGE_R, PAGE_X, PAGE_BOTH])
def test_a_layout_holds_every_buffer_apart_and_is_at_least_the_byte_peak(residual, lines):
    schedule = hand(residual, *lines)
    plan = plan_arena(replay(residual, schedule), resident_bytes=100)
    assert check_layout(plan.buffers, plan.arena_bytes) is None
    # the byte peak of the buffers is the checker's: the lifetimes are the contract's
    assert plan.peak_bytes == check_schedule(residual, schedule, resident_bytes=100).peak_ram_bytes
    assert plan.arena_bytes >= plan.peak_bytes
    resident = [b for b in plan.buffers if b.kind == "resident"]
    assert resident == [Buffer("resident", -1, 0, len(schedule.steps), 100, 0)]


def test_the_plain_schedule_of_a_chain_lays_out_at_its_byte_peak(residual):
    plan = plan_arena(replay(residual, plain_schedule(residual)))
    assert plan.optimal and plan.fragmentation_bytes == 0


def test_a_prefetch_holds_its_buffer_from_its_trigger(residual):
    schedule = hand(residual, *PAGE_R)
    r = replay(residual, schedule)
    page_in = next(i for i, s in enumerate(schedule.steps) if s.action.value == "page_in")
    early = plan_arena(r, prefetch_from={page_in: page_in - 3})
    k = schedule.steps[page_in].op
    starts = sorted(b.start for b in early.buffers if b.kind == "tensor" and b.op == k)
    assert page_in - 3 in starts and page_in not in starts
    assert early.peak_bytes >= plan_arena(r).peak_bytes


def _brute_force_arena(buffers: list[Buffer], unit: int) -> int:
    """The least arena of ``buffers`` (sizes multiples of ``unit``) over every placement
    on the ``unit`` grid: exhaustive, for a handful of buffers."""
    top = sum(b.size_bytes for b in buffers)
    best = top
    slots = range(0, top, unit)
    for offsets in itertools.product(slots, repeat=len(buffers)):
        placed = [attrs.evolve(b, offset_bytes=o) for b, o in zip(buffers, offsets)]
        high = max(b.top_bytes for b in placed)
        if high < best and check_layout(placed, high) is None:
            best = high
    return best


def _random_buffers(seed: int, count: int, unit: int) -> list[Buffer]:
    """``count`` tensor buffers of 1 to 3 ``unit`` over ``count + 2`` steps (seeded)."""
    import random

    rng = random.Random(seed)
    buffers = []
    for op in range(count):
        start = rng.randrange(0, count)
        buffers.append(Buffer("tensor", op, start, rng.randrange(start + 1, count + 2),
                              unit * rng.choice((1, 2, 3))))
    return buffers


@pytest.mark.parametrize("seed", range(12))
def test_tiny_layouts_match_the_brute_force_optimum(seed):
    """Four buffers of 1 to 3 units over five steps: the planner's arena is the least any
    placement on the unit grid can have, and never below the byte peak."""
    from poetsim.schedule.placement import ORDERS, Buffers, peak_bytes, place

    unit = 16
    buffers = _random_buffers(seed, 4, unit)
    best = min(place(buffers, order)[1] for order in ORDERS)
    alone = Buffers(buffers, [[i] for i in range(4)], [])
    assert best == _brute_force_arena(buffers, unit) >= peak_bytes(alone, 6)


def test_a_layout_that_overlaps_or_overflows_is_named():
    unit = 16
    buffers = [Buffer("tensor", 0, 0, 2, 2 * unit), Buffer("tensor", 1, 1, 3, unit),
               Buffer("workspace", 2, 2, 4, 2 * unit)]
    from poetsim.schedule.placement import place

    placed, top = place(buffers, "size")
    assert check_layout(placed, top) is None and top == 3 * unit
    on_b = next(b for b in placed if b.op == 1)
    clash = [attrs.evolve(b, offset_bytes=on_b.offset_bytes) if b.op == 0 else b
             for b in placed]
    message = check_layout(clash, 10 * unit)
    assert message.startswith("tensor buffer of op #0") and "share bytes" in message
    assert "outside the arena of 47 B" in check_layout(placed, top - 1)


@pytest.mark.parametrize("seed", [380, 396, 821, 1932, 2268, 2760])
def test_the_local_search_reaches_the_optimum_the_greedy_orders_miss(seed):
    """Five buffers where every greedy order leaves the arena above the brute-force
    optimum: moving a buffer that reaches the top earlier in the order finds it."""
    from poetsim.schedule.placement import (
        ORDERS,
        Buffers,
        conflicts,
        improve,
        peak_bytes,
        place,
        sequence_of,
    )

    unit = 16
    buffers = _random_buffers(seed, 5, unit)
    alone = Buffers(buffers, [[i] for i in range(5)], [])
    greedy = {order: place(buffers, order)[1] for order in ORDERS}
    optimum = _brute_force_arena(buffers, unit)
    assert min(greedy.values()) > optimum
    order = min(greedy, key=greedy.__getitem__)
    near = conflicts(buffers)
    offsets, top, improved = improve(alone, sequence_of(alone, order), near, peak_bytes(alone, 7))
    assert top == optimum and improved >= 1
    placed = [attrs.evolve(b, offset_bytes=o) for b, o in zip(buffers, offsets)]
    assert check_layout(placed, top) is None
    assert improve(alone, sequence_of(alone, order), near, 0)[:2] == (offsets, top)


def test_a_prefetch_that_crowds_the_arena_starts_where_the_layout_leaves_room(residual):
    """Held from three steps early the paged-in buffer raises the arena; with the RAM
    limit at the arena without it, the buffers are laid out from their own steps and the
    prefetch starts no earlier than its bytes are free."""
    from poetsim.schedule.arena import adopt_layout

    schedule = hand(residual, *PAGE_X)
    r = replay(residual, schedule)
    page_in = next(i for i, s in enumerate(schedule.steps) if s.action.value == "page_in")
    late = plan_arena(r)
    early = plan_arena(r, prefetch_from={page_in: page_in - 3})
    assert early.arena_bytes > late.arena_bytes
    fitted = plan_arena(r, prefetch_from={page_in: page_in - 3}, fit_bytes=late.arena_bytes)
    assert fitted.arena_bytes == late.arena_bytes
    assert check_layout(fitted.buffers, fitted.arena_bytes) is None
    start = fitted.prefetch_from.get(page_in, page_in)
    assert page_in - 3 <= start <= page_in
    # the layout is one a schedule file may carry: the checker adopts it as it is
    adopted = adopt_layout(r, fitted.layout)
    assert adopted.prefetch_from == fitted.prefetch_from


@pytest.mark.parametrize("seed", [380, 1932, 2760, 7])
def test_the_exact_search_proves_the_brute_force_optimum(seed):
    """From the worst greedy order, SCIP's search finds the least arena of five buffers and
    proves it: the brute force's."""
    from poetsim.schedule.placement import (
        ORDERS,
        Buffers,
        conflicts,
        exact_search,
        offsets_for,
        peak_bytes,
        sequence_of,
    )

    unit = 16
    buffers = _random_buffers(seed, 5, unit)
    alone = Buffers(buffers, [[i] for i in range(5)], [])
    near = conflicts(buffers)
    worst = max((offsets_for(alone, sequence_of(alone, order), near) for order in ORDERS),
                key=lambda placed: max(placed[1]))
    found = exact_search(alone, near, worst[0], max(worst[1]), peak_bytes(alone, 7))
    assert found is not None
    offsets, top, proved = found
    optimum = _brute_force_arena(buffers, unit)
    assert top == optimum and proved
    placed = [attrs.evolve(b, offset_bytes=o) for b, o in zip(buffers, offsets)]
    assert check_layout(placed, top) is None


def test_a_runs_stop_time_cuts_a_long_layout_short():
    """#32 item 3: laying out a long chain's buffers is quadratic; within a run whose
    stop time has passed (:mod:`poetsim.clock`) it raises OutOfTime, outside any run it
    lays out as ever."""
    import time

    from poetsim import clock
    from poetsim.errors import OutOfTime
    from poetsim.zoo import build_model

    graph = build_model("mlp", layers=250, width=16)
    walk = replay(graph, plain_schedule(graph))
    with clock.limit(time.perf_counter() - 1), pytest.raises(OutOfTime):
        plan_arena(walk)
    assert plan_arena(walk).arena_bytes > 0
