"""Tests of the model zoo: published sizes, autograd-like structure, options and errors."""

from __future__ import annotations

import re
from functools import cache

import pytest

from poetsim.errors import InputError, UnknownNameError
from poetsim.graph import KINDS, MAC_KINDS, Phase, TrainingGraph, forward_macs, graph_fingerprint
from poetsim.graph.autograd import grad_name
from poetsim.zoo import (
    DEFAULT_MODEL,
    PRECISION_OPTIONS,
    TRAINING_OPTIONS,
    build_model,
    model_description,
    model_names,
    model_options,
)

ALL_MODELS = ["bert", "ds_cnn_m", "ds_cnn_s", "mcunet_in1", "mlp", "mobilenet_v2",
              "mobilenet_v2_w035", "resnet18", "resnet18_cifar", "resnet50",
              "transformer_block", "vgg16", "vgg16_cifar"]

#: Readable hierarchical op names: "layer1.0.conv1", "block3.attn.softmax", "fc".
NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)*")


@cache
def model(name: str, **options: int) -> TrainingGraph:
    return build_model(name, **options)


def params(graph: TrainingGraph) -> float:
    return graph.param_bytes / 4


def inputs_of(graph: TrainingGraph, name: str) -> set[str]:
    return set(graph.inputs_of(graph.index(name)))


# ------------------------------------------------------------------ published numbers

# (model, parameters, forward MACs at batch 1): torchvision / published figures.
PUBLISHED = [
    ("resnet18", 11.69e6, 1.82e9),
    ("resnet50", 25.6e6, 4.1e9),
    ("vgg16", 138.4e6, 15.5e9),
    ("mobilenet_v2", 3.5e6, 0.30e9),
    # Kuang Liu's pytorch-cifar ResNet18: 11,173,962 parameters, 0.56 G MACs.
    ("resnet18_cifar", 11.17e6, 0.556e9),
    # CIFAR VGG-16 without batch norm, one linear classifier: 14,719,818 parameters,
    # 313 M MACs (with batch norm it is 14,728,266 parameters).
    ("vgg16_cifar", 14.72e6, 0.313e9),
]


@pytest.mark.parametrize(("name", "n_params", "macs"), PUBLISHED)
def test_published_params_and_macs(name: str, n_params: float, macs: float) -> None:
    g = model(name)
    assert params(g) == pytest.approx(n_params, rel=0.02)
    assert forward_macs(g) == pytest.approx(macs, rel=0.02)


# MCU models (issue #15), each against its published figures within 2%:
# (model, options, parameters, forward MACs, source).
PUBLISHED_MCU = [
    # tensorflow/models research/slim/nets/mobilenet/README.md, mobilenet_v2_0.35_128:
    # 20 M MACs, 1.66 M parameters.
    ("mobilenet_v2_w035", (), 1.66e6, 20e6),
    # mit-han-lab/mcunet README, mcunet-in1 (mcunet-5fps_imagenet) at its 96x96
    # resolution: 12.8 M MACs, 0.64 M parameters.
    ("mcunet_in1", (("image_size", 96),), 0.64e6, 12.8e6),
]

# Hello Edge (Zhang et al. 2017), DS-CNN operations per inference: small 5.4 M, medium
# 19.8 M, counting a multiply-accumulate as 2 operations.
PUBLISHED_KWS_OPS = [("ds_cnn_s", 5.4e6), ("ds_cnn_m", 19.8e6)]


@pytest.mark.parametrize(("name", "options", "n_params", "macs"), PUBLISHED_MCU)
def test_published_mcu_models(name: str, options: tuple, n_params: float, macs: float) -> None:
    g = model(name, **dict(options))
    assert params(g) == pytest.approx(n_params, rel=0.02)
    assert forward_macs(g) == pytest.approx(macs, rel=0.02)


@pytest.mark.parametrize(("name", "ops"), PUBLISHED_KWS_OPS)
def test_published_kws_operations(name: str, ops: float) -> None:
    assert 2 * forward_macs(model(name)) == pytest.approx(ops, rel=0.02)


