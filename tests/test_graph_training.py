"""Training modes: what is trained, and what a frozen parameter no longer costs."""

from __future__ import annotations

import pytest

from poetsim.errors import GraphError, GraphFileError, InputError
from poetsim.graph import (
    Phase,
    Training,
    TrainingGraph,
    check_gradients,
    graph_fingerprint,
    graph_from_dict,
    graph_to_dict,
    read_graph,
    resident_memory,
    write_graph,
)
from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.training import layers, resolve_training
from poetsim.zoo import build_model


def names(graph: TrainingGraph) -> set[str]:
    return {op.name for op in graph.ops}


def inputs_of(graph: TrainingGraph, name: str) -> set[str]:
    return set(graph.inputs_of(graph.index(name)))


def test_layers_group_a_convolution_with_its_norm() -> None:
    g = build_model("mcunet_in1")
    fg_layers = layers(_forward("mcunet_in1"))
    assert fg_layers[0] == ("stem.conv", "stem.bn")
    assert fg_layers[1] == ("block1.dw.conv", "block1.dw.bn")
    assert fg_layers[-1] == ("classifier",)
    assert len(fg_layers) == 43                       # 42 convolutions + the classifier
    assert sum(op.param_bytes for op in g.ops) == g.param_bytes


def _forward(name: str):
    """The forward ops of a zoo model (recorded through a ForwardGraph subclass)."""
    import poetsim.zoo.layers as L

    captured: list = []
    original = L.new_graph

    def spy(*args, **kwargs):
        fg = original(*args, **kwargs)
        captured.append(fg)
        return fg

    L.new_graph = spy
    try:
        build_model(name)
    finally:
        L.new_graph = original
    return captured[0].ops


def test_full_is_the_default_and_unchanged() -> None:
    for name in ("mlp", "resnet18_cifar", "mcunet_in1"):
        default = build_model(name)
        spelled = build_model(name, train_last=0, bias_only=0, sparse_update=0)
        assert graph_fingerprint(default) == graph_fingerprint(spelled)
        assert all(op.frozen_param_bytes == 0 for op in default.ops)
        assert default.trained_param_bytes == default.param_bytes
        assert "frozen_param_bytes" not in str(graph_to_dict(default))


def test_last_k_layers() -> None:
    full, last = build_model("mlp"), build_model("mlp", train_last=2)
    # fc9 and fc10 are trained; fc1..fc8 are frozen, and fc1..fc8 need no backward op
    assert last.op("fc9").frozen_param_bytes == 0
    assert last.op("fc10").frozen_param_bytes == 0
    assert last.op("fc8").frozen_param_bytes == last.op("fc8").param_bytes
    assert {"fc10/grad", "relu9/grad", "fc9/grad", "loss/grad"} <= names(last)
    assert not {"relu8/grad", "fc8/grad", "fc1/grad"} & names(last)
    # fc9 is the first trained layer: its backward computes the weight gradient only
    assert last.op("fc9/grad").output_bytes == 0
    assert last.op("fc9/grad").flops == full.op("fc9").flops
    # no gradient and no optimizer state for frozen weights; all weights stay resident
    trained = 4 * ((256 * 256 + 256) + (256 * 10 + 10))
    assert last.trained_param_bytes == trained
    r = resident_memory(last, optimizer="adam")
    assert r.param_bytes == full.param_bytes
    assert (r.gradient_bytes, r.optimizer_state_bytes) == (trained, 2 * trained)
    assert resident_memory(last).total_bytes < resident_memory(full).total_bytes
    assert last.flops < full.flops
    assert last.metadata["train_last"] == 2 and last.metadata["training_mode"] == "last"
    check_gradients(last)


def test_frozen_layer_after_a_trained_one_passes_the_gradient_on() -> None:
    # Freeze the middle of a chain by hand: a (trained) -> b (frozen) -> c (trained).
    fg = ForwardGraph("chain", training=Training("sparse", weights={0: 1.0, 2: 1.0}))
    x = fg.input("x", 8)
    a = fg.op("a", "linear", [x], output_elements=8, flops=128, param_count=72, bias_count=8)
    b = fg.op("b", "linear", [a], output_elements=8, flops=128, param_count=72, bias_count=8)
    c = fg.op("c", "linear", [b], output_elements=2, flops=32, param_count=18, bias_count=2)
    fg.loss("loss", c)
    g = fg.build()
    assert g.op("b").frozen_param_bytes == 4 * 72
    assert g.op("a").frozen_param_bytes == 4 * 8       # weights trained, bias not
    # b/grad exists (a needs its input gradient), costs the input-gradient half only and
    # does not read its input a (that is only for b's weight gradient)
    assert g.op("b/grad").flops == 128
    assert g.op("b/grad").output_bytes == 4 * 8
    assert "a" not in inputs_of(g, "b/grad")
    assert "b" in inputs_of(g, "c/grad")              # c's weights are trained
    assert g.op("c/grad").flops == 2 * 32


