"""Schedule files (poetsim.schedule.io): JSON and binary round trips, one-line errors."""

from __future__ import annotations

import json
import struct
import zlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poetsim.errors import InputError
from poetsim.graph import graph_fingerprint
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.schedule import (
    Action,
    Schedule,
    ScheduleError,
    ScheduleFileError,
    Step,
    check_schedule,
    decode_binary,
    encode_binary,
    plain_schedule,
    read_schedule,
    read_schedule_binary,
    schedule_from_dict,
    schedule_to_dict,
    write_schedule,
    write_schedule_binary,
)
from poetsim.zoo import build_model


def paging(graph) -> Schedule:
    """The residual graph's plain schedule with r paged out after s and back in."""
    steps = list(plain_schedule(graph).steps)
    r = graph.index("r")
    steps[7:7] = [Step("page_out", r, 4), Step("free", r, 4)]
    at = steps.index(Step("compute", graph.index("fc2/grad"), 8))
    steps.insert(at, Step("page_in", r, 8))
    s = Schedule.for_graph(graph, steps, {"method": "hand", "budget_bytes": 96,
                                          "predicted": {"energy_j": 1.5e-3, "peak": [96, 17]}})
    assert check_schedule(graph, s).valid
    return s


def unsigned(schedule):
    """``schedule`` without the digest its file recorded (a property of the file)."""
    import attrs

    return attrs.evolve(schedule, metadata={k: v for k, v in schedule.metadata.items()
                                            if k != "digest"})


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ----------------------------------------------------------------------------- JSON


def test_json_round_trip(residual, tmp_path):
    s = paging(residual)
    path = tmp_path / "plan.json"
    write_schedule(s, residual, path)
    assert unsigned(read_schedule(path, residual)) == s
    assert unsigned(read_schedule(path)) == s  # the ops list maps names without the graph
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left


def test_json_is_readable(residual, tmp_path):
    path = tmp_path / "plan.json"
    write_schedule(paging(residual), residual, path)
    text = path.read_text()
    assert '\n    ["compute", "fc1", 1],\n' in text
    assert '\n    ["page_out", "r", 4],\n' in text
    doc = json.loads(text)
    assert (doc["format"], doc["version"], doc["graph"]) == ("poetsim-schedule", 1, "residual")
    assert doc["graph_fingerprint"] == graph_fingerprint(residual)
    assert doc["ops"] == [op.name for op in residual.ops]
    assert doc == schedule_to_dict(paging(residual), residual)


def test_write_refuses_a_schedule_for_another_graph(residual, tmp_path):
    s = attrs.evolve(paging(residual), graph_fingerprint="ab" * 32)
    with pytest.raises(ScheduleError, match=r"\[fingerprint_mismatch\]$"):
        write_schedule(s, residual, tmp_path / "x.json")
    s = attrs.evolve(paging(residual), steps=(Step("compute", 11),))
    with pytest.raises(ScheduleError, match=r"op index 11 .*\[unknown_op\]$"):
        write_schedule(s, residual, tmp_path / "x.json")
    s = paging(residual).with_metadata(bad=object())
    with pytest.raises(ScheduleError, match="metadata cannot be written as JSON"):
        write_schedule(s, residual, tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


def test_json_numpy_metadata_is_written_as_plain_numbers(residual, tmp_path):
    np = pytest.importorskip("numpy")
    s = paging(residual).with_metadata(energy_j=np.float64(0.25), peak=np.int64(96))
    write_schedule(s, residual, tmp_path / "n.json")
    meta = read_schedule(tmp_path / "n.json").metadata
    assert (meta["energy_j"], meta["peak"]) == (0.25, 96)


def edit(doc, path, value):
    *head, last = path
    target = doc
    for key in head:
        target = target[key]
    target[last] = value
    return doc


@pytest.mark.parametrize(("path", "value", "expected"), [
    (("format",), "poetsim-graph", "format = \"poetsim-graph\": must be 'poetsim-schedule' "
                                   "[bad_format]"),
    (("version",), 4, "version = 4: this poetsim reads versions 1 to 3 [unsupported_version]"),
    (("steps", 3), ["comptue", "r", 2], "steps[3]: action \"comptue\": must be one of "
                                        "compute, page_out, page_in, free, read_weights, "
                                        "write_weights, hold_weights, drop_weights "
                                        "[unknown_action]"),
    (("steps", 4), ["compute", "conv9", 3], "steps[4]: op \"conv9\" is not in the ops list "
                                           "[unknown_op]"),
    (("steps", 5), ["compute", "s", -1], "steps[5]: stage -1: must be a non-negative "
                                         "integer [bad_stage]"),
    (("steps", 6), ["free", "fc2"], "steps[6]: [\"free\", \"fc2\"]: must be [action, op "
                                    "name, stage] [bad_step]"),
    (("metadata",), [], "metadata: []: must be an object [bad_format]"),
    (("ops", 2), "fc1", "ops[2]: duplicate op name 'fc1' [bad_format]"),
])
def test_json_errors_name_file_position_and_rule(residual, tmp_path, path, value, expected):
    doc = edit(schedule_to_dict(paging(residual), residual), path, value)
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(doc))
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(file)
    assert one_line(err) == f"{file}: {expected}"
    assert err.value.rule == expected.rsplit("[", 1)[1].rstrip("]")
    assert isinstance(err.value, InputError)


