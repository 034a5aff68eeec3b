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
from typing import NamedTuple

import attrs
import numpy as np

from poetsim.costs import OpCosts
from poetsim.schedule.ops import Action
from poetsim.schedule.replay import Replay

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


def program_profile(replay: Replay, costs: OpCosts, *, resident_bytes: int,
                    cpu_moves_bytes: bool) -> ProgramProfile:
    """List-order RAM and estimated step start times of a finished ``replay`` (transfers
    take CPU time without DMA; a MOVE takes its copy's time). A COMPUTE that streams its
    weights takes the op's compute time, any other its held compute time (the same for an
    op reading no weights)."""
    compute_s = costs.compute_time_s.tolist()
    held_s = costs.held_compute_time_s.tolist()
    in_s = costs.pagein_time_s.tolist()
    out_s = costs.pageout_time_s.tolist()
    move_s = costs.move_time_s.tolist()
    t = 0.0
    start: list[float] = []
    COMPUTE, PAGE_IN, PAGE_OUT = Action.COMPUTE, Action.PAGE_IN, Action.PAGE_OUT
    for step, read in zip(replay.steps, replay.reads_weights):
        k, action = step.op, step.action
        start.append(t)
        if action is COMPUTE:
            t += compute_s[k] if read else held_s[k]
        elif action is Action.MOVE:  # the CPU waits for a copy, or makes it
            t += move_s[k]
        elif cpu_moves_bytes:
            t += in_s[k] if action is PAGE_IN else (out_s[k] if action is PAGE_OUT else 0.0)
    ram = [b + resident_bytes for b in replay.ram_bytes]
    return ProgramProfile(start, ram, max(ram, default=resident_bytes), t,
                          dict(replay.counts), replay.recomputes)


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


def plan_transfers(replay: Replay, costs: OpCosts, profile: ProgramProfile, *,
                   ram_limit_bytes: int, dma: bool,
                   wakeup_latency_s: float = 0.0) -> list[PlannedTransfer]:
    """Plan every transfer of a finished ``replay`` (see the module docstring); in step
    order."""
    names = [op.name for op in replay.graph.ops]
    size = costs.output_bytes.tolist()
    start = profile.start_s
    steps = replay.steps
    n = len(steps)
    by_step: dict[int, PlannedTransfer] = {}
    lane = _Lane()
    write_end: dict[int, float] = {}
    lane_free = 0.0
    page_ins: list[tuple[float, int, int, int, int]] = []
    for i in replay.transfer_positions:
        k = steps[i].op
        if steps[i].action is Action.PAGE_OUT:
            duration = float(costs.pageout_time_s[k])
            by_step[i] = PlannedTransfer("page_out", k, names[k], i, -1, i, 0.0, start[i],
                                         start[i], duration)
            if dma:  # the lane takes page-outs first in, first out
                s = max(start[i], lane_free)
                lane_free = s + duration
                lane.add(s, lane_free)
                write_end[k] = lane_free
        elif not dma:
            by_step[i] = PlannedTransfer("page_in", k, names[k], i, -1, i, 0.0, start[i],
                                         start[i], float(costs.pagein_time_s[k]))
        else:
            consumer = replay.page_in_consumer[i]
            deadline = start[consumer] if consumer >= 0 else start[i]
            page_ins.append((deadline, i, k, consumer, replay.page_in_after[i] + 1))
    if not dma:
        return [by_step[i] for i in sorted(by_step)]

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
