"""Whether a schedule fits a graph: shared by the JSON (:mod:`poetsim.schedule.io`) and the
binary (:mod:`poetsim.schedule.binary`) readers and writers."""

from __future__ import annotations

from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.schedule.check import ScheduleError
from poetsim.schedule.ops import Schedule

__all__ = ["check_fits"]


def check_fits(schedule: Schedule, graph: TrainingGraph) -> None:
    """Raise :class:`ScheduleError` unless ``schedule`` was made for ``graph``."""
    expected = graph_fingerprint(graph)
    if schedule.graph_fingerprint != expected:
        raise ScheduleError(
            f"schedule for graph {schedule.graph_name!r} (fingerprint "
            f"{schedule.graph_fingerprint[:12]!r}) does not fit graph {graph.name!r} "
            f"(fingerprint {expected[:12]!r}) [fingerprint_mismatch]")
    n = len(graph.ops)
    for position, step in enumerate(schedule.steps):
        if step.op >= n:
            raise ScheduleError(f"step {position} ({step.describe()}): op index {step.op} is "
                                f"not an op of graph {graph.name!r} ({n} ops) [unknown_op]")
