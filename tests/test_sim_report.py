"""The report: units in the keys, JSON, derived figures (poetsim.sim.report)."""

from __future__ import annotations

import json

import pytest
from conftest import make_board
from test_sim_support import PAGE_R, hand

from poetsim.sim import Prediction, simulate

UNITS = ("_j", "_s", "_bytes", "_bytes_per_s", "_pct", "_cycles", "_iterations")
COUNTS = {"graph", "board", "steps", "passed", "reasons", "violations", "deadline_met",
          "peak_step", "peak_op", "peak_action", "ram_overflow", "layout_from_schedule",
          "residency_s", "transitions",
          "wakeups", "bus_utilisation", "bus_bandwidth_utilisation", "flash_erases",
          "flash_max_erase_count", "flash_sectors_used", "computes", "recomputes",
          "page_ins", "page_outs", "frees", "events", "prediction", "transfers", "seed",
          "bytes_read", "bytes_written", "bytes_paged_in", "bytes_paged_out", "bus_bytes"}


def test_as_dict_is_json_ready_with_units_in_the_keys(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R, predicted_energy_j=1e-3))
    data = report.as_dict()
    json.dumps(data)
    for key in data:
        assert key in COUNTS or key.endswith(UNITS), key
    for key in ("energy_j", "peak_ram_bytes", "makespan_s", "stall_s", "budget_bytes",
                "storage_wear_bytes", "storage_lifetime_iterations"):
        assert key in data
    assert data["transfers"][0]["kind"] == "page_out"
    assert "transfers" not in report.as_dict(transfers=False)
    assert data["prediction"]["energy_diff_pct"] == pytest.approx(
        report.prediction.energy_diff_pct)


def test_derived_figures(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R))
    assert report.bus_utilisation == pytest.approx(report.bus_busy_s / report.makespan_s)
    # one 512 B write and one 512 B read over a 100 MB/s bus
    assert report.bus_bytes == 1024
    assert report.bus_bandwidth_utilisation == pytest.approx(
        1024 / (1e8 * report.makespan_s))
    assert report.bytes_read == report.bytes_written == 512
    assert report.bytes_paged_in == report.bytes_paged_out == 16
    assert report.stalls == (report.transfers[1],)
    assert report.transfers[1].start_delay_s == pytest.approx(
        report.transfers[1].started_s - report.transfers[1].planned_start_s)


def test_prediction_percentages():
    p = Prediction(2.0, 2.2, 1.0, 0.5, 100, 100)
    assert p.energy_diff_pct == pytest.approx(10.0)
    assert p.time_diff_pct == pytest.approx(-50.0)
    assert p.peak_diff_pct == 0.0
    missing = Prediction(None, 1.0, 0.0, 1.0, None, 5)
    assert missing.energy_diff_pct is None and missing.peak_diff_pct is None
    assert missing.time_diff_pct is None  # 0 predicted, nonzero simulated
