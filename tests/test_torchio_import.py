"""Importing PyTorch modules (torch.export) as poetsim training graphs."""

from __future__ import annotations

import pytest
from conftest import make_board, paper_request

from poetsim.errors import GraphError, InputError
from poetsim.graph import Phase, forward_macs, graph_to_dict
from poetsim.schedule import check_schedule
from poetsim.torchio import (
    UnsupportedOpError,
    import_module,
    parse_input_spec,
)
from poetsim.zoo import build_model

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402  (needs torch)


def _forward_flops(graph) -> float:
    return sum(op.flops for op in graph.ops if op.phase is Phase.FORWARD)


def test_mlp_imports_exactly_as_the_zoo_builds_it():
    imported = import_module(tm.mlp(), tm.mlp_inputs(), name="mlp")
    zoo = build_model("mlp", batch_size=2, input_dim=32, width=16, layers=3, classes=4)
    assert graph_to_dict(imported.graph)["ops"] == graph_to_dict(zoo)["ops"]
    assert imported.graph.metadata["batch_size"] == 2


def _mlp_with_frozen(frozen) -> object:
    model = tm.mlp()
    for name, param in model.named_parameters():
        param.requires_grad_(not frozen(name))
    return model


#: zoo training-mode options, and the parameters to freeze in torch for the same thing
FROZEN_CASES = {
    "full": ({}, lambda name: False),
    "last-1": ({"train_last": 1}, lambda name: not name.startswith("fc3.")),
    "bias-only": ({"bias_only": 1}, lambda name: name.endswith(".weight")),
}


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("case", sorted(FROZEN_CASES))
def test_frozen_parameters_and_inplace_updates_import_as_the_zoo_derives_them(case, inplace):
    options, frozen = FROZEN_CASES[case]
    imported = import_module(_mlp_with_frozen(frozen), tm.mlp_inputs(), name="mlp",
                             inplace_update=inplace)
    zoo = build_model("mlp", batch_size=2, input_dim=32, width=16, layers=3, classes=4,
                      inplace_update=int(inplace), **options)
    assert graph_to_dict(imported.graph)["ops"] == graph_to_dict(zoo)["ops"]
    assert imported.frozen_params == {n for n, _ in tm.mlp().named_parameters() if frozen(n)}
    assert imported.inplace_update is inplace
    assert any(op.inplace_update for op in imported.graph.ops) is inplace


def test_a_frozen_weight_costs_no_weight_gradient():
    graph = import_module(tm.frozen_mlp(), tm.mlp_inputs()).graph
    fc1, fc2 = graph.op("fc1"), graph.op("fc2")
    assert fc1.frozen_param_bytes == fc1.param_bytes  # frozen: no backward op at all
    assert "fc1/grad" not in {op.name for op in graph.ops}
    assert fc2.frozen_param_bytes == 4 * 16 * 16  # the weight; the bias is trained
    # the bias gradient needs no saved input: fc2/grad reads relu2's gradient alone
    assert graph.inputs_of(graph.index("fc2/grad")) == ["relu2/grad"]


def test_inplace_updates_are_on_every_backward_op_with_trained_parameters():
    imported = import_module(tm.small_cnn(), tm.small_cnn_inputs(), inplace_update=True)
    graph = imported.graph
    fused = {op.forward_of for op in graph.ops if op.inplace_update}
    assert fused == {op.name for op in graph.ops if op.trained_param_bytes}
    assert fused == {"conv1", "bn1", "conv2", "bn2", "fc"}
    assert graph.metadata["inplace_update"] == 1
    assert imported.ops["conv2"].biases == ("conv2.bias",)
    assert imported.ops["bn1"].biases == ("bn1.bias",)


def test_bad_import_options_are_one_line():
    with pytest.raises(InputError, match="inplace_update = 'yes'"):
        import_module(tm.mlp(), tm.mlp_inputs(), inplace_update="yes")
    with pytest.raises(GraphError, match="nothing to train"):
        import_module(_mlp_with_frozen(lambda name: True), tm.mlp_inputs())


