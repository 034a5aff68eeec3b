"""The paper experiments' smoke run (benchmarks/experiments, issue #4): files, columns, claims."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

# benchmarks/ is a package at the repository root, not part of the installed poetsim
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.experiments import (
    fig3_energy_vs_ram,
    fig4_deadlines,
    fig5_capuchin,
    run_all,
    table3_pofo,
)
from benchmarks.experiments.common import COLUMNS, markdown_table, status_cell

EXPERIMENTS = (fig3_energy_vs_ram, fig4_deadlines, fig5_capuchin, table3_pofo)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    summary = run_all.run("smoke", out, out / "cache", jobs=2)
    return out, summary


def _rows(out, name):
    with (out / name / "data.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_every_experiment_writes_csv_plot_and_table(smoke):
    out, summary = smoke
    for exp in EXPERIMENTS:
        folder = out / exp.NAME
        for name in ("data.csv", "plot.png", "table.md"):
            path = folder / name
            assert path.is_file() and path.stat().st_size > 0, path
        assert (folder / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (folder / "table.md").read_text().startswith("# ")
    assert (out / "run_all_smoke.md").is_file()
    assert summary["points"] > 0 and summary["method_runs"] >= summary["points"]


def test_csv_has_units_in_columns_and_positive_simulated_energies(smoke):
    out, _ = smoke
    for exp in EXPERIMENTS:
        rows = _rows(out, exp.NAME)
        assert rows, exp.NAME
        assert tuple(rows[0]) == COLUMNS
        with_energy = [r for r in rows if r["energy_j"]]
        assert with_energy, exp.NAME
        for r in with_energy:
            assert float(r["energy_j"]) > 0
            assert float(r["makespan_s"]) > 0
            assert int(r["peak_ram_bytes"]) > 0
            # the breakdown by kind adds up to the simulated total
            parts = sum(float(r[f"{k}_energy_j"]) for k in
                        ("compute", "recompute", "page_in", "page_out", "idle", "stall",
                         "wakeup"))
            assert parts == pytest.approx(float(r["energy_j"]), rel=1e-6)
        for r in rows:
            if r["status"] in ("not_applicable", "infeasible", "no_solution"):
                assert r["energy_j"] == "" and r["feasible"] == "False"


def test_poet_uses_no_more_energy_than_one_technique_alone(smoke):
    """Fig. 4 smoke: at each point POET's simulated energy <= paging-only's and remat-only's
    (1% tolerance for the simulator's deviation from the optimizer's prediction)."""
    out, _ = smoke
    rows = _rows(out, fig4_deadlines.NAME)
    points = {(r["board"], r["deadline"]) for r in rows}
    compared = 0
    for point in points:
        cell = {r["method"]: r for r in rows if (r["board"], r["deadline"]) == point}
        poet = cell["poet"]
        assert poet["feasible"] == "True", point
        for other in ("paging_only", "checkmate"):
            if cell[other]["feasible"] == "True":
                assert float(poet["energy_j"]) <= 1.01 * float(cell[other]["energy_j"]), point
                compared += 1
    assert compared >= 2


def test_chain_only_methods_are_absent_not_zero(smoke):
    out, _ = smoke
    for r in _rows(out, fig3_energy_vs_ram.NAME):
        if r["method"] in ("revolve", "pofo") and r["status"] == "not_applicable":
            assert r["energy_j"] == ""


def test_markdown_helpers():
    assert markdown_table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert status_cell({"status": "not_applicable", "energy_j": None}) == "n/a"
    assert status_cell({"status": "infeasible", "energy_j": None}) == "infeasible"
    assert status_cell({"status": "ok", "energy_j": 1.0, "energy_overhead": 0.25,
                        "budget_ok": True, "deadline_ok": False,
                        "gap_limited": False}) == "+25.0% (late)"
