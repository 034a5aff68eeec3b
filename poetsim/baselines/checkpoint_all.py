"""Checkpoint-all: PyTorch's default. Every op once, every tensor kept until its last reader.

No rematerialization and no paging: the plain schedule
(:func:`poetsim.schedule.plain_schedule`). Infeasible when its peak (the plain peak,
:func:`poetsim.graph.plain_peak`) exceeds the budget.
"""

from __future__ import annotations

from poetsim.baselines.base import BaselineResult, check_budget, costs_for, finish
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.schedule import plain_schedule

__all__ = ["checkpoint_all"]

METHOD = "checkpoint_all"


def checkpoint_all(graph: TrainingGraph, board: Board, costs: OpCosts | None,
                   budget_bytes: int, *, deadline_s: float | None = None) -> BaselineResult:
    """The plain schedule, or ``infeasible`` when its peak is over ``budget_bytes``."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    return finish(METHOD, graph, board, costs, budget_bytes, plain_schedule(graph),
                  deadline_s=deadline_s)