def test_resnet18_matches_the_zoo_within_two_percent():
    imported = import_module(tm.resnet18_cifar(), (torch.randn(1, 3, 32, 32),))
    zoo = build_model("resnet18_cifar", batch_size=1)
    params = sum(p.numel() for p in tm.resnet18_cifar().parameters())
    assert imported.graph.param_bytes == 4 * params  # every trained parameter counted once
    assert imported.graph.param_bytes == pytest.approx(zoo.param_bytes, rel=0.02)
    assert _forward_flops(imported.graph) == pytest.approx(_forward_flops(zoo), rel=0.02)
    assert forward_macs(imported.graph) == pytest.approx(forward_macs(zoo), rel=0.02)
    # Same layers, same names: the module paths are the zoo's op names.
    zoo_forward = {op.name for op in zoo.ops if op.phase is not Phase.BACKWARD}
    ours = {op.name for op in imported.graph.ops if op.phase is not Phase.BACKWARD}
    assert ours == (zoo_forward - {"input"}) | {"x"}


def test_backward_reads_exactly_what_each_kind_saves():
    graph = import_module(tm.transformer_block(), tm.transformer_inputs()).graph
    assert set(graph.inputs_of(graph.index("softmax/grad"))) == {"matmul_2/grad", "softmax"}
    assert set(graph.inputs_of(graph.index("query/grad"))) == {"matmul/grad", "x"}
    assert set(graph.inputs_of(graph.index("matmul/grad"))) == {"softmax/grad", "query", "key"}
    # the residual add saves nothing; the GELU saves its input
    assert graph.inputs_of(graph.index("add/grad")) == ["ln2/grad"]
    assert set(graph.inputs_of(graph.index("gelu/grad"))) == {"fc2/grad", "fc1"}


def test_views_and_constant_scaling_are_folded_not_tensors():
    graph = import_module(tm.transformer_block(), tm.transformer_inputs()).graph
    kinds = {op.kind for op in graph.ops}
    assert kinds <= {"input", "linear", "matmul", "softmax", "layernorm", "gelu", "add",
                     "cross_entropy"}
    # the scores matmul feeds the softmax directly: the 1/sqrt(d) scale is folded in
    assert "matmul" in graph.inputs_of(graph.index("softmax"))


def test_bert_from_transformers_imports_and_solves():
    pytest.importorskip("transformers")
    from poetsim.methods import SolverSettings, seeded_solve

    imported = import_module(tm.bert_tiny(), tm.bert_inputs(), name="bert_tiny")
    graph = imported.graph
    kinds = {op.kind for op in graph.ops}
    assert {"embedding", "layernorm", "matmul", "softmax", "gelu", "linear"} <= kinds
    # the attention mask is a data input the softmax reads, not a trained tensor
    inputs = [op.name for op in graph.ops if op.kind == "input"]
    assert "input_ids" in inputs and len(inputs) >= 2
    params = sum(p.numel() for p in tm.bert_tiny().parameters())
    assert graph.param_bytes == 4 * params
    request = paper_request(graph, make_board(), "60%")
    result = seeded_solve(request, SolverSettings(time_limit_s=5))
    assert result.schedule is not None
    assert result.request is request
    assert check_schedule(graph, result.schedule, budget_bytes=request.ram_limit_bytes,
                          resident_bytes=request.resident_bytes).valid


def test_unsupported_op_names_the_op_and_the_module_path():
    with pytest.raises(UnsupportedOpError) as info:
        import_module(tm.unsupported(), (torch.randn(2, 4),))
    message = str(info.value)
    assert "aten.sin" in message and "'body.act'" in message
    assert "\n" not in message
    assert isinstance(info.value, GraphError)


def test_a_model_without_parameters_on_the_output_path_is_refused():
    with pytest.raises(GraphError, match="nothing to train"):
        import_module(torch.nn.ReLU(), (torch.randn(2, 4),))


def test_the_callers_module_is_not_changed():
    model = tm.small_cnn()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    import_module(model, tm.small_cnn_inputs())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_input_specs():
    assert parse_input_spec("2,3,32,32").shape == (2, 3, 32, 32)
    spec = parse_input_spec("2,16:int:100")
    assert spec.shape == (2, 16) and spec.int_high == 100
    # an empty size is a typo, not read as 2,16 (#32)
    for bad in ("", "2,a", "2,0", "2,16:float", "2,16:int:x", "2,,16", "2,16,", ",2"):
        with pytest.raises(InputError):
            parse_input_spec(bad)
