"""Compaction: MOVE steps that lay out a schedule no layout without them fits
(poetsim.schedule.compaction, the MOVE rules of the contract, #28 item 4)."""

from __future__ import annotations

import attrs
import pytest
from test_sim_support import FRAGMENTED, UNIT_BYTES, fragmented_graph, fragmented_schedule

from poetsim.schedule import Action, Step, check_schedule
from poetsim.schedule.arena import adopt_layout, plan_arena
from poetsim.schedule.compaction import compact
from poetsim.schedule.replay import replay

#: The byte peak of the fragmented schedule: 4 units of tensors and two 4 B accumulators.
PEAK_BYTES = 4 * UNIT_BYTES + 8


def _fits_without_moves(units: int) -> bool:
    """Brute force: the :data:`FRAGMENTED` tensors alone placed at whole units within an
    arena of ``units``, no two live at once sharing one."""
    at: list[int] = []

    def place(i: int) -> bool:
        if i == len(FRAGMENTED):
            return True
        start, end, size = FRAGMENTED[i]
        for offset in range(units - size + 1):
            if all(not (start < e and s < end and offset < o + z and o < offset + size)
                   for o, (s, e, z) in zip(at, FRAGMENTED)):
                at.append(offset)
                if place(i + 1):
                    return True
                at.pop()
        return False

    return place(0)


@pytest.fixture(scope="module")
def fragmented():
    graph = fragmented_graph()
    return graph, fragmented_schedule(graph)


def test_no_layout_without_moves_fits_the_byte_peak(fragmented):
    """The case is fragmented: 4 units at most live, 5 needed by any layout (brute force
    of the tensors alone, and the planner's exact search on every buffer)."""
    graph, schedule = fragmented
    walk = replay(graph, schedule)
    assert walk.peak_bytes == PEAK_BYTES
    assert not _fits_without_moves(4) and _fits_without_moves(5)
    plan = plan_arena(walk, fit_bytes=PEAK_BYTES)
    assert plan.arena_bytes > PEAK_BYTES and plan.arena_bytes >= 5 * UNIT_BYTES


def test_compaction_lays_it_out_at_its_byte_peak_and_the_checker_agrees(fragmented):
    graph, schedule = fragmented
    moved = compact(replay(graph, schedule), room_bytes=PEAK_BYTES)
    assert moved is not None and moved.layout.arena_bytes <= PEAK_BYTES
    moves = [s for s in moved.steps if s.action is Action.MOVE]
    assert moves and moved.metadata["arena_moves"] == len(moves)
    # the other steps are the old ones in their order, each MOVE sliding a tensor down
    assert [s for s in moved.steps if s.action is not Action.MOVE] == list(schedule.steps)
    assert all(s.to_offset_bytes < s.from_offset_bytes for s in moves)
    check = check_schedule(graph, moved, budget_bytes=PEAK_BYTES)
    assert check.valid and check.peak_ram_bytes == PEAK_BYTES
    walk = replay(graph, moved)
    plan = adopt_layout(walk, moved.layout)
    assert plan.arena_bytes <= PEAK_BYTES and plan.peak_bytes == walk.peak_bytes
    # with a resident state below, every offset shifts by it
    based = compact(replay(graph, schedule), room_bytes=PEAK_BYTES, resident_bytes=100)
    assert based.layout.arena_bytes <= 100 + PEAK_BYTES
    assert check_schedule(graph, based, resident_bytes=100).valid


def test_compaction_gives_up_below_the_byte_peak(fragmented):
    graph, schedule = fragmented
    assert compact(replay(graph, schedule), room_bytes=PEAK_BYTES - 4) is None


def _moved(fragmented):
    graph, schedule = fragmented
    moved = compact(replay(graph, schedule), room_bytes=PEAK_BYTES)
    p = next(i for i, s in enumerate(moved.steps) if s.action is Action.MOVE)
    return graph, moved, p


def _with_step(schedule, p, step):
    steps = list(schedule.steps)
    steps[p] = step
    return attrs.evolve(schedule, steps=steps)


def test_a_move_counts_the_destination_beyond_its_source_while_it_copies(fragmented):
    graph, moved, p = _moved(fragmented)
    walk = replay(graph, moved)
    step = moved.steps[p]
    size = graph.ops[step.op].output_bytes
    extra = min(size, step.from_offset_bytes - step.to_offset_bytes)
    assert walk.ram_bytes[p] == walk.ram_bytes[p - 1] + extra
    assert walk.ram_bytes[p + 1] <= walk.ram_bytes[p]


