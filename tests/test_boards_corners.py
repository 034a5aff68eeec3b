"""Ranges of board numbers and the corners a schedule is judged at (issue #29 items 3-4)."""

from __future__ import annotations

import json
import re

import pytest
from test_boards import assert_board_error, builtin_doc, write_doc

from poetsim.boards import board_from_dict, board_to_dict, get_board
from poetsim.boards.corners import CORNERS, RANGE_EFFECTS, corner_board, corner_boards
from poetsim.cli.main import main


def test_the_default_board_gives_the_measured_sd_ranges_with_their_sources():
    board = get_board("nrf52840")
    assert board.ranges["storage.read_throughput_bytes_per_s"] == (46_000, 364_000)
    assert board.ranges["storage.write_throughput_bytes_per_s"] == (46_000, 186_500)
    assert board.ranges["storage.idle_power_w"][1] == pytest.approx(0.017 * 3.3)
    ref = board.source_of("storage.read_throughput_bytes_per_s").ref
    assert "greiman/SdFat-beta#36" in ref and "arduino/ArduinoCore-zephyr#91" in ref
    assert "greiman/SdFat#90" in board.source_of("storage.idle_power_w").ref
    # a range survives the round trip through a document and a file
    again = board_from_dict(board_to_dict(board))
    assert dict(again.ranges) == dict(board.ranges)


def test_each_corner_puts_every_range_at_the_end_that_costs_its_figure():
    board = get_board("nrf52840")
    typical, slow, costly = (corner_board(board, c) for c in CORNERS)
    assert typical is board
    s, c = slow.storage, costly.storage
    assert s.read_throughput_bytes_per_s == c.read_throughput_bytes_per_s == 46_000
    assert s.write_throughput_bytes_per_s == 46_000
    # a power costs no time: typical at the slow corner, the highest at the costly one
    assert s.idle_power_w == board.storage.idle_power_w
    assert c.idle_power_w == c.sleep_power_w == pytest.approx(0.0561)
    assert "[slow corner: the min of its range]" in slow.source_of(
        "storage.read_throughput_bytes_per_s").ref
    assert corner_boards(get_board("rpi4")) == {c: get_board("rpi4") for c in CORNERS}
    # every rangeable number has an end that costs energy; time may not depend on it
    assert all(energy in ("min", "max") for _, energy in RANGE_EFFECTS.values())


@pytest.mark.parametrize("change, fragments", [
    (lambda doc: doc["storage"]["read_latency_s"].update(min=0.001, max=0.002),
     ["storage.read_latency_s = 0.0005", "must lie within its range: min = 0.001"]),
    (lambda doc: doc["storage"]["read_latency_s"].update(min=0.0001, max=0.0002),
     ["storage.read_latency_s = 0.0005", "must lie within its range"]),
    (lambda doc: doc["storage"]["block_bytes"].update(min=256, max=512),
     ["storage.block_bytes", "cannot be a range"]),
    (lambda doc: doc["storage"]["read_latency_s"].update(min=0.0001),
     ["missing key 'storage.read_latency_s.max'", "a range needs min and max"]),
    (lambda doc: doc["storage"]["read_latency_s"].update(min="fast", max=0.002),
     ["storage.read_latency_s.min = 'fast'", "must be a number"]),
    # an end that breaks the number's own rule, at the corner that takes it
    (lambda doc: doc["storage"]["read_throughput_bytes_per_s"].update(min=0),
     ["storage.read_throughput_bytes_per_s = 0", "at the slow corner of the board's ranges"]),
    # a range that makes an inconsistent board at a corner: the card's sleep above idle
    (lambda doc: doc["storage"]["sleep_power_w"].update(min=8.25e-4, max=0.5),
     ["sleep_power_w", "at the costly corner of the board's ranges"]),
    # an end no judged corner takes is checked too (#32): the higher throughput, the
    # shorter latency, the lower power
    (lambda doc: doc["storage"]["read_throughput_bytes_per_s"].update(max=float("inf")),
     ["storage.read_throughput_bytes_per_s = inf", "must be finite", "at the best corner"]),
    (lambda doc: doc["storage"]["read_throughput_bytes_per_s"].update(max=9e9),
     ["storage.read_throughput_bytes_per_s = 9000000000.0", "exceeds the wire rate",
      "at the best corner of the board's ranges: every range at the end no judged corner"]),
    (lambda doc: doc["storage"]["read_latency_s"].update(min=-0.001, max=0.002),
     ["storage.read_latency_s = -0.001", "must be >= 0", "at the best corner"]),
])
def test_a_bad_range_is_one_line_naming_the_key_and_the_rule(tmp_path, change, fragments):
    doc = builtin_doc("nrf52840")
    change(doc)
    assert_board_error(write_doc(tmp_path, doc, stem="nrf52840"), *fragments)


