"""The structural pre-check (poetsim.sim.validate)."""

from __future__ import annotations

import pytest
from test_sim_support import PAGE_R, hand

from poetsim.schedule import RULES, Schedule, ScheduleError, Step, check_schedule
from poetsim.sim.validate import validate_structure


def test_valid_schedules_pass(residual):
    validate_structure(residual, hand(residual, *PAGE_R))


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
def test_each_structural_rule_is_reported_as_the_checker_names_it(residual, rule):
    assert rule in RULES
    schedule = Schedule.for_graph(residual, BROKEN[rule])
    assert check_schedule(residual, schedule).violation.rule == rule
    with pytest.raises(ScheduleError, match=rf"\[{rule}\]"):
        validate_structure(residual, schedule)


def test_budget_and_capacity_are_not_structural(residual):
    schedule = hand(residual, *PAGE_R)
    assert not check_schedule(residual, schedule, budget_bytes=1,
                              storage_capacity_bytes=1).valid
    validate_structure(residual, schedule)
