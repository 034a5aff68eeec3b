"""RAM accounting, the peak and where it occurs, overflows (poetsim.sim.ram)."""

from __future__ import annotations

import pytest
from conftest import make_board
from test_sim_support import PAGE_R, hand

from poetsim.costs import op_costs
from poetsim.schedule import check_schedule, plain_schedule
from poetsim.sim import simulate
from poetsim.sim.ram import RamModel


def test_peak_and_where_it_occurs():
    ram = RamModel(budget_bytes=100, resident_bytes=10, record=True)
    ram.alloc(0.0, 30, 0, "a", "compute")
    ram.alloc(1.0, 40, 1, "b", "compute")
    ram.free(2.0, 30)
    ram.alloc(3.0, 20, 2, "c", "compute")
    assert (ram.peak, ram.peak_step, ram.peak_op, ram.peak_time_s) == (80, 1, "b", 1.0)
    assert ram.live == 70 and not ram.overflows
    assert ram.samples == [(0.0, 10), (0.0, 40), (1.0, 80), (2.0, 50), (3.0, 70)]


def test_an_overflow_is_recorded_and_the_allocation_happens():
    ram = RamModel(budget_bytes=50, resident_bytes=0)
    ram.alloc(0.0, 40, 0, "a", "compute")
    ram.alloc(1.0, 20, 3, "b", "page_in")
    assert ram.live == 60
    (over,) = ram.overflows
    assert (over.step, over.op, over.action, over.ram_bytes, over.excess_bytes) == (
        3, "b", "page_in", 60, 10)


def test_simulated_peak_equals_the_checker_peak(residual):
    for schedule in (plain_schedule(residual), hand(residual, *PAGE_R)):
        check = check_schedule(residual, schedule, resident_bytes=100)
        report = simulate(residual, make_board(), schedule, resident_bytes=100)
        assert report.peak_ram_bytes == check.peak_ram_bytes
        assert report.peak_step == check.peak_step
        assert report.peak_activation_bytes == check.peak_activation_bytes


def test_overflow_is_recorded_with_step_and_op_and_the_run_continues(residual):
    schedule = plain_schedule(residual)
    check = check_schedule(residual, schedule, budget_bytes=60)
    assert check.violation is not None and check.violation.rule == "budget_exceeded"
    report = simulate(residual, make_board(), schedule, budget_bytes=60)
    assert report.violations and report.ram_overflow
    overflows = [v for v in report.violations if v.rule == "ram_overflow"]
    first = overflows[0]
    assert first.step == check.violation.position
    assert first.op == residual.ops[check.violation.op].name
    assert "over the budget of 60 B" in first.message
    # Every allocation over the budget is its own violation, the first one first.
    assert report.violations[0] is first
    assert all("over the budget of 60 B" in v.message for v in overflows)
    assert {v.rule for v in report.violations} == {"ram_overflow"}
    assert any(f"RAM reaches {report.peak_ram_bytes} B" in v.message for v in overflows)
    # The run went on: every op ran, for its full time.
    costs = op_costs(residual, make_board())
    assert report.computes == len(residual.ops)
    assert report.compute_s == pytest.approx(float(costs.compute_time_s.sum()))
    assert report.peak_ram_bytes == check_schedule(residual, schedule).peak_ram_bytes


def test_default_budget_is_the_boards_usable_ram(residual):
    board = make_board()
    report = simulate(residual, board, plain_schedule(residual))
    assert report.budget_bytes == board.ram.usable_bytes
    too_big = simulate(residual, board, plain_schedule(residual),
                       resident_bytes=board.ram.usable_bytes)
    assert too_big.ram_overflow
    assert any(v.rule == "ram_overflow" for v in too_big.violations)


def test_a_resident_region_over_the_budget_is_an_overflow_before_any_step(residual):
    report = simulate(residual, make_board(), plain_schedule(residual), budget_bytes=100,
                      resident_bytes=200)
    first = next(v for v in report.violations if v.rule == "ram_overflow")
    assert first.step == -1
    assert report.violations[0] is first
