"""Every method that makes a schedule for a request: POET and the baselines, by name.

This is the study layer's registry (:data:`METHODS`), above :mod:`poetsim.optimizer` and
:mod:`poetsim.baselines`, which know nothing of each other:

* ``poet``: the POET MILP (:func:`poetsim.optimizer.solve`) started from the fast
  baselines' schedules as well as its own greedy plans (:func:`seeded_solve`);
* ``checkmate`` (Jain et al., MLSys 2020) and ``paging_only``: the same MILP with paging,
  respectively rematerialization, switched off (the paper's ablations);
* the heuristic baselines of :data:`poetsim.baselines.BASELINES`.

:func:`produce` runs one of them on a resolved :class:`~poetsim.request.Request` and
returns a :class:`Produced`: the method's own status, its schedule (stamped with the
request it was made for) and its predicted figures. Simulating and judging the schedule
is :mod:`poetsim.runs`' job.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from poetsim import clock
from poetsim.baselines import BASELINES, BaselineResult
from poetsim.baselines.base import out_of_time
from poetsim.baselines.capuchin import capuchin
from poetsim.baselines.chen import chen_greedy, chen_sqrt_n
from poetsim.baselines.dtr import dtr
from poetsim.baselines.pofo import pofo
from poetsim.baselines.revolve import revolve
from poetsim.errors import InputError, PoetsimError, PoetsimWarning
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.optimizer import STAGE_MAX_OPS, SolveResult, SolveStatus, solve
from poetsim.optimizer.settings import (
    DEFAULT_EFFORT,
    DEFAULT_TIME_LIMIT_S,
    SOLVER_METHODS,
    SolverSettings,
)
from poetsim.request import Request
from poetsim.schedule import Schedule
from poetsim.schedule.metadata import stamped
from poetsim.status import Status

__all__ = ["DEFAULT_EFFORT", "DEFAULT_TIME_LIMIT_S", "FAST_BASELINES", "METHODS",
           "SOLVER_METHODS", "MethodStatus", "Produced", "SolverSettings", "produce",
           "seeded_solve"]

#: Baselines fast enough to run before every POET solve, as its warm starts.
FAST_BASELINES = (dtr, chen_greedy, chen_sqrt_n, capuchin, revolve, pofo)

#: The warm starts that take a ``stop_at`` (all of them), and the share of the solve's time
#: limit all warm starts together may use.
_STOPPABLE = frozenset({dtr, chen_greedy, chen_sqrt_n, capuchin, revolve, pofo})
_WARM_START_SHARE = 0.2
#: DTR's greedy eviction is not monotone in the budget: it can run out of tensors it may
#: evict at one budget and finish at a smaller one (ResNet-18 CIFAR on the nRF52840, paper
#: accounting, 1.5x: none at 35%, 7.87 J at 30%). A schedule within a smaller budget fits
#: the request's too, so when DTR fails the warm starts try it at these shares of it.
_DTR_RETRY_FRACTIONS = (0.95, 0.9, 0.85, 0.8, 0.7)
#: Their share when the graph is beyond the stage MILP: they are then the whole search.
_WARM_START_SHARE_BEYOND_STAGES = 0.8
#: The share of the time limit a MILP solve leaves for lowering its plan and for the run
#: to lay it out and simulate it on the board (MobileNetV2 on the rpi4 beside busy
#: processes: about 15% of a 10 s limit); under effort a cap that binds only then.
_FINISH_RESERVE = 0.2

#: Every method, in the order compare reports them: POET, then the baselines.
METHODS: tuple[str, ...] = ("poet", "checkpoint_all", "chen_sqrt_n", "chen_greedy", "revolve",
                            "checkmate", "paging_only", "capuchin", "dtr", "pofo")

#: What a method answered (:class:`poetsim.status.Status`, the one vocabulary).
MethodStatus = Status


@attrs.frozen
class Produced:
    """What one method made for one request (predicted figures, not simulated)."""

    status: MethodStatus
    reason: str
    schedule: Schedule | None = attrs.field(default=None, repr=False, eq=False)
    predicted_energy_j: float | None = None
    predicted_time_s: float | None = None
    predicted_peak_ram_bytes: int | None = None
    gap: float | None = None
    bound_j: float | None = None
    #: ``("time",)`` when the time limit, a safety cap under deterministic effort, cut
    #: part of a MILP search short (the result may then depend on the machine's speed).
    limits_hit: tuple[str, ...] = ()
    #: POET's whole result (model figures, search statistics), for ``poetsim solve``
    solve_result: SolveResult | None = attrs.field(default=None, repr=False, eq=False)


def seeded_solve(request: Request, settings: SolverSettings = SolverSettings(), *,
                 remat: bool = True, paging: bool = True, restricted: bool = False,
                 deadline_s: float | None = None,
                 progress: Callable[[dict[str, float]], None] | None = None) -> SolveResult:
    """:func:`poetsim.optimizer.solve` with the fast baselines' schedules as warm starts.

    ``deadline_s`` plans against a deadline tighter than the request's (default: the
    request's planning deadline, its deadline minus any margin). A fast baseline
    that fails is skipped: a warm start is a help, never a requirement; DTR, when it finds
    nothing within the budget, is tried at smaller ones (:data:`_DTR_RETRY_FRACTIONS`).
    The warm starts share :data:`_WARM_START_SHARE` of the time limit and the solve gets
    what they leave, so the time limit holds for the whole; when they run out of their
    share, the result's ``limits_hit`` says so (``"time"``).
    """
    started = time.perf_counter()
    share = (_WARM_START_SHARE if len(request.graph) <= STAGE_MAX_OPS
             else _WARM_START_SHARE_BEYOND_STAGES)
    stop_at = started + share * settings.time_limit_s
    cut_short = False
    deadline_s = request.planning_deadline_s if deadline_s is None else deadline_s
    schedules = []
    # Below the smallest possible working set the solver answers at once; nothing to seed.
    smallest = minimum_ram_bytes(request.graph)[0]
    budget = request.activation_budget_bytes
    seeding = request.infeasible_reason is None and budget >= smallest
    for method in FAST_BASELINES if seeding else ():
        retries = _DTR_RETRY_FRACTIONS if method is dtr else ()
        for within in [budget] + [int(budget * f) for f in retries if budget * f >= smallest]:
            if out_of_time(stop_at):
                break
            result = _warm_start(method, request, within, deadline_s, stop_at)
            if result is not None and result.schedule is not None:
                schedules.append(result.schedule)
                break
        cut_short = out_of_time(stop_at)
        if cut_short:
            break
    # the solve's own limit keeps a reserve for lowering and checking the schedule and
    # for freeing the MILP, so that the whole keeps within the time limit under load too
    left_s = max(0.1, (1 - _FINISH_RESERVE) * settings.time_limit_s
                 - (time.perf_counter() - started))
    solved = solve(request, remat=remat, paging=paging, restricted=restricted,
                   deadline_s=deadline_s, time_limit_s=left_s, gap_limit=settings.gap_limit,
                   threads=settings.threads, seed=settings.seed, progress=progress,
                   warm_starts=schedules, effort=settings.effort)
    if cut_short:
        if solved.status is MethodStatus.NO_SOLUTION and "time" not in solved.limits_hit:
            # the search ran out of nothing but schedules: the limit, not the request, did
            solved = attrs.evolve(solved, message=f"{solved.message}; " + clock.ran_out(
                "before every warm start had run", share * settings.time_limit_s,
                "the warm starts"))
        solved = attrs.evolve(solved, limits_hit=tuple(sorted({*solved.limits_hit, "time"})))
    return solved


def _warm_start(method: Callable[..., BaselineResult], request: Request, budget_bytes: int,
                deadline_s: float | None, stop_at: float) -> BaselineResult | None:
    """One fast baseline's schedule within ``budget_bytes`` (at most the request's), or
    None when it fails with an error: a warm start is a help, never a requirement."""
    extra = {"stop_at": stop_at} if method in _STOPPABLE else {}
    try:
        return method(request.graph, request.board, request.costs, budget_bytes,
                      deadline_s=deadline_s, **extra)
    except Exception as err:  # noqa: BLE001 - a warm start is a help, not a need
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        warnings.warn(f"warm start {method.__name__} skipped: {type(err).__name__}: {first}",
                      PoetsimWarning, stacklevel=3)
        return None


def _from_solve(result: SolveResult) -> Produced:
    m = result.metrics
    return Produced(
        status=result.status,
        reason="" if result.status is SolveStatus.OPTIMAL else result.message,
        schedule=result.schedule, predicted_energy_j=m.energy_j if m else None,
        predicted_time_s=m.time_s if m else None,
        predicted_peak_ram_bytes=m.peak_ram_bytes if m else None, gap=result.gap,
        bound_j=result.bound_j, limits_hit=result.limits_hit, solve_result=result)


def _from_baseline(result: BaselineResult, time_limit_s: float) -> Produced:
    if result.details.get("out_of_time"):
        # the limit, not the request, ended it: a status of its own, and what to raise
        return Produced(
            status=MethodStatus.NO_SOLUTION, limits_hit=("time",),
            reason=clock.ran_out(f"before {result.method} found a schedule", time_limit_s,
                                 result.method))
    return Produced(
        status=result.status, reason=result.reason, schedule=result.schedule,
        predicted_energy_j=result.energy_j, predicted_time_s=result.time_s,
        predicted_peak_ram_bytes=result.peak_ram_bytes)


def produce(request: Request, method: str, settings: SolverSettings = SolverSettings(), *,
            deadline_s: float | None = None, budget_bytes: int | None = None,
            solve_options: Mapping[str, Any] | None = None) -> Produced:
    """Run ``method`` on ``request`` (planning against ``deadline_s`` when it is tighter
    than the request's deadline; default: the request's planning deadline, its deadline
    minus any margin; and against ``budget_bytes`` of activations when it is tighter than
    the request's, to leave room for the arena's fragmentation); its schedule carries the
    request in its metadata. ``solve_options`` go to POET's :func:`seeded_solve`
    (``remat``, ``paging``, ``restricted``, ``progress``: ``poetsim solve``'s flags)."""
    if method not in METHODS:
        raise InputError(f"method = {method!r}: must be one of {', '.join(METHODS)}")
    deadline_s = request.planning_deadline_s if deadline_s is None else deadline_s
    unfit = request.infeasible_reason
    if unfit is not None and method != "poet":  # POET refuses it itself, with its result
        return Produced(MethodStatus.INFEASIBLE, unfit)
    stamp = request.metadata()
    if budget_bytes is not None and budget_bytes < request.activation_budget_bytes:
        # the request to plan against; the schedule still records the user's
        request = attrs.evolve(request, activation_budget_bytes=max(0, budget_bytes))
        stamp["planned_activation_bytes"] = request.activation_budget_bytes
    if method == "poet":
        produced = _from_solve(seeded_solve(request, settings, deadline_s=deadline_s,
                                            **(solve_options or {})))
    elif method in ("checkmate", "paging_only"):
        # the same reserve for lowering and checking as POET's (:func:`seeded_solve`)
        produced = _from_solve(solve(
            request, remat=method == "checkmate", paging=method == "paging_only",
            deadline_s=deadline_s, time_limit_s=(1 - _FINISH_RESERVE) * settings.time_limit_s,
            gap_limit=settings.gap_limit, threads=settings.threads, seed=settings.seed,
            effort=settings.effort))
    else:
        baseline = BASELINES[method]
        # every baseline is bounded by the time limit too (checkpoint-all needs none)
        extra = ({"stop_at": time.perf_counter() + settings.time_limit_s}
                 if baseline in _STOPPABLE else {})
        try:
            produced = _from_baseline(baseline(
                request.graph, request.board, request.costs, request.activation_budget_bytes,
                deadline_s=deadline_s, **extra), settings.time_limit_s)
        except PoetsimError as err:  # the method cannot handle this graph or board
            return Produced(MethodStatus.NOT_APPLICABLE, f"{method}: {err}")
    if produced.schedule is None:
        return produced
    # POET's ablations (``poetsim solve --no-remat``) keep the name the solver gives them
    label = produced.schedule.metadata.get("method", method) if solve_options else method
    return attrs.evolve(produced, schedule=stamped(produced.schedule, request=stamp,
                                                   method=label, solver_deadline_s=deadline_s))
