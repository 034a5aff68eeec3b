"""``poetsim compare`` on every zoo model and every built-in board (issue #4, part 1).

Fast settings: 1 s limits, hard since #32 (a method that runs out says so). Every model
runs on a paper-profile and a physical board with
POET and the fast baselines (paper accounting, as the paper's figures; and physical
accounting, where an MCU board refuses every model with its reason); the MLP runs every
method on every board; the CLI is exercised once. The full model x board x method grid with
5 s limits is recorded in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json

import pytest

from poetsim.baselines import CHAIN_ONLY
from poetsim.boards import get_board
from poetsim.boards.registry import builtin_board_names
from poetsim.compare import compare
from poetsim.graph.graph import resident_memory
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.methods import METHODS, MethodStatus, SolverSettings
from poetsim.request import resolve_request
from poetsim.zoo import build_model, model_names

SETTINGS = SolverSettings(time_limit_s=1.0)

FAST = ["checkpoint_all", "chen_sqrt_n", "chen_greedy", "revolve", "capuchin", "dtr", "pofo"]


def _check(rows, methods):
    assert [r.method for r in rows] == ["poet", *methods]
    for r in rows:
        if r.status is MethodStatus.NOT_APPLICABLE:
            assert r.method in CHAIN_ONLY and r.energy_j is None and not r.feasible
        if r.feasible:
            assert r.energy_j > 0 and r.makespan_s > 0 and r.energy_overhead is not None
            assert r.verdict.within_budget and r.verdict.deadline_met
        if r.energy_j is None:
            assert not r.feasible and r.why_not
    poet = rows[0]
    # POET answers with a schedule, or, when its 1 s limit (a hard one for the whole
    # method, #32) runs out first, says so; it never calls a feasible request infeasible,
    # and a schedule the limit left unchecked has no verdict (never PASS)
    assert poet.status is not MethodStatus.NO_SOLUTION or "limit ran out" in poet.reason, \
        poet.reason
    assert not poet.unchecked or (poet.verdict is None and poet.verdict_label == "unchecked"
                                  and "limit ran out" in poet.unchecked)


@pytest.mark.slow
@pytest.mark.parametrize("board", ["poet_nrf52840", "rpi4"])
@pytest.mark.parametrize("model", model_names())
def test_compare_every_model(model, board):
    graph, spec = build_model(model), get_board(board)
    rows = compare(resolve_request(graph, spec, ram="70%", deadline="2x", accounting="paper"),
                   settings=SETTINGS, methods=FAST)
    _check(rows, FAST)
    # at 70% of the plain peak every model has a schedule (the largest op needs <= 62%):
    # POET's, or a baseline's when POET's limit ran out
    assert any(r.feasible for r in rows), [r.why_not for r in rows]
    assert rows[0].feasible or rows[0].status is MethodStatus.NO_SOLUTION or rows[0].unchecked
    physical = resolve_request(graph, spec, ram="70%", deadline="2x")
    if spec.profile.value == "paper":
        # no zoo model trained in full fits this MCU physically (parameters, gradients
        # and the smallest working set): every method says so; where the resident state
        # alone is over the usable RAM, the reason says that
        resident = resident_memory(graph).total_bytes
        assert resident + minimum_ram_bytes(graph)[0] > spec.ram.usable_bytes
        rows = compare(physical, settings=SETTINGS, methods=["dtr"])
        assert not any(r.feasible for r in rows)
        if resident > spec.ram.usable_bytes:
            assert all("usable RAM" in r.why_not for r in rows)


@pytest.mark.parametrize("board", builtin_board_names())
def test_compare_every_board_every_method(board):
    request = resolve_request(build_model("mlp", layers=4), get_board(board), ram="60%",
                              deadline="2x", accounting="paper")
    rows = compare(request, settings=SETTINGS)
    _check(rows, list(METHODS[1:]))
    for r in rows:
        if r.verdict is not None:
            fits = r.peak_total_bytes <= get_board(board).ram.usable_bytes
            assert r.verdict.fits_board_ram is fits


def test_compare_cli_json(capsys):
    from poetsim.cli.main import main

    status = main(["compare", "--model", "transformer_block", "--board", "poet_rpi4",
                   "--ram", "70%", "--time-limit", "1", "--json"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    assert [row["method"] for row in out] == list(METHODS)
    for row in out:
        assert row["accounting"] == "physical"
        assert set(row) >= {"verdict", "fits_board_ram", "peak_total_bytes", "board_ram_bytes",
                            "violations"}
        if row["verdict"] == "PASS":
            assert row["fits_board_ram"] and row["peak_total_bytes"] <= row["board_ram_bytes"]
