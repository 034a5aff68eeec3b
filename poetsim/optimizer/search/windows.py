"""Neighbourhood searches on the built MILP: the window search (re-optimize windows of
stages with everything else fixed to the incumbent) and the remat neighbourhood (the
integrated model with recomputation limited to a remat-only plan's), both taking SCIP's
plan only when it is better and fits."""

from __future__ import annotations

import time

from poetsim import interrupt
from poetsim.optimizer.effort import WorkLimit
from poetsim.optimizer.milp import MilpModel
from poetsim.optimizer.plan import PlanMetrics, StagePlan, evaluate_plan
from poetsim.optimizer.search.problem import Problem
from poetsim.optimizer.search.state import Search

__all__ = ["better_solution", "remat_neighbourhood", "window_search"]


_WINDOWS = 8
#: The least gap a window is solved to (relative to the whole plan's energy).
_WINDOW_MIN_GAP = 1e-3
#: Under deterministic effort the window search makes at most this many passes.
_WINDOW_PASSES = 2
#: Deterministic effort of the remat neighbourhood (:func:`remat_neighbourhood`).
_EFFORT_NEIGHBOURHOOD_SHARE = 0.6


def better_solution(milp: MilpModel, problem: Problem, than: PlanMetrics | None
                    ) -> tuple[StagePlan, PlanMetrics] | None:
    """SCIP's best solution of the model's last search as a plan with its exact metrics,
    when it fits the budget and the deadline and costs less than ``than`` (any plan
    does without it); None otherwise."""
    if milp.model.getNSols() == 0:
        return None
    plan = milp.plan_from_solution(milp.model.getBestSol())
    metrics = evaluate_plan(milp.graph, milp.costs, plan)
    if not metrics.fits(problem.budget_bytes, problem.deadline_s) or (
            than is not None and metrics.energy_j >= than.energy_j * (1 - 1e-9)):
        return None
    return plan, metrics


