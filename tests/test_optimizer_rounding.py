"""LP rounding into stage plans (poetsim.optimizer.rounding) and its SCIP heuristic."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import paper_request
from hypothesis import given, settings
from hypothesis import strategies as st
from test_optimizer_heuristic import forward_graphs

from poetsim.boards import get_board
from poetsim.costs import op_costs
from poetsim.optimizer import evaluate_plan, plan_violations, solve
from poetsim.optimizer.milp import Formulation, build_milp
from poetsim.optimizer.rounding import THRESHOLDS, RoundingHeuristic, round_plan
from poetsim.zoo import build_model

MODES = [(True, True), (True, False), (False, True)]


def _fractions(draw, n: int) -> dict[str, np.ndarray]:
    def matrix() -> np.ndarray:
        flat = draw(st.lists(st.floats(0, 1), min_size=n * n, max_size=n * n))
        return np.tril(np.array(flat).reshape(n, n))

    return {"compute": matrix(), "keep": matrix(), "page_in": matrix(), "page_out": matrix()}


@settings(max_examples=40, deadline=None)
@given(data=st.data(), graph=forward_graphs(), threshold=st.sampled_from(THRESHOLDS),
       mode=st.sampled_from(MODES))
def test_any_rounding_is_a_consistent_plan(data, graph, threshold, mode) -> None:
    remat, paging = mode
    values = _fractions(data.draw, len(graph))
    plan = round_plan(graph, values, threshold, remat=remat, paging=paging)
    if plan is None:
        assert not remat  # only paging-only can miss a dependency
        return
    assert plan_violations(graph, plan) == []
    if not remat:
        assert int(plan.compute.sum()) == len(graph)
    if not paging:
        assert not plan.page_in.any() and not plan.page_out.any()


@pytest.mark.parametrize("mode", MODES)
def test_rounding_an_optimal_plan_gives_it_back_or_cheaper(mode) -> None:
    remat, paging = mode
    graph = build_model("mlp", layers=4)
    board = get_board("nrf52840")
    costs = op_costs(graph, board)
    result = solve(paper_request(graph, board, "60%"), remat=remat, paging=paging,
                   time_limit_s=20)
    assert result.status.value == "optimal"
    plan = result.plan
    values = {name: getattr(plan, name).astype(float)
              for name in ("compute", "keep", "page_in", "page_out")}
    rounded = round_plan(graph, values, 0.5, remat=remat, paging=paging)
    assert plan_violations(graph, rounded) == []
    again = evaluate_plan(graph, costs, rounded)
    assert again.energy_j <= result.metrics.energy_j * (1 + 1e-12)
    assert again.peak_ram_bytes <= result.request.activation_budget_bytes


def test_heuristic_offers_only_plans_that_fit_and_scip_accepts_them() -> None:
    graph = build_model("mlp")
    board = get_board("nrf52840")
    costs = op_costs(graph, board)
    budget = paper_request(graph, board, "70%").activation_budget_bytes
    deadline = 1.5 * float(costs.compute_time_s.sum())
    milp = build_milp(graph, costs, budget, deadline, Formulation(remat=True, paging=False),
                      storage_capacity_bytes=None,
                      energy_reference_j=float(costs.compute_energy_j.sum()))
    heuristic = RoundingHeuristic(milp, costs, budget, deadline, None)
    heuristic.include()
    milp.model.setParam("limits/time", 30.0)
    milp.model.optimize()
    assert milp.model.getNSols() > 0
    best = milp.plan_from_solution(milp.model.getBestSol())
    metrics = evaluate_plan(graph, costs, best)
    assert metrics.peak_ram_bytes <= budget and metrics.time_s <= deadline
    # without a warm start, every solution SCIP has comes from a heuristic; ours found one
    assert heuristic.found >= 1
