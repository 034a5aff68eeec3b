"""Row tiling of a network's frozen front (issue #15 item 4): geometry, the banded graph,
the fewest bands that fit, and a model that fits a 256 KiB board only in bands."""

from __future__ import annotations

import json

import pytest

from poetsim.errors import InputError
from poetsim.graph import ForwardGraph, Phase, Training
from poetsim.graph.autograd import forward_macs
from poetsim.graph.io import graph_to_dict
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.graph.tiling import Rows, band_name
from poetsim.zoo import build_model, row_bands_to_fit, zoo_options
from poetsim.zoo import layers as L

#: Lin et al.'s MobileNetV2 w0.35 setting, int8, sparse update applied in place.
MBV2 = {"head": 0, "sparse_update": 1, "inplace_update": 1, "int8": 1, "classes": 10}


@pytest.mark.parametrize(("rows", "out", "reads"), [
    (Rows(8, 8, kernel=3, stride=1, padding=1), (0, 4), (0, 5)),
    (Rows(8, 8, kernel=3, stride=1, padding=1), (4, 8), (3, 8)),
    (Rows(4, 8, kernel=3, stride=2, padding=1), (2, 4), (3, 8)),
    (Rows(4, 8, kernel=3, stride=2, padding=1), (0, 2), (0, 4)),
    (Rows(8, 8), (2, 5), (2, 5)),
])
def test_rows_read_by_an_output_band(rows, out, reads):
    assert rows.input_rows(*out) == reads


def test_rows_reject_nonsense():
    with pytest.raises(ValueError, match="Rows.stride = 0: must be >= 1"):
        Rows(4, 8, stride=0)


def _tiny(bands: int, training: Training | None = None):
    """8x8 input, a 3x3 convolution, ReLU, a 3x3 stride-2 convolution, then a classifier
    trained on the frozen features."""
    fg = ForwardGraph("tiny", training=training or Training("last", last=1), row_bands=bands)
    x = L.Tensor(fg.input("input", 1 * 8 * 8), (1, 8, 8))
    x = L.conv2d(fg, "c1", x, 2, 3)
    x = L.relu(fg, "r1", x)
    x = L.conv2d(fg, "c2", x, 2, 3, stride=2)
    logits = L.linear(fg, "fc", L.flatten(x), 3)
    fg.loss("loss", logits.name)
    return fg.build()


def test_two_bands_by_hand():
    plain, tiled = _tiny(0), _tiny(2)
    names = [op.name for op in tiled.ops if op.phase is Phase.FORWARD]
    # band by band: band 0 of every op of the front, then band 1
    assert names == ["input", "c1.band0", "r1.band0", "c2.band0",
                     "c1.band1", "r1.band1", "c2.band1", "fc"]
    # c2 (4 output rows) is split exactly: rows 0-1 and 2-3; each reads r1 rows [0, 4)
    # and [3, 8) (stride 2, padding 1); c1 and r1 make exactly those rows
    rows_of = {op.name: op.output_bytes // (4 * 2 * 8) for op in tiled.ops
               if op.name.startswith(("c1.", "r1."))}
    assert rows_of == {"c1.band0": 4, "r1.band0": 4, "c1.band1": 5, "r1.band1": 5}
    assert tiled.op("c2.band0").output_bytes + tiled.op("c2.band1").output_bytes \
        == plain.op("c2").output_bytes
    # the halo row is computed twice; c2's own work is not
    assert tiled.op("c1.band0").flops + tiled.op("c1.band1").flops \
        == pytest.approx(plain.op("c1").flops * 9 / 8)
    assert tiled.op("c2.band0").flops + tiled.op("c2.band1").flops == plain.op("c2").flops
    # the whole tensor after the front: the classifier reads every band of c2
    fc = tiled.index("fc")
    assert {tiled.ops[u].name for u in tiled.predecessors(fc)} == {"c2.band0", "c2.band1"}
    # weights once (band 0 owns them), frozen; the front has no backward op
    assert tiled.param_bytes == plain.param_bytes
    assert tiled.op("c1.band1").param_bytes == 0
    assert not any(op.forward_of and op.forward_of.startswith(("c1", "r1", "c2"))
                   for op in tiled.ops)
    assert minimum_ram_bytes(tiled)[0] < minimum_ram_bytes(plain)[0]


