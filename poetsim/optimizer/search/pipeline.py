"""The solve, step by step: refuse what no schedule can meet, start from the best
heuristic plan and the relaxation bound, seed with a remat-only solve, build the MILP,
improve by the remat neighbourhood and the window search, let SCIP search, and conclude
what was proven. :func:`solve` is the optimizer's public entry point."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs

from poetsim import clock, interrupt
from poetsim.errors import BuildTimeout, InputError
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.optimizer.bound import relax
from poetsim.optimizer.effort import WorkLimit
from poetsim.optimizer.milp import Formulation, MilpModel, build_milp
from poetsim.optimizer.plan import evaluate_plan
from poetsim.optimizer.rounding import RoundingHeuristic
from poetsim.optimizer.search import scip
from poetsim.optimizer.search.finish import finish
from poetsim.optimizer.search.oplist import best_op_list, beyond_stage_form
from poetsim.optimizer.search.portfolio import (
    EFFORT_HEURISTIC_CAP,
    HEURISTIC_SHARE,
    best_heuristic,
    follow_relaxation,
    overlap_incumbent,
)
from poetsim.optimizer.search.result import SolveResult, SolveStatus
from poetsim.optimizer.search.state import Search
from poetsim.optimizer.search.windows import remat_neighbourhood, window_search
from poetsim.optimizer.settings import SolverSettings
from poetsim.request import Request
from poetsim.schedule import Schedule

__all__ = ["solve"]


#: Models larger than this first improve the incumbent by a window search, with this share
#: of the time limit.
_WINDOW_SEARCH_BINARIES = 2000
_WINDOW_SEARCH_SHARE = 0.5
#: Deterministic effort (``effort`` nodes in all): the relaxation bound, each window of
#: the window search and the remat-only seed get these shares of it.
_EFFORT_BOUND_SHARE = 0.2
_EFFORT_WINDOW_SHARE = 0.06
_EFFORT_SEED_SHARE = 0.25
#: No remat-only solve starts with less than this share of the time limit left.
_SEED_MIN_LEFT = 0.25
#: Share of the time limit the search leaves for hiding the transfers of its plan
#: (:func:`~poetsim.optimizer.search.portfolio.overlap_incumbent`).
OVERLAP_SHARE = 0.05
#: Runs of the LP-rounding heuristic per SCIP search under deterministic effort.
_EFFORT_ROUNDING_RUNS = 100
#: Integrated solves with at least this time limit first spend this share of it on the
#: remat-only model, whose plan seeds the integrated search.
_SEED_MIN_TIME_S = 5.0
_SEED_SHARE = 0.25
#: No remat-only solve starts with less than this share of the time limit left.
_SEED_MIN_LEFT = 0.25
#: Share of the time limit (at most ``_BOUND_MAX_S``) for the relaxation bound.
_BOUND_SHARE = 0.05
_BOUND_MAX_S = 5.0


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
    deadline_s = _checked(request, time_limit_s=time_limit_s, gap_limit=gap_limit,
                          threads=threads, seed=seed, effort=effort, deadline_s=deadline_s)
    search = Search(request=request,
                    formulation=Formulation(remat=remat, paging=paging, restricted=restricted),
                    deadline_s=deadline_s, time_limit_s=time_limit_s, gap_limit=gap_limit,
                    threads=threads, seed=seed, progress=progress,
                    warm_starts=tuple(warm_starts), effort=effort)
    answer = _refuse_at_once(search)
    if answer is None and beyond_stage_form(request.graph):
        return best_op_list(search)
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


def _checked(request: Request, *, time_limit_s: float, gap_limit: float, threads: int,
             seed: int, effort: int | None, deadline_s: float | None) -> float | None:
    """The deadline to plan against, once the settings are checked (by
    :class:`~poetsim.optimizer.settings.SolverSettings`, their one validator)."""
    if effort == 0 and not isinstance(effort, bool):
        raise InputError(f"effort = {effort!r}: must be a whole number of nodes >= 1")
    SolverSettings(time_limit_s=time_limit_s, gap_limit=gap_limit, threads=threads, seed=seed,
                   effort=effort)
    if deadline_s is None:
        return request.deadline_s
    if request.deadline_s is not None and deadline_s > request.deadline_s:
        raise InputError(f"deadline_s = {deadline_s!r}: must not exceed the request's "
                         f"{request.deadline_s!r}")
    return deadline_s


def _refuse_at_once(search: Search) -> SolveResult | None:
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


def _start(search: Search) -> SolveResult | None:
    """The best heuristic plan, the relaxation's lower bound and the plan its solution
    suggests; an infeasible answer when the relaxation proves that no plan exists."""
    request, formulation, problem = search.request, search.formulation, search.problem
    search.plan, search.metrics, search.heuristic = best_heuristic(
        problem, formulation, search.warm_starts,
        stop_at=time.perf_counter() + search.time_share_s(HEURISTIC_SHARE,
                                                          EFFORT_HEURISTIC_CAP),
        limits_hit=search.limits_hit, end_at=search.started + search.time_limit_s)
    relaxed = relax(
        problem.graph, problem.costs, problem.budget_bytes, search.deadline_s,
        remat=formulation.remat, paging=formulation.paging,
        storage_capacity_bytes=problem.storage_capacity_bytes,
        time_limit_s=(min(_BOUND_MAX_S, search.time_share_s(_BOUND_SHARE))
                      if search.effort is None
                      else search.time_share_s(_BOUND_SHARE, EFFORT_HEURISTIC_CAP)),
        seed=search.seed,
        node_limit=search.share(_EFFORT_BOUND_SHARE), limits_hit=search.limits_hit)
    if relaxed.bound_j is None:
        if search.metrics is not None:
            raise AssertionError(f"the relaxation bound calls a request infeasible that the "
                                 f"{search.heuristic} plan meets")
        what = ("the RAM budget and the deadline together" if search.deadline_s
                else "the RAM budget")
        min_ram, _ = minimum_ram_bytes(problem.graph)
        return search.answer(SolveStatus.INFEASIBLE, (
            f"no {search.base['method']} schedule meets {what}: tensors must leave RAM and "
            "there is no way to bring them back in time (proven by the relaxation bound; "
            f"smallest RAM of any schedule {min_ram} B of activations, shortest time "
            f"{request.plain_time_s:.6g} s)"), build_time_s=search.elapsed_s)
    search.lower_j = max(request.plain_energy_j, relaxed.bound_j)
    follow_relaxation(search, relaxed)
    return None


def _seed_with_remat_only(search: Search) -> None:
    """The remat-only model is several times smaller and SCIP often solves it to
    optimality quickly; its plan is a plan of the integrated model too."""
    formulation = search.formulation
    if not (formulation.remat and formulation.paging
            and search.time_limit_s >= _SEED_MIN_TIME_S):
        return
    if search.effort is None and search.elapsed_s > _SEED_SHARE * search.time_limit_s:
        search.limits_hit.append("time")  # the heuristics took the seed's share already
        return
    if _cap_near(search):
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
        _guide_by_remat_without_deadline(search)


def _cap_near(search: Search) -> bool:
    """Whether the safety cap bound already, or so little of it is left that a nested
    remat-only solve (its plain plan and first greedy pass cannot be cut short) would
    run past it; ``"time"`` then goes to the search's limits (its result depends on the
    machine's speed either way)."""
    left_s = search.time_limit_s - search.elapsed_s
    if "time" not in search.limits_hit and left_s >= _SEED_MIN_LEFT * search.time_limit_s:
        return False
    search.limits_hit.append("time")
    return True


