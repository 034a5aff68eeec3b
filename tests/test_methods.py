"""poetsim.methods: every method by name, on a resolved request."""

from __future__ import annotations

import time

import pytest
from conftest import paper_request
from test_baselines_program import _long_chain

from poetsim.baselines import BASELINES
from poetsim.boards import get_board
from poetsim.errors import InputError
from poetsim.methods import (
    METHODS,
    SOLVER_METHODS,
    MethodStatus,
    SolverSettings,
    produce,
    seeded_solve,
)
from poetsim.zoo import build_model


def test_methods_are_poet_the_milp_ablations_and_every_heuristic():
    assert METHODS[0] == "poet"
    assert set(METHODS) == {"poet", *SOLVER_METHODS, *BASELINES}
    assert len(METHODS) == len(set(METHODS))


@pytest.mark.parametrize("method", ["checkmate", "paging_only"])
def test_milp_ablations_answer_with_the_solvers_status(method):
    request = paper_request(build_model("mlp", layers=3), get_board("nrf52840"), "70%")
    made = produce(request, method, SolverSettings(time_limit_s=2))
    assert made.status in (MethodStatus.OPTIMAL, MethodStatus.FEASIBLE)
    steps = made.schedule.steps
    if method == "checkmate":
        assert not made.schedule.page_outs
    else:
        assert made.schedule.recomputations() == 0 and steps
    assert made.schedule.metadata["method"] == method


@pytest.mark.parametrize("settings, message", [
    ({"time_limit_s": float("nan")}, "time_limit_s = nan"), ({"time_limit_s": 0}, "(0, 1e6]"),
    ({"seed": -1}, "seed = -1"), ({"gap_limit": 1.0}, "gap_limit = 1.0"),
    ({"threads": 0}, "threads = 0")])
def test_solver_settings_are_checked(settings, message):
    with pytest.raises(InputError, match=message.replace("(", "\\(").replace("]", "\\]")):
        SolverSettings(**settings)


def test_a_failing_warm_start_is_skipped_with_a_warning(monkeypatch):
    import poetsim.methods as methods
    from poetsim.errors import PoetsimWarning

    def broken(*_a, **_k):
        raise AssertionError("revolve assumed a chain")

    broken.__name__ = "revolve"
    monkeypatch.setattr(methods, "FAST_BASELINES", (broken, *methods.FAST_BASELINES[:1]))
    request = paper_request(build_model("mlp", layers=3), get_board("nrf52840"), "70%")
    with pytest.warns(PoetsimWarning, match="warm start revolve skipped: AssertionError"):
        result = methods.seeded_solve(request, SolverSettings(time_limit_s=1))
    assert result.schedule is not None


def test_dtr_failing_at_the_budget_is_tried_at_smaller_ones(monkeypatch):
    """DTR is not monotone in the budget: when it finds no schedule within the request's,
    the warm starts try it at smaller budgets, whose schedules fit the request too."""
    import poetsim.methods as methods
    from poetsim.baselines.base import infeasible

    real = methods.dtr
    asked: list[int] = []
    request = paper_request(build_model("mlp", layers=3), get_board("nrf52840"), "100%")
    budget = request.activation_budget_bytes

    def picky_dtr(graph, board, costs, budget_bytes, **kwargs):
        asked.append(budget_bytes)
        if budget_bytes > 0.88 * budget:
            return infeasible("dtr", "nothing left to evict", budget_bytes, None)
        return real(graph, board, costs, budget_bytes, **kwargs)

    monkeypatch.setattr(methods, "dtr", picky_dtr)
    monkeypatch.setattr(methods, "FAST_BASELINES", (picky_dtr,))
    result = methods.seeded_solve(request, SolverSettings(time_limit_s=2))
    # the first budget where DTR finishes ends the retries: its schedule is a warm start
    assert asked == [budget, int(0.95 * budget), int(0.9 * budget), int(0.85 * budget)]
    assert result.schedule is not None


def test_a_baseline_refusing_a_graph_is_not_applicable(monkeypatch):
    import poetsim.methods as methods
    from poetsim.errors import GraphError

    def refuses(*_a, **_k):
        raise GraphError("needs a chain")

    monkeypatch.setitem(methods.BASELINES, "dtr", refuses)
    request = paper_request(build_model("mlp", layers=3), get_board("nrf52840"), "70%")
    made = produce(request, "dtr")
    assert made.status is MethodStatus.NOT_APPLICABLE and "needs a chain" in made.reason


def test_warm_starts_keep_within_the_time_limit():
    """On a 1,005-op chain POFO alone once ran for minutes before POET began; now the
    warm starts share a fifth of the limit and the solve gets the rest. How far it gets
    depends on the machine's load: a schedule, or none and the limit named (#32 item 3:
    the first greedy plan too gives up at the end of the limit)."""
    request = paper_request(_long_chain(500), get_board("rpi4"), "50%", "1.5x")
    started = time.process_time()  # the CPU it took: a loaded machine leaves it less
    result = seeded_solve(request, SolverSettings(time_limit_s=5))
    assert time.process_time() - started < 5 * 1.1 + 1.5
    assert "time" in result.limits_hit
    assert result.schedule is not None or (result.status is MethodStatus.NO_SOLUTION
                                           and "a longer time limit may find one"
                                           in result.message)


def test_searches_are_deterministic_by_default_and_an_effort_of_zero_is_the_clock_alone():
    from poetsim.methods import DEFAULT_EFFORT

    assert SolverSettings().effort == DEFAULT_EFFORT
    assert SolverSettings(effort=0).effort is None and SolverSettings(effort=None).effort is None
    with pytest.raises(InputError, match="effort = -1"):
        SolverSettings(effort=-1)
    request = paper_request(build_model("mlp", layers=3, width=32), get_board("rpi4"), "80%")
    assert seeded_solve(request).effort == DEFAULT_EFFORT
    assert seeded_solve(request, SolverSettings(time_limit_s=2, effort=0)).effort is None
