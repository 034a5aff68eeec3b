"""Solving: heuristics, the relaxation bound, the MILP, honest status.

:func:`solve` is the optimizer's public entry point. It takes a resolved
:class:`~poetsim.request.Request` (budget and deadline already in bytes and seconds),
rules out requests no schedule can meet (and says why in one line), starts SCIP from the
best greedy plan, and returns a :class:`SolveResult` whose status is never better than
what was proven:

* ``optimal``: SCIP proved the schedule optimal for the exact formulation;
* ``feasible``: a schedule with SCIP's bound and the gap (time or gap limit, or a
  restricted formulation, whose result is labelled as such);
* ``infeasible``: proven: no schedule meets the request;
* ``no_solution``: the limit ended the search before any schedule was found.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
from pyscipopt import SCIP_PARAMSETTING

from poetsim import interrupt
from poetsim.costs import OpCosts
from poetsim.errors import BuildTimeout, InputError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.optimizer.bound import Relaxation, relax
from poetsim.optimizer.effort import WorkLimit
from poetsim.optimizer.heuristic import add_holds, greedy_plan, overlap_transfers, plain_plan
from poetsim.optimizer.milp import Formulation, MilpModel, build_milp
from poetsim.optimizer.plan import (
    PlanMetrics,
    StagePlan,
    drop_idle_keeps,
    drop_unread_page_outs,
    evaluate_plan,
    lower_plan,
    plan_from_schedule,
)
from poetsim.optimizer.rounding import RoundingHeuristic
from poetsim.request import Request
from poetsim.schedule import Action, Schedule, check_schedule, plain_schedule
from poetsim.schedule.model import predict

__all__ = ["STAGE_MAX_OPS", "SolveResult", "SolveStatus", "solve"]


#: Graphs with more ops than this are not put in stage form: its n x n decision matrices
#: (125 MB at this size, and the MILP's variables with them) are out of reach; the solve
#: returns the best of the given op-list schedules instead (:func:`_best_op_list`).
STAGE_MAX_OPS = 5000
#: Models larger than this use SCIP's fast presolve.
_FAST_PRESOLVE_BINARIES = 5000
#: Models larger than this first improve the incumbent by a window search, with this share
#: of the time limit.
_WINDOW_SEARCH_BINARIES = 2000
_WINDOW_SEARCH_SHARE = 0.5
_WINDOWS = 8
#: The least gap a window is solved to (relative to the whole plan's energy).
_WINDOW_MIN_GAP = 1e-3
#: Deterministic effort (``effort`` nodes in all): the relaxation bound, each window of
#: the window search and the remat-only seed get these shares of it; the window search
#: makes at most this many passes.
_EFFORT_BOUND_SHARE = 0.2
_EFFORT_WINDOW_SHARE = 0.06
_EFFORT_SEED_SHARE = 0.25
#: Deterministic effort of the remat neighbourhood (:func:`_remat_neighbourhood`).
_EFFORT_NEIGHBOURHOOD_SHARE = 0.6
_WINDOW_PASSES = 2
#: Share of the time limit after which no further greedy variant starts.
_HEURISTIC_SHARE = 0.25
#: Share of the time limit the search leaves for hiding the transfers of its plan
#: (:func:`_overlap_incumbent`).
_OVERLAP_SHARE = 0.05
#: Work of that step, in stages timed: ResNet-18 (137 ops) with 17 page-outs needs about
#: 80,000 (0.2 s).
_OVERLAP_WORK = 200_000
#: Runs of the LP-rounding heuristic per SCIP search under deterministic effort.
_EFFORT_ROUNDING_RUNS = 100
#: Integrated solves with at least this time limit first spend this share of it on the
#: remat-only model, whose plan seeds the integrated search.
_SEED_MIN_TIME_S = 5.0
_SEED_SHARE = 0.25
#: Share of the time limit (at most ``_BOUND_MAX_S``) for the relaxation bound.
_BOUND_SHARE = 0.05
_BOUND_MAX_S = 5.0
#: Relative difference below which a plan's energy counts as equal to a proven lower bound
#: (far below the energy of the cheapest op of any zoo model relative to its iteration).
_SAME_ENERGY = 1e-10


def _window_search(milp: MilpModel, plan: StagePlan, metrics: PlanMetrics, budget: int,
                   deadline_s: float | None,
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
    n = milp.n
    step = max(1, n // _WINDOWS)
    starts = list(range(max(0, n - 2 * step), -1, -step))
    deadline_at = time.perf_counter() + time_budget
    improved = 0
    passes = 0
    solved_for: dict[int, int] = {}  # window -> count of improvements when it was solved
    while window_nodes is None or passes < _WINDOW_PASSES:
        passes += 1
        pending = [first for first in starts if solved_for.get(first) != improved]
        if not pending:
            break
        if deadline_at - time.perf_counter() < 0.2:
            if limits_hit is not None:
                limits_hit.append("time")
            break
        for position, first in enumerate(pending):
            remaining = deadline_at - time.perf_counter()
            if remaining < 0.2:
                if limits_hit is not None:
                    limits_hit.append("time")
                break
            model.freeTransform()
            milp.fix_outside(plan, first, min(n - 1, first + 2 * step - 1))
            milp.add_warm_start(plan)
            if window_nodes is None or work is None:
                model.setParam("limits/time", remaining / (len(pending) - position))
            else:
                model.setParam("limits/time", remaining)
                work.set(window_nodes)
            with interrupt.solving():
                model.optimize()
            if model.getStatus() == "timelimit" and window_nodes is not None \
                    and limits_hit is not None:
                limits_hit.append("time")
            better = _better_solution(milp, budget, deadline_s, metrics)
            if better is not None:
                plan, metrics = better
                improved += 1
            if model.getStatus() in ("optimal", "gaplimit", "infeasible"):
                solved_for[first] = improved
            if work is not None and work.spent and model.getNNodes() <= 1:
                # a window's share of the effort did not even solve its root LP: the other
                # windows, as large, would spend theirs the same way
                starts = []
                break
    model.freeTransform()
    milp.unfix()
    model.setParam("limits/gap", gap_limit)
    if work is not None:
        work.set(None)
    return plan, metrics, improved


class SolveStatus(enum.Enum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"


@attrs.frozen
class SolveResult:
    """Everything a solve produced, with units in the names.

    ``deadline_s`` is the deadline the solver planned against: the request's, or a
    tighter one its caller asked for (the request keeps the user's).
    """

    status: SolveStatus
    message: str
    request: Request = attrs.field(repr=False)
    method: str
    restricted: bool
    deadline_s: float | None
    schedule: Schedule | None = None
    plan: StagePlan | None = attrs.field(default=None, repr=False)
    metrics: PlanMetrics | None = None
    objective_j: float | None = None
    bound_j: float | None = None
    gap: float | None = None
    binaries: int = 0
    build_time_s: float = 0.0
    solve_time_s: float = 0.0
    warm_start: str | None = None
    effort: int | None = None
    limits_hit: tuple[str, ...] = ()

    @property
    def has_schedule(self) -> bool:
        return self.schedule is not None

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (no schedule steps)."""
        m = self.metrics
        r = self.request
        return {
            "status": self.status.value,
            "message": self.message,
            "graph": r.graph.name,
            "board": r.board.name,
            "method": self.method,
            "restricted_formulation": self.restricted,
            **r.metadata(),
            "solver_deadline_s": self.deadline_s,
            "energy_j": m.energy_j if m else None,
            "compute_energy_j": m.compute_energy_j if m else None,
            "pagein_energy_j": m.pagein_energy_j if m else None,
            "pageout_energy_j": m.pageout_energy_j if m else None,
            "time_s": m.time_s if m else None,
            "peak_ram_bytes": m.peak_ram_bytes if m else None,
            "peak_total_bytes": m.peak_ram_bytes + r.resident_bytes if m else None,
            "recomputations": m.recomputations if m else None,
            "page_ins": m.page_ins if m else None,
            "page_outs": m.page_outs if m else None,
            "weight_holds": m.weight_holds if m else None,
            "weight_holds_possible": int((r.costs.hold_owner >= 0).sum()),
            "bound_j": self.bound_j,
            "gap": self.gap,
            "binaries": self.binaries,
            "build_time_s": self.build_time_s,
            "solve_time_s": self.solve_time_s,
            "warm_start": self.warm_start,
            "effort_nodes": self.effort,
            "time_cap_bound": "time" in self.limits_hit,
            "plain_energy_j": r.plain_energy_j,
            "plain_time_s": r.plain_time_s,
            "energy_overhead": (m.energy_j / r.plain_energy_j - 1
                                if m and r.plain_energy_j else None),
        }


def _method(remat: bool, paging: bool) -> str:
    if remat and paging:
        return "poet"
    return "remat-only" if remat else "paging-only"


def _greedy_variants(formulation: Formulation, suffix: str, guide: np.ndarray | None
                     ) -> list[tuple]:
    """The greedy variants the formulation allows, as :func:`_greedy_run`'s arguments."""
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


def _fitting(graph: TrainingGraph, costs: OpCosts, budget: int, deadline: float | None,
             storage_capacity: int | None, plan: StagePlan | None
             ) -> tuple[StagePlan, PlanMetrics] | None:
    """``plan`` with its weight holds taken and its metrics, when it meets the budget,
    the deadline and the storage capacity; None otherwise."""
    if plan is None:
        return None
    metrics = evaluate_plan(graph, costs, plan)
    if not metrics.fits(budget, deadline, storage_capacity):
        return None
    return add_holds(graph, costs, budget, plan, deadline, storage_capacity, metrics)


def _best_heuristic(graph: TrainingGraph, costs: OpCosts, budget: int, deadline: float | None,
                    formulation: Formulation, storage_capacity: int | None = None,
                    warm_starts: Sequence[Schedule] = (), stop_at: float | None = None,
                    limits_hit: list[str] | None = None
                    ) -> tuple[StagePlan | None, PlanMetrics | None, str | None]:
    """The cheapest plan that meets budget and deadline among the greedy variants, the
    given schedules lifted into stage form, and the greedy variants guided by each lifted
    schedule's keep decisions (a baseline that drops and recomputes within a stage has no
    stage form within the budget, but what it chose to keep still guides the greedy well).
    Past ``stop_at`` no further candidate is made, and a greedy pass under way gives up
    (the plain plan and the first greedy plan are always made, so that a loaded machine
    still gets the schedule an idle one would start from). Of equal energies the first in
    the order plain, lifted schedules, greedy, guided greedy wins, whatever order they were
    made in."""
    best: tuple[StagePlan | None, PlanMetrics | None, str | None] = (None, None, None)
    best_rank = math.inf
    count = len(warm_starts)

    def consider(rank: float, name: str, plan: StagePlan | None,
                 always: bool = False) -> None:
        nonlocal best, best_rank
        if not always and out_of_time():  # past the stop, only the first two are judged
            return
        fitting = _fitting(graph, costs, budget, deadline, storage_capacity, plan)
        if fitting is None:
            return
        plan, metrics = fitting
        if best[1] is None or (metrics.energy_j, rank) < (best[1].energy_j, best_rank):
            best, best_rank = (plan, metrics, name), rank

    def out_of_time() -> bool:
        if stop_at is None or time.perf_counter() <= stop_at:
            return False
        if limits_hit is not None:
            limits_hit.append("time")
        return True

    # the cheap candidates first, so that a time limit leaves out the costlier ones
    consider(0, "plain", plain_plan(graph), always=True)
    runs = _greedy_variants(formulation, "", None)
    after_lifted = 1 + count
    # the first greedy plan always, so that a loaded machine still gets a schedule
    consider(after_lifted, *_greedy_run(graph, costs, budget, *runs[0]), always=True)
    if out_of_time():
        return best
    lifted: list[tuple[int, str, StagePlan]] = []
    for position, schedule in enumerate(warm_starts):
        if out_of_time():
            return best
        plan = plan_from_schedule(graph, schedule)
        if plan is None or out_of_time():
            continue
        name = str(schedule.metadata.get("method", "given schedule"))
        # what the list keeps guides the greedy; the plan itself need not hold it idle
        lifted.append((position, name, plan))
        if _allowed(plan, formulation):
            consider(1 + position, name, overlap_transfers(
                graph, costs, budget, drop_idle_keeps(graph, plan)))
    for number, run in enumerate(runs[1:], start=1):
        if out_of_time():
            return best
        consider(after_lifted + number, *_greedy_run(graph, costs, budget, *run,
                                                     stop_at=stop_at))
    for position, name, plan in lifted:
        guided_from = after_lifted + len(runs) * (1 + position)
        for number, run in enumerate(_greedy_variants(formulation, f"-guided-by-{name}",
                                                      plan.keep)):
            if out_of_time():
                return best
            consider(guided_from + number, *_greedy_run(graph, costs, budget, *run,
                                                        stop_at=stop_at))
    return best


def _follow_relaxation(search: _Search, relaxed: Relaxation) -> None:
    """Take the cheapest of the greedy variants that leave out and write what the
    relaxation's solution does, transfers hidden, when it beats the search's plan: where
    the bound is tight that solution is nearly a real plan (ResNet-18 at 50% on the
    Raspberry Pi 4: it keeps the convolutions' outputs and recomputes each batch norm and
    ReLU, within 1% of the bound, which neither the baselines nor the other greedy
    variants find). Like the heuristics, it stops making candidates past its share of the
    time limit."""
    if relaxed.away is None:
        return
    request = search.request
    graph, costs = request.graph, request.costs
    budget = request.activation_budget_bytes
    stop_at = time.perf_counter() + search.time_share_s(_HEURISTIC_SHARE)
    for run in _greedy_variants(search.formulation, "-relaxed", None):
        if time.perf_counter() > stop_at:
            search.limits_hit.append("time")
            return
        name, plan = _greedy_run(graph, costs, budget, *run, leave=relaxed.away,
                                 write=relaxed.paged, stop_at=stop_at)
        if plan is not None:
            plan = overlap_transfers(graph, costs, budget, plan, max_work=_OVERLAP_WORK)
        fitting = _fitting(graph, costs, budget, search.deadline_s,
                           request.paging_capacity_bytes, plan)
        if fitting is not None and (search.metrics is None
                                    or fitting[1].energy_j < search.metrics.energy_j):
            search.plan, search.metrics = fitting
            search.heuristic = name


def _greedy_run(graph: TrainingGraph, costs: OpCosts, budget: int, suffix: str,
                guide: np.ndarray | None, remat: bool, paging: bool, by_time: bool,
                cascade: bool, **leaving: Any) -> tuple[str, StagePlan | None]:
    """One greedy variant, named, and its plan (None when it finds none); ``leaving``:
    :func:`greedy_plan`'s ``leave``, ``write`` and ``stop_at``."""
    name = (f"greedy-{_method(remat, paging)}{'-time' if by_time else ''}"
            f"{'-cascade' if cascade else ''}{suffix}")
    return name, greedy_plan(graph, costs, budget, remat=remat, paging=paging,
                             by_time=by_time, cascade=cascade, keep_guide=guide, **leaving)


def _allowed(plan: StagePlan, formulation: Formulation) -> bool:
    """Whether ``plan`` uses only the mechanisms the formulation allows."""
    if not formulation.remat and int(plan.compute.sum()) > plan.n:
        return False
    return formulation.paging or not (plan.page_out.any() or plan.page_in.any())


def solve(request: Request, *, remat: bool = True, paging: bool = True,
          restricted: bool = False, deadline_s: float | None = None,
          time_limit_s: float = 60.0, gap_limit: float = 0.0, threads: int = 1, seed: int = 0,
          progress: Callable[[dict[str, float]], None] | None = None,
          warm_starts: Sequence[Schedule] = (), effort: int | None = None) -> SolveResult:
    """Find the least-energy schedule of ``request`` (graph, board, budget, deadline).

    ``effort`` bounds the search by deterministic work, SCIP branch-and-bound nodes in all
    (shared between the relaxation bound, the windows, the remat-only seed and the main
    search, with the rounding heuristic run a fixed number of times): the same request
    and options then give the same schedule on any machine under any load, and
    ``time_limit_s`` is only a safety cap, reported in the result when it binds
    (``limits_hit``). Without ``effort`` the search is bounded by ``time_limit_s`` alone.

    ``remat=False`` / ``paging=False`` are the paper's ablations. ``restricted`` selects
    the faster restricted formulation (labelled in the result). ``deadline_s`` plans
    against a deadline tighter than the request's (the schedule's metadata keeps the
    request's). ``warm_starts`` are schedules (a baseline's, say) that, lifted into stage
    form, compete with the greedy plans as the starting point. Never reports ``optimal``
    unless it is proven for the exact formulation.

    The steps, each a function below: refuse what no schedule can meet; start from the
    best heuristic plan, the relaxation bound and the plan the relaxation's solution
    suggests; seed with a remat-only solve; build the
    MILP; improve by a window search, then let SCIP search; conclude what was proven.
    """
    if not (time_limit_s > 0) or not math.isfinite(time_limit_s):
        raise InputError(f"time_limit_s = {time_limit_s!r}: must be a positive number of "
                         "seconds")
    if not (0 <= gap_limit < 1):
        raise InputError(f"gap_limit = {gap_limit!r}: must be in [0, 1)")
    if threads < 1:
        raise InputError(f"threads = {threads!r}: must be at least 1")
    if effort is not None and (isinstance(effort, bool) or not isinstance(effort, int)
                               or effort < 1):
        raise InputError(f"effort = {effort!r}: must be a whole number of nodes >= 1")
    if deadline_s is None:
        deadline_s = request.deadline_s
    elif request.deadline_s is not None and deadline_s > request.deadline_s:
        raise InputError(f"deadline_s = {deadline_s!r}: must not exceed the request's "
                         f"{request.deadline_s!r}")
    search = _Search(request=request,
                     formulation=Formulation(remat=remat, paging=paging, restricted=restricted),
                     deadline_s=deadline_s, time_limit_s=time_limit_s, gap_limit=gap_limit,
                     threads=threads, seed=seed, progress=progress,
                     warm_starts=tuple(warm_starts), effort=effort)
    answer = _refuse_at_once(search)
    if answer is None and len(request.graph) > STAGE_MAX_OPS:
        return _best_op_list(search)
    answer = answer or _start(search)
    if answer is not None:
        return answer
    if search.within_gap():
        return search.finish_without_milp()
    _seed_with_remat_only(search)
    if search.within_gap():
        return search.finish_without_milp()
    milp = _build(search)
    if isinstance(milp, SolveResult):
        return milp
    return _search_and_conclude(search, milp)


@attrs.define
class _Search:
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
    #: recomputations bound :func:`_remat_neighbourhood`
    remat_guide: StagePlan | None = None

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
                "method": _method(self.formulation.remat, self.formulation.paging),
                "restricted": self.restricted, "deadline_s": self.deadline_s,
                "effort": self.effort, "limits_hit": tuple(sorted(set(self.limits_hit)))}

    def answer(self, status: SolveStatus, message: str, **fields: Any) -> SolveResult:
        """A result without a schedule."""
        return SolveResult(status, message, **self.base, **fields)

    def share(self, fraction: float) -> int | None:
        """``fraction`` of the effort in nodes (at least 1), or None without an effort."""
        return None if self.effort is None else max(1, int(self.effort * fraction))

    def time_share_s(self, fraction: float) -> float:
        """Seconds a step may take: ``fraction`` of the time limit; under deterministic
        effort the step is bounded by its share of the effort and the time left is only a
        safety cap, so that a busy machine does not change the result."""
        if self.effort is None:
            return fraction * self.time_limit_s
        return max(0.1, self.time_limit_s - self.elapsed_s)

    def within_gap(self) -> bool:
        return (self.metrics is not None and self.metrics.energy_j * (1 - self.gap_limit)
                <= self.lower_j * (1 + _SAME_ENERGY))

    def finish_without_milp(self) -> SolveResult:
        return _finish(self.base, self.plan, self.metrics, self.restricted, bound=self.lower_j,
                       scip_status="gaplimit", time_limit_s=self.time_limit_s,
                       timing={"binaries": 0, "build_time_s": 0.0,
                               "solve_time_s": self.elapsed_s, "warm_start": self.heuristic})


