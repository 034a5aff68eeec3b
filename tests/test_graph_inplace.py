"""In-place update (issue 15 item 1): each trained parameter's gradient is applied by the
backward op that computes it, so no gradient is resident; the op holds it as workspace."""

from __future__ import annotations

import json

import pytest

from poetsim.costs import _moved_bytes
from poetsim.errors import GraphFileError, InputError
from poetsim.graph import (
    CHANNEL_KINDS,
    Phase,
    Training,
    check_gradients,
    graph_fingerprint,
    graph_from_dict,
    graph_to_dict,
    inplace_gradient_bytes,
    precision_of,
    read_graph,
    resident_memory,
    write_graph,
)
from poetsim.zoo import build_model

CASES = [
    ("mlp", {"layers": 3}),
    ("mlp", {"layers": 4, "train_last": 2}),
    ("ds_cnn_s", {"bias_only": 1}),
    ("mcunet_in1", {"int8": 1, "sparse_update": 1}),
    ("mobilenet_v2_w035", {"int8": 1, "bias_only": 1, "gradient_bytes": 2}),
]


def _gradient_bytes(graph, forward_name: str) -> int:
    p = precision_of(graph)
    return graph.op(forward_name).trained_param_bytes // p.weight_bytes * p.gradient_bytes


@pytest.mark.parametrize(("model", "options"), CASES)
def test_resident_drops_by_the_gradients_and_each_op_holds_its_own(model, options) -> None:
    plain = build_model(model, **options)
    fused = build_model(model, **options, inplace_update=1)
    before, after = resident_memory(plain), resident_memory(fused)
    assert before.gradient_bytes > 0 and after.gradient_bytes == 0
    assert before.total_bytes - after.total_bytes == before.gradient_bytes
    assert after.param_bytes == before.param_bytes
    for optimizer in ("momentum", "adam"):  # optimizer state stays resident
        assert (resident_memory(fused, optimizer=optimizer).optimizer_state_bytes
                == resident_memory(plain, optimizer=optimizer).optimizer_state_bytes > 0)
    assert [op.name for op in fused.ops] == [op.name for op in plain.ops]
    for i, (a, b) in enumerate(zip(plain.ops, fused.ops)):
        assert (a.output_bytes, a.flops) == (b.output_bytes, b.flops)
        trained = a.phase is Phase.BACKWARD and plain.op(a.forward_of).trained_param_bytes > 0
        assert b.inplace_update is trained and not a.inplace_update
        grown = b.workspace_bytes - a.workspace_bytes
        assert grown == inplace_gradient_bytes(fused, i)
        # a convolution or linear layer holds one output channel's gradient, anything
        # else (a norm) all of it
        whole = _gradient_bytes(plain, a.forward_of) if trained else 0
        assert (0 < grown <= whole) if trained else grown == 0
        if trained and plain.op(a.forward_of).kind not in CHANNEL_KINDS:
            assert grown == whole
    assert graph_fingerprint(fused) != graph_fingerprint(plain)
    assert fused.metadata["inplace_update"] == 1
    check_gradients(fused)


def test_a_layer_holds_one_output_channels_gradient_at_a_time() -> None:
    """fc2 of a 64-wide MLP: 64 inputs per output, so 64 weights and a bias per channel,
    at 4 B: 260 B of its 16,640 B gradient at once (TinyEngine updates tile by tile)."""
    graph = build_model("mlp", layers=3, width=64, inplace_update=1)
    grad = graph.index("fc2/grad")
    assert graph.op("fc2").trained_param_bytes == (64 * 64 + 64) * 4
    assert inplace_gradient_bytes(graph, grad) == (64 + 1) * 4
    assert graph.ops[grad].workspace_bytes == (64 + 1) * 4


def test_default_is_unchanged() -> None:
    g = build_model("mlp", layers=3)
    assert graph_fingerprint(g) == graph_fingerprint(build_model("mlp", layers=3,
                                                                 inplace_update=0))
    assert not any(op.inplace_update for op in g.ops)
    assert "inplace_update" not in json.dumps(graph_to_dict(g)["ops"])


def test_graph_file_round_trip(tmp_path) -> None:
    g = build_model("mcunet_in1", int8=1, sparse_update=1, inplace_update=1)
    path = tmp_path / "g.json"
    write_graph(g, path)
    back = read_graph(path)
    assert back == g and graph_fingerprint(back) == graph_fingerprint(g)
    assert [op.inplace_update for op in back.ops] == [op.inplace_update for op in g.ops]
    assert resident_memory(back) == resident_memory(g)


