"""Per-class compute rates of a board (issue #29 item 2): ``[cpu.efficiency]``."""

from __future__ import annotations

import copy

import pytest
from test_boards import assert_board_error, builtin_doc, write_doc

from poetsim.boards import board_from_dict, get_board
from poetsim.costs import OP_CLASSES, compute_rate, op_class, op_costs
from poetsim.graph.precision import compute_widths
from poetsim.zoo import build_model


def _with_efficiency(name: str, **factors: float):
    doc = builtin_doc(name)
    doc["cpu"]["efficiency"] = {
        key: {"value": value, "source": "what-if", "ref": "test"} for key, value in factors.items()}
    return board_from_dict(doc)


def test_a_depthwise_factor_slows_the_depthwise_ops_alone():
    """MCUNet int8 on the nRF52840 with depthwise kernels at half the int8 rate: every
    int8 depthwise op computes at that rate, every other op as before."""
    graph = build_model("mcunet_in1", int8=1, sparse_update=1, inplace_update=1, classes=102)
    plain, board = get_board("nrf52840"), _with_efficiency("nrf52840", depthwise_int8=0.5)
    assert board.source_of("cpu.efficiency.depthwise_int8").ref == "test"
    before, after = op_costs(graph, plain), op_costs(graph, board)
    widths = compute_widths(graph)
    depthwise = 0
    for k, op in enumerate(graph.ops):
        if op.kind == "input":
            continue
        if op_class(op.kind) == "depthwise" and widths[k] == 1:
            depthwise += 1
            rate = compute_rate(board, 1, op.kind)
            assert rate.ops_per_s == plain.cpu.int8_ops_per_s * 0.5
            assert "cpu.efficiency.depthwise_int8" in rate.field
            assert after.compute_time_s[k] >= before.compute_time_s[k]
            assert after.compute_time_s[k] >= op.flops / rate.ops_per_s * (1 - 1e-12)
        else:
            assert after.compute_time_s[k] == before.compute_time_s[k], op.name
    # the forward depthwise convolutions (their backward ops read fp32 gradients: the
    # fp32 rate, which the board leaves as it is)
    assert depthwise == sum(op.kind.startswith("dwconv2d") and op.forward_of is None
                            for op in graph.ops) >= 10
    assert float(after.compute_time_s.sum()) > float(before.compute_time_s.sum())


def test_the_zoo_and_the_importer_give_depthwise_convolutions_their_own_kind():
    assert {op.kind for op in build_model("ds_cnn_s").ops if "conv" in op.kind} == {
        "conv2d", "dwconv2d"}
    assert set(OP_CLASSES["depthwise"]) == {"dwconv2d", "dwconv2d_relu", "dwconv2d_relu6"}
    torch = pytest.importorskip("torch")
    from poetsim.torchio import import_module

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
                                torch.nn.Conv2d(4, 4, 3, padding=1, groups=4),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 2))
    graph = import_module(model, (torch.randn(2, 3, 8, 8),), name="dw").graph
    assert [op.kind for op in graph.ops if "conv" in op.kind and op.forward_of is None] == [
        "conv2d", "dwconv2d"]


@pytest.mark.parametrize("factors, fragments", [
    ({"depthwise_int8": 0}, ["cpu.efficiency.depthwise_int8 = 0", "must be > 0"]),
    ({"dephtwise_int8": 0.5}, ["unknown key 'cpu.efficiency.dephtwise_int8'",
                               "did you mean 'depthwise_int8'"]),
])
def test_a_bad_efficiency_is_one_line(tmp_path, factors, fragments):
    doc = copy.deepcopy(builtin_doc("nrf52840"))
    doc["cpu"]["efficiency"] = {
        key: {"value": value, "source": "what-if", "ref": "test"} for key, value in factors.items()}
    assert_board_error(write_doc(tmp_path, doc, stem="nrf52840"), *fragments)