def _refuse_at_once(search: _Search) -> SolveResult | None:
    """Requests no schedule can meet, each with its one-line reason (or None)."""
    request = search.request
    unfit = request.infeasible_reason
    if unfit is not None:
        return search.answer(SolveStatus.INFEASIBLE, unfit)
    budget = request.activation_budget_bytes
    min_ram, min_op = minimum_ram_bytes(request.graph)
    if budget < min_ram:
        return search.answer(SolveStatus.INFEASIBLE, (
            f"the RAM budget allows {budget} B of activations, but op {min_op!r} "
            f"alone needs {min_ram} B (its inputs, output and workspace at once), the smallest "
            f"activation RAM any schedule can use ({min_ram + request.resident_bytes} B with "
            f"the {request.resident_bytes} B resident)"))
    plain_time = request.plain_time_s
    if search.deadline_s is not None and search.deadline_s < plain_time:
        return search.answer(SolveStatus.INFEASIBLE, (
            f"the deadline {search.deadline_s:.6g} s is shorter than computing every op once "
            f"({plain_time:.6g} s), the shortest possible time"))
    return None


def _op_list_metrics(request: Request, schedule: Schedule, check: Any) -> PlanMetrics:
    """:class:`PlanMetrics` of an op list under the op-list cost model
    (:func:`poetsim.baselines.base.predict`); an op list has no stages (``peak_stage`` -1)."""
    costs = request.costs
    figures = predict(request.graph, costs, schedule)
    ops = {action: [s.op for s in schedule.steps if s.action is action]
           for action in (Action.COMPUTE, Action.PAGE_IN, Action.PAGE_OUT)}
    peak_step = schedule.steps[check.peak_step] if check.peak_step >= 0 else None
    return PlanMetrics(
        energy_j=figures.energy_j, compute_energy_j=figures.compute_energy_j,
        pagein_energy_j=float(costs.pagein_energy_j[ops[Action.PAGE_IN]].sum()),
        pageout_energy_j=float(costs.pageout_energy_j[ops[Action.PAGE_OUT]].sum()),
        wait_energy_j=figures.wait_energy_j, storage_wakeups=figures.storage_wakeups,
        time_s=figures.time_s,
        compute_time_s=float(costs.compute_time_s[ops[Action.COMPUTE]].sum()),
        transfer_time_s=float(costs.pagein_time_s[ops[Action.PAGE_IN]].sum()
                              + costs.pageout_time_s[ops[Action.PAGE_OUT]].sum()),
        peak_ram_bytes=check.peak_ram_bytes, peak_stage=-1,
        peak_op=peak_step.op if peak_step is not None else -1,
        recomputations=check.recomputes, page_ins=check.page_ins, page_outs=check.page_outs,
        weight_holds=schedule.count(Action.HOLD_WEIGHTS),
        peak_storage_bytes=check.peak_storage_bytes)


