"""poetsim.methods: every method by name, on a resolved request."""

from __future__ import annotations

import pytest
from conftest import paper_request

from poetsim.baselines import BASELINES
from poetsim.boards import get_board
from poetsim.errors import InputError
from poetsim.methods import METHODS, SOLVER_METHODS, MethodStatus, SolverSettings, produce
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
