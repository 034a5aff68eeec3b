"""The last step of every search that has a plan: lower it to a schedule, check that
independently, and state what was proven (``optimal`` only with a proof for the exact
formulation; otherwise ``feasible`` with the gap and what ended the search)."""

from __future__ import annotations

from typing import Any

from poetsim import clock
from poetsim.optimizer.lowering import lower_plan
from poetsim.optimizer.plan import (
    PlanMetrics,
    StagePlan,
    drop_unread_page_outs,
    evaluate_plan,
)
from poetsim.optimizer.search.result import SAME_ENERGY, SolveResult, SolveStatus
from poetsim.request import Request
from poetsim.schedule import check_schedule
from poetsim.schedule.metadata import stamped

__all__ = ["finish"]


def finish(base: dict[str, Any], plan: StagePlan, metrics: PlanMetrics, restricted: bool, *,
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
    gap = None
    if bound is not None and objective > 0:
        gap = max(0.0, (objective - bound) / objective)
    status, message = _status(base, objective, request.plain_energy_j, restricted, bound=bound,
                              gap=gap, scip_status=scip_status, time_limit_s=time_limit_s)
    schedule = stamped(
        schedule, request=request.metadata(), method=base["method"], status=status.value,
        restricted=restricted, solver_deadline_s=base["deadline_s"],
        predicted_energy_j=metrics.energy_j, predicted_time_s=metrics.time_s,
        predicted_peak_ram_bytes=metrics.peak_ram_bytes, gap=gap, bound_j=bound)
    return SolveResult(status, message, **base, schedule=schedule, plan=plan, metrics=metrics,
                       objective_j=objective, bound_j=bound, gap=gap, **timing)


def _status(base: dict[str, Any], objective: float, plain_energy: float, restricted: bool, *,
            bound: float | None, gap: float | None, scip_status: str, time_limit_s: float
            ) -> tuple[SolveStatus, str]:
    """The status a plan of energy ``objective`` has earned, and its message."""
    if scip_status == "optimal" and not restricted:
        status, message = SolveStatus.OPTIMAL, "optimal (proven by SCIP)"
    elif objective <= plain_energy * (1 + 1e-12) and not restricted:
        status, message = SolveStatus.OPTIMAL, (
            "optimal (proven: every op runs once and nothing is paged, the least any "
            "schedule can spend)")
    elif bound is not None and objective <= bound * (1 + SAME_ENERGY) and not restricted:
        status, message = SolveStatus.OPTIMAL, "optimal (proven: equals the lower bound)"
    else:
        status = SolveStatus.FEASIBLE
        why = _why_not_proven(scip_status, base["effort"], clock.named(time_limit_s,
                                                                      _whose(base)))
        message = f"feasible, gap {gap:.2%} to the lower bound ({why})"
        if restricted:
            message += "; restricted formulation: not proven optimal for the exact problem"
    if base["effort"] is not None and "time" in base["limits_hit"]:
        message += (f"; {clock.named(time_limit_s, _whose(base))} (a safety cap) ended part "
                    "of the search before the effort limit, so this result depends on the "
                    "machine's speed")
    return status, message


def _whose(base: dict[str, Any]) -> str:
    """Whose share of the time limit a search's is: ``"poet's search"``."""
    return f"{base['method']}'s search"


def _why_not_proven(scip_status: str, effort: int | None, limit: str) -> str:
    """What ended the search short of a proof, in words (``limit``: the time limit's,
    :func:`poetsim.clock.named`)."""
    return {"timelimit": limit, "gaplimit": "gap limit",
            "nodelimit": f"effort limit {effort} nodes",
            "totalnodelimit": f"effort limit {effort} nodes",
            "lpiterlimit": f"effort limit {effort} nodes' LP iterations",
            "optimal-for-approximation": "optimal only for the restricted or "
                                         "memory-rounded model",
            "infeasible": "SCIP found the approximate model infeasible; greedy schedule",
            "tolerance": "SCIP's best plan broke the budget within its numerical "
                         "tolerance; greedy schedule",
            "build-timelimit": f"{limit} ran out while building the MILP: greedy "
                               "schedule"}.get(scip_status, scip_status)
