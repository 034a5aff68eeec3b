"""poetsim.runs: one method at one point, and the run cache."""

from __future__ import annotations

import json

import attrs
import pytest

from poetsim.boards import get_board
from poetsim.errors import InputError
from poetsim.runs import METHODS, MethodRun, RunCache, run_key, run_method, simulate_run
from poetsim.schedule import check_schedule
from poetsim.zoo import build_model


@pytest.fixture(scope="module")
def mlp():
    return build_model("mlp", layers=3)


@pytest.fixture(scope="module")
def board():
    return get_board("nrf52840")


def test_methods_are_poet_then_every_baseline():
    assert METHODS[0] == "poet" and "dtr" in METHODS and "checkmate" in METHODS


@pytest.mark.parametrize("method", METHODS)
def test_every_method_returns_a_checked_schedule_or_a_reason(mlp, board, method):
    run = run_method(mlp, board, method, ram="70%", deadline="2x", time_limit_s=1)
    assert run.method == method and not run.cached
    if run.schedule is None:
        assert run.reason and run.energy_j is None
        assert simulate_run(mlp, board, run) is None
        return
    check = check_schedule(mlp, run.schedule, budget_bytes=run.budget_activation_bytes)
    assert check.valid and check.peak_ram_bytes == run.peak_ram_bytes
    report = simulate_run(mlp, board, run)
    assert report.peak_ram_bytes <= report.budget_bytes
    assert report.deadline_s == run.deadline_s


def test_unknown_method_is_refused(mlp, board):
    with pytest.raises(InputError, match="method = 'gurobi'"):
        run_method(mlp, board, "gurobi", ram="70%")


def test_cache_returns_the_same_run_and_schedule(mlp, board, tmp_path):
    cache = RunCache(tmp_path)
    first = run_method(mlp, board, "poet", ram="60%", time_limit_s=2, cache=cache)
    again = run_method(mlp, board, "poet", ram="60%", time_limit_s=2, cache=cache)
    assert (cache.misses, cache.hits) == (1, 1)
    assert again.cached and again.schedule.steps == first.schedule.steps
    assert attrs.evolve(again, cached=False) == first


def test_cache_key_changes_with_every_input_that_matters(mlp, board):
    base = dict(method="poet", budget_activation_bytes=1000, deadline_s=1.0,
                solver_settings={"time_limit_s": 5})
    key = run_key(mlp, board, **base)
    faster = attrs.evolve(board, storage=attrs.evolve(
        board.storage, read_throughput_bytes_per_s=2 * board.storage.read_throughput_bytes_per_s))
    assert run_key(mlp, faster, **base) != key
    assert run_key(build_model("mlp", layers=4), board, **base) != key
    for field, value in (("method", "dtr"), ("budget_activation_bytes", 999),
                         ("deadline_s", 1.0000001), ("solver_settings", {"time_limit_s": 6})):
        assert run_key(mlp, board, **{**base, field: value}) != key
    # a renamed but otherwise identical board is the same point
    assert run_key(mlp, attrs.evolve(board, name="copy", title="copy"), **base) == key


def test_a_corrupt_cache_entry_is_a_miss_and_is_replaced(mlp, board, tmp_path):
    cache = RunCache(tmp_path)
    run_method(mlp, board, "dtr", ram="60%", cache=cache)
    (entry,) = tmp_path.glob("*/*.json")
    entry.write_text("{not json")
    run = run_method(mlp, board, "dtr", ram="60%", cache=cache)
    assert not run.cached and cache.misses == 2
    assert json.loads(entry.read_text())["run"]["method"] == "dtr"


def test_summary_has_units_and_no_steps(mlp, board):
    run = run_method(mlp, board, "checkpoint_all", ram="100%")
    summary = run.summary()
    assert "schedule" not in summary and summary["energy_j"] > 0
    assert isinstance(run, MethodRun) and run.status == "ok"


def test_a_solver_schedule_late_in_simulation_is_solved_again_with_a_tighter_deadline():
    # On the Pi 4 the MILP's fully overlapped transfers stall in simulation; the first POET
    # schedule at 70% / 2x is late by about 6%.
    graph, board = build_model("mlp"), get_board("rpi4")
    run = run_method(graph, board, "poet", ram="70%", deadline="2x", time_limit_s=1)
    assert run.tightenings >= 1
    assert run.solver_deadline_s < run.deadline_s
    report = simulate_run(graph, board, run)
    assert report.makespan_s <= run.deadline_s and report.passed


def test_without_a_deadline_nothing_is_tightened(mlp, board):
    run = run_method(mlp, board, "poet", ram="60%", time_limit_s=1)
    assert run.tightenings == 0 and run.solver_deadline_s is None
