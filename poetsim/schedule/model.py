"""The op-list energy and time model: what a schedule should cost, from its steps alone.

:func:`predict` prices an op list with the per-op costs (:class:`poetsim.costs.OpCosts`)
on a simple timeline of the CPU and one transfer lane. Every method's predicted figures,
the optimizer's check of its plans and the verdict's model energy come from here, so a
schedule is priced the same way whoever made it. The simulator
(:mod:`poetsim.sim`) is the detailed model the verdict trusts.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.schedule.ops import Action, Schedule, Step
from poetsim.schedule.replay import Replay, replay

__all__ = ["OpListFigures", "predict"]


@attrs.frozen
class OpListFigures:
    """Energy, time and peak of an op list under the per-op cost model."""

    energy_j: float
    compute_energy_j: float
    transfer_energy_j: float
    wait_energy_j: float
    storage_wakeups: int
    time_s: float
    peak_ram_bytes: int


def predict(graph: TrainingGraph, costs: OpCosts,
            steps: Schedule | Sequence[Step] | Replay) -> OpListFigures:
    """Predicted energy, time and activation peak of an op list (or of its finished
    :class:`~poetsim.schedule.replay.Replay`).

    Energy: every COMPUTE at its op's compute energy, every PAGE_OUT / PAGE_IN at its
    transfer energy, plus the time-proportional energy of the timeline below
    (:class:`poetsim.costs.WaitPower`). Time: without DMA everything runs in list order on
    the CPU; with DMA, transfers run one at a time on a transfer lane, a page-out starts at
    its step, a page-in starts at its step (or when the lane frees up) and a COMPUTE waits
    for the page-ins of its inputs, and for the writes of tensors freed while they were
    written when their RAM is needed to stay within the schedule's own peak (as the
    simulator's CPU does); a run that holds the storage device (it streams its weights or
    writes them back, :meth:`~poetsim.schedule.replay.Replay.streams`) waits for
    every transfer before it. A COMPUTE that streams its weights costs the op's compute
    time and energy, any other its held ones (``held_compute_*``: the same for an op
    reading no weights from storage). A transfer that finds the storage asleep (the
    first, or one more than the auto-sleep timeout after the previous one ended) waits for
    its wake-up first. Peak: activation bytes by the contract (held weights included).
    """
    replayed = steps if isinstance(steps, Replay) else replay(graph, steps)
    steps = replayed.steps
    ram = replayed.ram_bytes
    peak = max(ram, default=0)
    reads = replayed.reads_weights
    wait = costs.wait
    written: dict[int, float] = {}  # tensor -> when its page-out ends
    held: list[tuple[float, int]] = []  # heap of (write end, bytes) of tensors freed while written
    held_bytes = 0
    e_compute = e_transfer = 0.0
    overlap = not costs.cpu_moves  # the cost model says who moves the bytes
    cpu = lane = 0.0
    busy_cpu = busy_storage = 0.0
    wakeups = 0
    last_end: float | None = None  # when the storage's last transfer ended
    ready: dict[int, float] = {}

    def transfer(start: float, seconds: float) -> float:
        """Run one transfer from ``start`` (waking the storage if it sleeps); its end."""
        nonlocal wakeups, last_end, busy_storage
        if last_end is None or start - last_end > wait.awake_s:
            wakeups += 1
            start += wait.wakeup_s
        last_end = start + seconds
        busy_storage += seconds
        return last_end

    for number, step in enumerate(steps):
        k = step.op
        if step.action is Action.COMPUTE:
            read = reads[number]
            seconds = float((costs.compute_time_s if read else costs.held_compute_time_s)[k])
            e_compute += float((costs.compute_energy_j if read
                                else costs.held_compute_energy_j)[k])
            start = max([cpu] + [ready.get(u, 0.0) for u in graph.predecessors(k)])
            if overlap and replayed.streams(number):  # it holds the storage: transfers end first
                start = max(start, lane)
            # a freed tensor's RAM returns when its write ends: wait for as many writes as
            # the schedule's own peak needs
            while held and (held[0][0] <= start or ram[number] + held_bytes > peak):
                end, nbytes = heapq.heappop(held)
                start, held_bytes = max(start, end), held_bytes - nbytes
            cpu = start + seconds
            busy_cpu += seconds
            ready[k] = cpu
        elif step.action in (Action.PAGE_OUT, Action.PAGE_IN):
            write = step.action is Action.PAGE_OUT
            seconds = float((costs.pageout_time_s if write else costs.pagein_time_s)[k])
            e_transfer += float((costs.pageout_energy_j if write else costs.pagein_energy_j)[k])
            if overlap:
                lane = transfer(max(lane, cpu), seconds)
            else:
                cpu = transfer(cpu, seconds)
                busy_cpu += seconds
            if write:
                written[k] = lane if overlap else cpu
            else:
                ready[k] = lane if overlap else cpu
        elif step.action is Action.FREE and written.get(k, 0.0) > cpu:
            heapq.heappush(held, (written[k], int(costs.output_bytes[k])))
            held_bytes += int(costs.output_bytes[k])
    makespan = max(cpu, lane)
    e_wait = wait.energy_j(makespan_s=makespan, cpu_busy_s=busy_cpu,
                           storage_busy_s=busy_storage, wakeups=wakeups)
    return OpListFigures(energy_j=e_compute + e_transfer + e_wait, compute_energy_j=e_compute,
                         transfer_energy_j=e_transfer, wait_energy_j=e_wait,
                         storage_wakeups=wakeups, time_s=makespan,
                         peak_ram_bytes=peak)
