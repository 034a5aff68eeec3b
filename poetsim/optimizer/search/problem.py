"""The problem one search solves, as one frozen value: the graph, its costs, the
activation budget, the deadline planned against and the storage capacity (instead of
five arguments threaded through every step)."""

from __future__ import annotations

import attrs

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.optimizer.heuristic import add_holds
from poetsim.optimizer.plan import PlanMetrics, StagePlan, evaluate_plan
from poetsim.request import Request

__all__ = ["Problem"]


@attrs.frozen
class Problem:
    """What a plan must meet: ``budget_bytes`` of activations, ``deadline_s`` (None: no
    deadline) and ``storage_capacity_bytes`` (None: unbounded) on ``graph`` with
    ``costs``."""

    graph: TrainingGraph
    costs: OpCosts
    budget_bytes: int
    deadline_s: float | None = None
    storage_capacity_bytes: int | None = None

    @classmethod
    def of(cls, request: Request, deadline_s: float | None) -> Problem:
        """``request``'s problem, planned against ``deadline_s``."""
        return cls(request.graph, request.costs, request.activation_budget_bytes, deadline_s,
                   request.paging_capacity_bytes)

    def fitting(self, plan: StagePlan | None) -> tuple[StagePlan, PlanMetrics] | None:
        """``plan`` with its weight holds taken and its metrics, when it meets the budget,
        the deadline and the storage capacity; None otherwise."""
        if plan is None:
            return None
        metrics = evaluate_plan(self.graph, self.costs, plan)
        if not metrics.fits(self.budget_bytes, self.deadline_s, self.storage_capacity_bytes):
            return None
        return add_holds(self.graph, self.costs, self.budget_bytes, plan, self.deadline_s,
                         self.storage_capacity_bytes, metrics)
