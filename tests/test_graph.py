"""TrainingGraph: validation rules, deterministic topological order, queries."""

from __future__ import annotations

import math

import pytest

from poetsim.errors import GraphError
from poetsim.graph import (
    MeasuredCosts,
    Op,
    Phase,
    TrainingGraph,
    check_gradients,
    needs_gradient,
    resident_memory,
    topological_order,
)
from poetsim.graph.ops import MAX_BYTES, MAX_FLOPS
from poetsim.zoo import build_model, model_names


def fwd(name: str, **kw) -> Op:
    return Op(name, kw.pop("kind", "relu"), Phase.FORWARD, **kw)


def loss(name: str = "loss") -> Op:
    return Op(name, "cross_entropy", Phase.LOSS, flops=1, output_bytes=4)


def grad(name: str, of: str, **kw) -> Op:
    return Op(name, "relu", Phase.BACKWARD, forward_of=of, **kw)


def chain() -> tuple[list[Op], dict[str, list[str]]]:
    ops = [fwd("x", kind="input", output_bytes=8), fwd("a", flops=2, output_bytes=8,
                                                        param_bytes=4),
           loss(), grad("loss/grad", "loss", output_bytes=8), grad("a/grad", "a")]
    inputs = {"a": ["x"], "loss": ["a"], "loss/grad": ["loss", "a"], "a/grad": ["loss/grad", "x"]}
    return ops, inputs


def test_chain_builds_in_order():
    ops, inputs = chain()
    g = TrainingGraph.from_ops("chain", ops, inputs)
    assert [op.name for op in g.ops] == ["x", "a", "loss", "loss/grad", "a/grad"]
    assert g.predecessors(g.index("a/grad")) == (0, 3)
    assert g.successors(0) == (1, 4)
    assert g.loss_index == 2
    assert g.param_bytes == 4


def test_order_is_topological_and_deterministic():
    ops, inputs = chain()
    shuffled = list(reversed(ops))
    g1 = TrainingGraph.from_ops("chain", shuffled, inputs)
    g2 = TrainingGraph.from_ops("chain", shuffled, inputs)
    assert [op.name for op in g1.ops] == [op.name for op in g2.ops]
    assert all(i < j for i, j in g1.edges)
    assert g1 == g2


def test_topological_order_keeps_a_valid_order():
    assert topological_order(["a", "b", "c"], [(0, 2), (1, 2)]) == [0, 1, 2]
    assert topological_order(["a", "b", "c"], [(2, 0)]) == [1, 2, 0]


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("mutate, expected", [
    (lambda ops, inp: ops.append(fwd("a", output_bytes=1)), "op 'a': duplicate op name"),
    (lambda ops, inp: inp.__setitem__("a", ["nope"]), "op 'a': input 'nope' does not exist"),
    (lambda ops, inp: inp.__setitem__("a", ["x", "x"]), "op 'a': input 'x' listed twice"),
    (lambda ops, inp: inp.__setitem__("a", ["x", "a"]), "op 'a': reads its own output"),
    (lambda ops, inp: inp.__setitem__("x", ["a"]), "cycle through ops"),
    (lambda ops, inp: inp.__setitem__("ghost", ["x"]), "op 'ghost': has inputs but is not"),
    (lambda ops, inp: ops.__setitem__(2, fwd("loss", output_bytes=4)), "exactly one loss op"),
    (lambda ops, inp: (ops.append(fwd("dead", output_bytes=4)), inp.__setitem__("dead", ["x"])),
     "op 'dead': forward op does not reach the loss"),
    (lambda ops, inp: inp.__setitem__("a/grad", ["x"]),
     "op 'a/grad': backward op does not depend on the loss"),
    (lambda ops, inp: ops.__setitem__(4, grad("a/grad", "zzz")),
     "op 'a/grad': forward_of = 'zzz' is not a forward or loss op"),
    (lambda ops, inp: (ops.append(grad("a/grad2", "a")), inp.__setitem__("a/grad2", ["loss/grad"])),
     "op 'a/grad2': 'a' already has backward op 'a/grad'"),
    (lambda ops, inp: inp.__setitem__("loss", ["a", "loss/grad"]), "cycle through ops"),
])
def test_invalid_graphs_are_rejected_with_op_and_rule(mutate, expected):
    ops, inputs = chain()
    mutate(ops, inputs)
    with pytest.raises(GraphError) as err:
        TrainingGraph.from_ops("bad", ops, inputs)
    assert expected in one_line(err)