def test_json_fingerprint_and_ops_checked_against_the_graph(residual, tmp_path):
    other = build_model("mlp", layers=2)
    file = tmp_path / "plan.json"
    write_schedule(paging(residual), residual, file)
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(file, other)
    assert one_line(err).startswith(f"{file}: made for graph 'residual' with fingerprint ")
    assert err.value.rule == "fingerprint_mismatch"
    doc = schedule_to_dict(paging(residual), residual)
    doc["ops"][3] = "fc2_renamed"
    with pytest.raises(ScheduleFileError, match=r"^schedule: ops\[3\]: .*\[ops_mismatch\]$"):
        schedule_from_dict(doc, residual)


def test_json_truncated_or_missing_file(residual, tmp_path):
    file = tmp_path / "plan.json"
    write_schedule(paging(residual), residual, file)
    file.write_text(file.read_text()[:300])
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(file, residual)
    assert one_line(err).startswith(f"{file}: not valid JSON: ")
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(tmp_path / "missing.json")
    assert one_line(err).endswith("[unreadable]")
    file.write_bytes(encode_binary(paging(residual)))
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(file)
    assert err.value.rule == "not_json"
    one_line(err)


# ----------------------------------------------------------------------------- binary


def test_binary_round_trip(residual):
    s = paging(residual)
    data = encode_binary(s, residual)
    assert data[:4] == b"POET" and data[4] == 1
    assert decode_binary(data, residual) == attrs.evolve(s, metadata={})
    fingerprint = graph_fingerprint(residual)
    assert decode_binary(data, fingerprint, graph_name="residual") == \
        attrs.evolve(s, metadata={})
    assert encode_binary(s) == data  # op count from the steps: every op is computed


def test_weight_steps_take_binary_version_2_and_json_by_name():
    graph = WeightsOnStorage(trained=True).graph(
        build_model("mlp", layers=3, width=16, inplace_update=1))
    s = plain_schedule(graph)
    assert s.count(Action.READ_WEIGHTS) and s.count(Action.WRITE_WEIGHTS)
    data = encode_binary(s, graph)
    assert data[4] == 2  # three action bits
    assert decode_binary(data, graph) == attrs.evolve(s, metadata={})
    assert unsigned(schedule_from_dict(schedule_to_dict(s, graph), graph)) == s
    assert ["read_weights", "fc1", graph.index("fc1")] in schedule_to_dict(s, graph)["steps"]


