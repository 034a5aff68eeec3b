"""Executing schedules for real on PyTorch tensors: recompute, page to files, free."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import make_board, paper_request

from poetsim.cli.main import main
from poetsim.errors import InputError
from poetsim.graph.autograd import KINDS, KindRule
from poetsim.methods import SolverSettings, seeded_solve
from poetsim.schedule import Action, Schedule, check_schedule
from poetsim.torchio import ExecutionError, execute_schedule, import_module
from poetsim.torchio import runner as runner_module
from poetsim.torchio import weights as weights_module

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


@pytest.mark.parametrize("inplace", [True, False])
def test_a_gradient_summed_in_an_op_of_its_own_matches_autograd(inplace):
    """relu1's output feeds conv2 and the residual add: with gradient_sums its gradient
    is summed by relu1/grad_sum, which relu1/grad then reads alone."""
    model = import_module(tm.small_cnn(), tm.small_cnn_inputs(), inplace_update=inplace,
                          gradient_sums=True)
    graph = model.graph
    assert [op.name for op in graph.ops if op.gradient_sum_of] == ["relu1/grad_sum"]
    assert graph.inputs_of(graph.index("relu1/grad")) == ["relu1", "relu1/grad_sum"]
    schedule = tm.remat_and_page_schedule(graph, {"relu1"}, {"bn1"})
    report = execute_schedule(model, schedule, lr=0.1)
    assert report.passed, report.reasons
    assert report.max_rel_grad_error <= 1e-9 and report.max_rel_weight_error <= 1e-9
    trained = report.params_updated_in_place + report.params_updated_after
    assert trained == 9  # conv1.weight, then weight and bias of bn1, conv2, bn2 and fc
    assert report.params_updated_in_place == (trained if inplace else 0)


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_momentum_and_adam_steps_and_state_match_torch_optim(optimizer, inplace):
    model = import_module(tm.mlp(), tm.mlp_inputs(), inplace_update=inplace)
    schedule = tm.remat_and_page_schedule(model.graph, {"fc1"}, {"relu2"})
    report = execute_schedule(model, schedule.with_metadata(optimizer=optimizer), lr=0.1)
    assert report.passed, report.reasons
    assert report.optimizer == optimizer and report.params_with_state_on_storage == 0
    assert report.max_rel_weight_error <= 1e-9 and report.max_rel_state_error <= 1e-9
    assert report.params_updated_in_place == (6 if inplace else 0)


def test_a_wrong_optimizer_state_is_detected(monkeypatch):
    original = runner_module.optim_step

    def drifting(param, grad, state, optimizer, lr):
        original(param, grad, state, optimizer, lr)
        state["exp_avg"].add_(1e-3)  # the weights are right; the state kept is not

    monkeypatch.setattr(runner_module, "optim_step", drifting)
    model = import_module(tm.mlp(), tm.mlp_inputs())
    schedule = tm.remat_and_page_schedule(model.graph, set(), set())
    report = execute_schedule(model, schedule.with_metadata(optimizer="adam"))
    assert not report.passed and report.max_rel_weight_error <= 1e-9
    assert any(reason.startswith("optimizer state exp_avg of ") for reason in report.reasons)


def test_an_unknown_optimizer_is_one_line(imported):
    schedule = tm.remat_and_page_schedule(imported["mlp"].graph, set(), set())
    with pytest.raises(InputError, match="schedule optimizer = 'lion': must be one of sgd, "
                                         "momentum, adam"):
        execute_schedule(imported["mlp"], schedule.with_metadata(optimizer="lion"))


def test_a_changed_frozen_parameter_is_detected(monkeypatch):
    original = runner_module.Runner.step_the_rest

    def nudge(self):
        with torch.no_grad():
            self.params["fc2.weight"].view(-1)[0] += 1e-12
        return original(self)

    monkeypatch.setattr(runner_module.Runner, "step_the_rest", nudge)
    model = import_module(tm.frozen_mlp(), tm.mlp_inputs())
    report = execute_schedule(model, tm.remat_and_page_schedule(model.graph, set(), set()))
    assert not report.passed
    assert "frozen parameter 'fc2.weight' changed" in report.reasons


@pytest.mark.parametrize("inplace", [True, False])
def test_an_update_applied_twice_is_detected(monkeypatch, inplace):
    original = runner_module.Runner.apply_step

    def twice(self, name, grad):
        original(self, name, grad)
        original(self, name, grad)

    monkeypatch.setattr(runner_module.Runner, "apply_step", twice)
    model = import_module(tm.mlp(), tm.mlp_inputs(), inplace_update=inplace)
    report = execute_schedule(model, tm.remat_and_page_schedule(model.graph, {"fc1"}, set()))
    assert not report.passed
    assert report.max_rel_grad_error <= 1e-9  # the gradients are right; the weights are not
    assert report.max_rel_weight_error == pytest.approx(1.0, rel=1e-6)  # one step too many
    assert any("updated weights of" in reason for reason in report.reasons)


def test_a_recomputation_after_the_update_is_refused_by_the_contract():
    # fc3/grad's output (relu2's gradient) is its gradient times fc3's weight: computed
    # again after the in-place update, it would read the new weight, as on the board; the
    # contract's replay refuses it before any tensor is touched.
    model, schedule, _ = _inplace("mlp")
    schedule = tm.with_recomputed(schedule, model.graph, "fc3/grad")
    with pytest.raises(ExecutionError, match=r"'fc3/grad' applies its SGD step in place.*"
                                             r"\[recomputed_inplace_update\]"):
        execute_schedule(model, schedule)
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


# ----------------------------------------------------------------------------- weights on storage


def _tiny_ram_board(usable: int):
    """The test board with only ``usable`` bytes of RAM for training, no flash: weights
    that do not fit go to its SD card (:func:`poetsim.request.resolve_request`)."""
    import attrs

    from poetsim.boards import Ram

    board = make_board()
    return attrs.evolve(board, ram=Ram(bytes=usable + board.ram.reserved_bytes,
                                       reserved_bytes=board.ram.reserved_bytes,
                                       bandwidth_bytes_per_s=board.ram.bandwidth_bytes_per_s))


#: factory, inputs, in-place update, usable RAM, expected placement, params on storage
STREAM_CASES = {
    # fc1 and fc2's weight frozen, on the card; fc2's bias and fc3 trained in RAM, stepped
    # after the schedule
    "frozen": (tm.frozen_mlp, tm.mlp_inputs, False, 3000, "frozen", 3),
    # every weight trained in place and on the card
    "trained": (tm.mlp, tm.mlp_inputs, True, 3000, "trained", 6),
    # frozen and trained weights on the card
    "all": (tm.frozen_mlp, tm.mlp_inputs, True, 900, "all", 6),
}


def _streamed(case: str):
    """The imported model, the tiny board, and the physical request that streams weights."""
    from poetsim.request import resolve_request

    factory, inputs, inplace, usable, label, _ = STREAM_CASES[case]
    model = import_module(factory(), inputs(), name=case, inplace_update=inplace)
    board = _tiny_ram_board(usable)
    request = resolve_request(model.graph, board, ram="board", deadline="3x")
    return model, board, request


def _record_loads(monkeypatch):
    """Wrap each step: which parameters each READ_WEIGHTS loaded, and that none of the
    weights on storage was ever in RAM besides them."""
    loads: list[tuple[str, tuple[str, ...]]] = []
    original = runner_module.Runner.run

    def run(self, position, step, reads_weights, overwrites=-1):
        original(self, position, step, reads_weights, overwrites)
        assert not set(self.params) & set(self.files.weight_files)  # never held in RAM
        if step.action is Action.READ_WEIGHTS:
            loads.append((self.graph.ops[step.op].name, tuple(sorted(self.files.loaded))))

    monkeypatch.setattr(runner_module.Runner, "run", run)
    return loads


@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_weights_on_storage_are_read_from_files_and_updated_there(case, tmp_path,
                                                                  monkeypatch):
    from poetsim.graph.streaming import WeightsOnStorage

    model, board, request = _streamed(case)
    *_, label, on_files = STREAM_CASES[case]
    on_storage = WeightsOnStorage.of(request.graph)
    assert on_storage.label == label
    assert request.streamed_weight_bytes == on_storage.total_bytes(model.graph) > 0
    # relu1 paged, fc2 and relu2 recomputed: fc2 runs again in the backward pass, so its
    # weights are read twice
    schedule = tm.remat_and_page_schedule(request.graph, {"relu1"}, {"fc2", "relu2"})
    assert check_schedule(request.graph, schedule).valid and schedule.recomputations() > 0
    loads = _record_loads(monkeypatch)
    report = execute_schedule(model, schedule, board=board, lr=0.05, page_dir=tmp_path)
    assert report.passed, report.reasons
    assert report.weights_on_storage == label and report.params_on_storage == on_files
    assert report.max_rel_weight_error <= 1e-9 and report.max_rel_grad_error <= 1e-9
    # the byte counts are the cost model's, summed over the COMPUTE steps run
    computes = [s.op for s in schedule.steps if s.action is Action.COMPUTE]
    read = sum(on_storage.bytes_read(request.graph, k) for k in computes)
    written = sum(on_storage.bytes_written(request.graph, k) for k in computes)
    assert report.weights_read_bytes == report.cost_model_weights_read_bytes == read > 0
    assert report.weights_written_bytes == report.cost_model_weights_written_bytes == written
    # an in-place update writes each trained weight back once; frozen ones never
    assert written == (model.graph.trained_param_bytes if on_storage.trained else 0)
    assert report.weights_read_bytes > on_storage.total_bytes(model.graph)  # fc2 read twice
    loaded = dict.fromkeys(op for op, names in loads if names)
    assert "fc2" in loaded and "fc2/grad" in loaded  # forward and backward of a layer
    assert sum(1 for op, names in loads if op == "fc2" and names) == 2  # recomputed
    # the files hold the updated (trained) or untouched (frozen) weights; nothing else
    files = {path.stem for path in (tmp_path / "weights").iterdir()}
    assert len(files) == on_files
    initial = dict(model.module.named_parameters())
    for name in files:
        value = torch.load(tmp_path / "weights" / f"{name}.pt", weights_only=True)
        same = torch.equal(value, initial[name].detach().double())
        assert same is (name in model.frozen_params), name


def test_a_solved_schedule_runs_with_weights_on_storage(monkeypatch):
    # the library path: resolve_request on the imported graph and a tiny-RAM board puts
    # the weights on storage; POET solves the request's (streamed) graph
    model, board, request = _streamed("all")
    result = seeded_solve(request, SolverSettings(time_limit_s=5, effort=10))
    assert result.schedule is not None
    report = execute_schedule(model, result.schedule, board=board)
    assert report.passed, report.reasons
    assert report.weights_on_storage == "all"
    assert report.budget_bytes == request.activation_budget_bytes
    assert report.weights_read_bytes == report.cost_model_weights_read_bytes > 0
    assert report.weights_written_bytes == model.graph.trained_param_bytes


def test_paging_baseline_with_trained_weights_on_storage(tmp_path):
    # a CNN whose weights leave 9000 B of RAM: all trained in place and on the card;
    # Capuchin's schedule pages activations beside them
    from poetsim.methods import produce
    from poetsim.request import resolve_request

    model = import_module(tm.small_cnn(), tm.small_cnn_inputs(), inplace_update=True)
    board = _tiny_ram_board(9000)
    request = resolve_request(model.graph, board, ram="board", deadline="3x")
    schedule = produce(request, "capuchin").schedule
    assert schedule is not None and schedule.page_ins > 0
    report = execute_schedule(model, schedule, board=board, lr=0.05, page_dir=tmp_path)
    assert report.passed, report.reasons
    assert report.weights_on_storage == "trained" and report.params_on_storage == 9
    assert report.params_updated_in_place == 9 and report.max_rel_weight_error <= 1e-9
    assert report.weights_written_bytes == report.cost_model_weights_written_bytes \
        == model.graph.trained_param_bytes
    assert report.weights_read_bytes == report.cost_model_weights_read_bytes
    assert report.peak_live_bytes <= report.budget_bytes


def test_adam_state_on_storage_is_loaded_and_written_back_by_the_in_place_update(tmp_path):
    """The CNN's trained weights and their two Adam slots (fp32) live on the card: each
    in-place update reads its weights and state and writes all three back, byte for byte
    as the cost model prices them, and the files end up holding torch.optim's state."""
    from poetsim.graph.streaming import WeightsOnStorage
    from poetsim.methods import produce
    from poetsim.request import resolve_request

    model = import_module(tm.small_cnn(), tm.small_cnn_inputs(), inplace_update=True)
    board = _tiny_ram_board(10000)  # 9000 B, as above, is too little beside Adam's slices
    request = resolve_request(model.graph, board, ram="board", deadline="3x",
                              optimizer="adam")
    assert WeightsOnStorage.of(request.graph).state_copies == 2
    schedule = produce(request, "capuchin").schedule
    assert schedule is not None and schedule.metadata["optimizer"] == "adam"
    report = execute_schedule(model, schedule, board=board, lr=0.05, page_dir=tmp_path)
    assert report.passed, report.reasons
    assert report.params_with_state_on_storage == report.params_on_storage == 9
    assert report.max_rel_state_error <= 1e-9 and report.max_rel_weight_error <= 1e-9
    assert report.weights_written_bytes == report.cost_model_weights_written_bytes \
        == 3 * model.graph.trained_param_bytes
    assert report.weights_read_bytes == report.cost_model_weights_read_bytes
    files = {path.stem for path in (tmp_path / "weights").iterdir()}
    assert len(files) == 3 * 9 and "conv1.weight.exp_avg_sq" in files


