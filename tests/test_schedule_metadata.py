"""poetsim.schedule.metadata: a typed, validated record whose figures are never trusted."""

from __future__ import annotations

import json

import pytest

from poetsim.errors import InputError
from poetsim.schedule import ScheduleFileError, plain_schedule, read_schedule, write_schedule
from poetsim.schedule.metadata import disagreements, parse_metadata


def test_known_fields_are_typed_and_the_rest_kept():
    meta = parse_metadata({"method": "poet", "budget_bytes": 100.0, "deadline_s": 2,
                           "gap": 0.01, "solver_status": "optimal", "deadline": None})
    assert meta.method == "poet" and meta.budget_bytes == 100 and meta.deadline_s == 2.0
    assert meta.extra == {"solver_status": "optimal"} and meta.deadline is None


@pytest.mark.parametrize("raw, message", [
    ({"budget_activation_bytes": "abc"}, "metadata.budget_activation_bytes = 'abc'"),
    ({"resident_bytes": -1}, "must be a number in"), ({"resident_bytes": 1.5}, "whole number"),
    ({"deadline_s": float("nan")}, "deadline_s"), ({"gap": 2.0}, "must be in \\[0, 1\\]"),
    ({"ram": 50}, "must be a string"), ({"budget_bytes": True}, "budget_bytes = True"),
    ({"optimizer": "lion"}, "s.json: metadata.optimizer = 'lion': must be one of sgd, "
                            "momentum, adam")])
def test_bad_fields_are_one_line_errors(raw, message):
    with pytest.raises(InputError, match=message):
        parse_metadata(raw, source="s.json")


def test_reading_a_file_with_bad_metadata_names_the_file_and_field(residual, tmp_path):
    path = tmp_path / "s.json"
    write_schedule(plain_schedule(residual), residual, path)
    doc = json.loads(path.read_text())
    doc["metadata"]["budget_activation_bytes"] = "a lot"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleFileError, match=r"s\.json: metadata\.budget_activation_bytes "
                                                r"= 'a lot'.*\[bad_metadata\]"):
        read_schedule(path, residual)


def test_disagreements_name_each_recorded_figure_that_differs():
    meta = parse_metadata({"resident_bytes": 0, "budget_bytes": 10, "deadline_s": 1.0,
                           "board": "nrf52840"})
    lines = disagreements(meta, {"resident_bytes": 5, "budget_bytes": 10,
                                 "deadline_s": 1.0 + 1e-15, "board": "rpi4"})
    assert len(lines) == 2
    assert "board = 'nrf52840', poetsim uses 'rpi4'" in lines[0]
    assert "resident_bytes = 0, poetsim uses 5" in lines[1]