def test_mcu_models_exact_architecture() -> None:
    # MobileNetV2 0.35: channels x 0.35 rounded to multiples of 8, the 1280 head kept.
    w = model("mobilenet_v2_w035")
    assert w.op("stem.conv").output_bytes == 4 * 16 * 64 * 64       # 32 x 0.35 -> 16
    assert w.op("block1.project.conv").output_bytes == 4 * 8 * 64 * 64
    assert w.op("block17.project.conv").output_bytes == 4 * 112 * 4 * 4
    assert w.op("head.conv").param_bytes == 4 * 112 * 1280
    assert build_model("mobilenet_v2", width_percent=35, image_size=128).param_bytes \
        == w.param_bytes
    # Lin et al.'s network has no head: the classifier reads block 17's 112 channels
    headless = build_model("mobilenet_v2_w035", head=0)
    assert "head.conv" not in {op.name for op in headless.ops}
    assert headless.op("classifier").param_bytes == 4 * (112 * 1000 + 1000)
    assert headless.metadata["head"] == 0 and w.metadata["head"] == 1
    assert "head" not in build_model("mobilenet_v2").metadata
    # MCUNet-in1 at 128 (tiny-training mcunet-5fps): 16 -> ... -> 160 channels at 4x4,
    # 7x7 depthwise kernels in blocks 4, 7 and 11, residuals where the shape is kept.
    m = model("mcunet_in1")
    assert m.op("block4.dw.conv").flops == 2 * 48 * 16 * 16 * 49
    assert m.op("block14.project.conv").output_bytes == 4 * 160 * 4 * 4
    assert "block1.expand.conv" not in {op.name for op in m.ops}
    assert sum(op.kind == "add" for op in m.ops if op.phase is Phase.FORWARD) == 7
    assert m.op("classifier").param_bytes == 4 * (160 * 1000 + 1000)
    # DS-CNN: exact parameters of the ML-KWS-for-MCU definition (convolutions with
    # bias, batch norm with shift only): small 23,180, medium 136,580.
    assert params(model("ds_cnn_s")) == 23_180
    assert params(model("ds_cnn_m")) == 136_580
    s = model("ds_cnn_s")
    assert s.op("conv1.conv").output_bytes == 4 * 64 * 25 * 5      # 49x10, SAME, stride 2
    assert s.op("conv1.conv").flops == 2 * 25 * 5 * 64 * 40
    assert s.op("conv1.bn").param_bytes == 4 * 64
    assert model("ds_cnn_m").op("ds1.dw.conv").output_bytes == 4 * 172 * 13 * 5


def test_exact_parameter_counts() -> None:
    # Pinned to the exact counts of the reference implementations.
    assert params(model("resnet18")) == 11_689_512
    assert params(model("resnet50")) == 25_557_032
    assert params(model("vgg16")) == 138_357_544
    assert params(model("mobilenet_v2")) == 3_504_872
    assert params(model("resnet18_cifar")) == 11_173_962


def test_bert_base_encoder_has_85m_parameters() -> None:
    g = model("bert")
    encoder = sum(op.param_bytes for op in g.ops if op.name.startswith("block")) / 4
    assert encoder == pytest.approx(85.0e6, rel=0.02)
    assert encoder == 12 * 7_087_872
    head = g.op("classifier").param_bytes / 4
    assert head == 768 * 2 + 2
    assert params(g) == encoder + head
    assert params(g) == pytest.approx(85.0e6, rel=0.02)


