"""CPU states, idle power while waiting, and the break-even sleep policy (poetsim.sim.cpu)."""

from __future__ import annotations

import math

import pytest
from conftest import make_board
from test_sim_support import PAGE_R, evolve, hand

from poetsim.sim import simulate
from poetsim.sim.cpu import break_even_s


def test_break_even_is_the_larger_of_latency_and_energy_over_saving():
    board = make_board()  # idle 5 mW, sleep 10 uW, wake 10 us / 0.1 uJ
    assert break_even_s(board.cpu) == pytest.approx(max(1e-5, 1e-7 / (0.005 - 1e-5)))
    no_saving = evolve(board, cpu={"sleep_power_w": 0.005}).cpu
    assert break_even_s(no_saving) == math.inf


def test_idle_power_is_accounted_while_waiting_for_a_page_in(residual):
    # Sleeping saves nothing on this board, so the CPU idles through the stall.
    board = evolve(make_board(), cpu={"sleep_power_w": 0.005})
    report = simulate(residual, board, hand(residual, *PAGE_R))
    assert report.stall_s > 3e-3  # the page-in waits for the 3 ms write, then takes 1.5 ms
    assert report.residency_s["cpu"]["idle"] == pytest.approx(report.stall_s)
    assert report.energy_by_kind_j["stall"] == pytest.approx(0.005 * report.stall_s)
    assert report.energy_by_state_j["cpu.idle"] == pytest.approx(0.005 * report.stall_s)
    assert "sleep" not in report.residency_s["cpu"]
    assert report.wakeups["cpu"] == 0


def test_cpu_sleeps_through_a_stall_longer_than_break_even(residual):
    board = make_board()
    report = simulate(residual, board, hand(residual, *PAGE_R))
    cpu = report.residency_s["cpu"]
    assert report.wakeups["cpu"] == 1
    assert cpu["wake"] == pytest.approx(board.cpu.wakeup_latency_s)
    # The wake-up latency is part of the stall: the CPU resumes after it.
    assert cpu["sleep"] + cpu["wake"] == pytest.approx(report.stall_s)
    assert report.transitions["cpu"]["active->sleep"] == 1
    assert report.energy_by_state_j["cpu.wake"] == pytest.approx(board.cpu.wakeup_energy_j)


def test_cpu_stays_idle_when_the_gap_is_shorter_than_break_even(residual):
    # Waking costs so much energy that sleeping pays off only after ~20 s.
    board = evolve(make_board(), cpu={"wakeup_energy_j": 0.1})
    report = simulate(residual, board, hand(residual, *PAGE_R))
    assert report.wakeups["cpu"] == 0
    assert report.residency_s["cpu"]["idle"] == pytest.approx(report.stall_s)


def test_op_power_comes_from_the_op_costs(residual):
    from poetsim.costs import op_costs
    from poetsim.schedule import plain_schedule

    board = make_board()
    costs = op_costs(residual, board)
    report = simulate(residual, board, plain_schedule(residual))
    assert report.energy_by_kind_j["compute"] == pytest.approx(costs.compute_energy_j.sum())
    assert report.residency_s["cpu"]["active"] == pytest.approx(costs.compute_time_s.sum())