def _best_op_list(search: _Search) -> SolveResult:
    """For graphs beyond stage form: the least-energy schedule among checkpoint-all and the
    given op lists (the fast baselines' under :func:`poetsim.methods.seeded_solve`) that
    the checker accepts within the budget and storage, that meet the deadline and that use
    only the mechanisms the formulation allows. Its gap is against every op once."""
    request, formulation = search.request, search.formulation
    graph = request.graph
    budget = request.activation_budget_bytes
    best: tuple[Schedule, PlanMetrics, str] | None = None
    for schedule in (plain_schedule(graph), *search.warm_starts):
        check = check_schedule(graph, schedule, budget_bytes=budget,
                               storage_capacity_bytes=request.paging_capacity_bytes)
        if not check.valid or (check.recomputes and not formulation.remat) or (
                check.page_outs and not formulation.paging):
            continue
        metrics = _op_list_metrics(request, schedule, check)
        if search.deadline_s is not None and metrics.time_s > search.deadline_s:
            continue
        if best is None or metrics.energy_j < best[1].energy_j:
            best = (schedule, metrics, str(schedule.metadata.get("method", "checkpoint-all")))
    timing = {"build_time_s": 0.0, "solve_time_s": search.elapsed_s}
    beyond = (f"the graph has {len(graph)} ops, more than the {STAGE_MAX_OPS} the stage "
              "MILP can take")
    if best is None:
        return search.answer(SolveStatus.NO_SOLUTION, (
            f"no schedule: {beyond}, and neither checkpoint-all nor any warm-start baseline "
            "meets the request"), bound_j=request.plain_energy_j, **timing)
    schedule, metrics, name = best
    bound = request.plain_energy_j
    gap = max(0.0, (metrics.energy_j - bound) / metrics.energy_j) if metrics.energy_j else 0.0
    if metrics.energy_j <= bound * (1 + 1e-12):
        status, message = SolveStatus.OPTIMAL, (
            "optimal (proven: every op runs once and nothing is paged, the least any "
            "schedule can spend)")
    else:
        status, message = SolveStatus.FEASIBLE, (
            f"feasible, gap {gap:.2%} to the every-op-once bound ({beyond}: the best "
            f"warm-start schedule, {name})")
    schedule = attrs.evolve(schedule, metadata={}).with_metadata(
        **request.metadata(), method=search.base["method"], status=status.value,
        restricted=search.restricted, solver_deadline_s=search.deadline_s,
        predicted_energy_j=metrics.energy_j, predicted_time_s=metrics.time_s,
        predicted_peak_ram_bytes=metrics.peak_ram_bytes, gap=gap, bound_j=bound)
    return SolveResult(status, message, **search.base, schedule=schedule, metrics=metrics,
                       objective_j=metrics.energy_j, bound_j=bound, gap=gap,
                       warm_start=name, **timing)


