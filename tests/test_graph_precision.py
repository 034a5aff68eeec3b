"""Precision of a training graph (issue #15 item 3): separate byte widths for weights,
activations and gradients, the resident memory they imply, and their graph-file fields."""

from __future__ import annotations

import json

import pytest

from poetsim.errors import GraphError, GraphFileError
from poetsim.graph import (
    ForwardGraph,
    Precision,
    compute_widths,
    graph_fingerprint,
    graph_from_dict,
    graph_to_dict,
    precision_of,
    read_graph,
    resident_memory,
)
from poetsim.graph.precision import rescale_bytes


def tiny(**widths):
    """x (8) -> fc (8 -> 4; 32 weights + 4 biases) -> loss."""
    fg = ForwardGraph("tiny", **widths)
    x = fg.input("x", 8)
    h = fg.op("fc", "linear", [x], output_elements=4, flops=2 * 8 * 4, param_count=36,
              bias_count=4, workspace_elements=3)
    fg.loss("loss", h)
    return fg.build()


def sizes(graph):
    return {op.name: (op.output_bytes, op.workspace_bytes, op.param_bytes) for op in graph.ops}


def test_default_widths_are_fp32_and_recorded():
    g = tiny()
    assert precision_of(g) == Precision(4, 4, 4)
    assert {k: g.metadata[k] for k in ("dtype_bytes", "weight_bytes", "activation_bytes",
                                       "gradient_bytes")} == {
        "dtype_bytes": 4, "weight_bytes": 4, "activation_bytes": 4, "gradient_bytes": 4}
    # hand-computed, 4 bytes everywhere
    assert sizes(g) == {"x": (32, 0, 0), "fc": (16, 12, 144), "loss": (4, 0, 0),
                        "loss/grad": (16, 0, 0), "fc/grad": (0, 12, 0)}


def test_byte_sizes_follow_each_width():
    g = tiny(weight_bytes=1, activation_bytes=2, gradient_bytes=4)
    # activations (forward outputs, the loss, forward workspace) 2 B; parameters 1 B;
    # backward outputs 4 B; a backward workspace at the wider of activation and gradient
    assert sizes(g) == {"x": (16, 0, 0), "fc": (8, 6, 36), "loss": (2, 0, 0),
                        "loss/grad": (16, 0, 0), "fc/grad": (0, 12, 0)}
    assert precision_of(g) == Precision(1, 2, 4)
    assert g.metadata["dtype_bytes"] == 2  # the activation width, for older readers
    # an op computes at its widest input: fc reads fp16 activations and int8 weights
    assert compute_widths(g) == [0, 2, 2, 4, 4]


def test_dtype_bytes_alone_still_sets_every_width():
    assert sizes(tiny(dtype_bytes=1)) == {"x": (8, 0, 0), "fc": (4, 3, 36), "loss": (1, 0, 0),
                                          "loss/grad": (4, 0, 0), "fc/grad": (0, 3, 0)}
    assert sizes(tiny(dtype_bytes=2, gradient_bytes=4))["loss/grad"] == (16, 0, 0)


@pytest.mark.parametrize("field", ["dtype_bytes", "weight_bytes", "activation_bytes",
                                   "gradient_bytes"])
@pytest.mark.parametrize("value", [0, 3, 16, True])
def test_forward_graph_rejects_bad_widths(field, value):
    with pytest.raises(GraphError, match=f"graph 'g': {field} = {value!r}: must be one of "
                                         r"1, 2, 4, 8 \(bytes per element\)"):
        ForwardGraph("g", **{field: value})


def test_a_graph_file_with_an_odd_element_width_is_refused():
    from poetsim.graph import graph_from_dict, graph_to_dict

    doc = graph_to_dict(tiny(dtype_bytes=1))
    doc["metadata"]["dtype_bytes"] = 3
    with pytest.raises(GraphError, match=r"metadata.dtype_bytes = 3: must be one of"):
        graph_from_dict(doc)


def test_resident_memory_sizes_params_by_weight_and_state_by_gradient_width():
    g = tiny(weight_bytes=1, activation_bytes=1, gradient_bytes=4)
    assert resident_memory(g).param_bytes == 36
    assert resident_memory(g).gradient_bytes == 144
    assert resident_memory(g, optimizer="momentum").optimizer_state_bytes == 144
    assert resident_memory(g, optimizer="adam").total_bytes == 36 + 144 + 288
    assert resident_memory(g, gradients=False).total_bytes == 36
    half = tiny(weight_bytes=4, gradient_bytes=2)
    assert resident_memory(half).param_bytes == 144
    assert resident_memory(half).gradient_bytes == 72


def test_resident_memory_of_a_partly_frozen_int8_model():
    from poetsim.zoo import build_model

    fp32 = build_model("mlp", layers=2, width=8, train_last=1)
    int8 = build_model("mlp", layers=2, width=8, train_last=1, int8=1)
    assert int8.param_bytes * 4 == fp32.param_bytes
    # gradients of the trained layer only, fp32 in both
    assert resident_memory(int8).gradient_bytes == resident_memory(fp32).gradient_bytes
    assert resident_memory(int8).gradient_bytes == (8 * 10 + 10) * 4


def test_rescale_bytes():
    assert rescale_bytes(36, 1, 4) == 144
    assert rescale_bytes(144, 4, 2) == 72
    assert rescale_bytes(5, 4, 2) == 3  # not whole elements: rounded up


def test_widths_round_trip_through_a_graph_file(tmp_path):
    from poetsim.graph import write_graph

    g = tiny(weight_bytes=1, activation_bytes=1, gradient_bytes=2)
    write_graph(g, tmp_path / "g.json")
    back = read_graph(tmp_path / "g.json")
    assert precision_of(back) == Precision(1, 1, 2)
    assert graph_fingerprint(back) == graph_fingerprint(g)
    assert resident_memory(back) == resident_memory(g)


def test_older_graph_files_without_widths_still_load_as_before():
    doc = graph_to_dict(tiny())
    for key in ("weight_bytes", "activation_bytes", "gradient_bytes"):
        del doc["metadata"][key]
    g = graph_from_dict(doc)
    assert precision_of(g) == Precision(4, 4, 4)
    assert resident_memory(g).total_bytes == 2 * 144
    doc["metadata"] = {}
    assert precision_of(graph_from_dict(doc)) == Precision(4, 4, 4)
    doc["metadata"] = {"dtype_bytes": 2}
    assert precision_of(graph_from_dict(doc)) == Precision(2, 2, 2)


@pytest.mark.parametrize("value", [3, 0, -1, "4", 4.0, True, None])
def test_a_graph_file_width_is_validated(tmp_path, value):
    doc = graph_to_dict(tiny())
    doc["metadata"]["gradient_bytes"] = value
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(GraphFileError) as err:
        read_graph(path)
    message = str(err.value)
    assert "\n" not in message
    assert f"metadata.gradient_bytes = {value!r}: must be one of 1, 2, 4, 8" in message
