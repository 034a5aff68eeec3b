"""Executing schedules for real on PyTorch tensors: recompute, page to files, free."""

from __future__ import annotations

import pytest
from conftest import make_board, paper_request

from poetsim.errors import InputError
from poetsim.graph.autograd import KINDS, KindRule
from poetsim.methods import SolverSettings, seeded_solve
from poetsim.schedule import Action, Schedule, check_schedule
from poetsim.torchio import ExecutionError, execute_schedule, import_module
from poetsim.torchio import execute as execute_module

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
    assert report.max_rel_weight_error <= 1e-9  # the plain SGD step, after the schedule
    assert report.params_updated_in_place == 0 and report.params_updated_after > 0
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


# ----------------------------------------------------------------------------- updates

#: model factory, inputs, tensors to page, tensors to recompute, the first layer's backward
INPLACE_CASES = {
    "mlp": (tm.mlp, tm.mlp_inputs, {"fc1"}, {"relu1", "fc2"}, "fc1/grad"),
    "cnn": (tm.small_cnn, tm.small_cnn_inputs, {"conv1", "conv2"}, {"bn1", "relu1"},
            "conv1/grad"),
}


def _inplace(case: str, factory=None):
    make, inputs, page, remat, first = INPLACE_CASES[case]
    model = import_module((factory or make)(), inputs(), name=case, inplace_update=True)
    schedule = tm.remat_and_page_schedule(model.graph, page, remat)
    return model, schedule, first


@pytest.mark.parametrize("case", sorted(INPLACE_CASES))
def test_inplace_updates_with_recomputation_and_paging_match_sgd(case, tmp_path):
    model, schedule, first = _inplace(case)
    # An in-place update runs once: the op-list contract refuses a second run (on the
    # board it would apply the step again), even of the first layer's backward op,
    # which passes no gradient on.
    twice = check_schedule(model.graph, tm.with_recomputed(schedule, model.graph, first))
    assert twice.violation is not None
    assert twice.violation.rule == "recomputed_inplace_update"
    assert check_schedule(model.graph, schedule).valid
    assert schedule.page_ins > 0 and model.graph.op(first).inplace_update
    report = execute_schedule(model, schedule, lr=0.05, page_dir=tmp_path)
    assert report.passed, report.reasons
    trained = sum(1 for _ in model.module.parameters())
    assert report.params_updated_in_place == trained and report.params_updated_after == 0
    assert report.max_rel_weight_error <= 1e-9 and report.max_rel_grad_error <= 1e-9
    assert report.lr == 0.05 and report.frozen_params == 0


def _cnn_with_frozen_conv2():
    model = tm.small_cnn()
    for name, param in model.named_parameters():
        param.requires_grad_(not name.startswith(("conv2.", "bn1.weight")))
    return model


#: model, inputs, tensors to page, to recompute, frozen parameters, trained parameters
FROZEN_CASES = {
    # fc1 frozen, fc2's weight frozen: fc2/grad computes its bias gradient alone
    "mlp": (tm.frozen_mlp, tm.mlp_inputs, {"fc2"}, {"relu1"}, 3, 3),
    # conv2 frozen: its backward passes the input gradient through the frozen weights
    "cnn": (_cnn_with_frozen_conv2, tm.small_cnn_inputs, {"conv1"}, {"relu1"}, 3, 6),
}


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("case", sorted(FROZEN_CASES))
def test_frozen_parameters_get_no_gradient_and_do_not_change(case, inplace):
    factory, inputs, page, remat, frozen, trained = FROZEN_CASES[case]
    model = import_module(factory(), inputs(), inplace_update=inplace)
    schedule = tm.remat_and_page_schedule(model.graph, page, remat)
    report = execute_schedule(model, schedule, lr=0.1)
    assert report.passed, report.reasons
    assert report.frozen_params == frozen
    assert report.params_updated_in_place == (trained if inplace else 0)
    assert report.params_updated_after == (0 if inplace else trained)
    assert report.max_rel_weight_error <= 1e-9


def test_a_changed_frozen_parameter_is_detected(monkeypatch):
    original = execute_module._Runner.step_the_rest

    def nudge(self):
        with torch.no_grad():
            self.params["fc2.weight"].view(-1)[0] += 1e-12
        return original(self)

    monkeypatch.setattr(execute_module._Runner, "step_the_rest", nudge)
    model = import_module(tm.frozen_mlp(), tm.mlp_inputs())
    report = execute_schedule(model, tm.remat_and_page_schedule(model.graph, set(), set()))
    assert not report.passed
    assert "frozen parameter 'fc2.weight' changed" in report.reasons


@pytest.mark.parametrize("inplace", [True, False])
def test_an_update_applied_twice_is_detected(monkeypatch, inplace):
    original = execute_module._Runner.apply_step

    def twice(self, name, grad):
        original(self, name, grad)
        original(self, name, grad)

    monkeypatch.setattr(execute_module._Runner, "apply_step", twice)
    model = import_module(tm.mlp(), tm.mlp_inputs(), inplace_update=inplace)
    report = execute_schedule(model, tm.remat_and_page_schedule(model.graph, {"fc1"}, set()))
    assert not report.passed
    assert report.max_rel_grad_error <= 1e-9  # the gradients are right; the weights are not
    assert report.max_rel_weight_error == pytest.approx(1.0, rel=1e-6)  # one step too many
    assert any("updated weights of" in reason for reason in report.reasons)


def test_a_recomputation_after_the_update_reads_the_updated_weights():
    # fc3/grad's output (relu2's gradient) is its gradient times fc3's weight: computed
    # again after the in-place update, it reads the new weight, as on the board.
    model, schedule, _ = _inplace("mlp")
    schedule = tm.with_recomputed(schedule, model.graph, "fc3/grad")
    report = execute_schedule(model, schedule)
    assert not report.passed
    assert any(reason.startswith("backward op 'fc3/grad' recomputed after its in-place "
                                 "update") for reason in report.reasons)
    plain = import_module(tm.mlp(), tm.mlp_inputs(), name="mlp")
    schedule = tm.with_recomputed(tm.remat_and_page_schedule(plain.graph, {"fc1"}, set()),
                                  plain.graph, "fc3/grad")
    assert execute_schedule(plain, schedule).passed  # the step after the schedule is safe


@pytest.mark.parametrize("lr", [0, -0.1, float("nan"), float("inf"), True, "0.1"])
def test_a_bad_learning_rate_is_one_line(imported, lr):
    model = imported["mlp"]
    with pytest.raises(InputError, match=r"^lr = .*: the learning rate must be a finite "
                                         r"number > 0$"):
        execute_schedule(model, tm.remat_and_page_schedule(model.graph, set(), set()), lr=lr)
