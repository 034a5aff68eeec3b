"""Executing schedules for real on PyTorch tensors: recompute, page to files, free."""

from __future__ import annotations

import pytest
from conftest import make_board, paper_request

from poetsim.graph.autograd import KINDS, KindRule
from poetsim.methods import SolverSettings, seeded_solve
from poetsim.schedule import Action, Schedule, check_schedule
from poetsim.torchio import ExecutionError, execute_schedule, import_module

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402  (needs torch)

#: model factory, inputs, tensors to page, tensors to recompute
CASES = {
    "mlp": (tm.mlp, tm.mlp_inputs, {"fc1"}, {"relu1", "fc2"}),
    "cnn": (tm.small_cnn, tm.small_cnn_inputs, {"conv1", "conv2"}, {"bn1", "relu1"}),
    "transformer": (tm.transformer_block, tm.transformer_inputs, {"query", "fc1"},
                    {"softmax", "gelu", "ln1"}),
}


@pytest.fixture(scope="module")
def imported():
    return {name: import_module(factory(), inputs(), name=name)
            for name, (factory, inputs, _, _) in CASES.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_schedule_with_recomputation_and_paging_matches_autograd(imported, case, tmp_path):
    model = imported[case]
    _, _, page, remat = CASES[case]
    schedule = tm.remat_and_page_schedule(model.graph, page, remat)
    assert schedule.recomputations() > 0 and schedule.page_ins > 0
    check = check_schedule(model.graph, schedule)
    assert check.valid
    board = make_board()
    report = execute_schedule(model, schedule, board=board, page_dir=tmp_path)
    assert report.passed, report.reasons
    assert report.max_rel_grad_error <= 1e-6
    assert report.page_ins == schedule.page_ins and report.recomputations > 0
    # What the tensors really held is the contract's figure less the op workspace.
    workspace = max(op.workspace_bytes for op in model.graph.ops)
    assert check.peak_activation_bytes - workspace <= report.peak_live_bytes
    assert report.peak_live_bytes <= report.checker_peak_bytes
    assert report.peak_live_bytes <= report.simulated_peak_bytes
    assert report.peak_live_raw_bytes >= report.peak_live_bytes  # float64 is wider
    assert len(list(tmp_path.iterdir())) == schedule.page_outs


def test_solver_schedule_runs_within_its_budget(imported):
    model = imported["mlp"]
    board = make_board()
    result = seeded_solve(paper_request(model.graph, board, "50%"),
                          SolverSettings(time_limit_s=5))
    schedule = result.schedule
    assert schedule is not None
    assert schedule.recomputations() > 0 and schedule.page_ins > 0
    report = execute_schedule(model, schedule, board=board)
    assert report.passed, report.reasons
    assert report.budget_bytes == result.request.activation_budget_bytes
    assert report.peak_live_bytes <= report.budget_bytes
    assert report.peak_live_bytes == report.simulated_peak_bytes  # no workspace in an MLP


def test_reading_a_tensor_that_is_not_resident_names_the_step(imported):
    model = imported["cnn"]
    _, _, page, remat = CASES["cnn"]
    good = tm.remat_and_page_schedule(model.graph, page, remat)
    position = next(i for i, s in enumerate(good.steps) if s.action is Action.PAGE_IN)
    steps = good.steps[:position] + good.steps[position + 1:]
    bad = Schedule(good.graph_name, good.graph_fingerprint, steps)
    assert not check_schedule(model.graph, bad).valid
    with pytest.raises(ExecutionError, match=rf"^step {position} \(compute .*not resident"):
        execute_schedule(model, bad)


def test_a_corrupted_page_file_is_detected(imported):
    model = imported["transformer"]
    _, _, page, remat = CASES["transformer"]
    schedule = tm.remat_and_page_schedule(model.graph, page, remat)

    def corrupt(position, step, directory):
        if step.action is Action.PAGE_OUT:
            path = directory / f"{step.op}.pt"
            data = bytearray(path.read_bytes())
            data[-20] ^= 0xFF
            path.write_bytes(bytes(data))

    with pytest.raises(ExecutionError, match="corrupted"):
        execute_schedule(model, schedule, after_step=corrupt)


def test_a_false_saved_tensor_claim_gives_wrong_gradients(monkeypatch):
    # If ReLU's backward claimed to need nothing, the graph would drop its output from
    # relu/grad; executing with only what the graph allows cannot get the mask right.
    monkeypatch.setitem(KINDS, "relu", KindRule(False, False, lambda c: 0.0))
    model = import_module(tm.mlp(), tm.mlp_inputs())
    assert "relu1" not in model.graph.inputs_of(model.graph.index("relu1/grad"))
    from poetsim.schedule import plain_schedule

    report = execute_schedule(model, plain_schedule(model.graph))
    assert not report.passed
    assert report.max_rel_grad_error > 1e-3


def test_a_schedule_for_another_graph_is_refused(imported):
    other = tm.remat_and_page_schedule(imported["mlp"].graph, {"fc1"}, set())
    with pytest.raises(ExecutionError, match="not for the imported graph"):
        execute_schedule(imported["cnn"], other)
