"""Deterministic effort: node and LP-iteration budgets on a SCIP model."""

from __future__ import annotations

import numpy as np
from pyscipopt import Model, quicksum

from poetsim.optimizer.effort import LP_ITERATIONS_PER_NODE, WorkLimit


def _hard_lp_model(size: int = 300, seed: int = 3) -> Model:
    """A covering LP that needs far more than 100 simplex iterations."""
    rng = np.random.default_rng(seed)
    model = Model("effort")
    model.hideOutput()
    model.setPresolve(0)  # presolve must not solve it before the LP
    model.setHeuristics(3)  # off: the LP iterations are the root LP's
    x = [model.addVar(vtype="C", lb=0, ub=10, obj=float(rng.uniform(1, 2))) for _ in range(size)]
    for _ in range(size):
        picked = rng.choice(size, size=size // 3, replace=False)
        model.addCons(quicksum(float(rng.uniform(0.5, 1.5)) * x[j] for j in picked)
                      >= float(rng.uniform(5, 20)))
    return model


def test_unlimited_search_spends_more_than_one_node_buys():
    model = _hard_lp_model()
    WorkLimit(model).set(None)
    model.optimize()
    assert model.getNLPIterations() > 3 * LP_ITERATIONS_PER_NODE


def test_an_effort_of_one_node_stops_within_its_lp_iterations():
    model = _hard_lp_model()
    limit = WorkLimit(model)
    limit.set(1)
    model.optimize()
    assert model.getNLPIterations() <= LP_ITERATIONS_PER_NODE
    assert model.getStatus() != "optimal"


def test_the_limit_is_set_again_for_each_solve_and_can_be_lifted():
    model = _hard_lp_model()
    limit = WorkLimit(model)
    limit.set(1)
    model.optimize()
    stopped = model.getNLPIterations()
    model.freeTransform()
    limit.set(None)
    model.optimize()
    assert model.getStatus() == "optimal" and not limit.spent
    assert model.getNLPIterations() > stopped


def test_the_same_effort_does_the_same_work():
    spent = []
    for _ in range(2):
        model = _hard_lp_model()
        WorkLimit(model).set(3)
        model.optimize()
        spent.append((model.getNLPIterations(), model.getNTotalNodes(), model.getPrimalbound()))
    assert spent[0] == spent[1]
