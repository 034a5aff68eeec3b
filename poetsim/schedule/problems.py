"""What goes wrong reading a schedule file, before the file's name is known, and whether a
schedule fits a graph: shared by the JSON (:mod:`poetsim.schedule.io`) and the binary
(:mod:`poetsim.schedule.binary`) readers."""

from __future__ import annotations

from poetsim.errors import ScheduleFileError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.schedule.check import ScheduleError
from poetsim.schedule.ops import Schedule

__all__ = ["FileProblem", "check_fits"]


class FileProblem(Exception):
    """A problem found while reading, before the source is prefixed (:meth:`error`)."""

    def __init__(self, where: str, detail: str, rule: str, position: int | None = None) -> None:
        super().__init__(detail)
        self.where, self.detail, self.rule, self.position = where, detail, rule, position

    def error(self, source: str) -> ScheduleFileError:
        parts = [source, self.where, self.detail] if self.where else [source, self.detail]
        return ScheduleFileError(f"{': '.join(parts)} [{self.rule}]", self.rule, self.position)


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