def _guide_by_remat_without_deadline(search: Search) -> None:
    """The deadline is what remat alone cannot meet: its least-energy plan without the
    deadline is cheap to find, and the integrated model, restricted to what that plan
    recomputes, pages just enough of it to meet the deadline
    (:func:`~poetsim.optimizer.search.windows.remat_neighbourhood`)."""
    if _cap_near(search):
        return
    loose = attrs.evolve(search.request, deadline_s=None, deadline=None,
                         deadline_margin_s=0.0, deadline_margin=None)
    unbounded = solve(loose, remat=True, paging=False, restricted=search.restricted,
                      time_limit_s=max(0.1, 0.5 * (search.time_limit_s - search.elapsed_s)),
                      gap_limit=search.gap_limit, seed=search.seed,
                      effort=search.share(_EFFORT_SEED_SHARE))
    search.limits_hit.extend(unbounded.limits_hit)
    search.remat_guide = unbounded.plan


def _build(search: Search) -> MilpModel | SolveResult:
    """The MILP with our rounding heuristic, the warm start and SCIP's settings; or the
    answer when the time limit runs out while building it."""
    problem = search.problem
    try:
        milp = build_milp(problem.graph, problem.costs, problem.budget_bytes, search.deadline_s,
                          search.formulation,
                          storage_capacity_bytes=problem.storage_capacity_bytes,
                          energy_reference_j=search.request.plain_energy_j,
                          build_deadline=search.started + search.time_limit_s)
    except BuildTimeout:
        return _build_timed_out(search)
    search.build_time_s = search.elapsed_s
    if search.effort is not None:
        search.work = WorkLimit(milp.model)
    RoundingHeuristic(milp, problem.costs, problem.budget_bytes, search.deadline_s,
                      problem.storage_capacity_bytes,
                      max_runs=None if search.effort is None else _EFFORT_ROUNDING_RUNS
                      ).include()
    if search.plan is not None and milp.add_warm_start(search.plan):
        search.warm_start = search.heuristic
    scip.configure(milp, gap_limit=search.gap_limit, seed=search.seed, threads=search.threads)
    return milp


