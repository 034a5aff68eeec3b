"""The zoo's precision options (issue #15 item 3): ``int8`` and the explicit widths, their
validation, the unchanged default graphs, and int8 training of an MCU model end to end."""

from __future__ import annotations

import json

import pytest

from poetsim.errors import InputError
from poetsim.graph import Precision, graph_fingerprint, precision_of, resident_memory
from poetsim.graph.autograd import forward_macs
from poetsim.graph.memory import plain_peak
from poetsim.zoo import PRECISION_OPTIONS, build_model, model_names, model_options

#: Fingerprints of default graphs that golden schedules (schedules/) pin.
PINNED = {("mlp", ()): "46dbf16557a0939a0a080aaf179bea58e78cffd55334d1488a19ef1edfbbfaf3",
          ("resnet18_cifar", ()):
              "5a100be90992b49209d2aad2273f1aa5a345349bf241eae76b402eca6337ed32",
          ("ds_cnn_s", (("train_last", 2),)):
              "8eea766c356be4df45e704527749c19966e4e7f41dc304d0ed091ddc6da44b64"}


@pytest.mark.parametrize(("model", "options"), sorted(PINNED))
def test_default_fingerprints_are_unchanged(model, options):
    graph = build_model(model, **dict(options))
    assert graph_fingerprint(graph) == PINNED[(model, options)]
    explicit = build_model(model, **dict(options), int8=0, weight_bytes=4, activation_bytes=4,
                           gradient_bytes=4)
    assert graph_fingerprint(explicit) == PINNED[(model, options)]
    assert precision_of(graph) == Precision(4, 4, 4)


def test_every_model_has_the_precision_options():
    for name in model_names():
        assert model_options(name).items() >= PRECISION_OPTIONS.items()


def test_int8_means_int8_weights_and_activations_with_fp32_gradients():
    fp32 = build_model("ds_cnn_s")
    int8 = build_model("ds_cnn_s", int8=1)
    assert precision_of(int8) == Precision(1, 1, 4)
    assert int8.metadata["int8"] == 1
    # each batch norm (shift only in DS-CNN) folds into its convolution's bias
    folded = sum(op.param_bytes for op in fp32.ops if op.kind == "batchnorm")
    assert int8.param_bytes * 4 == fp32.param_bytes - folded
    assert resident_memory(int8).gradient_bytes == resident_memory(fp32).gradient_bytes - folded
    assert plain_peak(int8).bytes < plain_peak(fp32).bytes
    assert precision_of(build_model("ds_cnn_s", int8=1, gradient_bytes=2)) == Precision(1, 1, 2)
    assert precision_of(build_model("ds_cnn_s", int8=1, weight_bytes=1)) == Precision(1, 1, 4)
    assert precision_of(build_model("mlp", layers=2, weight_bytes=2, activation_bytes=1)) == \
        Precision(2, 1, 4)


@pytest.mark.parametrize("model", ["ds_cnn_s", "mobilenet_v2_w035", "mcunet_in1"])
def test_int8_graphs_fuse_norm_and_activation_into_the_convolution(model):
    """An int8 MCU graph runs convolution, norm and activation as one op: no tensor
    between them, the same MACs, the backward reading the output for the mask."""
    fp32 = build_model(model, image_size=64) if model != "ds_cnn_s" else build_model(model)
    int8 = (build_model(model, image_size=64, int8=1) if model != "ds_cnn_s"
            else build_model(model, int8=1))
    kinds = {op.kind for op in int8.ops}
    assert not kinds & {"batchnorm", "relu", "relu6"}
    assert kinds & {"conv2d_relu", "conv2d_relu6"}
    assert forward_macs(int8) == forward_macs(fp32)
    convs = [op.name for op in fp32.ops if op.kind == "conv2d" and op.phase.value == "forward"]
    assert convs == [op.name for op in int8.ops
                     if op.kind.startswith("conv2d") and op.phase.value == "forward"]
    fused = next(i for i, op in enumerate(int8.ops) if op.kind.startswith("conv2d_relu")
                 and f"{op.name}/grad" in {o.name for o in int8.ops})
    grad = int8.index(f"{int8.ops[fused].name}/grad")
    assert fused in int8.predecessors(grad)


