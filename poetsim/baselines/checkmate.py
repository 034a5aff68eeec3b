"""Checkmate (Jain et al., MLSys 2020): optimal rematerialization, no paging.

POET's own MILP (:func:`poetsim.optimizer.solve`) with paging switched off, minimising
energy (Checkmate minimises compute time; on a board whose compute energy is
time x active power the two agree, and the data input, a storage read, is the only op that
differs). Solved with SCIP within ``time_limit_s``; the status says whether optimality was
proven (``details["solver_status"]``). The deadline, if any, is enforced by the solver.
"""

from __future__ import annotations

from poetsim.baselines._solver import solver_baseline
from poetsim.baselines.base import BaselineResult
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph

__all__ = ["checkmate"]


def checkmate(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
              deadline_s: float | None = None, time_limit_s: float = 30.0,
              gap_limit: float = 0.0, seed: int = 0) -> BaselineResult:
    """``solve(..., paging=False)`` at ``budget_bytes`` of activation RAM."""
    return solver_baseline("checkmate", graph, board, costs, budget_bytes,
                           deadline_s=deadline_s, time_limit_s=time_limit_s,
                           gap_limit=gap_limit, seed=seed, remat=True, paging=False)