def test_holds_take_binary_codes_6_and_7_and_json_by_name():
    from test_schedule_check import with_holds

    graph = WeightsOnStorage(trained=True).graph(
        build_model("mlp", layers=3, width=16, inplace_update=1))
    s = with_holds(graph, plain_schedule(graph).steps, ["fc1/grad", "fc2/grad"])
    assert check_schedule(graph, s).valid
    assert s.count(Action.HOLD_WEIGHTS) == s.count(Action.DROP_WEIGHTS) == 2
    data = encode_binary(s, graph)
    assert data[4] == 2  # three action bits
    words = struct.unpack_from(f"<{len(s)}H", data, 24)
    codes = {step.action: word >> 13 for step, word in zip(s.steps, words)}
    assert codes[Action.HOLD_WEIGHTS] == 6 and codes[Action.DROP_WEIGHTS] == 7
    assert decode_binary(data, graph) == attrs.evolve(s, metadata={})
    assert decode_binary(encode_binary(s, graph, stages=False), graph).steps == tuple(
        attrs.evolve(step, stage=0) for step in s.steps)
    doc = schedule_to_dict(s, graph)
    stage = next(step.stage for step in s.steps if step.action is Action.HOLD_WEIGHTS)
    assert ["hold_weights", "fc1/grad", stage] in doc["steps"]
    assert any(step[:2] == ["drop_weights", "fc2/grad"] for step in doc["steps"])
    assert unsigned(schedule_from_dict(json.loads(json.dumps(doc)), graph)) == s
    # a schedule with holds but no weight step would still need version 2
    only = Schedule.for_graph(graph, [Step(Action.HOLD_WEIGHTS, graph.index("fc1/grad"))])
    assert encode_binary(only)[4] == 2
    # every 3-bit code is an action: the first step word's top byte (little-endian) set to 7
    assert decode_binary(corrupt(data, 25, 0xE0 | data[25] & 0x1F), graph).steps[0].action \
        is Action.DROP_WEIGHTS


def test_binary_without_stages(residual):
    s = paging(residual)
    data = encode_binary(s, residual, stages=False)
    assert len(data) == 24 + 2 * len(s) + 4
    back = decode_binary(data, residual)
    assert back.steps == tuple(attrs.evolve(step, stage=0) for step in s.steps)


def test_binary_size_of_resnet18_cifar():
    graph = build_model("resnet18_cifar")
    s = plain_schedule(graph)
    n = len(graph)
    # one 16-bit word per step; stage runs: one per op, 1-byte delta + 1-byte length.
    assert len(encode_binary(s, graph, stages=False)) == 24 + 2 * 2 * n + 4
    assert len(encode_binary(s, graph)) == 24 + 2 * 2 * n + 2 + 2 * n + 4
    assert decode_binary(encode_binary(s, graph), graph) == attrs.evolve(s, metadata={})


def test_binary_wide_words_and_irregular_stages():
    fingerprint = "0123456789abcdef" * 4
    steps = [Step("compute", 20000, 0), Step("page_out", 5, 7), Step("page_in", 16384, 3),
             Step("free", (1 << 30) - 1, 3), Step("compute", 0, 1000)]
    s = Schedule("big", fingerprint, steps)
    data = encode_binary(s)
    assert data[5] & 1  # 32-bit words
    assert struct.unpack_from("<I", data, 8)[0] == 1 << 30
    assert decode_binary(data, fingerprint, graph_name="big") == s


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["compute", "page_out", "page_in", "free"]),
                          st.integers(0, 300), st.integers(0, 400)), max_size=40))
def test_binary_round_trips_any_steps(entries):
    fingerprint = "fe" * 32
    s = Schedule("g", fingerprint, [Step(*entry) for entry in entries])
    assert decode_binary(encode_binary(s), fingerprint, graph_name="g") == s


def with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def corrupt(data: bytes, offset: int, value: int) -> bytes:
    """Change one byte and fix the checksum, to reach the checks behind it."""
    body = bytearray(data[:-4])
    body[offset] = value
    return with_crc(bytes(body))


#: Offset of the stage section in the binary of `paging` (25 steps of 2 bytes).
STAGES = 24 + 2 * 25