def test_a_skipped_write_back_fails_the_weight_check(monkeypatch):
    model, board, request = _streamed("trained")
    schedule = tm.remat_and_page_schedule(request.graph, set(), set())
    monkeypatch.setattr(weights_module.WeightFiles, "write_back", lambda self, name: None)
    report = execute_schedule(model, schedule, board=board)
    assert not report.passed
    assert report.max_rel_grad_error <= 1e-9  # the gradients are right; the card is not
    assert report.max_rel_weight_error == pytest.approx(1.0, rel=1e-6)  # no step at all
    assert report.weights_written_bytes == 0 < report.cost_model_weights_written_bytes
    assert any("updated weights of" in reason for reason in report.reasons)
    assert any(reason.startswith("weights on storage: read ") for reason in report.reasons)


def test_an_op_that_reads_weights_it_did_not_load_is_an_error(monkeypatch):
    # if the graph said a backward op read no weights, the op could not run from what it
    # loaded: it needs its layer's weights for the input gradient
    model, board, request = _streamed("frozen")
    original = weights_module.WeightFiles.weights_of
    monkeypatch.setattr(weights_module.WeightFiles, "weights_of",
                        lambda self, k: [] if self.graph.ops[k].name == "fc2/grad"
                        else original(self, k))
    schedule = tm.remat_and_page_schedule(request.graph, set(), set())
    with pytest.raises(ExecutionError, match=r"op 'fc2/grad' reads parameter 'fc2.weight', "
                                             "which lives on storage"):
        execute_schedule(model, schedule, board=board)


