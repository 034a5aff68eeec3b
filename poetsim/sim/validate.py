"""Can the simulator execute this schedule? A fast structural pre-check.

The simulator runs any schedule that follows the contract of :mod:`poetsim.schedule.ops`,
but it cannot execute one that breaks a *structural* rule (wrong graph, an input not in
RAM, a page-in of a tensor never written, ...). :func:`validate_structure` replays the
structural rules in one lean pass; only when it finds a problem (or the graph keeps weights
on storage, whose steps are the checker's rule) does it ask the independent
checker (:func:`poetsim.schedule.check.check_schedule`) for the canonical verdict and
message, so the error names the same rule, step and op as the checker would. The RAM
budget and the storage capacity are *not* structural: the simulator runs over them and
records the violation.

The graph fingerprint (a SHA-256 over the whole graph) is cached per graph object: graphs
are immutable, and hashing dominated short simulations.
"""

from __future__ import annotations

from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.schedule.check import ScheduleError, check_schedule
from poetsim.schedule.ops import Action, Schedule

__all__ = ["validate_structure"]

def _structurally_valid(graph: TrainingGraph, schedule: Schedule) -> bool:
    n = len(graph.ops)
    resident = [False] * n
    stored = [False] * n
    computed = [False] * n
    preds = graph.predecessors
    for step in schedule.steps:
        k = step.op
        if k >= n:
            return False
        action = step.action
        if action is Action.COMPUTE:
            if resident[k]:
                return False
            for u in preds(k):
                if not resident[u]:
                    return False
            resident[k] = computed[k] = True
        elif action is Action.FREE:
            if not resident[k]:
                return False
            resident[k] = False
        elif action is Action.PAGE_OUT:
            if not resident[k] or stored[k]:
                return False
            stored[k] = True
        elif action is Action.PAGE_IN:
            if not stored[k] or resident[k]:
                return False
            resident[k] = True
    return all(computed)


def validate_structure(graph: TrainingGraph, schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` if ``schedule`` cannot be executed on ``graph``. With
    weights on storage the checker judges it outright: where the weight steps go is its
    rule (the fast replay knows only the tensors)."""
    streamed = bool(WeightsOnStorage.of(graph))
    if (not streamed and schedule.graph_fingerprint == graph_fingerprint(graph)
            and _structurally_valid(graph, schedule)):
        return
    result = check_schedule(graph, schedule)
    if result.violation is not None:
        raise ScheduleError(f"cannot simulate: {result.violation.message} "
                            f"[{result.violation.rule}]")
    if streamed:
        return
    raise ScheduleError("cannot simulate: the schedule breaks a structural rule of the "
                        "schedule contract")  # pragma: no cover - the checker disagrees
