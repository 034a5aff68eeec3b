"""poetsim.compare: every method at one point, simulated, in one table."""

from __future__ import annotations

import pytest
from conftest import make_board

from poetsim.baselines import BASELINES, INFEASIBLE, NOT_APPLICABLE
from poetsim.boards import get_board
from poetsim.compare import compare, format_table, reference_energy_j
from poetsim.graph import resident_memory
from poetsim.optimizer import resolve_budget
from poetsim.runs import RunCache
from poetsim.zoo import build_model


@pytest.fixture(scope="module")
def mlp():
    return build_model("mlp")


def test_compare_on_mlp_returns_a_row_per_method(mlp):
    board = get_board("nrf52840")
    rows = compare(mlp, board, ram="70%", time_limit_s=1)
    assert [r.method for r in rows] == ["poet", *BASELINES]
    by_name = {r.method: r for r in rows}
    assert by_name["poet"].feasible
    assert not by_name["checkpoint_all"].feasible
    assert by_name["checkpoint_all"].status == INFEASIBLE and by_name["checkpoint_all"].reason
    for row in rows:
        if row.feasible:
            assert row.budget_ok and row.deadline_ok
            assert row.energy_j > 0 and row.makespan_s > 0 and row.energy_overhead is not None
            assert row.peak_ram_bytes <= (resolve_budget(mlp, "70%").activation_bytes
                                          + resident_memory(mlp).total_bytes)
        else:
            assert row.reason
    # every remat-only method pays for recomputation over checkpoint-all's energy
    assert by_name["chen_greedy"].energy_overhead > 0
    text = format_table(rows)
    assert len(text.splitlines()) == len(rows) + 1


def test_compare_marks_chain_only_methods_not_applicable(residual):
    board = make_board()
    rows = compare(residual, board, ram="100%", time_limit_s=1,
                   methods=["checkpoint_all", "revolve", "pofo"])
    by_name = {r.method: r for r in rows}
    assert by_name["checkpoint_all"].feasible
    assert by_name["checkpoint_all"].energy_overhead == pytest.approx(0.0, abs=1e-9)
    assert by_name["checkpoint_all"].energy_j == pytest.approx(
        reference_energy_j(residual, board))
    for method in ("revolve", "pofo"):
        assert by_name[method].status == NOT_APPLICABLE and not by_name[method].feasible


def test_compare_with_a_cache_gives_the_same_rows_twice(mlp, tmp_path):
    board = get_board("nrf52840")
    cache = RunCache(tmp_path)
    methods = ["dtr", "checkmate"]
    first = compare(mlp, board, ram="60%", time_limit_s=1, methods=methods, cache=cache)
    assert cache.hits == 0 and cache.misses == 3
    second = compare(mlp, board, ram="60%", time_limit_s=1, methods=methods, cache=cache)
    assert cache.hits == 3
    assert first == second