def test_bert_attention_costs() -> None:
    g = model("bert")
    seq, hidden, heads = 128, 768, 12
    scores = g.op("block3.attn.scores")
    assert scores.kind == "matmul"
    assert scores.flops == 2 * heads * seq * seq * (hidden // heads)
    assert scores.output_bytes == 4 * heads * seq * seq
    assert g.op("block3.attn.softmax").flops == 5 * heads * seq * seq
    assert inputs_of(g, "block3.attn.scores") == {"block3.attn.query", "block3.attn.key"}
    assert inputs_of(g, "block3.attn.context") == {"block3.attn.softmax", "block3.attn.value"}
    # the matmul backward reads both inputs, the softmax backward its output
    assert {"block3.attn.query", "block3.attn.key"} <= inputs_of(g, "block3.attn.scores/grad")
    assert "block3.attn.softmax" in inputs_of(g, "block3.attn.softmax/grad")
    # a matmul of two activations costs twice its forward in the backward
    assert g.op("block3.attn.scores/grad").flops == 2 * scores.flops


def test_macs_are_half_the_flops_of_mac_ops() -> None:
    g = model("resnet18_cifar")
    conv = g.op("layer1.0.conv1")
    assert conv.flops == 2 * 32 * 32 * 64 * 64 * 9
    assert forward_macs(g) == sum(op.flops for op in g.ops
                                  if op.phase is Phase.FORWARD and op.kind in MAC_KINDS) / 2


def test_layer_costs() -> None:
    g = model("resnet18_cifar", batch_size=2)
    n = 2 * 64 * 32 * 32
    assert g.op("bn1").flops == 7 * n
    assert g.op("bn1").param_bytes == 4 * 2 * 64
    assert g.op("relu").flops == n
    assert g.op("layer1.0.add").flops == n
    assert g.op("conv1").param_bytes == 4 * 3 * 64 * 9           # no bias
    assert g.op("layer1.0.conv1").workspace_bytes == 4 * 2 * 64 * 9  # im2col, 2 columns
    assert g.op("relu").workspace_bytes == 0
    assert g.op("avgpool").flops == 2 * 512 * 4 * 4
    m = model("resnet18")
    assert m.op("maxpool").flops == 8 * 64 * 56 * 56
    assert m.op("maxpool").output_bytes == 4 * 64 * 56 * 56
    dw = model("mobilenet_v2").op("block2.dw.conv")
    assert dw.workspace_bytes == 4 * 2 * 9        # depthwise: one input channel per group
    assert dw.flops == 2 * 96 * 56 * 56 * 9      # 112 -> 56, 96 channels
    assert model("mobilenet_v2").op("block2.dw.relu6").flops == 2 * 96 * 56 * 56


# ------------------------------------------------------------------ structure


@pytest.mark.parametrize("name", ALL_MODELS)
def test_structure(name: str) -> None:
    g = model(name)
    assert g.name == name
    assert g.metadata["model"] == name
    assert {k: g.metadata[k] for k in model_options(name)} == model_options(name)
    assert len(g.indices(Phase.LOSS)) == 1
    forward = g.indices(Phase.FORWARD)
    backward = g.indices(Phase.BACKWARD)
    # every forward op but the data input has a backward op, and so does the loss
    assert len(backward) == len(forward)
    assert [g.ops[i].name for i in forward if g.ops[i].kind == "input"] == ["input"]
    for i in backward:
        op = g.ops[i]
        assert op.name == grad_name(op.forward_of)
        assert op.kind == g.op(op.forward_of).kind
    for op in g.ops:
        assert op.kind in KINDS or op.kind == "input"
        forward_name = op.forward_of if op.phase is Phase.BACKWARD else op.name
        assert NAME.fullmatch(forward_name), forward_name
    assert g.loss_index == len(forward)


def test_residual_block_input_gradient_waits_for_both_consumers() -> None:
    g = model("resnet18_cifar")
    # identity shortcut: the stem ReLU feeds layer1.0.conv1 and layer1.0.add
    assert inputs_of(g, "layer1.0.add") == {"layer1.0.bn2", "relu"}
    deps = inputs_of(g, "relu/grad")
    assert {"layer1.0.conv1/grad", "layer1.0.add/grad"} <= deps
    # projection shortcut: layer1.1's output feeds layer2.0.conv1 and the shortcut conv
    deps = inputs_of(g, "layer1.1.relu2/grad")
    assert {"layer2.0.conv1/grad", "layer2.0.shortcut.conv/grad"} <= deps
    assert inputs_of(g, "layer2.0.add") == {"layer2.0.bn2", "layer2.0.shortcut.bn"}
    # the fan-out of 2 costs one extra add per element in the backward
    relu_bytes = g.op("relu").output_bytes
    assert g.op("relu/grad").flops == relu_bytes / 4 * (1 + 1)


def test_backward_reads_what_autograd_saves() -> None:
    g = model("resnet18_cifar")
    # relu backward reads its own output (and the incoming gradient)
    assert inputs_of(g, "layer1.0.relu1/grad") == {"layer1.0.relu1", "layer1.0.conv2/grad"}
    # conv backward reads its input (weight gradient) and the incoming gradient
    assert inputs_of(g, "layer1.0.conv2/grad") == {"layer1.0.relu1", "layer1.0.bn2/grad"}
    # add backward reads no forward tensor
    add_deps = inputs_of(g, "layer1.0.add/grad")
    assert add_deps == {"layer1.0.relu2/grad"}
    assert all(g.op(d).phase is Phase.BACKWARD for d in add_deps)
    # batch norm reads its input
    assert "layer1.0.conv1" in inputs_of(g, "layer1.0.bn1/grad")
    # the first conv needs no input gradient: its backward outputs nothing
    assert g.op("conv1/grad").output_bytes == 0
    assert g.op("layer1.0.conv1/grad").output_bytes == g.op("relu").output_bytes
    # the loss backward depends on the loss
    assert "loss" in inputs_of(g, "loss/grad")


def test_mobilenet_residuals() -> None:
    g = model("mobilenet_v2")
    adds = [op.name for op in g.ops if op.phase is Phase.FORWARD and op.kind == "add"]
    assert len(adds) == 10
    assert "block1.expand.conv" not in {op.name for op in g.ops}   # expansion 1
    assert inputs_of(g, "block3.add") == {"block3.project.bn", "block2.project.bn"}
    assert {"block3.expand.conv/grad", "block3.add/grad"} <= inputs_of(g, "block2.project.bn/grad")


def test_transformer_residuals() -> None:
    g = model("transformer_block")
    assert inputs_of(g, "block1.attn.add") == {"block1.attn.output", "input"}
    assert inputs_of(g, "block1.ffn.add") == {"block1.ffn.fc2", "block1.attn.layernorm"}
    deps = inputs_of(g, "block1.attn.layernorm/grad")
    assert {"block1.ffn.fc1/grad", "block1.ffn.add/grad"} <= deps
    # the input needs no gradient: Q/K/V backward only computes weight gradients
    assert g.op("block1.attn.query/grad").output_bytes == 0


# ------------------------------------------------------------------ batch size, determinism


@pytest.mark.parametrize("name", ["resnet18_cifar", "mobilenet_v2", "transformer_block", "mlp"])
def test_batch_size_scales_activations_not_params(name: str) -> None:
    one, four = model(name, batch_size=1), model(name, batch_size=4)
    assert [op.name for op in one.ops] == [op.name for op in four.ops]
    assert one.edges == four.edges
    assert four.param_bytes == one.param_bytes
    assert forward_macs(four) == 4 * forward_macs(one)
    for a, b in zip(one.ops, four.ops):
        if a.phase is Phase.LOSS:
            assert a.output_bytes == b.output_bytes == 4
        else:
            assert b.output_bytes == 4 * a.output_bytes
        assert b.workspace_bytes == a.workspace_bytes
    assert four.metadata["batch_size"] == 4


@pytest.mark.parametrize("name", ALL_MODELS)
def test_deterministic(name: str) -> None:
    a, b = build_model(name), build_model(name)
    assert a == b
    assert graph_fingerprint(a) == graph_fingerprint(b)


# ------------------------------------------------------------------ registry and errors


def test_registry() -> None:
    assert model_names() == ALL_MODELS
    assert DEFAULT_MODEL in model_names()
    for name in model_names():
        description = model_description(name)
        assert description and "\n" not in description
        options = model_options(name)
        assert options["batch_size"] == 1
        assert all(isinstance(v, int) and (v > 0 or k == "row_bands")
                   for k, v in options.items()
                   if k not in TRAINING_OPTIONS and k not in PRECISION_OPTIONS)
        assert {k: options[k] for k in TRAINING_OPTIONS} == TRAINING_OPTIONS
        assert {k: options[k] for k in PRECISION_OPTIONS} == PRECISION_OPTIONS
        # building with every default spelled out gives the default graph
        assert build_model(name, **options) == model(name)
    assert model_options("bert")["intermediate"] == 3072


def test_options_change_the_model() -> None:
    small = build_model("bert", blocks=2, seq_len=16, hidden=64, heads=4)
    assert small.metadata["intermediate"] == 256        # 4 x hidden
    assert small.op("block2.ffn.fc1").param_bytes == 4 * (64 * 256 + 256)
    assert "block3.attn.query" not in {op.name for op in small.ops}
    assert build_model("resnet18_cifar", classes=100).op("fc").param_bytes == 4 * (512 * 100 + 100)
    g = build_model("mobilenet_v2", image_size=96)
    assert g.op("stem.conv").output_bytes == 4 * 32 * 48 * 48
    assert build_model("mlp", layers=1).op("fc1").param_bytes == 4 * (784 * 10 + 10)
    assert build_model("resnet18", batch_size="2").metadata["batch_size"] == 2


def test_unknown_model() -> None:
    with pytest.raises(UnknownNameError,
                       match="known models: bert, ds_cnn_m, ds_cnn_s, mcunet_in1, mlp") as info:
        build_model("resnet1000")
    assert "\n" not in str(info.value)
    with pytest.raises(UnknownNameError):
        model_options("nope")
    with pytest.raises(UnknownNameError):
        model_description("nope")


@pytest.mark.parametrize(("name", "options", "message"), [
    ("resnet18_cifar", {"depth": 3}, "unknown option 'depth'"),
    ("resnet18_cifar", {"batch_size": 0}, "batch_size = 0"),
    ("resnet18_cifar", {"batch_size": -2}, "batch_size = -2"),
    ("mlp", {"width": 2.5}, "width = 2.5"),
    ("mlp", {"width": "wide"}, "width = 'wide'"),
    ("mlp", {"layers": True}, "layers = True"),
    ("vgg16", {"classes": None}, "classes = None"),
    ("bert", {"heads": 5}, "heads = 5: must divide hidden = 768"),
    ("transformer_block", {"hidden": 130}, "heads = 4: must divide hidden = 130"),
    ("resnet50", {"image_size": 16}, "image_size = 16"),
    ("mobilenet_v2", {"image_size": 31}, "image_size = 31"),
    ("mobilenet_v2", {"width_percent": 0}, "width_percent = 0: must be a positive integer"),
    ("mlp", {"layers": 100_000_000_000}, "layers = 100000000000: must be a positive integer up "
                                         "to 100000"),
    ("mlp", {"train_last": -1}, r"option train_last = -1: must be a whole number in \[0, "),
    ("mlp", {"train_last": 11}, "option train_last = 11: must be at most 10, the number of "
                                "layers with parameters"),
    ("mlp", {"bias_only": 2}, "option bias_only = 2: must be 0 or 1"),
    ("mlp", {"gradient_sums": 2}, "option gradient_sums = 2: must be 0 or 1"),
    ("mlp", {"sparse_update": 1}, "option sparse_update = 1: this model has no published "
                                  "sparse-update scheme"),
    ("mcunet_in1", {"sparse_update": 1, "train_last": 3}, "cannot be combined with train_last"),
    ("mlp", {"sparse_update": "yes"}, "option sparse_update = 'yes'"),
    ("mobilenet_v2_w035", {"head": 2}, "option head = 2: must be 0 or 1"),
    ("mobilenet_v2_w035", {"head": -1}, r"option head = -1: must be a whole number in \[0, "),
])
def test_bad_options(name: str, options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        build_model(name, **options)
    assert not isinstance(info.value, UnknownNameError)
    assert "\n" not in str(info.value)


def test_big_models_build_fast() -> None:
    import time
    for name in ("resnet50", "bert"):
        start = time.perf_counter()
        build_model(name, batch_size=3)
        assert time.perf_counter() - start < 1.0
