"""The transfer planner: when each page-in starts (POET paper section 5.5, Algorithm 2).

A schedule says *which* tensors are paged and in which order; the planner decides *when*
the DMA engine moves them. It works on an estimate of the program's timeline (every op at
its OpCosts time, no stalls) and produces, per transfer, a *trigger*: the step the CPU must
reach and an offset into it. Triggers are relative to steps, so the plan adapts when the
real run drifts from the estimate.

Rules, in order:

1. **Page-outs** start at their PAGE_OUT step (as soon as the tensor is in RAM); they
   occupy the transfer lane first-in first-out.
2. **Page-ins** are placed just in time: a page-in should *arrive* when its consumer (the
   next COMPUTE that reads the tensor) starts, so it starts ``duration`` earlier (its
   duration includes a storage wake-up, conservatively). Page-ins are placed latest
   deadline first on one lane; when one would overlap a transfer already placed (two
   transfers would contend for the storage and the bus), it starts earlier, before the
   other. It never starts before the tensor's page-out ends or before the step after the
   tensor was last freed or written.
3. **RAM**: a page-in whose trigger comes before its PAGE_IN step holds its buffer from the
   trigger on. If that would take the program's RAM (per step, in list order, plus the
   buffers of earlier-planned prefetches) over the *RAM limit*, the trigger moves later,
   step by step, at worst to the PAGE_IN step itself; the transfer may then arrive late
   and the CPU stalls. The RAM limit is the smaller of the budget and the schedule's own
   peak in list order, so prefetching never raises the peak the optimizer and the checker
   computed.

On a board without DMA the CPU moves every byte itself, in list order: each transfer runs
at its own step and there is nothing to plan.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple

import attrs
import numpy as np

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.schedule.ops import Action, Step, ram_during_steps

__all__ = ["PlannedTransfer", "ProgramProfile", "plan_transfers", "program_profile"]


class ProgramProfile(NamedTuple):
    """The program in list order, without stalls.

    ``start_s[i]``: estimated start of step ``i``; ``ram_bytes[i]``: RAM while step ``i``
    runs (a COMPUTE's output and workspace included; after the step for the others), with
    the resident region; ``peak_bytes``: the largest of them (the checker's peak).
    """

    start_s: list[float]
    ram_bytes: list[int]
    peak_bytes: int
    end_s: float
    #: steps per action, and COMPUTE steps beyond the first of each op
    counts: dict[Action, int]
    recomputes: int


def program_profile(graph: TrainingGraph, steps: Sequence[Step], costs: OpCosts, *,
                    resident_bytes: int, cpu_moves_bytes: bool) -> ProgramProfile:
    """List-order RAM and estimated step start times (transfers take CPU time without DMA).
    A COMPUTE right after its READ_WEIGHTS takes the op's compute time, any other its held
    compute time (the same for an op reading no weights from storage)."""
    ram = ram_during_steps(steps, costs.output_bytes.tolist(), costs.workspace_bytes.tolist(),
                           resident_bytes, costs.held_bytes.tolist())
    compute_s = costs.compute_time_s.tolist()
    held_s = costs.held_compute_time_s.tolist()
    READ = Action.READ_WEIGHTS
    read = False  # the step before is the COMPUTE's READ_WEIGHTS
    in_s = costs.pagein_time_s.tolist()
    out_s = costs.pageout_time_s.tolist()
    t = 0.0
    start: list[float] = []
    counts = dict.fromkeys(Action, 0)
    computed = [False] * len(compute_s)
    recomputes = 0
    for step in steps:
        k, action = step.op, step.action
        start.append(t)
        counts[action] += 1
        if action is Action.COMPUTE:
            if computed[k]:
                recomputes += 1
            computed[k] = True
            t += compute_s[k] if read else held_s[k]
        elif cpu_moves_bytes:
            t += in_s[k] if action is Action.PAGE_IN else (
                out_s[k] if action is Action.PAGE_OUT else 0.0)
        read = action is READ
    return ProgramProfile(start, ram, max(ram, default=resident_bytes), t, counts, recomputes)


@attrs.frozen
class PlannedTransfer:
    """When one transfer is planned to start.

    ``trigger_step`` / ``offset_s``: the transfer is issued ``offset_s`` after the CPU
    starts step ``trigger_step`` (after a COMPUTE's inputs are in). ``planned_start_s`` is
    that moment on the estimated timeline and ``needed_s`` the estimated start of the
    consumer (the page-in's deadline; for a page-out, its own step). ``consumer_step`` is
    -1 when no COMPUTE reads a paged-in tensor before it is freed. ``ram_delayed`` marks a
    trigger moved later to keep RAM within the limit.
    """

    kind: str
    tensor: int
    op: str
    step: int
    consumer_step: int
    trigger_step: int
    offset_s: float
    planned_start_s: float
    needed_s: float
    duration_s: float
    ram_delayed: bool = False


class _Lane:
    """Busy time of the transfer lane: disjoint, sorted intervals (overlaps are merged)."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def add(self, a: float, b: float) -> None:
        if b <= a:
            return
        starts, ends = self.starts, self.ends
        lo = bisect.bisect_left(ends, a)      # first interval ending at or after a
        hi = bisect.bisect_right(starts, b)   # first interval starting after b
        if lo < hi:
            a = min(a, starts[lo])
            b = max(b, ends[hi - 1])
        starts[lo:hi] = [a]
        ends[lo:hi] = [b]

    def latest_fit(self, start: float, duration: float) -> float:
        """The latest ``s <= start`` with ``[s, s + duration)`` free."""
        starts, ends = self.starts, self.ends
        s = start
        i = bisect.bisect_left(starts, s + duration) - 1  # last interval starting before the end
        while i >= 0 and ends[i] > s:
            s = starts[i] - duration
            i -= 1
            while i >= 0 and starts[i] >= s + duration:
                i -= 1
        return s


def plan_transfers(graph: TrainingGraph, steps: Sequence[Step], costs: OpCosts,
                   profile: ProgramProfile, *, ram_limit_bytes: int, dma: bool,
                   wakeup_latency_s: float = 0.0) -> list[PlannedTransfer]:
    """Plan every transfer of ``steps`` (see the module docstring); in step order."""
    names = [op.name for op in graph.ops]
    size = costs.output_bytes.tolist()
    start = profile.start_s
    n = len(steps)
    planned: list[PlannedTransfer] = []
    if not dma:
        for i, step in enumerate(steps):
            if step.action in (Action.PAGE_IN, Action.PAGE_OUT):
                k = step.op
                write = step.action is Action.PAGE_OUT
                duration = float(costs.pageout_time_s[k] if write else costs.pagein_time_s[k])
                planned.append(PlannedTransfer(
                    "page_out" if write else "page_in", k, names[k], i, -1, i, 0.0, start[i],
                    start[i], duration))
        return planned

    # Per-tensor step positions: where the tensor itself is touched, and where it is read.
    # Step positions per op: all of them, the FREEs and the COMPUTEs. The reads of tensor
    # u are the COMPUTE positions of u's successors. Only paged-in tensors are looked up.
    touches: dict[int, list[int]] = {}
    frees: dict[int, list[int]] = {}
    computes: dict[int, list[int]] = {}
    paged: set[int] = set()
    FREE, COMPUTE, PAGE_IN = Action.FREE, Action.COMPUTE, Action.PAGE_IN
    READ, WRITE = Action.READ_WEIGHTS, Action.WRITE_WEIGHTS
    HOLD, DROP = Action.HOLD_WEIGHTS, Action.DROP_WEIGHTS
    for i, step in enumerate(steps):
        k, action = step.op, step.action
        if action is READ or action is WRITE or action is HOLD or action is DROP:
            continue  # they touch weights, not tensor k
        touches.setdefault(k, []).append(i)
        if action is COMPUTE:
            computes.setdefault(k, []).append(i)
        elif action is FREE:
            frees.setdefault(k, []).append(i)
        elif action is PAGE_IN:
            paged.add(k)
    reads: dict[int, list[int]] = {}
    for u in paged:
        positions: list[int] = []
        for v in graph.successors(u):
            positions.extend(computes.get(v, ()))
        positions.sort()
        reads[u] = positions

    lane = _Lane()
    write_end: dict[int, float] = {}
    lane_free = 0.0
    by_step: dict[int, PlannedTransfer] = {}
    page_ins: list[tuple[float, int, int, int, int]] = []
    for i, step in enumerate(steps):
        k = step.op
        if step.action is Action.PAGE_OUT:
            duration = float(costs.pageout_time_s[k])
            s = max(start[i], lane_free)
            lane_free = s + duration
            lane.add(s, lane_free)
            write_end[k] = lane_free
            by_step[i] = PlannedTransfer("page_out", k, names[k], i, -1, i, 0.0, start[i],
                                         start[i], duration)
        elif step.action is Action.PAGE_IN:
            touched = touches[k]
            here = bisect.bisect_left(touched, i)
            earliest_step = touched[here - 1] + 1 if here > 0 else 0
            next_free = n
            free_list = frees.get(k, ())
            f = bisect.bisect_right(free_list, i)
            if f < len(free_list):
                next_free = free_list[f]
            read_list = reads[k]
            r = bisect.bisect_right(read_list, i)
            consumer = read_list[r] if r < len(read_list) and read_list[r] < next_free else -1
            deadline = start[consumer] if consumer >= 0 else start[i]
            page_ins.append((deadline, i, k, consumer, earliest_step))

    extra = np.zeros(n, dtype=np.int64)
    ram = np.asarray(profile.ram_bytes, dtype=np.int64)
    for deadline, i, k, consumer, earliest_step in sorted(page_ins, reverse=True):
        duration = float(costs.pagein_time_s[k]) + (wakeup_latency_s if size[k] > 0 else 0.0)
        earliest = max(start[earliest_step] if earliest_step < n else start[i],
                       write_end.get(k, 0.0))
        s = lane.latest_fit(deadline - duration, duration)
        if s < earliest:
            s = earliest
        lane.add(s, s + duration)
        upper = consumer if consumer >= 0 else i
        j = bisect.bisect_right(start, s, 0, upper + 1) - 1
        if j < earliest_step:
            j, offset = earliest_step, 0.0
        else:
            offset = max(0.0, s - start[j])
        delayed = False
        if j < i:
            need = size[k]
            # The buffer is held through steps j .. i-1: start after the last step there
            # that has no room for it.
            full = np.flatnonzero(ram[j:i] + extra[j:i] > ram_limit_bytes - need)
            if len(full):
                j, offset, delayed = j + int(full[-1]) + 1, 0.0, True
            extra[j:i] += need
        by_step[i] = PlannedTransfer("page_in", k, names[k], i, consumer, j, offset,
                                     start[j] + offset, deadline, duration, delayed)
    planned = [by_step[i] for i in sorted(by_step)]
    return planned