def _build_timed_out(search: Search) -> SolveResult:
    """The answer when the time limit ran out while building the MILP: the heuristic
    plan, or no schedule."""
    search.limits_hit.append("time")
    build_time = search.elapsed_s
    if search.plan is None or search.metrics is None:
        return search.answer(SolveStatus.NO_SOLUTION, clock.ran_out(
            "while building the MILP, and no heuristic schedule fits", search.time_limit_s,
            f"{search.base['method']}'s search"), build_time_s=build_time)
    return finish(search.base, search.plan, search.metrics, search.restricted,
                  bound=search.lower_j, scip_status="build-timelimit",
                  time_limit_s=search.time_limit_s,
                  timing={"binaries": 0, "build_time_s": build_time, "solve_time_s": 0.0,
                          "warm_start": search.heuristic})


def _improve_before_scip(search: Search, milp: MilpModel) -> int:
    """The remat neighbourhood, then on large models the window search; returns how many
    times the windows improved the plan."""
    remat_neighbourhood(search, milp)
    if (search.plan is None or search.metrics is None
            or milp.binaries <= _WINDOW_SEARCH_BINARIES):
        return 0
    remaining = (1 - OVERLAP_SHARE) * search.time_limit_s - search.elapsed_s
    search.plan, search.metrics, improved = window_search(
        milp, search.problem, search.plan, search.metrics,
        time_budget=remaining * (_WINDOW_SEARCH_SHARE if search.effort is None else 1.0),
        gap_limit=search.gap_limit, window_nodes=search.share(_EFFORT_WINDOW_SHARE),
        work=search.work, limits_hit=search.limits_hit)
    milp.add_warm_start(search.plan)
    return improved


def _run_scip(search: Search, milp: MilpModel) -> None:
    """SCIP on the whole problem, with the stop within the gap and the progress reports."""
    model = milp.model
    if search.work is not None:
        search.work.set(search.effort)
    # Attached only now: the window sub-problems' incumbents are not the problem's.
    scip.stop_within_gap(model, milp.energy_scale, search.lower_j, search.gap_limit)
    if search.progress is not None:
        scip.attach_progress(model, milp.energy_scale, search.progress, search.lower_j,
                             milp.exact_memory and not search.restricted)
    # the last share of the time limit is left to overlap_incumbent
    model.setParam("limits/time", max(0.1, (1 - OVERLAP_SHARE) * search.time_limit_s
                                      - search.elapsed_s))
    with interrupt.solving():
        if search.threads > 1:
            model.solveConcurrent()
        else:
            model.optimize()