def test_bias_only() -> None:
    full, bias = build_model("mobilenet_v2_w035"), build_model("mobilenet_v2_w035",
                                                                 bias_only=1)
    # convolutions have no bias: frozen; batch norms train their shift, not their scale
    assert bias.op("block5.expand.conv").trained_param_bytes == 0
    bn = bias.op("block5.expand.bn")
    assert bn.trained_param_bytes == bn.param_bytes // 2
    assert bias.op("classifier").trained_param_bytes == 4 * 1000
    # the frozen convolutions' backward ops pass the input gradient only, without input
    conv_grad = bias.op("block5.expand.conv/grad")
    assert conv_grad.flops == full.op("block5.expand.conv").flops
    assert "block4.add" not in inputs_of(bias, "block5.expand.conv/grad")
    # the stem convolution is below the first trained parameter (stem.bn's shift)
    assert "stem.conv/grad" not in names(bias) and "stem.bn/grad" in names(bias)
    # the classifier's bias gradient: one add per output element
    assert bias.op("classifier/grad").flops == (bias.op("avgpool").output_bytes // 4
                                                * 1000 * 2 + 1000)
    assert bias.trained_param_bytes < full.trained_param_bytes / 20
    # the last k layers' biases only
    two = build_model("mlp", bias_only=1, train_last=2)
    assert two.trained_param_bytes == 4 * (256 + 10)
    assert "fc9/grad" in names(two) and "fc8/grad" not in names(two)


def test_mobilenet_w035_sparse_update_is_lin_et_al_scheme() -> None:
    """tiny-training's "99kb" scheme on the headless network: expansions of blocks 10-17
    (ratio 1/8 in block 15, 1/2 in block 16), the classifier by its index -1, biases of
    the last 25 convolutions."""
    g = build_model("mobilenet_v2_w035", head=0, sparse_update=1, classes=10)
    assert g.metadata["training_mode"] == "sparse"
    for block in (10, 11, 12, 13, 14, 17):
        assert g.op(f"block{block}.expand.conv").frozen_param_bytes == 0
    b15, b16 = g.op("block15.expand.conv"), g.op("block16.expand.conv")
    assert b15.trained_param_bytes == b15.param_bytes // 8
    assert b16.trained_param_bytes == b16.param_bytes // 2
    assert g.op("classifier").frozen_param_bytes == 0
    assert g.op("classifier").param_bytes == 4 * (112 * 10 + 10)
    # 51 convolutions: the last 25 are 26 (block 9's projection) to 50
    shift = g.op("block9.project.bn")
    assert shift.trained_param_bytes == shift.param_bytes // 2
    assert g.op("block9.dw.bn").trained_param_bytes == 0
    expand = g.op("block10.expand.bn")
    assert expand.trained_param_bytes == expand.param_bytes


def test_negative_sparse_layer_index_counts_from_the_last() -> None:
    forward = _forward("mlp")
    n = len(layers(forward))
    last = resolve_training(forward, Training("sparse", weights={-1: 1.0}))
    assert set(last) == set(resolve_training(forward, Training("sparse", weights={n - 1: 1.0})))
    with pytest.raises(InputError, match=rf"layer index {-n - 1}: must be in \[-{n}, {n}\)"):
        resolve_training(forward, Training("sparse", weights={-n - 1: 1.0}))