def test_a_trained_front_is_not_tiled():
    with pytest.raises(InputError, match="nothing to tile: the first op 'c1' needs a "
                                         "gradient") as err:
        _tiny(2, Training())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("bands", "rule"), [
    (1, r"must be 0 \(no tiling\) or at least 2"),
    (-2, r"must be a whole number in \[0, "),
])
def test_band_count_must_be_zero_or_at_least_two(bands, rule):
    with pytest.raises(InputError, match=f"option row_bands = {bands}: {rule}") as err:
        build_model("mobilenet_v2_w035", **MBV2, row_bands=bands)
    assert "\n" not in str(err.value)


def test_mobilenet_front_in_bands_keeps_the_model():
    plain, tiled = build_model("mobilenet_v2_w035", **MBV2), \
        build_model("mobilenet_v2_w035", **MBV2, row_bands=3)
    assert tiled.metadata["row_bands"] == 3
    assert tiled.param_bytes == plain.param_bytes
    assert tiled.trained_param_bytes == plain.trained_param_bytes
    # halo rows are recomputed: a little more work, never less
    assert forward_macs(plain) < forward_macs(tiled) < 1.05 * forward_macs(plain)
    # the front ends where one op alone is read after it; its bands partition it
    ends = {op.name.rsplit(".band", 1)[0] for op in tiled.ops if ".band" in op.name}
    assert "stem.conv" in ends and "block2.dw.conv" in ends
    backward = {op.name for op in plain.ops if op.phase is Phase.BACKWARD}
    assert backward == {op.name for op in tiled.ops if op.phase is Phase.BACKWARD}
    # one 192 KiB int8 expansion output alone no longer sets the floor
    need, op = minimum_ram_bytes(plain)  # the depthwise convolution after it runs in place
    assert op == "block2.expand.conv" and need > 224 * 1024
    assert minimum_ram_bytes(tiled)[0] < need / 2
    assert band_name("stem.conv", 2) in {o.name for o in tiled.ops}


def test_fewest_bands_that_fit():
    need = minimum_ram_bytes(build_model("mobilenet_v2_w035", **MBV2))[0]
    assert row_bands_to_fit("mobilenet_v2_w035", MBV2, need) == 0
    two = minimum_ram_bytes(build_model("mobilenet_v2_w035", **MBV2, row_bands=2))[0]
    assert row_bands_to_fit("mobilenet_v2_w035", MBV2, two) == 2
    assert row_bands_to_fit("mobilenet_v2_w035", MBV2, two - 1) == 3
    # bands cannot shrink what lies outside the front, nor tile a trained front
    assert row_bands_to_fit("mobilenet_v2_w035", MBV2, 1000) == 0
    assert row_bands_to_fit("mobilenet_v2_w035", {"int8": 1}, need // 2) == 0
    assert row_bands_to_fit("mlp", {}, 10) == 0  # no row_bands option


def test_zoo_options_rebuild_the_graph_or_say_none():
    g = build_model("mobilenet_v2_w035", **MBV2, row_bands=2)
    options = zoo_options(g)
    assert options == {**MBV2, "row_bands": 2, "weight_bytes": 1, "activation_bytes": 1}
    doc = graph_to_dict(g)
    doc["ops"][1]["flops"] += 1  # an edited (or measured) graph is no zoo build
    from poetsim.graph.io import graph_from_dict
    assert zoo_options(graph_from_dict(doc)) is None


def test_mobilenet_sparse_update_fits_the_nrf52840_in_bands(tmp_path, capsys):
    """Lin et al.'s MobileNetV2 w0.35 at 128x128 cannot run its second block's depthwise
    convolution in 232 KiB; the CLI runs the frozen front in row bands by itself, and the
    schedule PASSes physically. The schedule file records how to build the graph, so
    simulate needs no options."""
    from poetsim.cli.main import main

    sets = [arg for k, v in MBV2.items() for arg in ("--set", f"{k}={v}")]
    out = tmp_path / "mbv2.json"
    assert main(["solve", "--model", "mobilenet_v2_w035", *sets, "--board", "nrf52840",
                 "--deadline", "1.5x", "--effort", "10", "--out", str(out)]) == 0
    assert "the frozen front runs in 2 row bands" in capsys.readouterr().out
    meta = json.loads(out.read_text())["metadata"]
    assert meta["model_options"]["row_bands"] == 2
    assert main(["simulate", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "PASS" and report["fits_board_ram"]