def _take_scip_plan(search: Search, milp: MilpModel, proofs_hold: bool
                    ) -> tuple[str, float]:
    """SCIP's status and the lower bound after its search (SCIP's bound counts only when
    the model is exact); SCIP's best plan becomes the search's when it fits and is no
    worse."""
    model = milp.model
    scip_status = model.getStatus()
    if scip_status == "timelimit":
        search.limits_hit.append("time")
    # Every op runs at least once, so the plain energy is a lower bound of its own.
    dual = model.getDualbound()
    bound = search.lower_j
    if proofs_hold and scip_status != "infeasible" and abs(dual) < 1e19:
        bound = max(bound, dual / milp.energy_scale)
    if scip_status == "optimal" and not proofs_hold:
        scip_status = "optimal-for-approximation"
    if model.getNSols() > 0:
        best_plan = milp.plan_from_solution(model.getBestSol())
        best_metrics = evaluate_plan(milp.graph, milp.costs, best_plan)
        if not best_metrics.fits(search.problem.budget_bytes, search.deadline_s):
            # SCIP accepts constraint violations within its feasibility tolerance, which on
            # memory counted in millions of units can be a byte. Such a plan is not ours to
            # return, and the search's optimality claim goes with it.
            scip_status = "tolerance"
        elif search.metrics is None or best_metrics.energy_j <= search.metrics.energy_j:
            search.plan, search.metrics = best_plan, best_metrics
    return scip_status, bound


def _search_and_conclude(search: Search, milp: MilpModel) -> SolveResult:
    """Window search, then SCIP on the whole problem; the status says what was proven."""
    started = time.perf_counter()
    improved_by_windows = _improve_before_scip(search, milp)
    _run_scip(search, milp)
    solve_time = time.perf_counter() - started
    proofs_hold = milp.exact_memory and not search.restricted
    scip_status, bound = _take_scip_plan(search, milp, proofs_hold)
    if search.plan is not None and search.metrics is not None and scip_status != "optimal":
        overlap_incumbent(search)
    if scip_status == "userinterrupt" and search.within_gap():
        scip_status = "gaplimit"  # our interrupt (scip.stop_within_gap), not the user's
    elif scip_status == "userinterrupt" and search.work is not None and search.work.spent:
        scip_status = "lpiterlimit"
    warm = search.warm_start
    if improved_by_windows:
        warm = f"{warm or 'none'} + {improved_by_windows} window improvement(s)"
    timing = {"binaries": milp.binaries, "build_time_s": search.build_time_s,
              "solve_time_s": solve_time, "warm_start": warm}
    if search.plan is None or search.metrics is None:
        return _without_plan(search, milp, scip_status, proofs_hold, bound, timing)
    return finish(search.base, search.plan, search.metrics, search.restricted, bound=bound,
                  scip_status=scip_status, time_limit_s=search.time_limit_s, timing=timing)


def _without_plan(search: Search, milp: MilpModel, scip_status: str, proofs_hold: bool,
                  bound: float, timing: dict) -> SolveResult:
    """The answer when the search ends without a plan: infeasible where SCIP proved it
    for the exact model, no solution otherwise."""
    if scip_status == "infeasible" and not proofs_hold:
        return search.answer(SolveStatus.NO_SOLUTION, (
            "no schedule: the " + ("restricted formulation" if search.restricted else
            f"MILP with memory rounded up to {milp.unit_bytes}-byte units")
            + " is infeasible, which does not prove the exact problem infeasible"),
            **timing)
    if scip_status == "infeasible":
        min_ram, _ = minimum_ram_bytes(milp.graph)
        return search.answer(SolveStatus.INFEASIBLE, (
            "SCIP proved that no schedule meets the RAM budget and the deadline "
            f"together (each alone is possible: smallest RAM {min_ram} B of activations, "
            f"shortest time {search.request.plain_time_s:.6g} s)"), **timing)
    return search.answer(SolveStatus.NO_SOLUTION, f"no schedule found (SCIP status "
                         f"{scip_status}): " + clock.ran_out(
                             "", search.time_limit_s, f"{search.base['method']}'s search"),
                         bound_j=bound, **timing)