def test_cycle_message_names_the_ops():
    ops, inputs = chain()
    inputs["x"] = ["a"]
    with pytest.raises(GraphError, match=r"'x' -> 'a' -> 'x'|'a' -> 'x' -> 'a'"):
        TrainingGraph.from_ops("bad", ops, inputs)


@pytest.mark.parametrize("field, value, rule", [
    ("flops", -1.0, "must not be negative"),
    ("flops", math.nan, "must be finite"),
    ("flops", math.inf, "must be finite"),
    ("output_bytes", -8, "must not be negative"),
    ("output_bytes", 2.5, "must be a whole number"),
    ("workspace_bytes", math.nan, "must be finite"),
    ("param_bytes", "4", "must be a number"),
    ("output_bytes", 10**30, "output_bytes = 1000000000000000000000000000000: outside the "
                             "allowed range [0, 2**44 = 17592186044416] B"),
    ("output_bytes", 10**400, "output_bytes = 10000000...(401 digits): outside the allowed"),
    ("workspace_bytes", MAX_BYTES + 1, "outside the allowed range [0, 2**44"),
    ("param_bytes", float(2**50), "outside the allowed range [0, 2**44"),
    ("flops", 1e19, "flops = 1e+19: outside the allowed range [0, 1e+18] FLOP"),
])
def test_bad_costs_name_op_field_and_rule(field, value, rule):
    with pytest.raises(GraphError) as err:
        fwd("conv1", **{field: value})
    message = one_line(err)
    assert "op 'conv1'" in message and field in message and rule in message


def test_bad_measured_cost():
    from poetsim.graph import MeasuredCosts
    with pytest.raises(GraphError, match="op 'a': measured.compute_time_s = -1: must not be"):
        fwd("a", measured=MeasuredCosts(compute_time_s=-1))


def test_phase_rules_for_forward_of():
    with pytest.raises(GraphError, match="needs exactly one of forward_of"):
        Op("g", "relu", Phase.BACKWARD)
    with pytest.raises(GraphError, match="only for backward ops"):
        Op("f", "relu", Phase.FORWARD, forward_of="x")
    with pytest.raises(GraphError, match="param_bytes belongs to the forward op"):
        Op("g", "relu", Phase.BACKWARD, forward_of="x", param_bytes=4)


def test_phase_rules_for_gradient_sum_of():
    with pytest.raises(GraphError, match="'s': a backward op needs exactly one of forward_of"):
        Op("s", "grad_sum", Phase.BACKWARD, forward_of="x", gradient_sum_of="x")
    with pytest.raises(GraphError, match="'s': gradient_sum_of is only for backward ops"):
        Op("s", "grad_sum", Phase.FORWARD, gradient_sum_of="x")
    with pytest.raises(GraphError, match="'s': kind = 'add': an op with gradient_sum_of has "
                                         "kind 'grad_sum'"):
        Op("s", "add", Phase.BACKWARD, gradient_sum_of="x")
    with pytest.raises(GraphError, match="'s': inplace_update is only for backward ops with "
                                         "forward_of"):
        Op("s", "grad_sum", Phase.BACKWARD, gradient_sum_of="x", inplace_update=True)


def test_direct_construction_requires_topological_edges():
    ops, _ = chain()
    with pytest.raises(GraphError, match="does not come before"):
        TrainingGraph("bad", ops, [(1, 0)])
    with pytest.raises(GraphError, match="refers to a missing op"):
        TrainingGraph("bad", ops, [(0, 9)])


def test_resident_memory_options(residual):
    params = residual.param_bytes
    assert params == (36 + 20) * 4
    assert resident_memory(residual, gradients=False).total_bytes == params
    assert resident_memory(residual).total_bytes == 2 * params
    assert resident_memory(residual, optimizer="adam").total_bytes == 4 * params
    with pytest.raises(GraphError, match="optimizer = 'lbfgs'"):
        resident_memory(residual, optimizer="lbfgs")