@pytest.mark.parametrize(("options", "message"), [
    ({"int8": 2}, "model ds_cnn_s: option int8 = 2: must be 0 or 1"),
    ({"weight_bytes": 3}, "model ds_cnn_s: option weight_bytes = 3: must be 1, 2 or 4"),
    ({"activation_bytes": 8}, "model ds_cnn_s: option activation_bytes = 8: must be 1, 2 or 4"),
    ({"gradient_bytes": 0}, "model ds_cnn_s: option gradient_bytes = 0: must be 1, 2 or 4"),
    ({"gradient_bytes": -1}, "model ds_cnn_s: option gradient_bytes = -1: must be a whole "
                             "number in [0, 100000]"),
    ({"int8": 1, "weight_bytes": 4}, "model ds_cnn_s: option weight_bytes = 4: contradicts "
                                     "int8 = 1"),
    ({"int8": 1, "activation_bytes": 2}, "option activation_bytes = 2: contradicts int8 = 1"),
])
def test_precision_option_errors_are_one_line_and_name_the_option(options, message):
    with pytest.raises(InputError) as err:
        build_model("ds_cnn_s", **options)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def _poet(rows):
    return next(row for row in rows if row["method"] == "poet")


def test_compare_int8_ds_cnn_on_the_nrf52840_passes_with_a_smaller_peak(capsys):
    """``poetsim compare --model ds_cnn_s --set int8=1 --board nrf52840 --ram board
    --deadline 2x``: fp32 full training cannot fit the board at all; int8 does (PASS).
    Against the last-2-layers fp32 run that does fit, int8 needs a smaller peak."""
    from poetsim.cli.main import main

    def run(*sets, status=0):
        args = ["compare", "--model", "ds_cnn_s", "--board", "nrf52840", "--ram", "board",
                "--deadline", "2x", "--time-limit", "2", "--json"]
        for s in sets:
            args += ["--set", s]
        assert main(args) == status
        return _poet(json.loads(capsys.readouterr().out))

    int8 = run("int8=1")
    assert int8["verdict"] == "PASS" and int8["fits_board_ram"]
    fp32 = run(status=1)  # no method can fit
    assert fp32["status"] == "infeasible"
    assert "smallest activation RAM any schedule can use" in fp32["reason"]
    smallest_fp32 = int(fp32["reason"].split("(")[-1].split(" B")[0])
    assert int8["peak_total_bytes"] < smallest_fp32
    int8_last2, fp32_last2 = run("int8=1", "train_last=2"), run("train_last=2")
    assert int8_last2["verdict"] == fp32_last2["verdict"] == "PASS"
    assert int8_last2["peak_total_bytes"] < fp32_last2["peak_total_bytes"]
    assert int8_last2["resident_bytes"] < fp32_last2["resident_bytes"]


def test_lin_et_al_mcunet_sparse_update_fits_the_nrf52840_in_a_static_arena(tmp_path, capsys):
    """Lin et al.'s setting (tiny-training: MCUNet-5fps at 128x128, Flowers-102, the
    "100KB" sparse update, int8, in-place update): POET's schedule's bytes fit the
    nRF52840's 256 KiB, frozen weights read from flash, the fp32 gradients of the trained
    layers only inside the ops that apply them, and with the depthwise convolutions in place
    its buffers lay out in a static arena there too: the file carries that layout, and the
    simulation runs in it."""
    from poetsim.cli.main import main

    sets = []
    for option in ("int8=1", "sparse_update=1", "inplace_update=1", "classes=102"):
        sets += ["--set", option]
    out = tmp_path / "mcunet.json"
    assert main(["solve", "--model", "mcunet_in1", *sets, "--board", "nrf52840",
                 "--deadline", "1.5x", "--effort", "10", "--out", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["layout"]["arena_bytes"] <= 232 * 1024
    assert main(["simulate", str(out), *sets, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "PASS" and report["fits_board_ram"]
    assert report["peak_total_bytes"] <= report["arena_bytes"] <= 232 * 1024
    assert report["flash_weight_bytes"] > 0
