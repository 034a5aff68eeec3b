"""The MILP's time: stage times, the storage's wake-ups and the deadline.

The stage model of :func:`poetsim.optimizer.plan.stage_timeline` in rows: without DMA the
makespan is ``sum_t compute_t + transfers_t`` (plus wake-up latency); with DMA continuous
stage times on a storage lane beside the CPU (:func:`add_lane`): per stage page-ins
arrived ``P_t``, compute done ``C_t``, lane done ``L_t``, stage end ``E_t``, each at least
the bounds of the timeline's rules; a rule that holds only for some plans is switched by
its decision and :func:`lead_bound`. Wake-ups (:func:`add_wakes`): ``W_t`` marks a stage
that transfers, ``wake_t >= W_t - sum_{s in near(t)} W_s`` one that wakes the storage.
The energy these cost is in the objective coefficients
(:mod:`~poetsim.optimizer.milp.objective`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pyscipopt import quicksum

from poetsim.optimizer.milp.objective import stage_w, wake_j

if TYPE_CHECKING:
    from poetsim.optimizer.milp.model import MilpModel

__all__ = ["add_timeline"]


def add_timeline(milp: MilpModel) -> None:
    """Stage times, storage wake-ups and the deadline, when either a deadline or priced
    time asks for them."""
    m, c, n = milp.model, milp.costs, milp.n
    wait = c.wait
    deadline = milp.deadline_s is not None and math.isfinite(milp.deadline_s)
    if not (deadline or milp.priced):
        return
    scale = milp.time_scale
    transfers: dict[int, list[tuple[float, Any]]] = {t: [] for t in range(n)}
    for (t, i), v in milp.Min.items():
        transfers[t].append((float(c.pagein_time_s[i]), v))
    for (t, i), v in milp.Mout.items():
        transfers[t].append((float(c.pageout_time_s[i]), v))
    if milp.priced and (wait.wake_j or wait.wakeup_s):
        add_wakes(milp, transfers)
    if c.cpu_moves:
        makespan = quicksum(compute_s(milp, t) + quicksum(scale * seconds * v
                                                          for seconds, v in transfers[t])
                            + wake_s(milp, t) for t in range(n))
    else:
        makespan = add_lane(milp)
    if deadline:
        # A hair under 1, so that SCIP's feasibility tolerance cannot push a plan past it.
        m.addCons(makespan <= (1.0 - 1e-7) * milp.deadline_s * scale, name="deadline")


def compute_s(milp: MilpModel, t: int) -> Any:
    """Stage ``t``'s compute time (scaled)."""
    c = milp.costs
    seconds = quicksum(milp.time_scale * float(c.compute_time_s[k]) * milp.r(t, k)
                       for k in milp.runnable(t))
    if t in milp.H:
        saved = float(c.compute_time_s[t] - c.held_compute_time_s[t])
        seconds = seconds - milp.time_scale * saved * milp.H[t]
    return seconds


def wake_s(milp: MilpModel, t: int) -> Any:
    """The storage's wake-up latency in stage ``t`` (scaled), where it may wake."""
    if t not in milp.wake:
        return 0.0
    return milp.time_scale * milp.costs.wait.wakeup_s * milp.wake[t]


def lead_bound(milp: MilpModel) -> float:
    """How far (scaled) the storage lane can ever be ahead of the CPU, to switch off
    the rows of :func:`add_lane` that hold only for some plans (each compares a time
    of the lane with one of the CPU). After stage ``t`` ends, the lane works without a
    break on what is left: page-ins of stage ``t`` (earlier ones have arrived before
    a compute of stage ``t``), the page-outs (each tensor is written at most once) and
    their wake-ups; a stage's page-ins then come on top, each tensor once. So twice
    every page-in, every page-out and a wake-up per tensor and two more bound it, and
    so does the deadline."""
    c = milp.costs
    tensors = {i for (_, i) in milp.Min} | {i for (_, i) in milp.Mout}
    seconds = sum(2 * float(c.pagein_time_s[i]) + float(c.pageout_time_s[i])
                  for i in tensors)
    if milp.moves:
        seconds += (len(tensors) + 2) * c.wait.wakeup_s
    lead = milp.time_scale * seconds * (1 + 1e-9)
    if milp.deadline_s is not None and math.isfinite(milp.deadline_s):
        lead = min(lead, 1.0)
    return lead


