"""The cost model's per-dtype compute throughput (issue #15 item 3), hand-checked."""

from __future__ import annotations

import attrs
import pytest
from conftest import make_board

from poetsim.boards import get_board
from poetsim.boards.spec import SourceKind
from poetsim.costs import compute_rate, op_costs
from poetsim.errors import BoardError
from poetsim.graph import ForwardGraph
from poetsim.summary import cost_summary


def tiny(**widths):
    fg = ForwardGraph("tiny", **widths)
    x = fg.input("x", 8)
    h = fg.op("fc", "linear", [x], output_elements=4, flops=64, param_count=36, bias_count=4)
    fg.loss("loss", h)
    return fg.build()


def int8_board(int8_ops_per_s=4e6, fp16=None):
    board = make_board()  # flops_per_s 1e6, RAM bandwidth 1e7 B/s
    return attrs.evolve(board, cpu=attrs.evolve(board.cpu, int8_ops_per_s=int8_ops_per_s,
                                                fp16_flops_per_s=fp16))


def test_an_int8_op_runs_at_the_int8_throughput():
    graph = tiny(dtype_bytes=1)
    fc = graph.index("fc")
    # fc: 64 ops / 4e6 op/s = 16 us; it moves 4 + 8 + 36 = 48 B / 1e7 B/s = 4.8 us
    assert op_costs(graph, int8_board()).compute_time_s[fc] == pytest.approx(64 / 4e6)
    assert op_costs(graph, int8_board()).compute_energy_j[fc] == pytest.approx(64 / 4e6 * 0.01)
    # without the figure the fp32 one stands in: 64 / 1e6
    assert op_costs(graph, make_board()).compute_time_s[fc] == pytest.approx(64 / 1e6)


def test_an_op_reading_a_wider_tensor_runs_at_that_width():
    graph = tiny(weight_bytes=1, activation_bytes=1, gradient_bytes=4)
    costs = op_costs(graph, int8_board(fp16=2e6))
    assert costs.compute_time_s[graph.index("fc")] == pytest.approx(64 / 4e6)
    # fc/grad reads fp32 gradients: the weight gradient's 64 FLOP at 1e6 FLOP/s
    assert costs.compute_time_s[graph.index("fc/grad")] == pytest.approx(64 / 1e6)
    half = tiny(dtype_bytes=2)
    assert op_costs(half, int8_board(fp16=2e6)).compute_time_s[half.index("fc")] == \
        pytest.approx(64 / 2e6)


def test_fp32_graphs_cost_exactly_as_before_on_a_board_with_int8_figures():
    graph = tiny()
    assert op_costs(graph, int8_board()) == op_costs(graph, make_board())


def test_the_roofline_counts_gradients_at_the_gradient_width():
    board = make_board()
    board = attrs.evolve(board, cpu=attrs.evolve(board.cpu, flops_per_s=1e15))
    graph = tiny(weight_bytes=1, activation_bytes=1, gradient_bytes=4)
    # fc/grad reads loss/grad (4 x 4 B), the saved input x (8 x 1 B) and its weights
    # (36 x 1 B) and writes 36 x 4 B of weight gradients; its own output is empty (x needs
    # no gradient)
    t = op_costs(graph, board).compute_time_s[graph.index("fc/grad")]
    assert t == pytest.approx((16 + 8 + 36 + 144) / 1e7)


def test_compute_rate_names_its_field_and_marks_the_fallback():
    board = int8_board()
    assert compute_rate(board, 1) == attrs.evolve(compute_rate(board, 1))
    assert (compute_rate(board, 1).ops_per_s, compute_rate(board, 1).field,
            compute_rate(board, 1).fallback) == (4e6, "int8_ops_per_s", False)
    assert (compute_rate(board, 2).field, compute_rate(board, 2).fallback) == ("flops_per_s",
                                                                                 True)
    assert (compute_rate(board, 4).field, compute_rate(board, 4).fallback) == ("flops_per_s",
                                                                                 False)


def test_the_cost_summary_marks_a_stand_in_throughput_as_an_estimate():
    graph = tiny(dtype_bytes=1)
    without = cost_summary(graph, make_board())
    assert without.compute_rate_estimated
    assert without.compute_rates == [{"width_bytes": 1, "dtype": "int8", "ops": 4,
                                      "ops_per_s": 1e6, "field": "flops_per_s",
                                      "source": None, "estimate": True}]
    assert without.precision_bytes == {"weight_bytes": 1, "activation_bytes": 1,
                                       "gradient_bytes": 1}
    with_figure = cost_summary(graph, int8_board())
    assert not with_figure.compute_rate_estimated
    assert with_figure.compute_rates[0]["field"] == "int8_ops_per_s"
    assert not cost_summary(tiny(), make_board()).compute_rate_estimated


def test_mcu_boards_carry_a_sourced_int8_estimate():
    for name, factor in (("nrf52840", 4), ("nrf52840_qspi_nor", 4), ("stm32h743", 2)):
        board = get_board(name)
        assert board.cpu.int8_ops_per_s == pytest.approx(factor * board.cpu.flops_per_s)
        source = board.source_of("cpu.int8_ops_per_s")
        assert source.kind is SourceKind.ESTIMATE and "SMLAD" in source.ref
    # boards without a basis keep none: the fp32 figure stands in, marked as an estimate
    assert get_board("mkr1000").cpu.int8_ops_per_s is None


def test_the_cost_summary_of_int8_on_the_nrf52840_names_the_estimated_int8_figure():
    from poetsim.zoo import build_model

    s = cost_summary(build_model("ds_cnn_s", int8=1), get_board("nrf52840"))
    int8 = next(r for r in s.compute_rates if r["dtype"] == "int8")
    assert int8["field"] == "int8_ops_per_s" and int8["source"] == "estimate"
    assert not int8["estimate"]  # the board has the figure; it is itself sourced 'estimate'
    fp32 = cost_summary(build_model("ds_cnn_s"), get_board("nrf52840"))
    assert s.compute_time_s < fp32.compute_time_s


def test_a_board_file_int8_figure_is_validated(tmp_path):
    from poetsim.boards.load import board_from_dict, board_to_dict

    doc = board_to_dict(get_board("nrf52840"))
    doc["cpu"]["int8_ops_per_s"]["value"] = -1.0
    with pytest.raises(BoardError, match="int8_ops_per_s"):
        board_from_dict(doc)
