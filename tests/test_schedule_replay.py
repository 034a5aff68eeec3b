"""The one replay of the op-list contract (poetsim.schedule.replay)."""

from __future__ import annotations

import pytest
from test_sim_support import PAGE_R, hand

from poetsim.boards import get_board
from poetsim.schedule import RULES, Action, Schedule, ScheduleError, Step, check_schedule
from poetsim.schedule.replay import ContractViolation, Replay, replay
from poetsim.sim import simulate


def test_valid_schedules_replay_to_the_end(residual):
    r = replay(residual, hand(residual, *PAGE_R))
    assert r.finished and len(r.ram_bytes) == len(hand(residual, *PAGE_R).steps)


BROKEN = {
    "unknown_op": [Step("compute", 99)],
    "input_not_resident": [Step("compute", 1)],
    "already_resident": [Step("compute", 0), Step("compute", 0)],
    "not_resident": [Step("free", 0)],
    "not_on_storage": [Step("compute", 0), Step("free", 0), Step("page_in", 0)],
    "redundant_page_out": [Step("compute", 0), Step("page_out", 0), Step("page_out", 0)],
    "never_computed": [Step("compute", 0)],
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_structural_rule_is_named_as_the_checker_names_it(residual, rule):
    assert rule in RULES
    schedule = Schedule.for_graph(residual, BROKEN[rule])
    violation = check_schedule(residual, schedule).violation
    assert violation.rule == rule
    with pytest.raises(ContractViolation) as raised:
        replay(residual, schedule)
    assert raised.value.violation == violation
    # the simulator cannot execute it, and says so with the same rule
    with pytest.raises(ScheduleError, match=rf"cannot simulate: .*\[{rule}\]"):
        simulate(residual, get_board("rpi4"), schedule)


def test_budget_and_capacity_are_not_structural(residual):
    schedule = hand(residual, *PAGE_R)
    assert not check_schedule(residual, schedule, budget_bytes=1,
                              storage_capacity_bytes=1).valid
    replay(residual, schedule)
    with pytest.raises(ContractViolation, match="storage_full"):
        replay(residual, schedule, storage_capacity_bytes=1)


def test_the_state_shown_with_an_effect_is_the_state_before_its_step(residual):
    schedule = hand(residual, *PAGE_R)
    walk = Replay(residual, schedule)
    for effect in walk:
        k = effect.op
        if effect.action is Action.COMPUTE:
            assert not walk.resident[k]
            assert all(walk.resident[u] for u in residual.predecessors(k))
        elif effect.action is Action.FREE:
            assert walk.resident[k]
    assert walk.finished


def test_a_page_in_knows_its_reader_and_what_came_before_it(residual):
    schedule = hand(residual, *PAGE_R)
    r = replay(residual, schedule)
    steps = schedule.steps
    assert r.page_in_consumer  # the hand schedule pages something in
    for i, reader in r.page_in_consumer.items():
        k = steps[i].op
        assert steps[r.page_in_after[i]].op == k and r.page_in_after[i] < i
        if reader >= 0:
            assert steps[reader].action is Action.COMPUTE
            assert k in residual.predecessors(steps[reader].op)
            between = steps[i + 1:reader]
            assert not any(s.op == k and s.action is Action.FREE for s in between)
            assert not any(s.action is Action.COMPUTE and k in residual.predecessors(s.op)
                           for s in between)
    assert sorted(r.transfer_positions) == [
        i for i, s in enumerate(steps) if s.action in (Action.PAGE_IN, Action.PAGE_OUT)]


def test_a_spent_time_limit_stops_a_long_replay_and_simulation():
    """#32: replaying, checking, pricing and simulating a long schedule read the command's
    limit; the plain schedule made under it too."""
    import time

    from poetsim import clock
    from poetsim.costs import op_costs
    from poetsim.errors import OutOfTime
    from poetsim.schedule import plain_schedule
    from poetsim.schedule.model import predict
    from poetsim.zoo import build_model

    graph = build_model("mlp", layers=600, width=4)
    board = get_board("rpi4")
    costs = op_costs(graph, board)
    spent = clock.command(time.perf_counter() - 1e9, 1.0)
    with spent, pytest.raises(OutOfTime):
        plain_schedule(graph)
    schedule = plain_schedule(graph)
    walk = replay(graph, schedule)
    for work in (lambda: replay(graph, schedule), lambda: check_schedule(graph, schedule),
                 lambda: predict(graph, costs, walk),
                 lambda: simulate(graph, board, schedule, costs=costs)):
        with clock.command(time.perf_counter() - 1e9, 1.0), pytest.raises(OutOfTime):
            work()
