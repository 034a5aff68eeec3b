"""Graph files: round trip, measured costs, fingerprints, and one-line errors."""

from __future__ import annotations

import json
import math

import pytest

from poetsim.errors import GraphFileError
from poetsim.graph import (
    graph_fingerprint,
    graph_from_dict,
    graph_to_dict,
    read_graph,
    write_graph,
)


def test_round_trip(residual, tmp_path):
    path = tmp_path / "g.json"
    write_graph(residual, path)
    again = read_graph(path)
    assert again == residual
    assert graph_fingerprint(again) == graph_fingerprint(residual)
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]  # no temporary file left


def test_gradient_sums_round_trip_and_a_second_sum_is_refused(tmp_path):
    from conftest import residual_graph

    from poetsim.graph.training import Training

    graph = residual_graph(Training(gradient_sums=True))
    path = tmp_path / "g.json"
    write_graph(graph, path)
    assert read_graph(path) == graph
    doc = graph_to_dict(graph)
    assert [op for op in doc["ops"] if op["name"] == "r/grad_sum"][0]["gradient_sum_of"] == "r"
    add_op(name="again", kind="grad_sum", phase="backward", gradient_sum_of="r",
           inputs=["s/grad"], flops=0, output_bytes=16)(doc)
    with pytest.raises(GraphFileError, match="op 'again': 'r' already has gradient-sum op "
                                             "'r/grad_sum'"):
        read_graph(write(tmp_path, doc))


def test_measured_costs_round_trip_and_change_the_fingerprint(residual, tmp_path):
    doc = graph_to_dict(residual)
    doc["ops"][1]["measured"] = {"compute_time_s": 0.25, "compute_energy_j": 0.002,
                                 "pageout_time_s": 0.01}
    graph = graph_from_dict(doc)
    assert graph.op("fc1").measured.compute_time_s == 0.25
    path = tmp_path / "m.json"
    write_graph(graph, path)
    assert read_graph(path).op("fc1").measured.as_dict() == doc["ops"][1]["measured"]
    assert graph_fingerprint(graph) != graph_fingerprint(residual)


def test_ops_in_any_order(residual):
    doc = graph_to_dict(residual)
    doc["ops"].reverse()
    assert graph_from_dict(doc) == residual


def test_flops_optional_with_measured_compute(residual):
    doc = graph_to_dict(residual)
    op = doc["ops"][1]
    del op["flops"]
    op["measured"] = {"compute_time_s": 1.0, "compute_energy_j": 0.1}
    assert graph_from_dict(doc).op("fc1").flops == 0


def write(tmp_path, doc) -> str:
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def set_op(i, **kw):
    def mutate(doc):
        doc["ops"][i].update(kw)
    return mutate


def drop_key(i, key):
    def mutate(doc):
        del doc["ops"][i][key]
    return mutate


def drop_op(name):
    def mutate(doc):
        doc["ops"] = [op for op in doc["ops"] if op["name"] != name]
    return mutate


def add_op(**op):
    def mutate(doc):
        doc["ops"].append(op)
    return mutate


