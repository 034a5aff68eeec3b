"""The heuristic plans a search starts from and ends with: the greedy variants, the given
schedules lifted into stage form, the greedy guided by what those keep, the greedy that
follows the relaxation's solution, and the incumbent with its transfers hidden.

Each candidate counts only when it meets the problem (:meth:`Problem.fitting`); of equal
energies the first in a fixed order wins, whatever order they were made in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from poetsim.optimizer.bound import Relaxation
from poetsim.optimizer.heuristic import add_holds, greedy_plan, overlap_transfers, plain_plan
from poetsim.optimizer.lowering import plan_from_schedule
from poetsim.optimizer.milp import Formulation
from poetsim.optimizer.plan import PlanMetrics, StagePlan, drop_idle_keeps
from poetsim.optimizer.search.problem import Problem
from poetsim.optimizer.search.result import method_name
from poetsim.optimizer.search.state import Search
from poetsim.schedule import Schedule

__all__ = ["EFFORT_HEURISTIC_CAP", "HEURISTIC_SHARE", "best_heuristic", "follow_relaxation",
           "greedy_run", "greedy_variants", "overlap_incumbent"]


#: Share of the time limit after which no further greedy variant starts.
HEURISTIC_SHARE = 0.25
#: Under effort, the heuristics and then the bound stop at this share of the time left
#: when the cap binds: the MILP's build and lowering the plan come after them, and each
#: step of theirs (lifting a warm start, one greedy pass) cannot be cut short.
EFFORT_HEURISTIC_CAP = 0.6
#: Work of :func:`overlap_incumbent`, in stages timed: ResNet-18 (137 ops) with 17
#: page-outs needs about 80,000 (0.2 s).
OVERLAP_WORK = 200_000

Best = tuple[StagePlan | None, PlanMetrics | None, str | None]


def greedy_variants(formulation: Formulation, suffix: str, guide: np.ndarray | None
                    ) -> list[tuple]:
    """The greedy variants the formulation allows, as :func:`greedy_run`'s arguments."""
    modes = []
    if formulation.remat and formulation.paging:
        modes.append((True, True))
    if formulation.paging:
        modes.append((False, True))
    if formulation.remat:
        modes.append((True, False))
    return [(suffix, guide, remat, paging, by_time, cascade)
            for remat, paging in modes for by_time in (False, True)
            for cascade in ((False, True) if remat else (False,))]


def greedy_run(problem: Problem, suffix: str, guide: np.ndarray | None, remat: bool,
               paging: bool, by_time: bool, cascade: bool, **leaving: Any
               ) -> tuple[str, StagePlan | None]:
    """One greedy variant, named, and its plan (None when it finds none); ``leaving``:
    :func:`greedy_plan`'s ``leave``, ``write`` and ``stop_at``."""
    name = (f"greedy-{method_name(remat, paging)}{'-time' if by_time else ''}"
            f"{'-cascade' if cascade else ''}{suffix}")
    return name, greedy_plan(problem.graph, problem.costs, problem.budget_bytes, remat=remat,
                             paging=paging, by_time=by_time, cascade=cascade,
                             keep_guide=guide, **leaving)


def allowed(plan: StagePlan, formulation: Formulation) -> bool:
    """Whether ``plan`` uses only the mechanisms the formulation allows."""
    if not formulation.remat and int(plan.compute.sum()) > plan.n:
        return False
    return formulation.paging or not (plan.page_out.any() or plan.page_in.any())


class _OutOfTime(Exception):
    """Raised past the stop: no further candidate is made."""


class _Candidates:
    """The cheapest fitting candidate so far, ranked among equal energies."""

    def __init__(self, problem: Problem, stop_at: float | None,
                 limits_hit: list[str] | None) -> None:
        self.problem, self.stop_at, self.limits_hit = problem, stop_at, limits_hit
        self.best: Best = (None, None, None)
        self.rank = math.inf

    def out_of_time(self) -> bool:
        if self.stop_at is None or time.perf_counter() <= self.stop_at:
            return False
        if self.limits_hit is not None:
            self.limits_hit.append("time")
        return True

    def stop_when_out_of_time(self) -> None:
        if self.out_of_time():
            raise _OutOfTime

    def consider(self, rank: float, name: str, plan: StagePlan | None,
                 always: bool = False) -> None:
        if not always and self.out_of_time():  # past the stop, only the first two are judged
            return
        fitting = self.problem.fitting(plan)
        if fitting is None:
            return
        plan, metrics = fitting
        if self.best[1] is None or (metrics.energy_j, rank) < (self.best[1].energy_j,
                                                               self.rank):
            self.best, self.rank = (plan, metrics, name), rank