def _start(search: _Search) -> SolveResult | None:
    """The best heuristic plan, the relaxation's lower bound and the plan its solution
    suggests; an infeasible answer when the relaxation proves that no plan exists."""
    request, formulation = search.request, search.formulation
    graph, costs = request.graph, request.costs
    budget = request.activation_budget_bytes
    search.plan, search.metrics, search.heuristic = _best_heuristic(
        graph, costs, budget, search.deadline_s, formulation,
        request.paging_capacity_bytes, search.warm_starts,
        stop_at=time.perf_counter() + search.time_share_s(_HEURISTIC_SHARE),
        limits_hit=search.limits_hit)
    relaxed = relax(
        graph, costs, budget, search.deadline_s, remat=formulation.remat,
        paging=formulation.paging,
        storage_capacity_bytes=request.paging_capacity_bytes,
        time_limit_s=(min(_BOUND_MAX_S, search.time_share_s(_BOUND_SHARE))
                      if search.effort is None else search.time_share_s(_BOUND_SHARE)),
        seed=search.seed,
        node_limit=search.share(_EFFORT_BOUND_SHARE), limits_hit=search.limits_hit)
    if relaxed.bound_j is None:
        if search.metrics is not None:
            raise AssertionError(f"the relaxation bound calls a request infeasible that the "
                                 f"{search.heuristic} plan meets")
        what = ("the RAM budget and the deadline together" if search.deadline_s
                else "the RAM budget")
        min_ram, _ = minimum_ram_bytes(graph)
        return search.answer(SolveStatus.INFEASIBLE, (
            f"no {search.base['method']} schedule meets {what}: tensors must leave RAM and "
            "there is no way to bring them back in time (proven by the relaxation bound; "
            f"smallest RAM of any schedule {min_ram} B of activations, shortest time "
            f"{request.plain_time_s:.6g} s)"), build_time_s=search.elapsed_s)
    search.lower_j = max(request.plain_energy_j, relaxed.bound_j)
    _follow_relaxation(search, relaxed)
    return None


