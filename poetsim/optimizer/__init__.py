"""The POET optimizer: stage plans, a greedy starting point, the MILP in SCIP, and solving.

* :mod:`poetsim.optimizer.plan`: decision matrices, their exact accounting, lowering to a
  :class:`~poetsim.schedule.Schedule`;
* :mod:`poetsim.optimizer.heuristic`: the greedy plan that warm-starts SCIP;
* :mod:`poetsim.optimizer.milp`: the formulation, one module per family of rows;
* :mod:`poetsim.optimizer.search`: a resolved request in, diagnostics and honest status out
  (:func:`solve`, also importable as :mod:`poetsim.optimizer.solve`).
"""

from poetsim.optimizer.heuristic import greedy_plan, plain_plan
from poetsim.optimizer.lowering import lower_plan
from poetsim.optimizer.milp import Formulation, build_milp
from poetsim.optimizer.plan import (
    PlanMetrics,
    StagePlan,
    evaluate_plan,
    plan_violations,
)
from poetsim.optimizer.solve import STAGE_MAX_OPS, SolveResult, SolveStatus, solve

__all__ = [
    "STAGE_MAX_OPS", "Formulation", "PlanMetrics", "SolveResult", "SolveStatus", "StagePlan",
    "build_milp", "evaluate_plan", "greedy_plan", "lower_plan", "plain_plan", "plan_violations",
    "solve",
]
