"""Graph and cost summaries: totals agree with the graph and the cost table."""

from __future__ import annotations

import pytest
from conftest import make_board

from poetsim.boards import get_board
from poetsim.costs import op_costs
from poetsim.summary import cost_summary, graph_summary


def test_graph_summary(residual):
    s = graph_summary(residual)
    assert (s.ops, s.forward_ops, s.backward_ops) == (11, 6, 5)
    assert s.parameters == 56 and s.param_bytes == 224
    assert s.forward_macs == 48
    assert s.activation_bytes == 32 + 4 * 16 + 4
    assert (s.plain_peak_bytes, s.plain_peak_op) == (96, "r/grad")
    assert s.training_flops == residual.flops


def test_cost_summary_totals(residual):
    board = make_board()
    costs = op_costs(residual, board)
    s = cost_summary(residual, board, costs)
    assert s.compute_energy_j == pytest.approx(costs.compute_energy_j.sum())
    assert s.compute_time_s == pytest.approx(s.forward_time_s + s.backward_time_s)
    assert s.resident_bytes == 2 * 224
    assert s.plain_total_bytes == 96 + 448
    assert s.fits_without_remat_or_paging
    assert sum(e["share"] for e in s.top_energy_ops) <= 1.0
    assert all(k.endswith(("_s", "_j", "_bytes")) or isinstance(v, (bool, str, int, list))
               for k, v in s.as_dict().items())


def test_parameters_that_do_not_fit_are_reported():
    from poetsim.zoo import build_model
    s = cost_summary(build_model("resnet18_cifar"), get_board("nrf52840"))
    assert not s.resident_fits and not s.fits_without_remat_or_paging


def test_cost_summary_takes_the_requests_flash_placement():
    from poetsim.request import resolve_request
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=2)
    board = get_board("nrf52840")
    frozen = graph.param_bytes - graph.trained_param_bytes
    s = cost_summary(graph, board)
    assert s.flash_weight_bytes == frozen
    assert s.resident_bytes == resolve_request(graph, board).resident_bytes
    paper = resolve_request(graph, board, accounting="paper")
    s = cost_summary(graph, board, request=paper)
    assert s.flash_weight_bytes == 0 and s.resident_bytes == paper.resident_bytes
