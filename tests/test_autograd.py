"""Backward derivation: autograd-like dependencies, saved tensors, sizes and FLOPs."""

from __future__ import annotations

import pytest
from conftest import residual_graph

from poetsim.errors import GraphError
from poetsim.graph import ForwardGraph, Phase, forward_macs, grad_name


def deps(graph, name):
    return set(graph.inputs_of(graph.index(name)))


def test_residual_backward_follows_autograd(residual):
    g = residual
    assert [op.name for op in g.ops] == [
        "x", "fc1", "r", "fc2", "s", "loss",
        "loss/grad", "s/grad", "fc2/grad", "r/grad", "fc1/grad"]
    # The seed gradient comes from the loss; cross-entropy's backward reads the logits.
    assert deps(g, "loss/grad") == {"loss", "s"}
    # Addition saves nothing: only the incoming gradient.
    assert deps(g, "s/grad") == {"loss/grad"}
    # Linear reads its input for the weight gradient.
    assert deps(g, "fc2/grad") == {"s/grad", "r"}
    # r fans out to fc2 and s: its gradient sums both, and ReLU reads its own output.
    assert deps(g, "r/grad") == {"s/grad", "fc2/grad", "r"}
    assert deps(g, "fc1/grad") == {"r/grad", "x"}


def test_not_a_reverse_chain(residual):
    """POET's published code chains gradients in reverse list order; a residual graph
    must instead let s/grad feed both branches."""
    g = residual
    s_grad = g.index("s/grad")
    readers = {g.ops[j].name for j in g.successors(s_grad)}
    assert readers == {"fc2/grad", "r/grad"}


def test_sizes_and_flops(residual):
    g = residual
    op = g.op
    assert op("loss").output_bytes == 4
    assert op("loss/grad").output_bytes == 16       # gradient of the logits
    assert op("s/grad").output_bytes == 16          # one shared gradient for both inputs
    assert op("fc1/grad").output_bytes == 0         # data input needs no gradient
    assert op("fc1/grad").flops == 64               # weight gradient only
    assert op("fc2/grad").flops == 2 * 32           # input and weight gradients
    assert op("r/grad").flops == 4 + 4              # mask + summing two incoming gradients
    assert op("s/grad").flops == 0
    assert all(op.forward_of for op in g.ops if op.phase is Phase.BACKWARD)
    assert forward_macs(g) == (64 + 32) / 2


def test_ops_without_gradient_get_no_backward():
    fg = ForwardGraph("frozen_prefix")
    x = fg.input("x", 4)
    r = fg.op("r", "relu", [x], output_elements=4, flops=4)     # nothing to train before fc
    fc = fg.op("fc", "linear", [r], output_elements=2, flops=16, param_count=10)
    fg.loss("loss", fc)
    g = fg.build()
    assert "r/grad" not in [op.name for op in g.ops]
    assert g.op("fc/grad").output_bytes == 0


def test_matmul_saves_both_inputs_and_batch_scales():
    fg = ForwardGraph("attn", batch_size=3)
    x = fg.input("x", 4)
    q = fg.op("q", "linear", [x], output_elements=12, flops=96, param_count=16)
    k = fg.op("k", "linear", [x], output_elements=12, flops=96, param_count=16)
    s = fg.op("scores", "matmul", [q, k], output_elements=9, flops=72)
    fg.loss("loss", s)
    g = fg.build()
    assert deps(g, "scores/grad") == {"loss/grad", "q", "k"}
    assert g.op("scores/grad").flops == 2 * 72
    assert g.op("scores/grad").output_bytes == (12 + 12) * 4
    assert g.op("x").output_bytes == 3 * 4 * 4
    assert g.metadata["batch_size"] == 3
    # x fans out to q and k: its backward would sum, but x needs no gradient.
    assert deps(g, "q/grad") == {"scores/grad", "x"}


