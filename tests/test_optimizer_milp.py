"""The MILP (poetsim/optimizer/milp/): which recomputations it may take, and its energy
of a fixed plan."""

from __future__ import annotations

import attrs
import pytest
from conftest import make_board, paper_request

from poetsim.boards import get_board
from poetsim.costs import op_costs
from poetsim.graph import Phase, plain_peak
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.optimizer import solve
from poetsim.optimizer.heuristic import plain_plan
from poetsim.optimizer.milp import Formulation, MilpModel, build_milp
from poetsim.optimizer.plan import evaluate_plan
from poetsim.zoo import build_model


def test_an_inplace_update_is_never_recomputed():
    """Only ops that may run again get recomputation variables: an in-place update
    (Op.recomputable) has none; other backward ops keep theirs."""
    graph = build_model("ds_cnn_s", inplace_update=1)
    model = MilpModel(graph, op_costs(graph, get_board("nrf52840")), 10**6, None,
                      Formulation(), storage_capacity_bytes=None, energy_reference_j=1.0)
    recomputed = {i for (_, i) in model.R}
    inplace = {i for i, op in enumerate(graph.ops) if op.inplace_update}
    assert inplace and not inplace & recomputed
    assert any(graph.ops[i].phase is Phase.BACKWARD for i in recomputed)


def _objective_at(graph, costs, plan, budget) -> float:
    """The MILP's optimum with every decision fixed to ``plan``: its energy of the plan."""
    milp = build_milp(graph, costs, budget, None, Formulation(), storage_capacity_bytes=None,
                      energy_reference_j=float(costs.compute_energy_j.sum()))
    milp.fix_outside(plan, len(graph), -1)
    milp.model.hideOutput()
    milp.model.optimize()
    assert milp.model.getStatus() == "optimal"
    return milp.model.getObjVal() / milp.energy_scale


def test_the_milp_prices_a_fixed_plan_as_the_stage_model_with_ops_streaming_weights():
    """At a fixed plan that pages, the MILP's energy is the stage model's (evaluate_plan),
    with and without ops that stream weights; streaming ops hold the storage, so the
    transfers that ran beside them now run before them and the plan costs more."""
    board = make_board(read_throughput_bytes_per_s=2e4, write_throughput_bytes_per_s=1e4)
    graph = build_model("mlp", layers=4, width=64)
    costs = op_costs(graph, board)
    low, _ = minimum_ram_bytes(graph)
    budget = (low + plain_peak(graph).bytes) // 2
    plan = solve(paper_request(graph, board, budget), remat=False, paging=True,
                 time_limit_s=5).plan
    assert plan is not None and plan.page_in.any()
    energies = []
    for streams in ([False] * len(graph), [True] * len(graph)):
        priced = attrs.evolve(costs, streams=streams)
        expected = evaluate_plan(graph, priced, plan).energy_j
        assert _objective_at(graph, priced, plan, budget) == pytest.approx(expected, rel=1e-6)
        energies.append(expected)
    assert energies[1] > energies[0] * (1 + 1e-6)


def test_the_milp_prices_a_fixed_plan_with_weight_holds_as_the_stage_model():
    """Weights on storage, updated in place: at a fixed plan, with and without weight holds,
    the MILP's energy is the stage model's, and holding every weight is cheaper."""
    graph = WeightsOnStorage(trained=True).graph(
        build_model("mlp", layers=3, width=16, inplace_update=1))
    costs = op_costs(graph, get_board("nrf52840"))
    plain = plain_plan(graph)
    held = attrs.evolve(plain, hold=costs.hold_owner >= 0)
    assert held.hold.sum() == 3
    budget = evaluate_plan(graph, costs, held).peak_ram_bytes
    energies = []
    for plan in (plain, held):
        expected = evaluate_plan(graph, costs, plan).energy_j
        assert _objective_at(graph, costs, plan, budget) == pytest.approx(expected, rel=1e-6)
        energies.append(expected)
    assert energies[1] < energies[0] * (1 - 1e-3)