@pytest.mark.parametrize(("change", "rule"), [
    (lambda d: d[:10], "truncated"),
    (lambda d: d[:-1], "checksum_mismatch"),
    (lambda d: d[:30] + bytes([d[30] ^ 0x40]) + d[31:], "checksum_mismatch"),
    (lambda d: b"PNG\x00" + d[4:], "bad_magic"),
    (lambda d: b"PO", "truncated"),
    (lambda d: corrupt(d, 4, 4), "unsupported_version"),
    (lambda d: corrupt(d, 5, 0x83), "bad_header"),
    (lambda d: corrupt(d, 16, d[16] ^ 1), "fingerprint_mismatch"),
    (lambda d: corrupt(d, 8, 12), "op_count_mismatch"),
    (lambda d: corrupt(d, 13, 1), "truncated"),  # 256 more steps announced
    (lambda d: corrupt(d, 12, d[12] + 1), "bad_stages"),  # the stage section read as a step
    (lambda d: corrupt(d, STAGES, d[STAGES] - 1), "bad_stages"),  # one stage run fewer
    (lambda d: corrupt(d, STAGES, d[STAGES] + 1), "bad_stages"),  # one stage run more
    (lambda d: with_crc(d[:-4] + b"\x00\x00\x00"), "trailing_bytes"),
])
def test_corrupted_binary_gives_a_one_line_error(residual, change, rule):
    data = encode_binary(paging(residual), residual)
    assert len(paging(residual)) == 25
    with pytest.raises(ScheduleFileError) as err:
        decode_binary(change(data), residual)
    assert err.value.rule == rule, str(err.value)
    assert one_line(err).startswith("binary schedule: ")
    assert one_line(err).endswith(f"[{rule}]")


def test_corrupted_op_index_names_the_step(residual):
    data = encode_binary(paging(residual), residual, stages=False)
    body = bytearray(data[:-4])
    struct.pack_into("<H", body, 24 + 2 * 3, 50)  # step 3: compute op 50
    with pytest.raises(ScheduleFileError) as err:
        decode_binary(with_crc(bytes(body)), residual)
    assert one_line(err) == ("binary schedule: steps[3]: op index 50 is outside the graph's "
                             "11 ops [unknown_op]")
    assert err.value.position == 3


def test_binary_files(residual, tmp_path):
    s = paging(residual)
    path = tmp_path / "plan.poet"
    write_schedule_binary(s, path, residual)
    assert read_schedule_binary(path, residual) == attrs.evolve(s, metadata={})
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ScheduleFileError) as err:
        read_schedule_binary(path, residual)
    assert one_line(err).startswith(f"{path}: ")


def test_encode_refuses_bad_input(residual):
    with pytest.raises(ScheduleError, match="must start with 16 hex digits"):
        encode_binary(Schedule("g", "not-hex", [Step("compute", 0)]))
    with pytest.raises(ScheduleError, match=r"\[fingerprint_mismatch\]"):
        encode_binary(attrs.evolve(paging(residual), graph_fingerprint="ab" * 32), residual)


def test_a_file_changed_after_it_was_written_is_refused_unless_accepted(residual, tmp_path):
    """The digest covers every key but itself: the request's words, the figures, the
    steps. A change to any refuses the file [edited], after its form is checked."""
    from poetsim.schedule.io import content_digest

    path = tmp_path / "s.json"
    write_schedule(plain_schedule(residual).with_metadata(deadline="1.5x"), residual, path)
    doc = json.loads(path.read_text())
    assert doc["metadata"]["digest"] == content_digest(doc)
    for change in (lambda d: d["metadata"].update(deadline="100x"),
                   lambda d: d["metadata"].pop("deadline"),
                   lambda d: d["steps"].reverse()):
        edited = json.loads(path.read_text())
        change(edited)
        with pytest.raises(ScheduleFileError) as err:
            schedule_from_dict(edited, source="s.json")
        assert err.value.rule == "edited"
        assert one_line(err).startswith("s.json: metadata.digest: the file was changed after "
                                        "poetsim wrote it")
    edited = json.loads(path.read_text())
    edited["metadata"]["deadline"] = "100x"
    assert schedule_from_dict(edited, accept_edits=True).metadata["deadline"] == "100x"
    del edited["metadata"]["digest"]  # no digest at all (an older file): read as it is
    assert schedule_from_dict(edited).metadata["deadline"] == "100x"


# ----------------------------------------------------------------------------- MOVE steps


@pytest.fixture(scope="module")
def compacted():
    """The fragmented schedule laid out at its byte peak with MOVE steps (#28 item 4)."""
    from test_sim_support import fragmented_graph, fragmented_schedule

    from poetsim.schedule.compaction import compact
    from poetsim.schedule.replay import replay

    graph = fragmented_graph()
    moved = compact(replay(graph, fragmented_schedule(graph)), room_bytes=264)
    assert moved is not None and moved.count(Action.MOVE) > 0
    return graph, moved


