"""Paging only: POET's MILP with rematerialization switched off (the paper's ablation).

:func:`poetsim.optimizer.solve` with ``remat=False``: every op runs exactly once, and
activations that do not fit are paged out to storage and back, at least energy. Solved
with SCIP within ``time_limit_s``; the deadline, if any, is enforced by the solver.
"""

from __future__ import annotations

from poetsim.baselines._solver import solver_baseline
from poetsim.baselines.base import BaselineResult
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph

__all__ = ["paging_only"]


def paging_only(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int,
                *, deadline_s: float | None = None, time_limit_s: float = 30.0,
                gap_limit: float = 0.0, seed: int = 0) -> BaselineResult:
    """``solve(..., remat=False)`` at ``budget_bytes`` of activation RAM."""
    return solver_baseline("paging_only", graph, board, costs, budget_bytes,
                           deadline_s=deadline_s, time_limit_s=time_limit_s,
                           gap_limit=gap_limit, seed=seed, remat=False, paging=True)