def _seed_with_remat_only(search: _Search) -> None:
    """The remat-only model is several times smaller and SCIP often solves it to
    optimality quickly; its plan is a plan of the integrated model too."""
    formulation = search.formulation
    if not (formulation.remat and formulation.paging
            and search.time_limit_s >= _SEED_MIN_TIME_S):
        return
    if search.effort is None and search.elapsed_s > _SEED_SHARE * search.time_limit_s:
        search.limits_hit.append("time")  # the heuristics took the seed's share already
        return
    # under effort the seed's time limit is only a safety cap, but one that leaves the
    # integrated model time to be built when it binds
    cap_s = (search.time_share_s(_SEED_SHARE) if search.effort is None
             else max(0.1, 0.5 * (search.time_limit_s - search.elapsed_s)))
    seeded = solve(search.request, deadline_s=search.deadline_s, remat=True, paging=False,
                   restricted=search.restricted, time_limit_s=cap_s,
                   gap_limit=search.gap_limit, seed=search.seed, warm_starts=search.warm_starts,
                   effort=search.share(_EFFORT_SEED_SHARE))
    search.limits_hit.extend(seeded.limits_hit)
    if seeded.plan is not None and seeded.metrics is not None and (
            search.metrics is None or seeded.metrics.energy_j < search.metrics.energy_j):
        search.plan, search.metrics = seeded.plan, seeded.metrics
        search.heuristic = f"remat-only solve ({seeded.status.value})"
    if seeded.plan is None and search.deadline_s is not None:
        # The deadline is what remat alone cannot meet: its least-energy plan without the
        # deadline is cheap to find, and the integrated model, restricted to what that plan
        # recomputes, pages just enough of it to meet the deadline.
        loose = attrs.evolve(search.request, deadline_s=None, deadline=None,
                             deadline_margin_s=0.0, deadline_margin=None)
        unbounded = solve(loose, remat=True, paging=False, restricted=search.restricted,
                          time_limit_s=max(0.1, 0.5 * (search.time_limit_s
                                                       - search.elapsed_s)),
                          gap_limit=search.gap_limit, seed=search.seed,
                          effort=search.share(_EFFORT_SEED_SHARE))
        search.limits_hit.extend(unbounded.limits_hit)
        search.remat_guide = unbounded.plan


