"""The simulator agrees with the optimizer on the ideal board (poetsim.sim vs poetsim.optimizer).

On :func:`~poetsim.sim.ideal_board` nothing the optimizer leaves out costs anything (idle
and sleep power, wake-ups, contention), so the simulated energy must equal the optimizer's
active energy ``sum(compute) + sum(page-in) + sum(page-out)`` (its energy without the
time-proportional part, :class:`poetsim.costs.WaitPower`), priced with the ideal board's
per-op costs (the data input op's CPU wait goes with the idle power), and the simulated
peak RAM its peak, byte for byte, for every schedule it produces. The schedules come from
:func:`poetsim.optimizer.solve` with a short time limit (it returns its greedy warm start
when SCIP finds nothing better), on two real boards, every zoo model and three budgets;
budgets the optimizer proves infeasible are skipped. Each solve runs once per module.
"""

from __future__ import annotations

import functools

import pytest
from conftest import op_list_energy, paper_request

from poetsim.boards import get_board
from poetsim.costs import op_costs
from poetsim.optimizer import SolveResult, SolveStatus, solve
from poetsim.sim import ideal_board, simulate
from poetsim.zoo import build_model, model_names

MODELS = tuple(model_names())
BOARDS = ("nrf52840", "rpi4")
BUDGETS = ("100%", "70%", "50%")
TIME_LIMIT_S = 0.2


@functools.cache
def graph(model: str):
    return build_model(model)


@functools.cache
def solved(model: str, board: str, ram: str) -> SolveResult:
    return solve(paper_request(graph(model), get_board(board), ram), time_limit_s=TIME_LIMIT_S)


def case(model: str, board: str, ram: str) -> SolveResult:
    result = solved(model, board, ram)
    if result.status is SolveStatus.INFEASIBLE:
        pytest.skip(f"{model} on {board} at {ram}: {result.message}")
    assert result.schedule is not None and result.metrics is not None, result.message
    return result


@pytest.mark.parametrize("ram", BUDGETS)
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", MODELS)
def test_ideal_board_reproduces_the_optimizer(model, board, ram):
    result = case(model, board, ram)
    report = simulate(graph(model), ideal_board(get_board(board)), result.schedule,
                      budget_bytes=result.request.activation_budget_bytes)
    active_j = result.metrics.energy_j - result.metrics.wait_energy_j
    assert active_j == pytest.approx(op_list_energy(result.schedule, result.request.costs),
                                     rel=1e-9)
    ideal_costs = op_costs(graph(model), ideal_board(get_board(board)))
    assert report.energy_j == pytest.approx(op_list_energy(result.schedule, ideal_costs),
                                            rel=1e-3)
    assert report.peak_ram_bytes == result.metrics.peak_ram_bytes
    assert not report.violations, [v.message for v in report.violations]
    prediction = report.prediction
    # the op-list model, recomputed for the board simulated, is what the ideal board spends
    assert abs(prediction.energy_diff_pct) < 0.1 and prediction.peak_diff_pct == 0.0


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", MODELS)
def test_the_real_board_costs_at_least_the_ideal_one(model, board):
    result = case(model, board, "50%") if solved(model, board, "50%").schedule else case(
        model, board, "70%")
    real = simulate(graph(model), get_board(board), result.schedule,
                    budget_bytes=result.request.activation_budget_bytes)
    ideal = simulate(graph(model), ideal_board(get_board(board)), result.schedule,
                     budget_bytes=result.request.activation_budget_bytes)
    assert real.energy_j >= ideal.energy_j
    assert real.peak_ram_bytes == ideal.peak_ram_bytes  # timing never raises the peak
    assert real.makespan_s >= ideal.makespan_s * (1 - 1e-9)