def test_moves_take_json_version_3_and_binary_version_3(compacted, tmp_path):
    graph, moved = compacted
    path = tmp_path / "m.json"
    write_schedule(moved, graph, path)
    doc = json.loads(path.read_text())
    assert doc["version"] == 3
    rows = [row for row in doc["steps"] if row[0] == "move"]
    steps = [s for s in moved.steps if s.action is Action.MOVE]
    assert rows == [["move", graph.ops[s.op].name, s.stage, s.from_offset_bytes,
                     s.to_offset_bytes] for s in steps]
    back = read_schedule(path, graph)
    assert back.steps == moved.steps and back.layout == moved.layout
    data = encode_binary(moved, graph)
    assert data[4] == 3
    decoded = decode_binary(data, graph)
    assert decoded.steps == moved.steps and decoded.layout == moved.layout
    # a schedule without moves keeps its older versions
    plain = attrs.evolve(moved, steps=[s for s in moved.steps if s.action is not Action.MOVE],
                         layout=None)
    assert schedule_to_dict(plain, graph)["version"] == 1 and encode_binary(plain, graph)[4] == 1


@pytest.mark.parametrize(("change", "expected"), [
    (lambda row: row.__setitem__(4, -3),
     "move of \"t3\": to_offset_bytes -3: must be a non-negative whole number of bytes "
     "[bad_move]"),
    (lambda row: row.__setitem__(3, 1.5),
     "from_offset_bytes 1.5: must be a non-negative whole number of bytes [bad_move]"),
    (lambda row: row.__setitem__(4, row[3]), "the offsets must differ (a move must move) "
                                             "[bad_move]"),
    (lambda row: row.pop(), "a move is [\"move\", op name, stage, from_offset_bytes, "
                            "to_offset_bytes] [bad_move]"),
])
def test_a_bad_move_in_a_file_is_one_line_naming_file_step_and_rule(compacted, tmp_path,
                                                                    change, expected):
    graph, moved = compacted
    doc = unsigned_doc(moved, graph)
    i = next(i for i, row in enumerate(doc["steps"]) if row[0] == "move")
    change(doc["steps"][i])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(path, graph)
    text = one_line(err)
    assert text.startswith(f"{path}: steps[{i}]: ") and text.endswith(expected), text


@pytest.mark.parametrize("recorded", [+1, -1, "2"])
def test_arena_moves_that_do_not_count_the_move_steps_are_refused(compacted, tmp_path,
                                                                  recorded):
    """#32: compaction records ``metadata.arena_moves``; a file whose figure disagrees with
    its MOVE steps was read without a word."""
    graph, moved = compacted
    doc = unsigned_doc(moved, graph)
    moves = moved.count(Action.MOVE)
    assert doc["metadata"]["arena_moves"] == moves  # as written, it reads back
    read_schedule(_written(tmp_path / "good.json", doc), graph)
    doc["metadata"]["arena_moves"] = moves + recorded if isinstance(recorded, int) else recorded
    path = _written(tmp_path / "bad.json", doc)
    with pytest.raises(ScheduleFileError) as err:
        read_schedule(path, graph)
    shown = json.dumps(doc["metadata"]["arena_moves"])
    assert one_line(err) == (f"{path}: metadata.arena_moves: {shown}: the file has {moves} "
                             "MOVE steps; it must count them [bad_metadata]")


def _written(path, doc):
    path.write_text(json.dumps(doc))
    return path


def test_a_move_in_an_older_version_is_refused(compacted, tmp_path):
    graph, moved = compacted
    doc = unsigned_doc(moved, graph)
    doc["version"] = 2
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleFileError, match=r"\(move: version 3\) \[unknown_action\]"):
        read_schedule(path, graph)
    # a binary version 2 holds no move code either
    data = bytearray(encode_binary(attrs.evolve(moved, layout=None), graph, stages=False))
    data[4] = 2
    data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-4])))
    with pytest.raises(ScheduleFileError, match="unknown_action|unknown_op|trailing_bytes"):
        decode_binary(bytes(data), graph)


def unsigned_doc(schedule, graph) -> dict:
    """``schedule``'s JSON document without its digest (so edits read as they are)."""
    doc = schedule_to_dict(schedule, graph)
    doc["metadata"].pop("digest")
    return doc
