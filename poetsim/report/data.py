"""The numbers behind the plots: pure, deterministic extraction from reports and schedules.

Nothing here imports matplotlib, so the series can be tested (and reused in tables or
notebooks) on their own:

* :func:`ram_series`: live RAM (resident region plus activations) over time, step-wise;
* :func:`power_series`: power per component over time, piecewise constant;
* :func:`schedule_matrix`: the stage x op matrix of a schedule (POET / Checkmate style);
* :func:`byte_unit`, :func:`watt_unit`: a readable unit for an axis.
"""

from __future__ import annotations

import numpy as np

from poetsim.errors import InputError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.schedule.ops import Action, Schedule
from poetsim.schedule.replay import Replay
from poetsim.sim.report import SimReport
from poetsim.sim.timeline import Timeline

__all__ = [
    "CELL_COMPUTE", "CELL_EMPTY", "CELL_NAMES", "CELL_PAGE_IN", "CELL_PAGE_OUT",
    "CELL_RECOMPUTE", "CELL_RESIDENT", "backward_start", "byte_unit", "power_series",
    "ram_series", "schedule_matrix", "watt_unit",
]

# Codes of schedule_matrix cells, in increasing precedence (a cell shows the highest code
# of what happens to that tensor in that stage).
CELL_EMPTY = 0
CELL_RESIDENT = 1
CELL_COMPUTE = 2
CELL_RECOMPUTE = 3
CELL_PAGE_OUT = 4
CELL_PAGE_IN = 5
CELL_NAMES = {
    CELL_EMPTY: "empty",
    CELL_RESIDENT: "resident",
    CELL_COMPUTE: "compute",
    CELL_RECOMPUTE: "recompute",
    CELL_PAGE_OUT: "page-out",
    CELL_PAGE_IN: "page-in",
}


def _timeline(report: SimReport, what: str) -> Timeline:
    if not isinstance(report, SimReport):
        raise InputError(f"expected a SimReport, got {type(report).__name__}")
    if report.timeline is None:
        raise InputError(f"cannot plot {what}: the report of {report.graph_name!r} on "
                         f"{report.board_name!r} has no timeline; simulate with trace=True")
    return report.timeline


def ram_series(report: SimReport) -> tuple[np.ndarray, np.ndarray]:
    """Live RAM over time: ``(times_s, bytes)``, to draw with ``drawstyle="steps-post"``.

    ``bytes[i]`` is the RAM in use (the resident region plus every live tensor, buffer and
    workspace) from ``times_s[i]`` on. Every allocation and release is a sample, so several
    samples may share a time (an instantaneous rise and fall) and ``bytes.max()`` equals
    ``report.peak_ram_bytes``. The series starts at 0 s with the resident region and is
    extended to the makespan with its last value.
    """
    timeline = _timeline(report, "RAM over time")
    samples = list(timeline.ram) or [(0.0, report.resident_bytes)]
    times = [float(t) for t, _ in samples]
    values = [int(b) for _, b in samples]
    if times[-1] < report.makespan_s:
        times.append(float(report.makespan_s))
        values.append(values[-1])
    return np.asarray(times, dtype=float), np.asarray(values, dtype=np.int64)


def _component_rank(name: str) -> tuple[int, str]:
    return ({"cpu": 0, "storage": 2}.get(name, 1), name)


