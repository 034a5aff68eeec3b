"""One solve as it moves through its steps (:class:`Search`): the request, the settings,
the best plan so far with the lower bound it is measured against, and the shares of time
and effort each step may take."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs

from poetsim.optimizer.effort import WorkLimit
from poetsim.optimizer.milp import Formulation
from poetsim.optimizer.plan import PlanMetrics, StagePlan
from poetsim.optimizer.search.finish import finish
from poetsim.optimizer.search.problem import Problem
from poetsim.optimizer.search.result import SAME_ENERGY, SolveResult, SolveStatus, method_name
from poetsim.request import Request
from poetsim.schedule import Schedule

__all__ = ["Search"]


@attrs.define
class Search:
    """One solve as it moves through its steps: the request, the settings, and the best
    plan so far with the lower bound it is measured against."""

    request: Request
    formulation: Formulation
    deadline_s: float | None
    time_limit_s: float
    gap_limit: float
    threads: int
    seed: int
    progress: Callable[[dict[str, float]], None] | None
    warm_starts: tuple[Schedule, ...]
    effort: int | None = None
    started: float = attrs.field(factory=time.perf_counter)
    limits_hit: list[str] = attrs.field(factory=list)
    plan: StagePlan | None = None
    metrics: PlanMetrics | None = None
    heuristic: str | None = None
    lower_j: float = 0.0
    build_time_s: float = 0.0
    warm_start: str | None = None
    #: the MILP's work limit under deterministic effort (set when the MILP is built)
    work: WorkLimit | None = None
    #: the remat-only plan without the deadline, when under it remat alone found none: its
    #: recomputations bound :func:`~poetsim.optimizer.search.windows.remat_neighbourhood`
    remat_guide: StagePlan | None = None

    @property
    def problem(self) -> Problem:
        """The request's problem under the deadline this search plans against."""
        return Problem.of(self.request, self.deadline_s)

    @property
    def restricted(self) -> bool:
        return self.formulation.restricted

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def base(self) -> dict[str, Any]:
        """The fields every :class:`SolveResult` of this search shares."""
        return {"request": self.request,
                "method": method_name(self.formulation.remat, self.formulation.paging),
                "restricted": self.restricted, "deadline_s": self.deadline_s,
                "effort": self.effort, "limits_hit": tuple(sorted(set(self.limits_hit)))}

    def answer(self, status: SolveStatus, message: str, **fields: Any) -> SolveResult:
        """A result without a schedule."""
        return SolveResult(status, message, **self.base, **fields)

    def share(self, fraction: float) -> int | None:
        """``fraction`` of the effort in nodes (at least 1), or None without an effort."""
        return None if self.effort is None else max(1, int(self.effort * fraction))

    def time_share_s(self, fraction: float, of_left: float = 1.0) -> float:
        """Seconds a step may take: ``fraction`` of the time limit; under deterministic
        effort the step is bounded by its share of the effort and the time left (``of_left``
        of it: what the steps after it need when the cap binds) is only a safety cap, so
        that a busy machine does not change the result."""
        if self.effort is None:
            return fraction * self.time_limit_s
        return max(0.1, of_left * (self.time_limit_s - self.elapsed_s))

    def within_gap(self) -> bool:
        return (self.metrics is not None and self.metrics.energy_j * (1 - self.gap_limit)
                <= self.lower_j * (1 + SAME_ENERGY))

    def finish_without_milp(self) -> SolveResult:
        return finish(self.base, self.plan, self.metrics, self.restricted, bound=self.lower_j,
                      scip_status="gaplimit", time_limit_s=self.time_limit_s,
                      timing={"binaries": 0, "build_time_s": 0.0,
                              "solve_time_s": self.elapsed_s, "warm_start": self.heuristic})