def _doc(**options):
    return graph_to_dict(build_model("mlp", layers=3, train_last=1, **options))


def _op(doc, name):
    return next(op for op in doc["ops"] if op["name"] == name)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: _op(d, "fc3").update(inplace_update=True),
     "op 'fc3': inplace_update is only for backward ops"),
    (lambda d: _op(d, "fc3/grad").update(inplace_update=1),
     "op 'fc3/grad': inplace_update = 1: must be true or false"),
    (lambda d: _op(d, "loss/grad").update(inplace_update=True),
     "op 'loss/grad': inplace_update, but 'loss' has no trained parameters"),
    (lambda d: _op(d, "fc3/grad").update(workspace_bytes=4),
     "op 'fc3/grad': inplace_update with workspace_bytes = 4: must be at least 1028, "
     "the gradient buffer of 'fc3''s update \\(one output channel's"),
])
def test_bad_inplace_updates_in_graph_files(tmp_path, mutate, message) -> None:
    doc = _doc(inplace_update=1)
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(GraphFileError, match=message) as err:
        read_graph(path)
    assert "\n" not in str(err.value)


def test_a_hand_written_inplace_op_is_accepted_when_its_workspace_holds_the_gradient() -> None:
    doc = _doc()
    entry = _op(doc, "fc3/grad")
    entry["inplace_update"] = True
    entry["workspace_bytes"] = entry.get("workspace_bytes", 0) + 2570 * 4
    g = graph_from_dict(doc)
    assert resident_memory(g).gradient_bytes == 0


def test_the_fused_step_reads_and_writes_the_trained_weights_once() -> None:
    plain = build_model("mlp", layers=3, train_last=1)
    fused = build_model("mlp", layers=3, train_last=1, inplace_update=1)
    k = plain.index("fc3/grad")
    trained = plain.op("fc3").trained_param_bytes
    assert _moved_bytes(fused, k) - _moved_bytes(plain, k) == 2 * trained
    other = plain.index("loss/grad")
    assert _moved_bytes(fused, other) == _moved_bytes(plain, other)


@pytest.mark.parametrize(("value", "message"), [
    (2, "model mlp: option inplace_update = 2: must be 0 or 1"),
    (-1, "model mlp: option inplace_update = -1: must be a whole number"),
    ("yes", "model mlp: option inplace_update = 'yes': must be a whole number"),
])
def test_bad_option_values_name_the_option(value, message) -> None:
    with pytest.raises(InputError, match=message) as err:
        build_model("mlp", layers=2, inplace_update=value)
    assert "\n" not in str(err.value)


def test_training_rejects_a_non_boolean_flag() -> None:
    with pytest.raises(InputError, match="option inplace_update = 1: must be 0 or 1"):
        Training(inplace_update=1)  # type: ignore[arg-type]
    assert Training(inplace_update=True).is_full and not Training(inplace_update=True).is_default


def test_inplace_update_solves_and_passes_with_less_resident_ram() -> None:
    """ds_cnn_s fine-tuning its last two layers on the nRF52840 with in-place updates: the
    request's resident RAM drops by exactly the gradient bytes, the workspace grows by one
    output channel's gradient per trained layer, and the solver's schedule
    PASSes on the board, with the verdict agreeing on the resident bytes."""
    from poetsim.boards import get_board
    from poetsim.methods import SolverSettings, seeded_solve
    from poetsim.request import resolve_request
    from poetsim.verdict import check_on_board

    board = get_board("nrf52840")
    plain = build_model("ds_cnn_s", train_last=2)
    graph = build_model("ds_cnn_s", train_last=2, inplace_update=1)
    gradients = resident_memory(plain).gradient_bytes
    before = resolve_request(plain, board, ram="board", deadline="2x")
    request = resolve_request(graph, board, ram="board", deadline="2x")
    assert request.resident_bytes == before.resident_bytes - gradients
    grown = sum(inplace_gradient_bytes(graph, i) for i in range(len(graph)))
    assert 0 < grown < gradients  # one output channel's gradient per trained layer at once
    assert int(request.costs.workspace_bytes.sum()) == (int(before.costs.workspace_bytes.sum())
                                                        + grown)
    result = seeded_solve(request, SolverSettings(time_limit_s=20))
    assert result.schedule is not None
    report, verdict = check_on_board(request, result.schedule)
    assert verdict.passed, verdict.line()
    assert report.resident_bytes == verdict.resident_bytes == request.resident_bytes