@pytest.mark.parametrize("mutate, expected", [
    (set_op(1, flops=-5), "op 'fc1': flops = -5: must not be negative"),
    (set_op(1, flops=math.nan), "op 'fc1': flops = nan: must be finite"),
    (set_op(2, output_bytes=-1), "op 'r': output_bytes = -1"),
    (set_op(1, inputs=["ghost"]), "op 'fc1': input 'ghost' does not exist"),
    (set_op(1, inputs=["x", "x"]), "op 'fc1': input 'x' listed twice"),
    (set_op(0, inputs=["s"]), "cycle through ops"),
    (set_op(2, name="fc1"), "op 'fc1' (ops[2]): duplicate op name"),
    (set_op(1, color="red"), "op 'fc1' (ops[1]): unknown key 'color'"),
    (set_op(1, phase="sideways"), "phase = 'sideways'"),
    (set_op(1, measured={"compute_time_s": -2}), "measured.compute_time_s = -2"),
    (set_op(1, measured={"power_w": 1}), "unknown key 'measured.power_w'"),
    (drop_key(1, "output_bytes"), "op 'fc1' (ops[1]): missing key 'output_bytes'"),
    (drop_key(1, "flops"), "op 'fc1' (ops[1]): needs flops, or measured"),
    (lambda d: d.update(format="onnx"), "format = 'onnx'"),
    (lambda d: d.update(version=7), "version = 7"),
    (lambda d: d.update(ops=[]), "ops: must be a non-empty list"),
    (set_op(1, forward_of=[]), "op 'fc1': forward_of = []: must be an op name"),
    # plausibility bounds
    (set_op(2, output_bytes=10**30), "op 'r': output_bytes = 1000000000000000000000000000000: "
                                     "outside the allowed range [0, 2**44 = 17592186044416] B "
                                     "(ops[2])"),
    (set_op(1, param_bytes=2**60), "op 'fc1': param_bytes = 1152921504606846976: outside"),
    (set_op(1, workspace_bytes=1e20), "op 'fc1': workspace_bytes = 1e+20: outside the allowed"),
    (set_op(1, flops=1e30), "op 'fc1': flops = 1e+30: outside the allowed range [0, 1e+18] FLOP"),
    (set_op(1, measured={"pageout_energy_j": 1e12}),
     "op 'fc1': measured.pageout_energy_j = 1000000000000.0: outside the allowed range "
     "[0, 1e+09] J"),
    # autograd's rules on backward ops
    (drop_op("fc1/grad"), "op 'fc1': has 144 B of trained parameters but no backward op (an "
                          "op with forward_of = 'fc1'): its weights would never be trained"),
    (add_op(name="x/grad", kind="input", phase="backward", forward_of="x",
            inputs=["r/grad"], flops=1, output_bytes=0),
     "op 'x/grad': backward op of 'x', which needs no gradient (it has no parameters and "
     "reads no op that does): only ops that need a gradient have a backward op"),
    # gradient-sum ops
    (add_op(name="x/grad_sum", kind="grad_sum", phase="backward", gradient_sum_of="x",
            inputs=["r/grad"], flops=1, output_bytes=32),
     "op 'x/grad_sum': gradient-sum op of 'x', which needs no gradient: there is nothing "
     "to sum"),
    (add_op(name="sum", kind="grad_sum", phase="backward", gradient_sum_of="ghost",
            inputs=["r/grad"], flops=1, output_bytes=16),
     "op 'sum': gradient_sum_of = 'ghost' is not a forward or loss op of this graph"),
    (add_op(name="sum", kind="grad_sum", phase="backward", gradient_sum_of="r",
            forward_of="r", inputs=["s/grad"], flops=1, output_bytes=16),
     "op 'sum': a backward op needs exactly one of forward_of"),
])
def test_bad_graph_files(residual, tmp_path, mutate, expected):
    doc = graph_to_dict(residual)
    mutate(doc)
    path = write(tmp_path, doc)
    with pytest.raises(GraphFileError) as err:
        read_graph(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(path)
    assert expected in message


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(GraphFileError, match="cannot read graph file"):
        read_graph(tmp_path / "missing.json")
    with pytest.raises(GraphFileError, match="not valid JSON"):
        read_graph(write(tmp_path, "{ops: ["))
    with pytest.raises(GraphFileError, match="not valid JSON: Exceeds the limit"):
        read_graph(write(tmp_path, '{"format": ' + "9" * 5000 + "}"))
    with pytest.raises(GraphFileError, match="not valid JSON: arrays or objects nested too"):
        read_graph(write(tmp_path, "[" * 100_000 + "]" * 100_000))


def test_non_utf8_graph_file_is_one_line(residual, tmp_path):
    path = tmp_path / "g.json"
    write_graph(residual, path)
    data = path.read_bytes()
    path.write_bytes(data[:40] + b"\xe9" + data[41:])
    with pytest.raises(GraphFileError) as err:
        read_graph(path)
    assert str(err.value) == (f"{path}: not UTF-8 text (byte 0xe9 at offset 40): a graph "
                              "file must be UTF-8")


def test_directory_is_one_line(tmp_path):
    with pytest.raises(GraphFileError) as err:
        read_graph(tmp_path)
    assert str(err.value).startswith(f"{tmp_path}: cannot read graph file: ")
    assert "\n" not in str(err.value)


def test_largest_allowed_numbers_round_trip(residual, tmp_path):
    doc = graph_to_dict(residual)
    doc["ops"][2].update(output_bytes=2**44, flops=1e18,
                         measured={"compute_time_s": 1e6, "compute_energy_j": 1e9})
    path = write(tmp_path, doc)
    graph = read_graph(path)
    assert graph.op("r").output_bytes == 2**44
    assert graph.op("r").measured.compute_energy_j == 1e9


def test_the_fingerprint_is_cached_per_graph_object():
    import gc

    from conftest import residual_graph

    from poetsim.graph.io import _FINGERPRINTS, graph_fingerprint

    graph = residual_graph()
    first = graph_fingerprint(graph)
    assert id(graph) in _FINGERPRINTS
    assert graph_fingerprint(graph) == first
    key = id(graph)
    del graph
    gc.collect()
    assert key not in _FINGERPRINTS
