"""Graphs beyond stage form (more than :data:`STAGE_MAX_OPS` ops): no MILP, the best of
checkpoint-all and the given op-list schedules, judged under the op-list cost model, with
its gap against every op once."""

from __future__ import annotations

from typing import Any

import attrs

from poetsim import clock
from poetsim.errors import OutOfTime
from poetsim.graph.graph import TrainingGraph
from poetsim.optimizer.plan import PlanMetrics
from poetsim.optimizer.search.result import SolveResult, SolveStatus
from poetsim.optimizer.search.state import Search
from poetsim.request import Request
from poetsim.schedule import Action, Schedule, plain_schedule
from poetsim.schedule.check import checked_replay
from poetsim.schedule.metadata import stamped
from poetsim.schedule.model import predict
from poetsim.schedule.replay import Replay

__all__ = ["STAGE_MAX_OPS", "best_op_list", "beyond_stage_form"]


#: Graphs with more ops than this are not put in stage form: its n x n decision matrices
#: (125 MB at this size, and the MILP's variables with them) are out of reach; the solve
#: returns the best of the given op-list schedules instead (:func:`best_op_list`).
STAGE_MAX_OPS = 5000


def beyond_stage_form(graph: TrainingGraph) -> bool:
    """Whether ``graph`` has too many ops for stage form."""
    return len(graph) > STAGE_MAX_OPS


def _op_list_metrics(request: Request, schedule: Schedule, check: Any, walk: Replay
                     ) -> PlanMetrics:
    """:class:`PlanMetrics` of an op list under the op-list cost model
    (:func:`poetsim.baselines.base.predict`) from its finished replay ``walk``; an op list
    has no stages (``peak_stage`` -1)."""
    costs = request.costs
    figures = predict(request.graph, costs, walk)
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


def _cheapest(search: Search) -> tuple[Schedule, PlanMetrics, str] | None:
    """The least-energy op list among checkpoint-all and the warm starts that the checker
    accepts, that meets the deadline and uses only what the formulation allows.

    Judging one takes a second on a graph of 20,000 ops: with one in hand, the search
    judges no more after its own time limit (which leaves the run the time to check the
    schedule on the board), before, none after the run's (:func:`poetsim.clock.stop_at`);
    ``"time"`` then goes to the search's limits."""
    best: tuple[Schedule, PlanMetrics, str] | None = None
    graph = search.request.graph
    own_end = search.started + search.time_limit_s
    try:
        for schedule in (plain_schedule(graph), *search.warm_starts):
            with clock.limit(None if best is None else own_end):
                metrics = _judged(search, schedule)
            if metrics is not None and (best is None or metrics.energy_j < best[1].energy_j):
                best = (schedule, metrics,
                        str(schedule.metadata.get("method", "checkpoint-all")))
    except OutOfTime:
        search.limits_hit.append("time")
    return best


def _judged(search: Search, schedule: Schedule) -> PlanMetrics | None:
    """``schedule``'s figures when the checker accepts it within the request, it meets the
    deadline and uses only what the formulation allows; else None."""
    request, formulation = search.request, search.formulation
    check, walk = checked_replay(request.graph, schedule,
                                 budget_bytes=request.activation_budget_bytes,
                                 storage_capacity_bytes=request.paging_capacity_bytes)
    if not check.valid or (check.recomputes and not formulation.remat) or (
            check.page_outs and not formulation.paging):
        return None
    metrics = _op_list_metrics(request, schedule, check, walk)
    if search.deadline_s is not None and metrics.time_s > search.deadline_s:
        return None
    return metrics


def best_op_list(search: Search) -> SolveResult:
    """For graphs beyond stage form: the least-energy schedule among checkpoint-all and the
    given op lists (the fast baselines' under :func:`poetsim.methods.seeded_solve`) that
    the checker accepts within the budget and storage, that meet the deadline and that use
    only the mechanisms the formulation allows. Its gap is against every op once."""
    request = search.request
    best = _cheapest(search)
    timing = {"build_time_s": 0.0, "solve_time_s": search.elapsed_s}
    beyond = (f"the graph has {len(request.graph)} ops, more than the {STAGE_MAX_OPS} the "
              "stage MILP can take")
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
    schedule = stamped(
        attrs.evolve(schedule, metadata={}), request=request.metadata(),
        method=search.base["method"], status=status.value,
        restricted=search.restricted, solver_deadline_s=search.deadline_s,
        predicted_energy_j=metrics.energy_j, predicted_time_s=metrics.time_s,
        predicted_peak_ram_bytes=metrics.peak_ram_bytes, gap=gap, bound_j=bound)
    return SolveResult(status, message, **search.base, schedule=schedule, metrics=metrics,
                       objective_j=metrics.energy_j, bound_j=bound, gap=gap,
                       warm_start=name, **timing)