def test_a_corrupted_weight_file_is_detected():
    model, board, request = _streamed("frozen")
    schedule = tm.remat_and_page_schedule(request.graph, set(), set())

    def corrupt(position, step, directory):
        if position == 0:
            path = directory / "weights" / "fc2.weight.pt"
            data = bytearray(path.read_bytes())
            data[-20] ^= 0xFF
            path.write_bytes(bytes(data))

    with pytest.raises(ExecutionError, match="weight file .*fc2.weight.pt of 'fc2.weight' is "
                                             "corrupted"):
        execute_schedule(model, schedule, after_step=corrupt)


def test_the_streamed_graph_is_found_by_fingerprint():
    model, board, request = _streamed("trained")
    schedule = tm.remat_and_page_schedule(request.graph, set(), set())
    # without a board: any placement the fingerprint names
    assert execute_schedule(model, schedule).weights_on_storage == "trained"
    # with a board whose own request would keep the weights in RAM: the request the file
    # records keeps the placement its schedule was made for (one way into a file's request)
    report = execute_schedule(model, schedule, board=make_board())
    assert report.weights_on_storage == "trained" and report.passed, report.reasons
    # a schedule for another graph altogether is refused, in one line
    other = tm.remat_and_page_schedule(_streamed("frozen")[0].graph, set(), set())
    with pytest.raises(ExecutionError, match=r"not for the imported graph 'trained' \(nor "
                                             "for it with weights on storage"):
        execute_schedule(model, other, board=make_board())


