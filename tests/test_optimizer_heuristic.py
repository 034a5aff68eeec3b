"""The greedy stage plan (poetsim.optimizer.heuristic): budgets, ablations, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import dtr_lifted_resnet18, make_board, residual_graph
from hypothesis import given, settings
from hypothesis import strategies as st

from poetsim.costs import op_costs
from poetsim.graph import ForwardGraph, TrainingGraph, plain_peak
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.optimizer import (
    evaluate_plan,
    greedy_plan,
    lower_plan,
    plain_plan,
    plan_violations,
)
from poetsim.schedule import check_schedule
from poetsim.zoo import build_model

MODES = [(True, True), (True, False), (False, True)]
MODELS = ["mlp", "resnet18_cifar", "mobilenet_v2", "transformer_block"]
#: (by_time, cascade)
FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def graphs() -> list[TrainingGraph]:
    return [residual_graph()] + [build_model(name) for name in MODELS]


@pytest.mark.parametrize("graph", graphs(), ids=lambda g: g.name)
def test_no_plan_below_the_largest_single_op_working_set(graph: TrainingGraph) -> None:
    costs = op_costs(graph, make_board())
    need, _ = minimum_ram_bytes(graph)
    for budget in (need - 1, need // 2, 0):
        for remat, paging in MODES:
            for by_time, cascade in FLAGS:
                assert greedy_plan(graph, costs, budget, remat=remat, paging=paging,
                                   by_time=by_time, cascade=cascade) is None, (
                    budget, remat, paging, by_time, cascade)


def test_minimum_ram_is_the_largest_working_set(residual: TrainingGraph) -> None:
    # fc1/grad reads x (32) and r/grad (16), outputs 0 B: 48 B; r/grad reads r, s/grad,
    # fc2/grad (48) and writes 16 B: 64 B, the largest.
    assert minimum_ram_bytes(residual) == (64, "r/grad")


@pytest.mark.parametrize("graph", graphs(), ids=lambda g: g.name)
def test_full_budget_gives_the_plain_plan(graph: TrainingGraph) -> None:
    costs = op_costs(graph, make_board())
    peak = plain_peak(graph).bytes
    for remat, paging in MODES:
        assert greedy_plan(graph, costs, peak, remat=remat, paging=paging) == plain_plan(graph)


@pytest.mark.parametrize("graph", graphs(), ids=lambda g: g.name)
def test_ablations_are_respected(graph: TrainingGraph) -> None:
    costs = op_costs(graph, make_board())
    peak = plain_peak(graph).bytes
    n = len(graph)
    seen = {"remat-only": 0, "paging-only": 0}
    for fraction in (0.9, 0.7, 0.5, 0.3):
        budget = math.floor(fraction * peak)
        for by_time, cascade in FLAGS:
            plan = greedy_plan(graph, costs, budget, remat=False, paging=True, by_time=by_time,
                               cascade=cascade)
            if plan is not None:
                seen["paging-only"] += 1
                assert np.array_equal(plan.compute, np.eye(n, dtype=bool))
                assert plan_violations(graph, plan) == []
            plan = greedy_plan(graph, costs, budget, remat=True, paging=False, by_time=by_time,
                               cascade=cascade)
            if plan is not None:
                seen["remat-only"] += 1
                assert not plan.page_in.any()
                assert not plan.page_out.any()
                assert not plan.stored.any()
                assert plan_violations(graph, plan) == []
    assert seen["paging-only"] > 0


def test_ablations_actually_use_their_mechanism() -> None:
    graph = build_model("mlp")
    costs = op_costs(graph, make_board())
    budget = plain_peak(graph).bytes * 7 // 10
    remat = greedy_plan(graph, costs, budget, remat=True, paging=False, cascade=True)
    paging = greedy_plan(graph, costs, budget, remat=False, paging=True)
    assert remat is not None and paging is not None
    assert remat.compute.sum() > len(graph)
    assert paging.page_out.any() and paging.page_in.any()


@pytest.mark.parametrize("graph", graphs(), ids=lambda g: g.name)
def test_greedy_is_deterministic(graph: TrainingGraph) -> None:
    board = make_board()
    peak = plain_peak(graph).bytes
    for fraction in (0.7, 0.5):
        budget = math.floor(fraction * peak)
        for remat, paging in MODES:
            for by_time, cascade in FLAGS:
                first = greedy_plan(graph, op_costs(graph, board), budget, remat=remat,
                                    paging=paging, by_time=by_time, cascade=cascade)
                # a rebuilt graph and fresh costs give the very same plan
                again_graph = (residual_graph() if graph.name == "residual"
                               else build_model(graph.name))
                second = greedy_plan(again_graph, op_costs(again_graph, board), budget,
                                     remat=remat, paging=paging, by_time=by_time,
                                     cascade=cascade)
                assert first == second
                if first is not None:
                    assert lower_plan(graph, first) == lower_plan(graph, second)


# ----------------------------------------------------------------------------- random graphs


@st.composite
def forward_graphs(draw) -> TrainingGraph:
    """x -> 2..4 ops (linear, relu, or a residual add of the previous and an earlier op)."""
    fg = ForwardGraph("rand")
    names = [fg.input("x", draw(st.integers(1, 16)))]
    count = draw(st.integers(2, 4))
    for j in range(count):
        kind = "linear" if j == 0 else draw(st.sampled_from(["linear", "relu", "add"]))
        elements = draw(st.integers(1, 16))
        flops = draw(st.integers(1, 5000))
        workspace = draw(st.sampled_from([0, 0, 2, 8]))
        if kind == "add" and len(names) >= 3:
            other = draw(st.sampled_from(names[1:-1]))
            inputs = [names[-1], other]
        else:
            kind = "relu" if kind == "add" else kind
            inputs = [names[-1]]
        params = elements * 4 if kind == "linear" else 0
        names.append(fg.op(f"op{j}", kind, inputs, output_elements=elements, flops=flops,
                           param_count=params, workspace_elements=workspace))
    fg.loss("loss", names[-1])
    return fg.build()


@settings(max_examples=30, deadline=None)
@given(graph=forward_graphs(), fraction=st.floats(0, 1), flags=st.sampled_from(FLAGS),
       mode=st.sampled_from(MODES))
def test_greedy_plans_on_random_graphs_are_valid(graph, fraction, flags, mode) -> None:
    by_time, cascade = flags
    remat, paging = mode
    costs = op_costs(graph, make_board())
    low, _ = minimum_ram_bytes(graph)
    high = plain_peak(graph).bytes
    budget = low + math.floor(fraction * (high - low))
    plan = greedy_plan(graph, costs, budget, remat=remat, paging=paging, by_time=by_time,
                       cascade=cascade)
    if plan is None:
        return
    assert plan_violations(graph, plan) == []
    metrics = evaluate_plan(graph, costs, plan)
    check = check_schedule(graph, lower_plan(graph, plan), budget_bytes=budget)
    assert check.valid, check.violation
    assert metrics.peak_ram_bytes == check.peak_ram_bytes <= budget
    if not remat:
        assert metrics.recomputations == 0
    if not paging:
        assert metrics.page_ins == metrics.page_outs == 0


def test_a_keep_guide_steers_evictions() -> None:
    """Guided by what DTR keeps (its list has no stage form within 50%: it drops and
    recomputes inside stages), the greedy finds a stage plan cheaper than DTR itself."""
    graph, costs, budget, listed, lifted = dtr_lifted_resnet18()
    assert evaluate_plan(graph, costs, lifted).peak_ram_bytes > budget
    guided = greedy_plan(graph, costs, budget, cascade=True, keep_guide=lifted.keep.astype(float))
    metrics = evaluate_plan(graph, costs, guided)
    assert metrics.peak_ram_bytes <= budget and plan_violations(graph, guided) == []
    assert metrics.energy_j < listed.energy_j
    unguided = [greedy_plan(graph, costs, budget, remat=remat, paging=paging,
                            by_time=by_time, cascade=cascade)
                for remat, paging in MODES for by_time, cascade in FLAGS]
    assert all(metrics.energy_j < evaluate_plan(graph, costs, plan).energy_j
               for plan in unguided if plan is not None)


def test_leave_evicts_as_told_and_brings_back_as_the_reader_needs(
        residual: TrainingGraph) -> None:
    """Told to leave r out of stages 5 to 7 (its readers are 4 and 8), with the whole plain
    peak as the budget: dropped, r is recomputed (with fc1, also out by then) in stage 8;
    written, it is paged out as soon as it is made (stage 2, its write then starts
    earliest) and in again in stage 8. A tensor nothing could
    bring back is kept: paging-only without ``write`` leaves r in RAM."""
    graph = residual
    costs = op_costs(graph, make_board())
    budget = plain_peak(graph).bytes
    n = len(graph)
    leave = np.zeros((n, n), dtype=bool)
    leave[5:8, 2] = True
    dropped = greedy_plan(graph, costs, budget, leave=leave)
    assert plan_violations(graph, dropped) == []
    assert not dropped.keep[5:8, 2].any() and dropped.compute[8, 2] and dropped.compute[8, 1]
    assert not dropped.page_out.any()
    write = np.zeros(n, dtype=bool)
    write[2] = True
    paged = greedy_plan(graph, costs, budget, leave=leave, write=write)
    assert plan_violations(graph, paged) == []
    assert paged.page_out[2, 2] and paged.page_in[8, 2] and not paged.keep[5:8, 2].any()
    assert paged.keep[3:5, 2].all()
    assert int(paged.compute.sum()) == n
    assert greedy_plan(graph, costs, budget, remat=False, leave=leave) == plain_plan(graph)


def test_keeping_a_written_tensor_hides_its_write() -> None:
    """In the hand plan x is written in stage 0 and leaves RAM after stage 1, where the CPU
    waits for the write (DMA timeline). With room for x a while longer, overlap_transfers
    keeps it while it is written, up to the stage before its page-in: the CPU computes
    meanwhile and the iteration is shorter, within the budget. Without DMA it changes
    nothing."""
    from test_optimizer_plan import residual_paging_remat_plan

    from poetsim.optimizer.heuristic import overlap_transfers
    from poetsim.optimizer.plan import stage_timeline

    graph = residual_graph()
    costs = op_costs(graph, make_board(dma_channels=1))
    plan = residual_paging_remat_plan()
    before = stage_timeline(graph, costs, plan)
    assert before.end_s[1] == before.write_end_s[0] > before.compute_end_s[1]
    hidden = overlap_transfers(graph, costs, 96, plan)
    assert plan_violations(graph, hidden) == []
    assert hidden.keep[2:8, 0].all() and not hidden.keep[8, 0]
    after = stage_timeline(graph, costs, hidden)
    assert after.makespan_s < before.makespan_s
    assert after.end_s[1] == after.compute_end_s[1]
    assert evaluate_plan(graph, costs, hidden).peak_ram_bytes <= 96
    assert check_schedule(graph, lower_plan(graph, hidden), budget_bytes=96).valid
    no_dma = op_costs(graph, make_board(dma_channels=0))
    assert overlap_transfers(graph, no_dma, 96, plan) is plan


def test_capuchin_overlapped_is_priced_as_the_board_runs_it() -> None:
    """Capuchin's ResNet-18 list at 50% on the Raspberry Pi 4 writes activations in the
    forward pass and reads them back in the backward one. Lifted, its writes free the
    tensor where the list does and its page-ins sit in the stage of their reader, so the
    stage timeline has the CPU wait for the storage where the board does not (predicted
    about 8% above the simulation). Overlapped (written tensors kept while written,
    page-ins prefetched where RAM allows) the plan is within the budget, lowers to a valid
    list that simulates Capuchin's own energy, and predicts it within 1%."""
    from poetsim.baselines import capuchin
    from poetsim.boards import get_board
    from poetsim.optimizer.heuristic import overlap_transfers
    from poetsim.optimizer.lowering import plan_from_schedule
    from poetsim.request import resolve_request
    from poetsim.sim import simulate

    graph, board = build_model("resnet18_cifar"), get_board("rpi4")
    request = resolve_request(graph, board, ram="50%", deadline="1.5x")
    costs, budget = request.costs, request.activation_budget_bytes
    listed = capuchin(graph, board, costs, budget)
    lifted = plan_from_schedule(graph, listed.schedule)
    plan = overlap_transfers(graph, costs, budget, lifted)
    assert plan_violations(graph, plan) == []
    metrics = evaluate_plan(graph, costs, plan)
    assert metrics.peak_ram_bytes <= budget
    assert metrics.energy_j < evaluate_plan(graph, costs, lifted).energy_j
    schedule = lower_plan(graph, plan)
    assert check_schedule(graph, schedule, budget_bytes=budget).valid
    simulated = simulate(graph, board, schedule, budget_bytes=budget).energy_j
    assert abs(simulated / metrics.energy_j - 1) < 0.01
    own = simulate(graph, board, listed.schedule, budget_bytes=budget).energy_j
    assert simulated <= own * (1 + 1e-6)