def _build(search: _Search) -> MilpModel | SolveResult:
    """The MILP with our rounding heuristic, the warm start and SCIP's settings; or the
    answer when the time limit runs out while building it."""
    request = search.request
    costs = request.costs
    budget = request.activation_budget_bytes
    try:
        milp = build_milp(request.graph, costs, budget, search.deadline_s, search.formulation,
                          storage_capacity_bytes=request.paging_capacity_bytes,
                          energy_reference_j=request.plain_energy_j,
                          build_deadline=search.started + search.time_limit_s)
    except BuildTimeout:
        search.limits_hit.append("time")
        build_time = search.elapsed_s
        if search.plan is None or search.metrics is None:
            return search.answer(SolveStatus.NO_SOLUTION, (
                f"the {search.time_limit_s:g} s limit ran out while building the MILP and no "
                "heuristic schedule fits; a longer time limit may find one"),
                build_time_s=build_time)
        return _finish(search.base, search.plan, search.metrics, search.restricted,
                       bound=search.lower_j, scip_status="build-timelimit",
                       time_limit_s=search.time_limit_s,
                       timing={"binaries": 0, "build_time_s": build_time, "solve_time_s": 0.0,
                               "warm_start": search.heuristic})
    search.build_time_s = search.elapsed_s
    if search.effort is not None:
        search.work = WorkLimit(milp.model)
    RoundingHeuristic(milp, costs, budget, search.deadline_s, request.paging_capacity_bytes,
                      max_runs=None if search.effort is None else _EFFORT_ROUNDING_RUNS
                      ).include()
    if search.plan is not None and milp.add_warm_start(search.plan):
        search.warm_start = search.heuristic
    model = milp.model
    model.setParam("limits/gap", float(search.gap_limit))
    model.setParam("randomization/randomseedshift", int(search.seed))
    model.setParam("parallel/maxnthreads", int(search.threads))
    if milp.budget_units > 100_000:
        # Memory coefficients reach millions of units: tighten the relative tolerance so
        # that "feasible" means within a fraction of a byte.
        model.setParam("numerics/feastol", 1e-9)
    if milp.binaries > _FAST_PRESOLVE_BINARIES:
        # SCIP's default presolve spends most of a minute on ResNet-sized models and buys
        # little; the fast setting keeps the time for the search.
        model.setPresolve(SCIP_PARAMSETTING.FAST)
    return milp


def _better_solution(milp: MilpModel, budget: int, deadline_s: float | None,
                     than: PlanMetrics | None) -> tuple[StagePlan, PlanMetrics] | None:
    """SCIP's best solution of the model's last search as a plan with its exact metrics,
    when it fits the budget and the deadline and costs less than ``than`` (any plan
    does without it); None otherwise."""
    if milp.model.getNSols() == 0:
        return None
    plan = milp.plan_from_solution(milp.model.getBestSol())
    metrics = evaluate_plan(milp.graph, milp.costs, plan)
    if not metrics.fits(budget, deadline_s) or (
            than is not None and metrics.energy_j >= than.energy_j * (1 - 1e-9)):
        return None
    return plan, metrics


def _remat_neighbourhood(search: _Search, milp: MilpModel) -> None:
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
    request = search.request
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
    better = _better_solution(milp, request.activation_budget_bytes, search.deadline_s,
                              search.metrics)
    if better is not None:
        search.plan, search.metrics = better
        search.heuristic = search.warm_start = "remat neighbourhood"
    model.freeTransform()
    milp.unfix()
    if search.work is not None:
        search.work.set(None)
    if search.plan is not None:
        milp.add_warm_start(search.plan)