def test_cli_import_solve_execute_with_weights_on_storage(tmp_path, capsys):
    # `solve --graph` on a board file with 3,308 B of usable RAM streams the MLP's trained
    # weights; `execute` with the same board runs the streamed graph
    here = Path(__file__).parent
    text = (here.parent / "device_models" / "mkr1000.toml").read_text()
    text = re.sub(r'(?m)^name = ".*"', 'name = "tinyram"', text)
    text = re.sub(r"(?m)^bytes = \{ value = 32_768,", "bytes = { value = 11_500,", text)
    board = tmp_path / "tinyram.toml"
    board.write_text(text)
    factory = f"{here / 'torch_models.py'}:mlp"
    graph, schedule = tmp_path / "g.json", tmp_path / "s.json"
    model = ["--model-factory", factory, "--input-shape", "2,32", "--inplace-update"]
    assert main(["import", factory, "--input-shape", "2,32", "--inplace-update", "--out",
                 str(graph)]) == 0
    assert main(["solve", "--graph", str(graph), "--board", str(board), "--ram", "board",
                 "--time-limit", "5", "--out", str(schedule)]) == 0
    assert "trained weights on sd_spi storage" in capsys.readouterr().out
    assert main(["execute", str(schedule), *model, "--board", str(board), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["weights_on_storage"] == "trained"
    assert report["weights_written_bytes"] == report["cost_model_weights_written_bytes"] > 0
    # without --board it runs on the board the schedule records: not built in, so asked for
    assert main(["execute", str(schedule), *model]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made for board 'tinyram', which is not built in" in err
    # on the nRF52840 the weights would fit RAM, but the file's request keeps the
    # placement its schedule was made for: it runs there streamed too
    assert main(["execute", str(schedule), *model, "--board", "nrf52840", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weights_on_storage"] == "trained"


@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_held_weights_are_used_from_ram_by_the_backward_op(case, tmp_path, monkeypatch):
    """A backward op whose weights are held runs on those its forward op's READ_WEIGHTS
    loaded: it loads nothing, the bytes read drop by its share, and the gradients and the
    updated weights (written back from the held copy) still match autograd and SGD."""
    from test_schedule_check import with_holds

    from poetsim.graph.streaming import WeightsOnStorage, hold_owners

    model, board, request = _streamed(case)
    graph = request.graph
    on_storage = WeightsOnStorage.of(graph)
    owners = hold_owners(graph)
    names = [op.name for k, op in enumerate(graph.ops) if owners[k] >= 0]
    assert "fc2/grad" in names
    streamed = tm.remat_and_page_schedule(graph, {"relu1"}, set())
    schedule = with_holds(graph, streamed.steps, names)
    assert check_schedule(graph, schedule).valid
    loads = _record_loads(monkeypatch)
    report = execute_schedule(model, schedule, board=board, lr=0.05, page_dir=tmp_path)
    # the held weights stay in RAM: this hand-made schedule's simulated peak is over the
    # tiny board's RAM, which the verdict's rule says (#32); the run itself is right
    assert all("over the board's usable RAM" in r for r in report.reasons), report.reasons
    assert report.max_rel_weight_error <= 1e-9 and report.max_rel_grad_error <= 1e-9
    loaded = {op for op, found in loads if found}
    assert not loaded & set(names) and "fc2" in loaded
    saved = sum(on_storage.bytes_read(graph, graph.index(name)) for name in names)
    plain = execute_schedule(model, streamed, board=board, lr=0.05)
    assert report.weights_read_bytes == report.cost_model_weights_read_bytes \
        == plain.weights_read_bytes - saved
    assert report.weights_written_bytes == plain.weights_written_bytes
    assert report.weights_held_peak_bytes >= plain.weights_held_peak_bytes


@pytest.mark.parametrize("case", sorted(CASES))
def test_in_the_arena_a_good_layout_matches_and_an_overlap_corrupts(imported, case, tmp_path):
    """#28 item 7: every activation at its planned offset of one region; moving a tensor
    onto one still live makes the gradients wrong, and the checks catch it."""
    import attrs

    from poetsim.schedule.arena import plan_arena
    from poetsim.schedule.layout import Layout
    from poetsim.schedule.replay import replay

    model = imported[case]
    _, _, page, remat = CASES[case]
    schedule = tm.remat_and_page_schedule(model.graph, page, remat)
    layout = plan_arena(replay(model.graph, schedule)).layout
    report = execute_schedule(model, schedule, page_dir=tmp_path / "good", arena=layout)
    assert report.passed, report.reasons
    # a computed tensor moved onto one that is read after it is written
    graph, steps = model.graph, schedule.steps
    tensors = [b for b in layout.buffers if b.kind == "tensor"]

    def read_later(victim, other) -> bool:
        return other.start < victim.start < other.end and any(
            steps[p].action is Action.COMPUTE and other.op in graph.predecessors(steps[p].op)
            for p in range(victim.start + 1, other.end))

    victim, other = next((v, o) for v in tensors for o in tensors
                         if steps[v.start].action is Action.COMPUTE and v.size_bytes >= 4
                         and read_later(v, o)
                         and o.offset_bytes + v.size_bytes <= layout.arena_bytes)
    bad = Layout(layout.arena_bytes, [attrs.evolve(b, offset_bytes=other.offset_bytes)
                                      if b is victim else b for b in layout.buffers])
    report = execute_schedule(model, schedule, page_dir=tmp_path / "bad", arena=bad)
    assert not report.passed and report.max_rel_grad_error > 1e-6


def test_a_model_that_runs_in_place_imports_and_executes_in_place():
    """#28 item 5: ``nn.ReLU(inplace=True)`` and ``out += h`` import as in-place kernels
    over the tensor they mutate; the plain schedule runs all three in place (each input
    dies right after), so each of those steps needs its input's bytes less than the same
    model written out of place, and it executes, in the arena too, to autograd's
    gradients within the contract's peak."""
    from poetsim.schedule import plain_schedule
    from poetsim.schedule.replay import Replay

    model = import_module(tm.inplace_cnn(), tm.small_cnn_inputs(), name="ip")
    assert {op.name: op.overwrites for op in model.graph.ops if op.overwrites} == {
        "relu1": "bn1", "add_": "bn2", "relu2": "add_"}
    plain = plain_schedule(model.graph)
    walk = Replay(model.graph, plain).run()
    assert sorted(model.graph.ops[u].name for u in walk.overwrites.values()) == [
        "add_", "bn1", "bn2"]
    out_of_place = import_module(tm.small_cnn(), tm.small_cnn_inputs(), name="oop")
    other = Replay(out_of_place.graph, plain_schedule(out_of_place.graph)).run()
    for position, u in walk.overwrites.items():  # the input's bytes hold the output
        assert walk.ram_bytes[position] == (other.ram_bytes[position]
                                            - model.graph.ops[u].output_bytes)
    for arena in (False, True):
        report = execute_schedule(model, plain, arena=arena)
        assert report.passed, report.reasons
        assert report.peak_live_bytes <= report.checker_peak_bytes == walk.peak_bytes


def _read_after(graph, steps, b, p) -> bool:
    """Tensor buffer ``b`` is read by a COMPUTE after step ``p``, while it lives."""
    return any(steps[q].action is Action.COMPUTE and b.op in graph.predecessors(steps[q].op)
               for q in range(p + 1, b.end))


def _with_a_move(graph, schedule):
    """``schedule`` with one MOVE: the first tensor computed that is read again later
    while another tensor, read later too, lives beside it is copied, right after its
    COMPUTE, to the top of the layout planned without it (the arena grows by its size);
    the schedule and the layout planned for the new steps."""
    import attrs

    from poetsim.schedule import Step
    from poetsim.schedule.arena import plan_arena
    from poetsim.schedule.replay import replay

    steps = list(schedule.steps)
    layout = plan_arena(replay(graph, schedule)).layout
    tensors = [b for b in layout.buffers if b.kind == "tensor"]
    for b in tensors:
        p = b.start
        beside = [c for c in tensors if c.op != b.op and c.start < p < c.end - 1
                  and _read_after(graph, steps, c, p)]
        if (steps[p].action is Action.COMPUTE and b.size_bytes >= 8 and beside
                and _read_after(graph, steps, b, p + 1)):
            steps.insert(p + 1, Step.move(b.op, steps[p].stage, b.offset_bytes,
                                          layout.arena_bytes))
            moved = attrs.evolve(schedule, steps=steps)
            return moved, plan_arena(replay(graph, moved)).layout
    raise AssertionError("no tensor to move")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_move_in_the_arena_keeps_the_gradients_and_a_tampered_target_corrupts(
        imported, case, tmp_path):
    """#28 item 4: a MOVE copies its tensor within the arena, so the gradients stay right;
    its target moved onto a tensor still live corrupts that one, and the checks catch it
    (and the checked path refuses the file: the layout no longer agrees with the step)."""
    import attrs

    from poetsim.schedule import Step

    model = imported[case]
    _, _, page, remat = CASES[case]
    graph = model.graph
    schedule, layout = _with_a_move(graph, tm.remat_and_page_schedule(graph, page, remat))
    assert check_schedule(graph, attrs.evolve(schedule, layout=layout)).valid
    report = execute_schedule(model, schedule, page_dir=tmp_path / "good", arena=layout)
    assert report.passed, report.reasons
    # the target moved onto a tensor live across the MOVE and read after it
    p, move = next((p, s) for p, s in enumerate(schedule.steps) if s.action is Action.MOVE)
    steps = schedule.steps
    size = graph.ops[move.op].output_bytes
    victim = next(b for b in layout.buffers if b.kind == "tensor" and b.op != move.op
                  and b.start < p < b.end and b.offset_bytes + size <= layout.arena_bytes
                  and b.offset_bytes != move.from_offset_bytes
                  and _read_after(graph, steps, b, p))
    tampered = list(steps)
    tampered[p] = Step.move(move.op, move.stage, move.from_offset_bytes, victim.offset_bytes)
    bad = attrs.evolve(schedule, steps=tampered, layout=layout)
    report = execute_schedule(model, bad, page_dir=tmp_path / "bad", arena=layout)
    assert not report.passed and report.max_rel_grad_error > 1e-6
    assert check_schedule(graph, bad).violation.rule == "move_mismatch"
    with pytest.raises(ExecutionError, match=r"\[move_mismatch\]"):
        execute_schedule(model, bad, page_dir=tmp_path / "checked", arena=True)


def test_a_layout_declaring_an_arena_over_the_budget_fails_by_the_verdicts_rule(imported):
    """#32: execute judges the arena the schedule's layout declares against the request
    as the verdict does (:func:`poetsim.verdict.ram_violations`), not only the live bytes:
    a layout of 10**15 B passed while ``simulate`` failed it."""
    import attrs

    from poetsim.request import resolve_request
    from poetsim.schedule.layout import Layout
    from poetsim.verdict import check_on_board

    model = imported["mlp"]
    board = make_board()
    request = resolve_request(model.graph, board, ram="90%")
    result = seeded_solve(request, SolverSettings(time_limit_s=5))
    assert result.schedule is not None
    # the layout the simulation used, as a schedule file records it
    schedule = attrs.evolve(result.schedule,
                            layout=check_on_board(request, result.schedule)[0].layout)
    report = execute_schedule(model, schedule, board=board, arena=True)
    assert report.passed, report.reasons
    huge = attrs.evolve(schedule, layout=Layout(10**15, list(schedule.layout.buffers)))
    report = execute_schedule(model, huge, board=board, arena=True)
    assert not report.passed
    assert any("arena of" in r and "over the budget" in r for r in report.reasons), report.reasons