class _Windows:
    """The state of one window search: the incumbent and how far each window got."""

    def __init__(self, milp: MilpModel, problem: Problem, plan: StagePlan,
                 metrics: PlanMetrics, window_nodes: int | None, work: WorkLimit | None,
                 limits_hit: list[str] | None) -> None:
        self.milp, self.problem, self.plan, self.metrics = milp, problem, plan, metrics
        self.window_nodes, self.work, self.limits_hit = window_nodes, work, limits_hit
        n = milp.n
        self.step = max(1, n // _WINDOWS)
        self.starts = list(range(max(0, n - 2 * self.step), -1, -self.step))
        self.improved = 0
        self.solved_for: dict[int, int] = {}  # window -> count of improvements when solved

    def hit_time(self) -> None:
        if self.limits_hit is not None:
            self.limits_hit.append("time")

    def run_pass(self, pending: list[int], deadline_at: float) -> None:
        """One pass over the ``pending`` windows, until the time runs out."""
        for position, first in enumerate(pending):
            remaining = deadline_at - time.perf_counter()
            if remaining < 0.2:
                self.hit_time()
                break
            if not self.solve_window(first, remaining / (len(pending) - position), remaining):
                self.starts = []
                break

    def solve_window(self, first: int, fair_s: float, remaining: float) -> bool:
        """Re-optimize the window from stage ``first``; False when its share of the effort
        did not even solve its root LP (the other windows, as large, would spend theirs
        the same way)."""
        milp, model = self.milp, self.milp.model
        model.freeTransform()
        milp.fix_outside(self.plan, first, min(milp.n - 1, first + 2 * self.step - 1))
        milp.add_warm_start(self.plan)
        if self.window_nodes is None or self.work is None:
            model.setParam("limits/time", fair_s)
        else:
            model.setParam("limits/time", remaining)
            self.work.set(self.window_nodes)
        with interrupt.solving():
            model.optimize()
        if model.getStatus() == "timelimit" and self.window_nodes is not None:
            self.hit_time()
        better = better_solution(milp, self.problem, self.metrics)
        if better is not None:
            self.plan, self.metrics = better
            self.improved += 1
        if model.getStatus() in ("optimal", "gaplimit", "infeasible"):
            self.solved_for[first] = self.improved
        return not (self.work is not None and self.work.spent and model.getNNodes() <= 1)


def window_search(milp: MilpModel, problem: Problem, plan: StagePlan, metrics: PlanMetrics,
                  *, time_budget: float, gap_limit: float, window_nodes: int | None = None,
                  work: WorkLimit | None = None, limits_hit: list[str] | None = None
                  ) -> tuple[StagePlan, PlanMetrics, int]:
    """Large-neighbourhood search: re-optimize overlapping windows of stages exactly, with
    every decision outside the window fixed to the incumbent's. Each window is a much
    smaller MILP; any better plan becomes the new incumbent (the model is left unfixed, with
    ``gap_limit`` as its gap limit again). The windows run from the last
    stages (where most remat and paging happens) backwards, in passes: a window solved to
    optimality for the current incumbent is done, and the time the easy windows leave over
    goes to the ones that ran out of time, in the next pass.

    With ``window_nodes`` and ``work`` (deterministic effort) each window gets the work of
    that many nodes and the
    search makes at most :data:`_WINDOW_PASSES` passes; ``time_budget`` is then a safety
    cap, and ``limits_hit`` gets ``"time"`` when it ends the search.
    """
    model = milp.model
    # A window's gap is relative to the whole plan's energy, most of it fixed: a tenth of
    # the caller's gap limit keeps the windows from stopping as soon as they start, and a
    # floor keeps a caller's gap of 0 from leaving every window unfinished.
    model.setParam("limits/gap", max(gap_limit / 10, _WINDOW_MIN_GAP))
    search = _Windows(milp, problem, plan, metrics, window_nodes, work, limits_hit)
    deadline_at = time.perf_counter() + time_budget
    passes = 0
    while window_nodes is None or passes < _WINDOW_PASSES:
        passes += 1
        pending = [first for first in search.starts
                   if search.solved_for.get(first) != search.improved]
        if not pending:
            break
        if deadline_at - time.perf_counter() < 0.2:
            search.hit_time()
            break
        search.run_pass(pending, deadline_at)
    model.freeTransform()
    milp.unfix()
    model.setParam("limits/gap", gap_limit)
    if work is not None:
        work.set(None)
    return search.plan, search.metrics, search.improved


def remat_neighbourhood(search: Search, milp: MilpModel) -> None:
    """Search the integrated model with recomputation limited to what
    ``search.remat_guide`` (the remat-only plan without the deadline) recomputes: a
    checkpointing plan that pages a few of its checkpoints to meet the deadline, which the
    greedy plans (evicting tensor by tensor) and the baselines miss. Takes its plan when it
    is better than the search's; the model is left unrestricted. Measured on the MLP at 35 %
    on the nRF52840 with a 1.5x deadline: 17.8 mJ at the root of this search, where the
    greedy start gave 30.5 mJ and the whole search at the default effort 30.7 mJ."""
    guide = search.remat_guide
    if guide is None or not search.formulation.remat:
        return
    model = milp.model
    model.freeTransform()
    for (t, i), var in milp.R.items():
        if not guide.compute[t, i]:
            model.chgVarUb(var, 0.0)
    if search.plan is not None:
        milp.add_warm_start(search.plan)  # accepted only when it fits the restriction
    model.setParam("limits/time", max(0.1, 0.5 * (search.time_limit_s - search.elapsed_s)))
    if search.work is not None:
        search.work.set(search.share(_EFFORT_NEIGHBOURHOOD_SHARE))
    with interrupt.solving():
        model.optimize()
    if model.getStatus() == "timelimit" and search.work is not None:
        search.limits_hit.append("time")
    better = better_solution(milp, search.problem, search.metrics)
    if better is not None:
        search.plan, search.metrics = better
        search.heuristic = search.warm_start = "remat neighbourhood"
    model.freeTransform()
    milp.unfix()
    if search.work is not None:
        search.work.set(None)
    if search.plan is not None:
        milp.add_warm_start(search.plan)