def add_lane(milp: MilpModel) -> Any:
    """The DMA timeline of :func:`~poetsim.optimizer.plan.stage_timeline`, per stage
    ``t``: page-ins arrived ``P``, compute done ``C``, lane done ``L``, stage end ``E``;
    ``y_t`` / ``v_t`` (continuous, integral at integral plans) mark a stage that reads
    one of its page-ins / pages in at all (the next stage's compute then waits for
    them), :func:`_holds` one whose compute holds the storage (it waits for the lane);
    :func:`add_write_waits` adds the waits for writes. Rows that hold only under such
    a mark are switched off by :func:`lead_bound`. Returns the makespan
    variable, which carries the stage power in the objective."""
    m, n = milp.model, milp.n
    big = lead_bound(milp)
    ins_of: dict[int, list[tuple[int, Any]]] = {}
    outs_of: dict[int, list[tuple[int, Any]]] = {}
    for (t, i), v in milp.Min.items():
        ins_of.setdefault(t, []).append((i, v))
    for (t, i), v in milp.Mout.items():
        outs_of.setdefault(t, []).append((i, v))
    end_prev: Any = 0.0
    lane_prev: Any = 0.0
    prefetch: tuple[Any, Any] | None = None  # the previous stage's (P, v) if it pages in
    for t in range(n):
        end_prev, lane_prev, prefetch = _lane_stage(
            milp, t, ins_of.get(t, []), outs_of.get(t, []), end_prev, lane_prev, prefetch,
            big)
    add_write_waits(milp, big)
    makespan = m.addVar(vtype="C", lb=0.0, name="makespan",
                        obj=milp.energy_scale * stage_w(milp.costs) / milp.time_scale)
    milp.makespan = makespan
    if n:
        m.addCons(makespan >= end_prev, name="makespan_cpu")
        m.addCons(makespan >= lane_prev, name="makespan_lane")
    return makespan


def _lane_stage(milp: MilpModel, t: int, ins: list[tuple[int, Any]],
                outs: list[tuple[int, Any]], end_prev: Any, lane_prev: Any,
                prefetch: tuple[Any, Any] | None, big: float
                ) -> tuple[Any, Any, tuple[Any, Any] | None]:
    """Stage ``t``'s times and rows on the lane; returns its end, its lane's end and its
    (P, v) when it pages in (the next stage's prefetch)."""
    m, c, scale = milp.model, milp.costs, milp.time_scale
    compute = compute_s(milp, t)
    pagein = quicksum(scale * float(c.pagein_time_s[i]) * v for i, v in ins)
    pageout = quicksum(scale * float(c.pageout_time_s[i]) * v for i, v in outs)
    arrived = m.addVar(vtype="C", lb=0.0, name=f"P_{t}")
    done = m.addVar(vtype="C", lb=0.0, name=f"C_{t}")
    lane = m.addVar(vtype="C", lb=0.0, name=f"L_{t}")
    end = m.addVar(vtype="C", lb=0.0, name=f"E_{t}")
    milp.P[t], milp.C[t], milp.L[t], milp.E[t] = arrived, done, lane, end
    m.addCons(arrived >= lane_prev + wake_s(milp, t) + pagein, name=f"pl_{t}")
    m.addCons(arrived >= end_prev + wake_s(milp, t) + pagein, name=f"pe_{t}")
    m.addCons(done >= end_prev + compute, name=f"ce_{t}")
    m.addCons(lane >= arrived + pageout, name=f"lp_{t}")
    m.addCons(lane >= done + pageout, name=f"lc_{t}")
    m.addCons(end >= done, name=f"ec_{t}")
    if prefetch is not None:
        m.addCons(done >= prefetch[0] + compute - big * (1 - prefetch[1]), name=f"cf_{t}")
    prefetch = None
    hold = _holds(milp, t)
    if hold is not None:
        # an op streaming weights holds the storage: the lane is done first
        m.addCons(done >= lane_prev + compute - big * (1 - hold), name=f"hl_{t}")
    if ins:
        pages = _page_in_marks(milp, t, ins, arrived, done, compute, hold, big)
        prefetch = (arrived, pages)
    if t in milp.wake:
        # a stage that only writes wakes the storage when its writes start
        pages_in = milp.v.get(t, 0)
        m.addCons(lane >= done + pageout
                  + scale * c.wait.wakeup_s * (milp.wake[t] - pages_in), name=f"lw_{t}")
    return end, lane, prefetch


def _page_in_marks(milp: MilpModel, t: int, ins: list[tuple[int, Any]], arrived: Any,
                   done: Any, compute: Any, hold: Any, big: float) -> Any:
    """``y_t`` (the stage reads one of its page-ins: its compute waits for them) and
    ``v_t`` (it pages in at all), with the rows they switch; returns ``v_t``."""
    m = milp.model
    reads = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"y_{t}")
    pages = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"v_{t}")
    milp.y[t], milp.v[t] = reads, pages
    run = set(milp.runnable(t))
    # v_t is exactly whether the stage pages in (it lowers the row of a write-only
    # stage's wake-up below, so it is bounded from both sides)
    m.addCons(pages <= quicksum(v for _, v in ins), name=f"vu_{t}")
    for i, v in ins:
        m.addCons(pages >= v, name=f"v_{t}_{i}")
        for j in milp.graph.successors(i):
            if j in run:
                m.addCons(reads >= v + milp.r(t, j) - 1, name=f"y_{t}_{i}_{j}")
    m.addCons(done >= arrived + compute - big * (1 - reads), name=f"cp_{t}")
    if hold is not None:
        m.addCons(done >= arrived + compute - big * (2 - hold - pages), name=f"hp_{t}")
    return pages