def best_heuristic(problem: Problem, formulation: Formulation,
                   warm_starts: Sequence[Schedule] = (), stop_at: float | None = None,
                   limits_hit: list[str] | None = None, end_at: float | None = None) -> Best:
    """The cheapest plan that meets budget and deadline among the greedy variants, the
    given schedules lifted into stage form, and the greedy variants guided by each lifted
    schedule's keep decisions (a baseline that drops and recomputes within a stage has no
    stage form within the budget, but what it chose to keep still guides the greedy well).
    Past ``stop_at`` no further candidate is made, and a greedy pass under way gives up
    (the plain plan and the first greedy plan are made past it, so that a loaded machine
    still gets the schedule an idle one would start from, but the first greedy pass gives
    up too at ``end_at``, the end of the whole time limit: a schedule is then not found in
    time). Of equal energies the first in the order plain, lifted schedules, greedy, guided
    greedy wins, whatever order they were made in."""
    pool = _Candidates(problem, stop_at, limits_hit)
    # the cheap candidates first, so that a time limit leaves out the costlier ones
    pool.consider(0, "plain", plain_plan(problem.graph), always=not _past(end_at))
    runs = greedy_variants(formulation, "", None)
    after_lifted = 1 + len(warm_starts)
    # the first greedy plan past the heuristics' share, so that a loaded machine still
    # gets a schedule, but not past the time limit
    first = greedy_run(problem, *runs[0], stop_at=end_at)
    if _past(end_at) and limits_hit is not None:
        limits_hit.append("time")
    pool.consider(after_lifted, *first, always=not _past(end_at))
    try:
        pool.stop_when_out_of_time()
        lifted = _lifted(pool, formulation, warm_starts)
        for number, run in enumerate(runs[1:], start=1):
            pool.stop_when_out_of_time()
            pool.consider(after_lifted + number, *greedy_run(problem, *run, stop_at=stop_at))
        for position, name, plan in lifted:
            guided_from = after_lifted + len(runs) * (1 + position)
            for number, run in enumerate(greedy_variants(formulation, f"-guided-by-{name}",
                                                         plan.keep)):
                pool.stop_when_out_of_time()
                pool.consider(guided_from + number, *greedy_run(problem, *run,
                                                                stop_at=stop_at))
    except _OutOfTime:
        pass
    return pool.best


def _past(instant: float | None) -> bool:
    """Whether the clock has passed ``instant`` (a :func:`time.perf_counter` reading;
    None: never)."""
    return instant is not None and time.perf_counter() > instant


def _lifted(pool: _Candidates, formulation: Formulation, warm_starts: Sequence[Schedule]
            ) -> list[tuple[int, str, StagePlan]]:
    """The given schedules lifted into stage form, each a candidate (its idle keeps
    dropped and its transfers hidden) where the formulation allows it; returns them all
    (position, name, plan), to guide the greedy."""
    graph, costs, budget = pool.problem.graph, pool.problem.costs, pool.problem.budget_bytes
    lifted: list[tuple[int, str, StagePlan]] = []
    for position, schedule in enumerate(warm_starts):
        pool.stop_when_out_of_time()
        plan = plan_from_schedule(graph, schedule)
        if plan is None or pool.out_of_time():
            continue
        name = str(schedule.metadata.get("method", "given schedule"))
        # what the list keeps guides the greedy; the plan itself need not hold it idle
        lifted.append((position, name, plan))
        if allowed(plan, formulation):
            pool.consider(1 + position, name, overlap_transfers(
                graph, costs, budget, drop_idle_keeps(graph, plan)))
    return lifted


def follow_relaxation(search: Search, relaxed: Relaxation) -> None:
    """Take the cheapest of the greedy variants that leave out and write what the
    relaxation's solution does, transfers hidden, when it beats the search's plan: where
    the bound is tight that solution is nearly a real plan (ResNet-18 at 50% on the
    Raspberry Pi 4: it keeps the convolutions' outputs and recomputes each batch norm and
    ReLU, within 1% of the bound, which neither the baselines nor the other greedy
    variants find). Like the heuristics, it stops making candidates past its share of the
    time limit."""
    if relaxed.away is None:
        return
    problem = search.problem
    stop_at = time.perf_counter() + search.time_share_s(HEURISTIC_SHARE,
                                                        EFFORT_HEURISTIC_CAP)
    for run in greedy_variants(search.formulation, "-relaxed", None):
        if time.perf_counter() > stop_at:
            search.limits_hit.append("time")
            return
        name, plan = greedy_run(problem, *run, leave=relaxed.away, write=relaxed.paged,
                                stop_at=stop_at)
        if plan is not None:
            plan = overlap_transfers(problem.graph, problem.costs, problem.budget_bytes, plan,
                                     max_work=OVERLAP_WORK)
        fitting = problem.fitting(plan)
        if fitting is not None and (search.metrics is None
                                    or fitting[1].energy_j < search.metrics.energy_j):
            search.plan, search.metrics = fitting
            search.heuristic = name


def overlap_incumbent(search: Search) -> None:
    """The search's plan with its transfers hidden behind more compute where the budget
    allows (:func:`~poetsim.optimizer.heuristic.overlap_transfers`), when that costs less:
    a plan the search did not prove optimal may still make the CPU wait for a write the
    RAM could have held through, or for a page-in it could have prefetched (the board's
    runtime does both, so without this the plan's prediction is above what it spends).
    Its work is counted (:data:`OVERLAP_WORK` stages timed, about half a second), not
    clocked, so that the result does not depend on the machine; the search leaves it the
    last share of the time limit (:data:`~poetsim.optimizer.search.pipeline.OVERLAP_SHARE`)."""
    problem = search.problem
    budget = problem.budget_bytes
    plan = overlap_transfers(problem.graph, problem.costs, budget, search.plan,
                             max_work=OVERLAP_WORK)
    plan, metrics = add_holds(problem.graph, problem.costs, budget, plan, search.deadline_s,
                              problem.storage_capacity_bytes)
    if metrics.energy_j < search.metrics.energy_j and metrics.fits(  # type: ignore[union-attr]
            budget, search.deadline_s, problem.storage_capacity_bytes):
        search.plan, search.metrics = plan, metrics