def test_largest_allowed_costs_are_accepted():
    op = fwd("big", flops=MAX_FLOPS, output_bytes=MAX_BYTES, workspace_bytes=MAX_BYTES,
             param_bytes=MAX_BYTES, measured=MeasuredCosts(compute_time_s=1e6,
                                                           pagein_energy_j=1e9))
    assert op.output_bytes == 2**44


@pytest.mark.parametrize("field, value, rule", [
    ("compute_time_s", 1e7, "measured.compute_time_s = 10000000.0: outside the allowed range "
                            "[0, 1e+06] s"),
    ("pageout_energy_j", 2e9, "measured.pageout_energy_j = 2000000000.0: outside the allowed "
                              "range [0, 1e+09] J"),
    ("pagein_time_s", 10**30, "measured.pagein_time_s = 1000000000000000000000000000000: "
                              "outside the allowed range [0, 1e+06] s"),
])
def test_measured_costs_are_bounded(field, value, rule):
    with pytest.raises(GraphError) as err:
        fwd("conv1", measured=MeasuredCosts(**{field: value}))
    assert f"op 'conv1': {rule}" in one_line(err)


def test_forward_of_must_be_a_name():
    with pytest.raises(GraphError, match=r"op 'g': forward_of = \['a'\]: must be an op name"):
        Op("g", "relu", Phase.BACKWARD, forward_of=["a"])


# ------------------------------------------------------------------ gradient rules


def test_needs_gradient_follows_parameters_downstream():
    ops, inputs = chain()
    graph = TrainingGraph.from_ops("chain", ops, inputs)
    assert needs_gradient(graph) == [False, True, True, False, False]
    check_gradients(graph)


def test_parameterised_op_without_backward_op_is_rejected():
    ops, inputs = chain()
    del ops[4], inputs["a/grad"]
    graph = TrainingGraph.from_ops("chain", ops, inputs)  # structurally fine
    with pytest.raises(GraphError) as err:
        check_gradients(graph)
    assert one_line(err) == ("op 'a': has 4 B of trained parameters but no backward op (an "
                             "op with forward_of = 'a'): its weights would never be trained "
                             "(set frozen_param_bytes to param_bytes to freeze them)")


def test_backward_op_of_the_data_input_is_rejected():
    ops, inputs = chain()
    ops.append(grad("x/grad", "x"))
    inputs["x/grad"] = ["a/grad"]
    graph = TrainingGraph.from_ops("chain", ops, inputs)
    with pytest.raises(GraphError) as err:
        check_gradients(graph)
    assert one_line(err).startswith("op 'x/grad': backward op of 'x', which needs no gradient")


def test_backward_op_of_a_parameter_free_prefix_is_rejected():
    """x -> scale (no parameters) -> a (parameters): scale's output needs no gradient."""
    ops, inputs = chain()
    ops += [fwd("scale", output_bytes=8), grad("scale/grad", "scale")]
    inputs.update({"scale": ["x"], "a": ["scale"], "scale/grad": ["a/grad"]})
    graph = TrainingGraph.from_ops("chain", ops, inputs)
    with pytest.raises(GraphError, match="op 'scale/grad': backward op of 'scale', which needs"):
        check_gradients(graph)


def test_fused_backward_of_a_parameter_free_op_is_allowed():
    """x -> a (parameters) -> r -> loss: r/grad may be fused into a/grad."""
    ops, inputs = chain()
    ops.append(fwd("r", output_bytes=8))
    inputs.update({"r": ["a"], "loss": ["r"]})
    graph = TrainingGraph.from_ops("chain", ops, inputs)
    assert needs_gradient(graph)[graph.index("r")]
    check_gradients(graph)


def test_graph_without_parameters_has_nothing_to_train():
    ops = [fwd("x", kind="input", output_bytes=8), fwd("a", output_bytes=8), loss()]
    graph = TrainingGraph.from_ops("frozen", ops, {"a": ["x"], "loss": ["a"]})
    with pytest.raises(GraphError, match="graph 'frozen': no op has trained parameters, so "
                                         "there is nothing to train"):
        check_gradients(graph)


@pytest.mark.parametrize("name", model_names())
def test_every_zoo_model_has_exactly_the_backward_ops_autograd_needs(name):
    graph = build_model(name)
    check_gradients(graph)
    needs = needs_gradient(graph)
    differentiated = {op.forward_of for op in graph.ops if op.phase is Phase.BACKWARD}
    assert differentiated == {op.name for i, op in enumerate(graph.ops) if needs[i]}