def _overlap_incumbent(search: _Search) -> None:
    """The search's plan with its transfers hidden behind more compute where the budget
    allows (:func:`~poetsim.optimizer.heuristic.overlap_transfers`), when that costs less:
    a plan the search did not prove optimal may still make the CPU wait for a write the
    RAM could have held through, or for a page-in it could have prefetched (the board's
    runtime does both, so without this the plan's prediction is above what it spends).
    Its work is counted (:data:`_OVERLAP_WORK` stages timed, about half a second), not
    clocked, so that the result does not depend on the machine; the search leaves it the
    last :data:`_OVERLAP_SHARE` of the time limit."""
    request = search.request
    budget = request.activation_budget_bytes
    plan = overlap_transfers(request.graph, request.costs, budget, search.plan,
                             max_work=_OVERLAP_WORK)
    plan, metrics = add_holds(request.graph, request.costs, budget, plan, search.deadline_s,
                              request.paging_capacity_bytes)
    if metrics.energy_j < search.metrics.energy_j and metrics.fits(  # type: ignore[union-attr]
            budget, search.deadline_s, request.paging_capacity_bytes):
        search.plan, search.metrics = plan, metrics


def _search_and_conclude(search: _Search, milp: MilpModel) -> SolveResult:
    """Window search, then SCIP on the whole problem; the status says what was proven."""
    request = search.request
    graph, costs = request.graph, request.costs
    budget = request.activation_budget_bytes
    model = milp.model
    started = time.perf_counter()
    _remat_neighbourhood(search, milp)
    improved_by_windows = 0
    if (search.plan is not None and search.metrics is not None
            and milp.binaries > _WINDOW_SEARCH_BINARIES):
        remaining = (1 - _OVERLAP_SHARE) * search.time_limit_s - search.elapsed_s
        search.plan, search.metrics, improved_by_windows = _window_search(
            milp, search.plan, search.metrics, budget, search.deadline_s,
            time_budget=remaining * (_WINDOW_SEARCH_SHARE if search.effort is None else 1.0),
            gap_limit=search.gap_limit, window_nodes=search.share(_EFFORT_WINDOW_SHARE),
            work=search.work, limits_hit=search.limits_hit)
        milp.add_warm_start(search.plan)
    if search.work is not None:
        search.work.set(search.effort)
    # Attached only now: the window sub-problems' incumbents are not the problem's.
    _stop_within_gap(model, milp.energy_scale, search.lower_j, search.gap_limit)
    if search.progress is not None:
        _attach_progress(model, milp.energy_scale, search.progress, search.lower_j,
                         milp.exact_memory and not search.restricted)
    # the last share of the time limit is left to _overlap_incumbent
    model.setParam("limits/time", max(0.1, (1 - _OVERLAP_SHARE) * search.time_limit_s
                                      - search.elapsed_s))
    with interrupt.solving():
        if search.threads > 1:
            model.solveConcurrent()
        else:
            model.optimize()
    solve_time = time.perf_counter() - started
    scip_status = model.getStatus()
    if scip_status == "timelimit":
        search.limits_hit.append("time")
    # Every op runs at least once, so the plain energy is a lower bound of its own. SCIP's
    # bound counts only when the model is exact (not restricted, memory not rounded).
    proofs_hold = milp.exact_memory and not search.restricted
    dual = model.getDualbound()
    bound = search.lower_j
    if proofs_hold and scip_status != "infeasible" and abs(dual) < 1e19:
        bound = max(bound, dual / milp.energy_scale)
    if scip_status == "optimal" and not proofs_hold:
        scip_status = "optimal-for-approximation"
    if model.getNSols() > 0:
        best_plan = milp.plan_from_solution(model.getBestSol())
        best_metrics = evaluate_plan(graph, costs, best_plan)
        if not best_metrics.fits(budget, search.deadline_s):
            # SCIP accepts constraint violations within its feasibility tolerance, which on
            # memory counted in millions of units can be a byte. Such a plan is not ours to
            # return, and the search's optimality claim goes with it.
            scip_status = "tolerance"
        elif search.metrics is None or best_metrics.energy_j <= search.metrics.energy_j:
            search.plan, search.metrics = best_plan, best_metrics
    if search.plan is not None and search.metrics is not None and scip_status != "optimal":
        _overlap_incumbent(search)
    if scip_status == "userinterrupt" and search.within_gap():
        scip_status = "gaplimit"  # our interrupt (_stop_within_gap), not the user's
    elif scip_status == "userinterrupt" and search.work is not None and search.work.spent:
        scip_status = "lpiterlimit"
    warm = search.warm_start
    if improved_by_windows:
        warm = f"{warm or 'none'} + {improved_by_windows} window improvement(s)"
    timing = {"binaries": milp.binaries, "build_time_s": search.build_time_s,
              "solve_time_s": solve_time, "warm_start": warm}
    if search.plan is None or search.metrics is None:
        if scip_status == "infeasible" and not proofs_hold:
            return search.answer(SolveStatus.NO_SOLUTION, (
                "no schedule: the " + ("restricted formulation" if search.restricted else
                f"MILP with memory rounded up to {milp.unit_bytes}-byte units")
                + " is infeasible, which does not prove the exact problem infeasible"),
                **timing)
        if scip_status == "infeasible":
            min_ram, _ = minimum_ram_bytes(graph)
            return search.answer(SolveStatus.INFEASIBLE, (
                "SCIP proved that no schedule meets the RAM budget and the deadline "
                f"together (each alone is possible: smallest RAM {min_ram} B of activations, "
                f"shortest time {request.plain_time_s:.6g} s)"), **timing)
        return search.answer(SolveStatus.NO_SOLUTION, (
            f"no schedule found within {search.time_limit_s:g} s (SCIP status "
            f"{scip_status}); a longer time limit may find one"), bound_j=bound, **timing)
    return _finish(search.base, search.plan, search.metrics, search.restricted, bound=bound,
                   scip_status=scip_status, time_limit_s=search.time_limit_s, timing=timing)