def test_simulate_judges_the_headline_at_every_corner(capsys):
    """ResNet-18 int8 full fine-tuning on the nRF52840: PASS as the board file has it, FAIL
    on a card at SdFat's measured 46 KB/s (issue #29: 887 s against the 415 s deadline)."""
    golden = "schedules/poet-resnet18_cifar_full_int8-nrf52840-board.json"
    assert main(["simulate", golden, "--corners", "--json"]) == 0  # the typical corner's
    doc = json.loads(capsys.readouterr().out)
    corners = {c["name"]: c for c in doc["corners"]}
    assert list(corners) == ["typical", "slow", "costly"]
    assert corners["typical"]["verdict"] == doc["verdict"] == "PASS"
    assert corners["typical"]["energy_j"] == doc["energy_j"]
    slow = corners["slow"]
    assert slow["verdict"] == "FAIL" and 850 < slow["makespan_s"] < 920
    assert "exceeds the deadline" in slow["violations"][0]
    assert corners["costly"]["energy_j"] > corners["slow"]["energy_j"] > doc["energy_j"]
    assert main(["simulate", golden, "--corners"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "corners" in x)
    # figures with their units, SI-prefixed like every printed figure
    assert re.search(r"PASS \(typical, [\d.]+ [mk]?J\)", line), line
    assert re.search(r"FAIL at the slow corner \([\d.]+ [mk]?J\)", line), line


def test_a_board_without_ranges_has_one_corner(capsys):
    golden = "schedules/checkpoint_all-mlp-rpi4-late.json"  # rpi4: no ranges; late: FAIL
    assert not get_board("rpi4").ranges
    assert main(["simulate", golden, "--corners"]) == 1
    assert ("FAIL (typical): rpi4 gives no ranges, so every corner is the typical one"
            in capsys.readouterr().out)
    assert main(["simulate", golden, "--corners", "--json"]) == 1
    assert [c["name"] for c in json.loads(capsys.readouterr().out)["corners"]] == ["typical"]


def test_solve_plans_for_a_corner(capsys, tmp_path):
    """The demo's job planned for the costly corner (a card that never idles): its energy
    is that corner's, the file says so, and simulate judges it at every corner. The
    headline job has no schedule at the slow corner: computing every op once already
    takes longer than its 2x deadline there."""
    out = tmp_path / "s.json"
    words = ["--board", "nrf52840", "--ram", "board", "--deadline", "2x", "--json"]
    assert main(["solve", "--model", "ds_cnn_s", "--set", "train_last=3", *words,
                 "--plan-for", "costly", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan_for"] == "costly" and doc["energy_j"] > 0.08  # typical: 17.3 mJ
    assert json.loads(out.read_text())["metadata"]["plan_for"] == "costly"
    assert main(["simulate", str(out), "--corners", "--json"]) == 0
    corners = {c["name"]: c for c in json.loads(capsys.readouterr().out)["corners"]}
    assert corners["costly"]["energy_j"] == pytest.approx(doc["energy_j"], rel=0.01)
    assert main(["solve", "--model", "resnet18_cifar", "--set", "int8=1", "--set",
                 "gradient_bytes=1", "--set", "inplace_update=1", *words[:-1],
                 "--plan-for", "slow"]) == 1
    assert "shorter than computing every op once" in capsys.readouterr().out


def test_compare_judges_every_schedule_at_the_corners():
    from poetsim.compare import compare, format_table
    from poetsim.methods import SolverSettings
    from poetsim.request import resolve_request
    from poetsim.zoo import build_model

    request = resolve_request(build_model("ds_cnn_s", train_last=3), get_board("nrf52840"),
                              ram="board", deadline="2x")
    outcomes = compare(request, settings=SolverSettings(effort=50), methods=["capuchin"],
                       corners=True)
    assert [o.method for o in outcomes] == ["poet", "capuchin"]
    for outcome in outcomes:
        assert [c.corner for c in outcome.corners] == list(CORNERS)
        assert outcome.corners[0].verdict == outcome.verdict
        assert [c["name"] for c in outcome.as_dict()["corners"]] == list(CORNERS)
    assert "typ/slow/costly" in format_table(outcomes).splitlines()[0]
    assert "typ/slow/costly" not in format_table(compare(request, methods=["capuchin"],
                                                         settings=SolverSettings(effort=50)))