# ------------------------------------------------------------------ gradient flow


def _rewired(model: str, op_name: str, inputs: list[str], **options) -> dict:
    from poetsim.graph.io import graph_to_dict
    doc = graph_to_dict(build_model(model, **options))
    for entry in doc["ops"]:
        if entry["name"] == op_name:
            entry["inputs"] = inputs
    return doc


@pytest.mark.parametrize("model, options, op_name, inputs, expected", [
    # the MLP's fc2/grad reads the loss's gradient instead of relu2's
    ("mlp", {}, "fc2/grad", ["relu1", "loss/grad"],
     "op 'fc2/grad': does not read 'relu2/grad', a part of the gradient of 'fc2''s output"),
    # the transformer's first layernorm drops the feed-forward branch's gradient
    ("transformer_block", {}, "block1.attn.layernorm/grad",
     ["block1.attn.add", "block1.ffn.add/grad"],
     "op 'block1.attn.layernorm/grad': does not read 'block1.ffn.fc1/grad', a part of the "
     "gradient of 'block1.attn.layernorm''s output"),
    # ResNet-18's gradient sum with one part missing, then with a part of another op's
    ("resnet18_cifar", {"gradient_sums": 1}, "layer4.0.relu2/grad_sum",
     ["layer4.1.add/grad"],
     "op 'layer4.0.relu2/grad_sum': does not read 'layer4.1.conv1/grad', a part of the "
     "gradient of 'layer4.0.relu2''s output (a gradient-sum op sums exactly"),
    ("resnet18_cifar", {"gradient_sums": 1}, "layer4.0.relu2/grad_sum",
     ["layer4.1.add/grad", "layer4.1.conv1/grad", "layer4.1.conv2/grad"],
     "op 'layer4.0.relu2/grad_sum': reads 'layer4.1.conv2/grad', which is not a part of the "
     "gradient of 'layer4.0.relu2''s output"),
    # a backward op that reads both the sum and one of its parts
    ("resnet18_cifar", {"gradient_sums": 1}, "layer4.0.relu2/grad",
     ["layer4.0.relu2", "layer4.0.relu2/grad_sum", "layer4.1.conv1/grad"],
     "op 'layer4.0.relu2/grad': reads 'layer4.1.conv1/grad', which is not a part of the "
     "gradient of 'layer4.0.relu2''s output (a backward op reads exactly"),
])
def test_wrong_gradient_flow_is_rejected(model, options, op_name, inputs, expected):
    from poetsim.graph.io import graph_from_dict
    doc = _rewired(model, op_name, inputs, **options)
    with pytest.raises(GraphError) as err:
        graph_from_dict(doc)
    assert one_line(err).startswith(expected)


def test_a_gradient_fused_through_a_parameter_free_chain_flows_to_its_producer():
    """x -> a (parameters) -> r1 -> r2 -> loss, r1 and r2 fused into a/grad: a/grad reads
    the loss's gradient; reading nothing is a missing part."""
    ops, inputs = chain()
    ops += [fwd("r1", output_bytes=8), fwd("r2", output_bytes=8)]
    inputs.update({"r1": ["a"], "r2": ["r1"], "loss": ["r2"], "loss/grad": ["loss", "r2"]})
    check_gradients(TrainingGraph.from_ops("chain", ops, inputs))
    inputs["a/grad"] = ["x", "loss"]
    with pytest.raises(GraphError) as err:
        check_gradients(TrainingGraph.from_ops("chain", ops, inputs))
    assert one_line(err).startswith("op 'a/grad': does not read 'loss/grad', a part of the "
                                    "gradient of 'a''s output")


def test_metadata_added_keeps_the_checked_graph():
    from poetsim.zoo import build_model

    graph = build_model("mlp", layers=3)
    more = graph.with_metadata({"note": 1, "layers": 4})
    assert more.metadata == {**graph.metadata, "note": 1, "layers": 4}
    assert graph.metadata["layers"] == 3 and "note" not in graph.metadata
    assert more == graph and more.ops is graph.ops
    assert more.index("loss") == graph.index("loss")
    assert more.predecessors(len(graph) - 1) == graph.predecessors(len(graph) - 1)