@pytest.mark.parametrize("build, message", [
    (lambda fg: fg.op("a", "warp", ["x"], output_elements=1, flops=1), "kind = 'warp'"),
    (lambda fg: fg.op("a", "relu", ["nope"], output_elements=1, flops=1), "input 'nope' does not"),
    (lambda fg: fg.op("x", "relu", ["x"], output_elements=1, flops=1), "duplicate op name"),
    (lambda fg: fg.op("a", "relu", [], output_elements=1, flops=1), "needs at least one input"),
    (lambda fg: fg.loss("l", "x", kind="hinge"), "loss kind = 'hinge'"),
    (lambda fg: fg.build(), "has no loss op"),
    (lambda fg: (fg.loss("l", "x"), fg.build()), "nothing to train"),
])
def test_builder_errors(build, message):
    fg = ForwardGraph("bad")
    fg.input("x", 4)
    with pytest.raises(GraphError, match=message):
        build(fg)


def test_grad_name():
    assert grad_name("layer1.0.conv1") == "layer1.0.conv1/grad"


def test_gradient_sums_move_the_summation_into_an_op_of_its_own(residual):
    from poetsim.graph.training import Training
    g = residual_graph(Training(gradient_sums=True))
    # r fans out to fc2 and s: r/grad_sum reads both incoming gradients, r/grad the sum.
    assert deps(g, "r/grad_sum") == {"s/grad", "fc2/grad"}
    assert deps(g, "r/grad") == {"r/grad_sum", "r"}
    total = g.op("r/grad_sum")
    assert (total.kind, total.phase, total.gradient_sum_of, total.forward_of) == (
        "grad_sum", Phase.BACKWARD, "r", None)
    assert total.output_bytes == 16 and total.flops == 4  # one add per element
    assert g.op("r/grad").flops == 4                       # the mask alone
    # Every other op is as without the option, and the FLOPs add up to the same.
    sums = {op.name for op in g.ops if op.gradient_sum_of is not None}
    assert sums == {"r/grad_sum"}
    for op in residual.ops:
        if op.name != "r/grad":
            assert g.op(op.name) == op
    assert sum(op.flops for op in g.ops) == sum(op.flops for op in residual.ops)


def test_gradient_sums_shrink_the_largest_working_set_of_a_block_output():
    """ResNet-18's block output feeds the next block's convolution and its shortcut: its
    backward would hold its output, both incoming gradients and its own (4 x 64 KiB at
    int8); summed first, no op holds more than three of them."""
    from poetsim.graph.memory import minimum_ram_bytes
    from poetsim.zoo import build_model

    options = {"int8": 1, "gradient_bytes": 1, "inplace_update": 1}
    plain = build_model("resnet18_cifar", **options)
    summed = build_model("resnet18_cifar", **options, gradient_sums=1)
    k = plain.index("layer1.1.relu2/grad")
    assert len(plain.predecessors(k)) == 3
    assert [summed.ops[p].name for p in summed.predecessors(summed.index(
        "layer1.1.relu2/grad"))] == ["layer1.1.relu2", "layer1.1.relu2/grad_sum"]
    assert len(summed) == len(plain) + 8  # one per block output read twice
    assert summed.metadata["gradient_sums"] == 1

    def need(graph, name):
        i = graph.index(name)
        return (sum(graph.ops[p].output_bytes for p in graph.predecessors(i))
                + graph.ops[i].output_bytes + graph.ops[i].workspace_bytes)

    assert need(plain, "layer1.1.relu2/grad") == 4 * 64 * 1024
    assert need(summed, "layer1.1.relu2/grad") == need(summed, "layer1.1.relu2/grad_sum") \
        == 3 * 64 * 1024
    # the block output's backward sets the floor without sums; with them a convolution's
    assert minimum_ram_bytes(plain) == (4 * 64 * 1024, "layer1.1.relu2/grad")
    assert minimum_ram_bytes(summed)[0] < 3 * 64 * 1024 + 3 * 1024


def test_a_spent_time_limit_stops_a_long_derivation():
    """#32: building a long chain reads the command's limit (seconds for 20,000 ops)."""
    import time

    from poetsim import clock
    from poetsim.errors import OutOfTime
    from poetsim.zoo import build_model

    with clock.command(time.perf_counter() - 1e9, 1.0), clock.doing("reading the model"), \
            pytest.raises(OutOfTime, match="ran out while reading the model"):
        build_model("mlp", layers=300, width=4)