def test_sparse_update_is_lin_et_al_scheme() -> None:
    g = build_model("mcunet_in1", sparse_update=1)
    assert g.metadata["training_mode"] == "sparse"
    # weights of the expansions of blocks 8-11 (ratio 1), 13 (1/8) and 14 (1/4)
    for block in (8, 9, 10, 11):
        conv = g.op(f"block{block}.expand.conv")
        assert conv.frozen_param_bytes == 0
    b13, b14 = g.op("block13.expand.conv"), g.op("block14.expand.conv")
    assert b13.trained_param_bytes == b13.param_bytes // 8
    assert b14.trained_param_bytes == b14.param_bytes // 4
    # a partial weight update costs that fraction of the weight-gradient MACs
    full = build_model("mcunet_in1")
    assert g.op("block13.expand.conv/grad").flops == pytest.approx(
        full.op("block13.expand.conv").flops * (1 + 1 / 8))
    # biases (norm shifts) of the last 22 convolutions, none before
    # conv 21's weights are trained: its batch norm trains its scale and its shift
    assert g.op("block8.expand.bn").trained_param_bytes == 4 * 2 * 160
    assert g.op("block7.project.bn").trained_param_bytes == 4 * 40     # conv 20: shift
    assert g.op("block7.dw.bn").trained_param_bytes == 0               # conv 19
    assert g.op("block7.dw.conv").trained_param_bytes == 0
    assert "block7.dw.conv/grad" not in names(g)
    assert g.op("classifier").frozen_param_bytes == 0
    weights = (sum(g.op(f"block{b}.expand.conv").param_bytes for b in (8, 9, 10, 11))
               + b13.param_bytes // 8 + b14.param_bytes // 4 + 4 * 160 * 1000)
    shifts = sum(op.trained_param_bytes for op in g.ops if op.kind == "batchnorm")
    assert g.trained_param_bytes == weights + shifts + 4 * 1000
    assert g.trained_param_bytes < full.param_bytes / 2
    check_gradients(g)


def test_graph_files_carry_frozen_bytes(tmp_path) -> None:
    g = build_model("mlp", train_last=3)
    path = tmp_path / "g.json"
    write_graph(g, path)
    back = read_graph(path)
    assert back == g and graph_fingerprint(back) == graph_fingerprint(g)
    assert back.trained_param_bytes == g.trained_param_bytes
    assert graph_fingerprint(g) != graph_fingerprint(build_model("mlp"))


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda op: op.update(frozen_param_bytes=10**6), "frozen_param_bytes = 1000000: must be at "
                                                     "most param_bytes"),
    (lambda op: op.update(frozen_param_bytes=-4), "frozen_param_bytes = -4: must not be "
                                                  "negative"),
    (lambda op: op.update(frozen_param_bytes=1.5), "frozen_param_bytes = 1.5: must be a whole"),
])
def test_bad_frozen_bytes_in_graph_files(tmp_path, mutate, message) -> None:
    doc = graph_to_dict(build_model("mlp", layers=2))
    mutate(next(op for op in doc["ops"] if op["name"] == "fc2"))
    path = tmp_path / "bad.json"
    path.write_text(__import__("json").dumps(doc))
    with pytest.raises(GraphFileError, match=message) as err:
        read_graph(path)
    assert "\n" not in str(err.value)


def test_trained_op_needs_a_backward_op_and_frozen_one_does_not() -> None:
    doc = graph_to_dict(build_model("mlp", layers=2))
    # freezing fc1 by hand: its backward op is then one that is not needed at all
    for op in doc["ops"]:
        if op["name"] == "fc1":
            op["frozen_param_bytes"] = op["param_bytes"]
    with pytest.raises(GraphError, match="which needs no gradient"):
        graph_from_dict(doc)
    doc["ops"] = [op for op in doc["ops"] if op["name"] not in ("fc1/grad", "relu1/grad")]
    g = graph_from_dict(doc)
    assert g.trained_param_bytes == g.op("fc2").param_bytes
    # ... while a trained op without one is rejected
    doc = graph_to_dict(build_model("mlp", layers=2))
    doc["ops"] = [op for op in doc["ops"] if op["name"] != "fc1/grad"]
    with pytest.raises(GraphError, match="op 'fc1': has 803840 B of trained parameters"):
        graph_from_dict(doc)


def test_everything_frozen_is_nothing_to_train() -> None:
    fg = ForwardGraph("frozen", training=Training("bias", last=1))
    x = fg.input("x", 4)
    fc = fg.op("fc", "linear", [x], output_elements=2, flops=16, param_count=8)  # no bias
    fg.loss("loss", fc)
    with pytest.raises(InputError, match="nothing would be trained"):
        fg.build()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "most"}, "training mode = 'most'"),
    ({"mode": "last", "last": 0}, "trains at least one layer"),
    ({"mode": "sparse", "weights": {3: 1.5}}, "weight fraction 1.5: must be in"),
    ({"mode": "sparse"}, "trains no weight and no bias"),
    ({"mode": "bias", "weights": {1: 1.0}}, "only for the sparse mode"),
])
def test_bad_training_modes(kwargs, message) -> None:
    with pytest.raises(InputError, match=message):
        Training(**kwargs)


def test_every_backward_op_still_depends_on_the_loss() -> None:
    for options in ({"train_last": 4}, {"bias_only": 1}, {"sparse_update": 1}):
        g = build_model("mcunet_in1", **options)
        loss = g.loss_index
        assert all(i in g.descendants(loss) for i in g.indices(Phase.BACKWARD))