def _finish(base: dict[str, Any], plan: StagePlan, metrics: PlanMetrics, restricted: bool, *,
            bound: float | None, scip_status: str, time_limit_s: float,
            timing: dict[str, Any]) -> SolveResult:
    """Lower the plan, check it independently, and state what was proven."""
    request: Request = base["request"]
    graph = request.graph
    budget = request.activation_budget_bytes
    pruned = drop_unread_page_outs(plan)
    if pruned is not plan:
        plan = pruned
        metrics = evaluate_plan(graph, request.costs, plan)
    schedule = lower_plan(graph, plan, metadata={})
    check = check_schedule(graph, schedule, budget_bytes=budget,
                           storage_capacity_bytes=request.paging_capacity_bytes)
    if not check.valid or check.peak_ram_bytes != metrics.peak_ram_bytes:
        raise AssertionError(f"optimizer produced a schedule the checker rejects: "
                             f"{check.violation.message if check.violation else 'peak differs'}")
    objective = metrics.energy_j
    plain_energy = request.plain_energy_j
    gap = None
    if bound is not None and objective > 0:
        gap = max(0.0, (objective - bound) / objective)
    if scip_status == "optimal" and not restricted:
        status, message = SolveStatus.OPTIMAL, "optimal (proven by SCIP)"
    elif objective <= plain_energy * (1 + 1e-12) and not restricted:
        status, message = SolveStatus.OPTIMAL, (
            "optimal (proven: every op runs once and nothing is paged, the least any "
            "schedule can spend)")
    elif bound is not None and objective <= bound * (1 + _SAME_ENERGY) and not restricted:
        status, message = SolveStatus.OPTIMAL, "optimal (proven: equals the lower bound)"
    else:
        status = SolveStatus.FEASIBLE
        effort = base["effort"]
        why = {"timelimit": f"time limit {time_limit_s:g} s", "gaplimit": "gap limit",
               "nodelimit": f"effort limit {effort} nodes",
               "totalnodelimit": f"effort limit {effort} nodes",
               "lpiterlimit": f"effort limit {effort} nodes' LP iterations",
               "optimal-for-approximation": "optimal only for the restricted or "
                                            "memory-rounded model",
               "infeasible": "SCIP found the approximate model infeasible; greedy schedule",
               "tolerance": "SCIP's best plan broke the budget within its numerical "
                            "tolerance; greedy schedule",
               "build-timelimit": f"the {time_limit_s:g} s limit ran out while building the "
                                  "MILP: greedy schedule"}.get(scip_status, scip_status)
        message = f"feasible, gap {gap:.2%} to the lower bound ({why})"
        if restricted:
            message += "; restricted formulation: not proven optimal for the exact problem"
    if base["effort"] is not None and "time" in base["limits_hit"]:
        message += (f"; the {time_limit_s:g} s time limit (a safety cap) ended part of the "
                    "search before the effort limit, so this result depends on the machine's "
                    "speed")
    schedule = schedule.with_metadata(
        **request.metadata(), method=base["method"], status=status.value,
        restricted=restricted, solver_deadline_s=base["deadline_s"],
        predicted_energy_j=metrics.energy_j, predicted_time_s=metrics.time_s,
        predicted_peak_ram_bytes=metrics.peak_ram_bytes, gap=gap, bound_j=bound)
    return SolveResult(status, message, **base, schedule=schedule, plan=plan, metrics=metrics,
                       objective_j=objective, bound_j=bound, gap=gap, **timing)


def _stop_within_gap(model: Any, scale: float, lower_j: float, gap_limit: float) -> None:
    """Interrupt SCIP once an incumbent is within ``gap_limit`` of ``lower_j``, a bound
    SCIP does not know (it stops by its own, often weaker, bound otherwise)."""
    from pyscipopt import SCIP_EVENTTYPE, SCIP_STAGE, Eventhdlr

    class StopWithinGap(Eventhdlr):
        def eventinit(self):
            # A warm start arrives before SCIP may be interrupted: check again at the nodes.
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event):
            if self.model.getStage() != SCIP_STAGE.SOLVING or self.model.getNSols() == 0:
                return
            incumbent_j = self.model.getPrimalbound() / scale
            if incumbent_j * (1 - gap_limit) <= lower_j * (1 + _SAME_ENERGY):
                self.model.interruptSolve()

    model.includeEventhdlr(StopWithinGap(), "poetsim_stop_within_gap",
                           "stops at the gap limit against the relaxation bound")


def _attach_progress(model: Any, scale: float, callback: Callable[[dict[str, float]], None],
                     lower_j: float, scip_bound_valid: bool, every_s: float = 5.0) -> None:
    """Report the incumbent, bound and gap on every new incumbent, and every ``every_s``
    seconds of search otherwise. The bound is ``lower_j`` or SCIP's, whichever is higher
    (SCIP's only when it holds for the exact problem)."""
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    class Progress(Eventhdlr):
        last = -math.inf

        def eventinit(self):
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event):
            now = self.model.getSolvingTime()
            new_incumbent = event.getType() == SCIP_EVENTTYPE.BESTSOLFOUND
            if not new_incumbent and now - self.last < every_s:
                return
            primal = self.model.getPrimalbound()
            if abs(primal) >= 1e19:
                return
            self.last = now
            incumbent_j, bound_j = primal / scale, lower_j
            if scip_bound_valid:
                bound_j = max(bound_j, self.model.getDualbound() / scale)
            callback({"incumbent_j": incumbent_j, "bound_j": bound_j,
                      "gap": max(0.0, (incumbent_j - bound_j) / incumbent_j), "time_s": now})

    model.includeEventhdlr(Progress(), "poetsim_progress", "reports the search's progress")
