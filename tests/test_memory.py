"""Plain-schedule peak memory, checked by hand."""

from __future__ import annotations

from poetsim.graph import ForwardGraph, plain_peak


def test_residual_peak_by_hand(residual):
    # Live bytes while each op runs, counted by hand:
    # x 32, fc1 48, r 64, fc2 64, s 80, loss 68, loss/grad 84, s/grad 80, fc2/grad 80,
    # r/grad 96 (x, r, s/grad, fc2/grad live + 16 out), fc1/grad 48.
    peak = plain_peak(residual)
    assert (peak.bytes, peak.op_name) == (96, "r/grad")


def test_workspace_counts_while_the_op_runs():
    fg = ForwardGraph("ws")
    x = fg.input("x", 2)
    fg.op("fc", "linear", [x], output_elements=2, flops=8, param_count=6, workspace_elements=100)
    fg.loss("loss", "fc")
    peak = plain_peak(fg.build())
    assert peak.bytes == 8 + 8 + 400
    assert peak.op_name in ("fc", "fc/grad")