def test_a_tampered_move_target_fails_the_check(fragmented):
    graph, moved, p = _moved(fragmented)
    step = moved.steps[p]
    # the step no longer agrees with the layout
    elsewhere = Step.move(step.op, step.stage, step.from_offset_bytes, step.to_offset_bytes + 4)
    violation = check_schedule(graph, _with_step(moved, p, elsewhere)).violation
    assert violation.rule == "move_mismatch" and violation.position == p
    assert f"step {p} (move 't" in violation.message
    # the layout moved with it, onto a tensor live at the MOVE: the two buffers named
    other = next(b for b in moved.layout.buffers if b.kind == "tensor" and b.op != step.op
                 and b.start < p < b.end)
    target = next(b for b in moved.layout.buffers if b.op == step.op and b.start == p)
    layout = attrs.evolve(moved.layout, buffers=[
        attrs.evolve(b, offset_bytes=other.offset_bytes) if b is target else b
        for b in moved.layout.buffers])
    onto = Step.move(step.op, step.stage, step.from_offset_bytes, other.offset_bytes)
    bad = attrs.evolve(_with_step(moved, p, onto), layout=layout)
    violation = check_schedule(graph, bad).violation
    assert violation.rule in ("layout_overlap", "layout_outside")
    assert "'t" in violation.message and "step" in violation.message


def test_a_move_of_a_tensor_not_in_ram_or_from_where_it_is_not_breaks_the_contract(
        fragmented):
    graph, moved, p = _moved(fragmented)
    step = moved.steps[p]
    gone = next(k for k in range(len(graph.ops)) if graph.ops[k].name == "t0")
    stray = Step.move(gone, step.stage, 0, 64)
    assert check_schedule(graph, _with_step(moved, p, stray)).violation.rule == "not_resident"
    # a second move must start where the first put the tensor
    again = Step.move(step.op, step.stage, step.from_offset_bytes, 0)
    steps = list(moved.steps)
    steps.insert(p + 1, again)
    violation = check_schedule(graph, attrs.evolve(moved, steps=steps, layout=None)).violation
    assert violation.rule == "move_mismatch" and violation.position == p + 1


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"from_offset_bytes": -1, "to_offset_bytes": 0},
     "step from_offset_bytes = -1: a move's offset must not be negative"),
    ({"from_offset_bytes": 8, "to_offset_bytes": 8},
     "move step to_offset_bytes = 8: must differ from its from_offset_bytes (a move must "
     "move)"),
    ({"from_offset_bytes": 1.5, "to_offset_bytes": 0},
     "step from_offset_bytes = 1.5: must be an integer"),
])
def test_a_move_step_refuses_bad_offsets(kwargs, text):
    from poetsim.errors import InputError

    with pytest.raises(InputError) as err:
        Step(Action.MOVE, 0, 0, **kwargs)
    assert str(err.value) == text
    with pytest.raises(InputError, match="only a move step has offsets"):
        Step(Action.FREE, 0, 0, to_offset_bytes=3)


@pytest.mark.parametrize("holds", [0, 1, 4])
def test_moves_go_before_the_weight_steps_bound_to_a_compute(holds):
    """On a graph whose weights stream from storage, a MOVE never comes between a
    HOLD_WEIGHTS or READ_WEIGHTS and its COMPUTE: the allocator, tight at the byte peak,
    slides before them all, and the contract accepts the result."""
    from test_schedule_check import with_holds

    from poetsim.graph.streaming import WeightsOnStorage, hold_owners
    from poetsim.schedule import plain_schedule
    from poetsim.zoo import build_model

    graph = WeightsOnStorage(trained=True).graph(
        build_model("mlp", layers=4, width=16, inplace_update=1))
    owners = hold_owners(graph)
    names = [op.name for k, op in enumerate(graph.ops) if owners[k] >= 0][:holds]
    walk = replay(graph, with_holds(graph, plain_schedule(graph).steps, names))
    moved = compact(walk, room_bytes=walk.peak_bytes)
    assert moved is not None and moved.count(Action.MOVE) > 0
    assert check_schedule(graph, moved, budget_bytes=walk.peak_bytes).valid
    for before, after in zip(moved.steps, moved.steps[1:]):
        if before.action in (Action.HOLD_WEIGHTS, Action.READ_WEIGHTS):
            assert after.action is not Action.MOVE
