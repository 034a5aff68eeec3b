"""The simulator agrees with the optimizer on the ideal board (poetsim.sim vs poetsim.optimizer).

On :func:`~poetsim.sim.ideal_board` nothing the optimizer leaves out costs anything (idle
and sleep power, wake-ups, contention), so the simulated energy must equal the optimizer's
active energy ``sum(compute) + sum(page-in) + sum(page-out)`` (its energy without the
time-proportional part, :class:`poetsim.costs.WaitPower`), priced with the ideal board's
per-op costs (the data input op's CPU wait goes with the idle power), and the simulated
peak RAM its peak, byte for byte, for every schedule it produces. The schedules come from
:func:`poetsim.optimizer.greedy_plan` (every solve's first plan), lowered to op lists, on
two real boards, every zoo model and three budgets; budgets below the smallest RAM any
schedule can use are skipped. Each plan is made once per module.
"""

from __future__ import annotations

import functools

import attrs
import pytest
from conftest import op_list_energy, paper_request

from poetsim.boards import get_board
from poetsim.costs import op_costs
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.optimizer import PlanMetrics, evaluate_plan, greedy_plan, lower_plan
from poetsim.request import Request
from poetsim.schedule import Schedule
from poetsim.sim import ideal_board, simulate
from poetsim.zoo import build_model, model_names

MODELS = tuple(model_names())
BOARDS = ("nrf52840", "rpi4")
BUDGETS = ("100%", "70%", "50%")


@attrs.frozen
class Planned:
    """The optimizer's plan of one request: its op list and the optimizer's own figures."""

    request: Request
    schedule: Schedule | None
    metrics: PlanMetrics | None


@functools.cache
def graph(model: str):
    return build_model(model)


@functools.cache
def solved(model: str, board: str, ram: str) -> Planned:
    # The optimizer's greedy plan, which every solve starts from: the same plan on any
    # machine under any load (a short time limit returned what a loaded machine reached).
    request = paper_request(graph(model), get_board(board), ram)
    plan = None
    if request.infeasible_reason is None:
        plan = greedy_plan(request.graph, request.costs, request.activation_budget_bytes)
    if plan is None:
        return Planned(request, None, None)
    return Planned(request, lower_plan(request.graph, plan),
                   evaluate_plan(request.graph, request.costs, plan))


def case(model: str, board: str, ram: str) -> Planned:
    result = solved(model, board, ram)
    if result.schedule is None:
        reason = result.request.infeasible_reason
        if reason is None and result.request.activation_budget_bytes < minimum_ram_bytes(
                result.request.graph)[0]:
            reason = "the budget is below the smallest RAM any schedule can use"
        if reason is not None:
            pytest.skip(f"{model} on {board} at {ram}: {reason}")
    assert result.schedule is not None and result.metrics is not None, \
        f"no greedy plan of {model} on {board} at {ram}"
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
