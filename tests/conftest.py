"""Shared fixtures: small hand-checked graphs."""

from __future__ import annotations

import pytest

from poetsim.graph import ForwardGraph, TrainingGraph


def residual_graph() -> TrainingGraph:
    """x -> fc1 -> r -> fc2 -> s = fc2 + r -> loss: a diamond, 4-element tensors.

    Forward sizes (float32): x 32 B, fc1 / r / fc2 / s 16 B each, loss 4 B.
    """
    fg = ForwardGraph("residual")
    x = fg.input("x", 8)
    a = fg.op("fc1", "linear", [x], output_elements=4, flops=64, param_count=36)
    r = fg.op("r", "relu", [a], output_elements=4, flops=4)
    b = fg.op("fc2", "linear", [r], output_elements=4, flops=32, param_count=20)
    s = fg.op("s", "add", [b, r], output_elements=4, flops=4)
    fg.loss("loss", s)
    return fg.build()


@pytest.fixture
def residual() -> TrainingGraph:
    return residual_graph()
