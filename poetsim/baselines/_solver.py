"""Running the POET optimizer restricted to one technique (Checkmate, paging-only)."""

from __future__ import annotations

from poetsim.baselines.base import BaselineResult, check_budget, costs_for, finish, infeasible
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.optimizer.solve import solve

__all__ = ["solver_baseline"]


def solver_baseline(method: str, graph: TrainingGraph, board: Board, costs: OpCosts | None,
                    budget_bytes: int, *, deadline_s: float | None, time_limit_s: float,
                    remat: bool, paging: bool, gap_limit: float = 0.0,
                    seed: int = 0) -> BaselineResult:
    """:func:`poetsim.optimizer.solve` with one technique switched off.

    The solver computes its own costs (``op_costs(graph, board)``); ``costs`` is used for
    the predicted figures only, like every other baseline's.
    """
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    result = solve(graph, board, ram=budget_bytes, deadline=deadline_s, remat=remat,
                   paging=paging, time_limit_s=time_limit_s, gap_limit=gap_limit, seed=seed)
    details = {"solver_status": result.status.value, "solver_message": result.message,
               "objective_j": result.objective_j, "bound_j": result.bound_j, "gap": result.gap,
               "solve_time_s": result.build_time_s + result.solve_time_s,
               "time_limit_s": time_limit_s}
    if result.schedule is None:
        return infeasible(method, result.message, budget_bytes, deadline_s, details)
    return finish(method, graph, board, costs, budget_bytes, result.schedule,
                  deadline_s=deadline_s, details=details,
                  metadata={"solver_status": result.status.value, "gap": result.gap,
                            "bound_j": result.bound_j})
