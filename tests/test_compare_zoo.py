"""``poetsim compare`` on every zoo model and every built-in board (issue #4, part 1).

Fast settings: 1 s MILP limits. Every model runs on a paper-profile and a physical board with
POET and the fast baselines; the MLP runs every method on every board; the CLI is exercised
once. The full model x board x method grid with 5 s limits is recorded in
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json

import pytest

from poetsim.baselines import CHAIN_ONLY
from poetsim.boards import get_board
from poetsim.boards.registry import builtin_board_names
from poetsim.compare import compare
from poetsim.runs import METHODS
from poetsim.zoo import build_model, model_names

FAST = ["checkpoint_all", "chen_sqrt_n", "chen_greedy", "revolve", "capuchin", "dtr", "pofo"]


def _check(rows, methods):
    assert [r.method for r in rows] == ["poet", *methods]
    for r in rows:
        if r.status == "not_applicable":
            assert r.method in CHAIN_ONLY and r.energy_j is None and not r.feasible
        if r.feasible:
            assert r.energy_j > 0 and r.makespan_s > 0 and r.energy_overhead is not None
            assert r.budget_ok and r.deadline_ok
        if r.energy_j is None:
            assert not r.feasible and r.reason
    poet = rows[0]
    assert poet.status in ("ok", "infeasible"), poet.reason


@pytest.mark.slow
@pytest.mark.parametrize("board", ["poet_nrf52840", "rpi4"])
@pytest.mark.parametrize("model", model_names())
def test_compare_every_model(model, board):
    rows = compare(build_model(model), get_board(board), ram="70%", deadline="2x",
                   time_limit_s=1.0, methods=FAST)
    _check(rows, FAST)
    # at 70% of the plain peak every model has a schedule (the largest op needs <= 62%)
    assert rows[0].feasible, rows[0].reason


@pytest.mark.parametrize("board", builtin_board_names())
def test_compare_every_board_every_method(board):
    rows = compare(build_model("mlp", layers=4), get_board(board), ram="60%", deadline="2x",
                   time_limit_s=1.0)
    _check(rows, list(METHODS[1:]))


def test_compare_cli_json(capsys):
    from poetsim.cli.main import main

    status = main(["compare", "--model", "transformer_block", "--board", "poet_rpi4",
                   "--ram", "70%", "--time-limit", "1", "--json"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    text = json.dumps(out)
    for method in METHODS:
        assert method in text
