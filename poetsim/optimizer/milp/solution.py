"""Plans in and out of the MILP: reading a plan from a SCIP solution or the LP, writing a
plan as a complete SCIP solution (warm starts, a primal heuristic's plans), and fixing the
decisions outside a window of stages to a plan's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from poetsim.optimizer.plan import StagePlan, StageTimeline, stage_streams, stage_timeline

if TYPE_CHECKING:
    from poetsim.optimizer.milp.model import MilpModel

__all__ = ["families", "fits", "fix_outside", "lp_values", "plan_from_solution", "solution",
           "unfix"]


def families(milp: MilpModel) -> tuple[tuple[str, dict[tuple[int, int], Any]], ...]:
    """Each binary family with the StagePlan matrix it fills."""
    return (("compute", milp.R), ("keep", milp.S), ("page_in", milp.Min),
            ("page_out", milp.Mout))


def plan_from_solution(milp: MilpModel, sol: Any) -> StagePlan:
    """The plan of a SCIP solution."""
    n = milp.n
    mats = StagePlan.empty(n)
    for t in range(n):
        mats["compute"][t, t] = True
    for name, family in families(milp):
        for (t, i), var in family.items():
            if milp.model.getSolVal(sol, var) > 0.5:
                mats[name][t, i] = True
    for t in range(1, n):
        mats["stored"][t] = mats["stored"][t - 1] | mats["page_out"][t - 1]
    hold = np.zeros(n, dtype=bool)
    for b, var in milp.H.items():
        hold[b] = milp.model.getSolVal(sol, var) > 0.5
    return StagePlan(**mats, hold=hold)


def _binaries(milp: MilpModel, plan: StagePlan) -> Iterator[tuple[int, Any, bool]]:
    """Every binary, with the stage it belongs to and its value in ``plan``."""
    for name, family in families(milp):
        matrix = getattr(plan, name)
        for (t, i), var in family.items():
            yield t, var, bool(matrix[t, i])
    for b, var in milp.H.items():
        yield b, var, bool(plan.hold[b])


def fits(milp: MilpModel, plan: StagePlan) -> bool:
    """Whether every decision of ``plan`` has a variable (or constant) in the model."""
    if plan.n != milp.n:
        return False
    for name, family in families(milp):
        matrix = getattr(plan, name)
        for t, i in zip(*np.nonzero(matrix)):
            if name == "compute" and t == i:
                continue
            if (int(t), int(i)) not in family:
                return False
    return all(int(b) in milp.H for b in np.flatnonzero(plan.hold))


def lp_values(milp: MilpModel) -> dict[str, np.ndarray]:
    """The current LP solution as fractional plan matrices (``compute[t, t]`` is 1)."""
    m, n = milp.model, milp.n
    values = {name: np.zeros((n, n)) for name, _ in families(milp)}
    np.fill_diagonal(values["compute"], 1.0)
    for name, family in families(milp):
        matrix = values[name]
        for (t, i), var in family.items():
            matrix[t, i] = m.getSolVal(None, var)
    return values


def solution(milp: MilpModel, plan: StagePlan, heuristic: Any = None) -> Any:
    """A complete SCIP solution (original space) for ``plan``."""
    m = milp.model
    sol = m.createOrigSol(heuristic) if heuristic is not None else m.createSol()
    for _, var, value in _binaries(milp, plan):
        m.setSolVal(sol, var, float(value))
    _set_memory(milp, plan, sol)
    _set_times(milp, plan, sol, stage_timeline(milp.graph, milp.costs, plan))
    return sol


def _set_memory(milp: MilpModel, plan: StagePlan, sol: Any) -> None:
    """The continuous memory variables: frees as large as allowed, ``U`` by the
    recurrence."""
    m = milp.model
    freed: dict[tuple[int, int, int], float] = {}
    for (t, i, k) in milp.F:
        keep_next = bool(plan.keep[t + 1, i]) if t + 1 < milp.n else False
        later = any(plan.compute[t, j] for j in milp.graph.successors(i) if j > k)
        freed[t, i, k] = 1.0 if (plan.compute[t, k] and not keep_next and not later) else 0.0
    for key, var in milp.F.items():
        m.setSolVal(sol, var, freed[key])
    frees_after: dict[tuple[int, int], float] = {}
    for (t, i, k), value in freed.items():
        frees_after[t, k] = frees_after.get((t, k), 0.0) + milp.mem[i] * value
    taken = {id(var) for b, var in milp.H.items() if plan.hold[b]}
    for t in range(milp.n):
        level = float(sum(milp.mem[i] for i in range(t)
                          if plan.keep[t, i] or plan.page_in[t, i]))
        level += sum(size for size, h in milp.held_at[t] if id(h) in taken)
        previous = None
        for k in milp.runnable(t):
            if previous is not None:
                level -= frees_after.get((t, previous), 0.0)
            level += milp.mem[k] * (1 if plan.compute[t, k] else 0)
            m.setSolVal(sol, milp.U[t, k], level)
            previous = k


def _set_times(milp: MilpModel, plan: StagePlan, sol: Any, timeline: StageTimeline) -> None:
    """The timeline's variables, from the plan's stage timeline."""
    m, scale = milp.model, milp.time_scale
    for times, family in ((timeline.pagein_end_s, milp.P), (timeline.compute_end_s, milp.C),
                          (timeline.lane_end_s, milp.L), (timeline.end_s, milp.E)):
        for t, var in family.items():
            m.setSolVal(sol, var, scale * float(times[t]))
    streams = stage_streams(milp.costs, plan)
    for t, var in milp.hold.items():
        m.setSolVal(sol, var, 1.0 if streams[t] else 0.0)
    for t, var in milp.y.items():
        m.setSolVal(sol, var, 1.0 if timeline.reads_page_in[t] else 0.0)
    for t, var in milp.v.items():
        m.setSolVal(sol, var, 1.0 if plan.page_in[t].any() else 0.0)
    for (s, i), var in milp.behind.items():
        # the write's end after the end of stage s, once it is written
        late = float(timeline.write_end_s[i] - timeline.end_s[s])
        written = plan.stored[s, i] or plan.page_out[s, i]
        m.setSolVal(sol, var, scale * max(0.0, late) if written else 0.0)
    if milp.makespan is not None:
        m.setSolVal(sol, milp.makespan, scale * timeline.makespan_s)
    for t, var in milp.moves.items():
        m.setSolVal(sol, var, 1.0 if (plan.page_in[t].any() or plan.page_out[t].any())
                    else 0.0)
    for t, var in milp.wake.items():
        m.setSolVal(sol, var, 1.0 if timeline.wakes[t] else 0.0)
    moves = np.cumsum(plan.page_in.any(axis=1) | plan.page_out.any(axis=1))
    for t, var in milp.moved_before.items():
        m.setSolVal(sol, var, float(moves[t - 1]))


def fix_outside(milp: MilpModel, plan: StagePlan, first: int, last: int) -> int:
    """Fix every decision outside stages ``first..last`` to ``plan``'s; returns how many
    binaries stay free."""
    m = milp.model
    free = 0
    for t, var, value in _binaries(milp, plan):
        if first <= t <= last:
            low, high = 0.0, 1.0
            free += 1
        else:
            low = high = float(value)
        m.chgVarLb(var, low)
        m.chgVarUb(var, high)
    return free


def unfix(milp: MilpModel) -> None:
    """Release every binary to [0, 1] again."""
    m = milp.model
    for var in (*(v for _, family in families(milp) for v in family.values()),
                *milp.H.values()):
        m.chgVarLb(var, 0.0)
        m.chgVarUb(var, 1.0)