def power_series(report: SimReport) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Power per component over time: ``(times_s, {component: watts})``.

    ``times_s`` holds every power-state transition of any component, from 0 to the
    makespan, sorted and without duplicates. ``watts[c][i]`` is component ``c``'s power
    from ``times_s[i]`` to ``times_s[i + 1]``; the last entry (at the makespan) repeats the
    one before so that a ``steps-post`` plot ends flat. Integrating, i.e.
    ``sum(watts[c][:-1] * diff(times_s))``, gives the component's energy. Components come
    in a fixed order: ``cpu``, then the others (``dma``, ...) by name, then ``storage``.
    """
    timeline = _timeline(report, "power over time")
    by_component: dict[str, list] = {}
    for st in timeline.states:
        by_component.setdefault(st.component, []).append(st)
    end = max([float(report.makespan_s)] + [float(st.end_s) for st in timeline.states])
    points = {0.0, end}
    for st in timeline.states:
        points.add(float(st.start_s))
        points.add(float(st.end_s))
    times = np.array(sorted(points), dtype=float)
    watts: dict[str, np.ndarray] = {}
    for component in sorted(by_component, key=_component_rank):
        states = sorted(by_component[component], key=lambda s: (s.start_s, s.end_s))
        starts = np.array([float(s.start_s) for s in states])
        ends = np.array([float(s.end_s) for s in states])
        power = np.array([float(s.power_w) for s in states])
        # The state in force at each time: the last one started at or before it.
        index = np.searchsorted(starts, times, side="right") - 1
        inside = (index >= 0) & (times < ends[np.clip(index, 0, None)])
        values = np.where(inside, power[np.clip(index, 0, None)], 0.0)
        if len(values) > 1:
            values[-1] = values[-2]
        watts[component] = values
    return times, watts


def backward_start(graph: TrainingGraph) -> int:
    """Index of the first op after the loss (where the backward pass starts)."""
    for i, op in enumerate(graph.ops):
        if op.phase is Phase.LOSS:
            return i + 1
    return len(graph.ops)


def schedule_matrix(graph: TrainingGraph, schedule: Schedule) -> np.ndarray:
    """The schedule as a ``stages x ops`` matrix of cell codes (``CELL_*``).

    Row ``t`` is stage ``t`` (``step.stage``), column ``i`` is op ``i`` (its output tensor).
    A cell holds, in increasing precedence, :data:`CELL_RESIDENT` (tensor ``i`` is in RAM
    when stage ``t`` starts, POET's ``S_RAM``), :data:`CELL_COMPUTE` (op ``i`` runs for the
    first time), :data:`CELL_RECOMPUTE` (it runs again), :data:`CELL_PAGE_OUT` or
    :data:`CELL_PAGE_IN`; a cell where several happen shows the highest one. "In RAM when
    the stage starts" is taken from replaying the steps in list order up to the first step
    of that stage.
    """
    rows = schedule.stages
    matrix = np.zeros((rows, len(graph.ops)), dtype=np.int8)
    codes = {Action.PAGE_IN: CELL_PAGE_IN, Action.PAGE_OUT: CELL_PAGE_OUT}
    walk = Replay(graph, schedule.steps)  # the contract's state before each step
    seen_stage: set[int] = set()
    for effect in walk:
        t, k = effect.stage, effect.op
        if t not in seen_stage:
            seen_stage.add(t)
            row = matrix[t]
            resident = np.flatnonzero(walk.resident)
            row[resident] = np.maximum(row[resident], CELL_RESIDENT)
        if effect.action is Action.COMPUTE:
            code = CELL_RECOMPUTE if effect.recompute else CELL_COMPUTE
        else:
            code = codes.get(effect.action)
            if code is None:
                continue
        matrix[t, k] = max(matrix[t, k], code)
    return matrix


_BYTE_UNITS = (("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30))


def byte_unit(max_bytes: float) -> tuple[str, int]:
    """The binary unit in which ``max_bytes`` reads best: ``(name, bytes per unit)``."""
    name, scale = _BYTE_UNITS[0]
    for unit, size in _BYTE_UNITS:
        if abs(max_bytes) >= size:
            name, scale = unit, size
    return name, scale


def watt_unit(max_watts: float) -> tuple[str, float]:
    """``("W", 1.0)``, ``("mW", 1e-3)`` or ``("µW", 1e-6)``: the unit for ``max_watts``."""
    value = abs(max_watts)
    if value >= 1.0:
        return "W", 1.0
    if value >= 1e-3 or value == 0:
        return "mW", 1e-3
    return "µW", 1e-6
