"""A schedule's layout (poetsim.schedule.layout): recorded in schedule files, checked against
the steps by the checker and the simulator, tampering refused with one line."""

from __future__ import annotations

import json

import attrs
import pytest
from conftest import make_board
from test_schedule_io import unsigned
from test_sim_support import PAGE_R, hand

from poetsim.cli.main import main
from poetsim.errors import ScheduleFileError
from poetsim.graph import write_graph
from poetsim.schedule import (
    check_schedule,
    decode_binary,
    encode_binary,
    read_schedule,
    schedule_from_dict,
    schedule_to_dict,
    write_schedule,
)
from poetsim.schedule.arena import adopt_layout
from poetsim.schedule.layout import Layout
from poetsim.schedule.replay import ContractViolation, replay
from poetsim.sim import simulate


@pytest.fixture
def laid_out(residual):
    """PAGE_R with the layout a simulation planned for it (no resident state)."""
    schedule = hand(residual, *PAGE_R)
    report = simulate(residual, make_board(), schedule)
    assert not report.layout_from_schedule and report.layout is not None
    return attrs.evolve(schedule, layout=report.layout), report


def _moved(schedule, kind: str, op: int, offset: int):
    buffers = [attrs.evolve(b, offset_bytes=offset) if (b.kind, b.op) == (kind, op) else b
               for b in schedule.layout.buffers]
    return attrs.evolve(schedule, layout=Layout(schedule.layout.arena_bytes, buffers))


def test_files_carry_the_layout_and_read_it_back(residual, laid_out, tmp_path):
    schedule, _ = laid_out
    doc = schedule_to_dict(schedule, residual)
    assert doc["version"] == 2 and doc["layout"]["arena_bytes"] == schedule.layout.arena_bytes
    path = tmp_path / "s.json"
    write_schedule(schedule, residual, path)
    assert unsigned(read_schedule(path, residual)) == schedule
    text = path.read_text()
    assert text.count("\n") > len(schedule.steps) + len(schedule.layout.buffers)
    back = decode_binary(encode_binary(schedule, residual), residual)
    assert back.layout == schedule.layout and back.steps == schedule.steps
    # without a layout: version 1 as before, and the binary has no layout section
    plain = attrs.evolve(schedule, layout=None)
    assert schedule_to_dict(plain, residual)["version"] == 1
    assert len(encode_binary(plain, residual)) < len(encode_binary(schedule, residual))
    assert decode_binary(encode_binary(plain, residual), residual).layout is None


def test_the_simulator_runs_in_the_schedules_layout(residual, laid_out):
    schedule, planned = laid_out
    report = simulate(residual, make_board(), schedule)
    assert report.layout_from_schedule and report.layout == schedule.layout
    assert (report.arena_bytes, report.energy_j) == (planned.arena_bytes, planned.energy_j)
    # a bigger arena, as declared: the run takes it as it is
    roomy = attrs.evolve(schedule, layout=attrs.evolve(schedule.layout, arena_bytes=4096))
    assert simulate(residual, make_board(), roomy).arena_bytes == 4096


def test_the_checker_names_two_buffers_that_share_bytes(residual, laid_out):
    schedule, _ = laid_out
    assert check_schedule(residual, schedule).valid
    tensors = [b for b in schedule.layout.buffers if b.kind == "tensor"]
    # fc1 and r are live together (r is computed while fc1 is resident)
    fc1, r = residual.index("fc1"), residual.index("r")
    r_offset = next(b.offset_bytes for b in tensors if b.op == r)
    clash = _moved(schedule, "tensor", fc1, r_offset)
    result = check_schedule(residual, clash)
    assert not result.valid and result.violation.rule == "layout_overlap"
    assert "'fc1'" in result.violation.message and "'r'" in result.violation.message
    assert "from step" in result.violation.message
    with pytest.raises(ContractViolation, match=r"\[layout_overlap\]|share bytes"):
        simulate(residual, make_board(), clash)


def test_a_buffer_outside_the_arena_or_a_layout_for_other_steps_is_refused(residual, laid_out):
    schedule, _ = laid_out
    top = max(b.top_bytes for b in schedule.layout.buffers)
    outside = attrs.evolve(schedule, layout=attrs.evolve(schedule.layout, arena_bytes=top - 1))
    assert check_schedule(residual, outside).violation.rule == "layout_outside"
    # one buffer left out, one that the steps never keep, the resident state of another run
    fewer = attrs.evolve(schedule, layout=Layout(schedule.layout.arena_bytes,
                                                 schedule.layout.buffers[1:]))
    assert check_schedule(residual, fewer).violation.rule == "layout_mismatch"
    shifted = attrs.evolve(schedule, layout=Layout(schedule.layout.arena_bytes, [
        attrs.evolve(b, start=b.start + 1) if i == 0 else b
        for i, b in enumerate(schedule.layout.buffers)]))
    assert check_schedule(residual, shifted).violation.rule == "layout_mismatch"
    with pytest.raises(ContractViolation, match="resident state"):
        adopt_layout(replay(residual, schedule), schedule.layout, resident_bytes=64)
    # another resident state: the simulator plans a layout of its own
    assert not simulate(residual, make_board(), schedule, resident_bytes=64
                        ).layout_from_schedule


@pytest.mark.parametrize(("change", "rule"), [
    (lambda b: b.__setitem__(5, -16), "offset_bytes = -16: must be a whole number >= 0"),
    (lambda b: b.__setitem__(5, 1.5), "offset_bytes = 1.5"),
    (lambda b: b.__setitem__(1, "nope"), 'op "nope": must be null for the resident state'),
    (lambda b: b.__setitem__(0, "stack"), 'kind "stack": must be one of'),
    (lambda b: b.__setitem__(3, 10_000), "end = 10000: must be a whole number [1, 25]"),
])
def test_a_malformed_layout_is_one_line_naming_the_buffer(residual, laid_out, change, rule):
    schedule, _ = laid_out
    doc = json.loads(json.dumps(schedule_to_dict(schedule, residual)))
    change(doc["layout"]["buffers"][2])
    with pytest.raises(ScheduleFileError) as err:
        schedule_from_dict(doc, residual, source="s.json")
    message = str(err.value)
    assert message.startswith("s.json: layout.buffers[2]: ") and rule in message
    assert message.endswith("[bad_layout]") and "\n" not in message


def test_simulate_refuses_a_tampered_layout_in_one_line(residual, laid_out, tmp_path, capsys):
    schedule, _ = laid_out
    graph_path, path = tmp_path / "g.json", tmp_path / "s.json"
    write_graph(residual, graph_path)
    r_offset = next(b.offset_bytes for b in schedule.layout.buffers
                    if b.kind == "tensor" and b.op == residual.index("r"))
    write_schedule(_moved(schedule, "tensor", residual.index("fc1"), r_offset), residual, path)
    status = main(["simulate", str(path), "--graph", str(graph_path), "--board", "rpi4"])
    out, err = capsys.readouterr()
    assert status == 2 and not out and err.count("\n") == 1
    assert "[layout_overlap]" in err and "'fc1'" in err and str(path) in err