def _holds(milp: MilpModel, t: int) -> Any:
    """Whether stage ``t`` runs an op that streams weights (``OpCosts.streams``): 1 for
    its own op, a continuous variable (integral at integral plans) when only a
    recomputation may, None when none can."""
    streams = milp.costs.streams
    quiet = t in milp.H and not milp.costs.writeback_bytes[t]  # held, reads nothing
    if streams[t] and not quiet:
        return 1
    recomputed = [milp.R[t, k] for k in milp.runnable(t) if k != t and streams[k]]
    if streams[t]:
        recomputed.append(1 - milp.H[t])
    if not recomputed:
        return None
    hold = milp.model.addVar(vtype="C", lb=0.0, ub=1.0, name=f"h_{t}")
    for k, r in enumerate(recomputed):
        milp.model.addCons(hold >= r, name=f"h_{t}_{k}")
    milp.hold[t] = hold
    return hold


def add_write_waits(milp: MilpModel, big: float) -> None:
    """Every stage ``s`` by which tensor ``i`` is written and that does not keep it into
    ``s + 1`` ends after the write (the first such stage is where ``i`` leaves RAM; the
    later ones follow). ``D[s,i] >= 0`` is how far the write ends after stage ``s``:
    at least ``L[t] - E[t]`` in the stage ``t`` that writes it, and carried on, less
    the stages' lengths; where the stage stops keeping ``i`` it must be 0."""
    m = milp.model
    pageable = sorted({i for (_, i) in milp.Mout})
    for i in pageable:
        behind: Any = None
        for s in range(i, milp.horizon(i) + 1):
            d = m.addVar(vtype="C", lb=0.0, name=f"D_{s}_{i}")
            milp.behind[s, i] = d
            if behind is not None:
                m.addCons(d >= behind + milp.E[s - 1] - milp.E[s], name=f"dc_{s}_{i}")
            if (s, i) in milp.Mout:
                m.addCons(d >= milp.L[s] - milp.E[s] - big * (1 - milp.Mout[s, i]),
                          name=f"dw_{s}_{i}")
            written = milp.stored.get((s + 1, i))
            if written is None:
                written = milp.stored.get((s, i), 0) + milp.Mout.get((s, i), 0)
            kept = milp.S.get((s + 1, i), 0)
            m.addCons(d <= big * (1 - written + kept), name=f"wait_{s}_{i}")
            behind = d


def add_wakes(milp: MilpModel, transfers: dict[int, list[tuple[float, Any]]]) -> None:
    """``W_t``: stage ``t`` transfers anything; ``wake_t``: it wakes the storage, that
    is it transfers and no stage since ``near[t]`` did (a continuous variable, integral
    at integral ``W``)."""
    m = milp.model
    for t, parts in transfers.items():
        if parts:
            w = m.addVar(vtype="B", name=f"W_{t}")
            milp.moves[t] = w
            m.addCons(w <= quicksum(v for _, v in parts), name=f"wu_{t}")
            for k, (_, v) in enumerate(parts):
                m.addCons(w >= v, name=f"wl_{t}_{k}")
    _add_reads_back(milp)
    moved_before = _add_moved_before(milp)
    for t, w in milp.moves.items():
        earlier = moved_before[t] - moved_before[milp.near[t]]
        wake = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"wake_{t}",
                        obj=milp.energy_scale * wake_j(milp.costs))
        m.addCons(wake >= w - earlier, name=f"wake_{t}")
        milp.wake[t] = wake


def _add_reads_back(milp: MilpModel) -> None:
    """Every write is read back: an unread page-out is pruned from any plan returned, so
    it must not pose as a way to keep the storage awake either."""
    writes: dict[int, list[Any]] = {}
    reads: dict[int, list[Any]] = {}
    for (_, i), v in milp.Mout.items():
        writes.setdefault(i, []).append(v)
    for (_, i), v in milp.Min.items():
        reads.setdefault(i, []).append(v)
    for i, written in writes.items():
        milp.model.addCons(quicksum(written) <= quicksum(reads.get(i, [])), name=f"read_{i}")


def _add_moved_before(milp: MilpModel) -> list[Any]:
    """``moved_before[t] = sum_{s < t} W_s``, so that the stages since ``near[t]`` that
    transfer count as ``moved_before[t] - moved_before[near[t]]``: four terms a row, not
    the window."""
    m = milp.model
    moved_before: list[Any] = [0]
    for t in range(milp.n):
        if t in milp.moves:
            total = m.addVar(vtype="C", lb=0.0, name=f"moved_{t + 1}")
            m.addCons(total == moved_before[t] + milp.moves[t], name=f"moved_{t + 1}")
            milp.moved_before[t + 1] = total
            moved_before.append(total)
        else:
            moved_before.append(moved_before[t])
    return moved_before
