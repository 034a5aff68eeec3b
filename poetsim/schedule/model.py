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

from poetsim.clock import Ticker, stop_at
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
    #: of ``energy_j``: the MOVE steps' copies (compaction)
    move_energy_j: float = 0.0


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
    its wake-up first. A MOVE (compaction) copies its tensor at its move cost
    (:func:`poetsim.costs.move_cost`) once a transfer of that tensor has ended: the
    CPU waits, awake, while the DMA engine copies, or copies itself without DMA. Peak:
    activation bytes by the contract (held weights included).
    """
    replayed = steps if isinstance(steps, Replay) else replay(graph, steps)
    timeline = _Timeline(graph, costs, replayed)
    ticker = Ticker(stop_at())  # a command's limit
    for number, step in enumerate(replayed.steps):
        ticker.tick()
        if step.action is Action.COMPUTE:
            timeline.compute(number, step.op)
        elif step.action in (Action.PAGE_OUT, Action.PAGE_IN):
            timeline.move(step.op, write=step.action is Action.PAGE_OUT)
        elif step.action is Action.FREE:
            timeline.free(step.op)
        elif step.action is Action.MOVE:
            timeline.relocate(step.op)
    return timeline.figures()


class _Timeline:
    """The CPU and the transfer lane of :func:`predict`, advanced step by step."""

    def __init__(self, graph: TrainingGraph, costs: OpCosts, replayed: Replay) -> None:
        self.graph, self.costs, self.replayed = graph, costs, replayed
        self.ram = replayed.ram_bytes
        self.peak = max(self.ram, default=0)
        self.written: dict[int, float] = {}  # tensor -> when its page-out ends
        #: heap of (write end, bytes) of tensors freed while written
        self.held: list[tuple[float, int]] = []
        self.held_bytes = 0
        self.e_compute = self.e_transfer = self.e_move = 0.0
        self.overlap = not costs.cpu_moves  # the cost model says who moves the bytes
        self.cpu = self.lane = 0.0
        self.busy_cpu = self.busy_storage = 0.0
        self.wakeups = 0
        self.last_end: float | None = None  # when the storage's last transfer ended
        self.ready: dict[int, float] = {}

    def _transfer(self, start: float, seconds: float) -> float:
        """Run one transfer from ``start`` (waking the storage if it sleeps); its end."""
        wait = self.costs.wait
        if self.last_end is None or start - self.last_end > wait.awake_s:
            self.wakeups += 1
            start += wait.wakeup_s
        self.last_end = start + seconds
        self.busy_storage += seconds
        return self.last_end

    def compute(self, number: int, k: int) -> None:
        """COMPUTE k at step ``number``: after its inputs, the lane if it holds the storage,
        and the writes whose RAM the schedule's own peak needs back."""
        costs = self.costs
        read = self.replayed.reads_weights[number]
        seconds = float((costs.compute_time_s if read else costs.held_compute_time_s)[k])
        self.e_compute += float((costs.compute_energy_j if read
                                 else costs.held_compute_energy_j)[k])
        start = max([self.cpu] + [self.ready.get(u, 0.0) for u in self.graph.predecessors(k)])
        if self.overlap and self.replayed.streams(number):  # transfers end first
            start = max(start, self.lane)
        # a freed tensor's RAM returns when its write ends: wait for as many writes as
        # the schedule's own peak needs
        held, need = self.held, self.ram[number]
        while held and (held[0][0] <= start or need + self.held_bytes > self.peak):
            end, nbytes = heapq.heappop(held)
            start, self.held_bytes = max(start, end), self.held_bytes - nbytes
        self.cpu = start + seconds
        self.busy_cpu += seconds
        self.ready[k] = self.cpu

    def move(self, k: int, *, write: bool) -> None:
        """PAGE_OUT or PAGE_IN k: on the lane with DMA, else on the CPU."""
        costs = self.costs
        seconds = float((costs.pageout_time_s if write else costs.pagein_time_s)[k])
        self.e_transfer += float((costs.pageout_energy_j if write else costs.pagein_energy_j)[k])
        if self.overlap:
            self.lane = self._transfer(max(self.lane, self.cpu), seconds)
        else:
            self.cpu = self._transfer(self.cpu, seconds)
            self.busy_cpu += seconds
        (self.written if write else self.ready)[k] = self.lane if self.overlap else self.cpu

    def relocate(self, k: int) -> None:
        """MOVE k: the copy starts once a read or a write of the tensor has ended; the CPU
        waits for the DMA engine's copy (awake, not busy) or makes it itself."""
        seconds = float(self.costs.move_time_s[k])
        self.e_move += float(self.costs.move_energy_j[k])
        start = max(self.cpu, self.ready.get(k, 0.0), self.written.get(k, 0.0))
        self.cpu = start + seconds
        if not self.overlap:
            self.busy_cpu += seconds

    def free(self, k: int) -> None:
        """FREE k: a tensor still being written keeps its RAM until the write ends."""
        if self.written.get(k, 0.0) > self.cpu:
            nbytes = int(self.costs.output_bytes[k])
            heapq.heappush(self.held, (self.written[k], nbytes))
            self.held_bytes += nbytes

    def figures(self) -> OpListFigures:
        makespan = max(self.cpu, self.lane)
        e_wait = self.costs.wait.energy_j(makespan_s=makespan, cpu_busy_s=self.busy_cpu,
                                          storage_busy_s=self.busy_storage,
                                          wakeups=self.wakeups)
        return OpListFigures(energy_j=self.e_compute + self.e_transfer + self.e_move + e_wait,
                             compute_energy_j=self.e_compute,
                             transfer_energy_j=self.e_transfer, wait_energy_j=e_wait,
                             storage_wakeups=self.wakeups, time_s=makespan,
                             peak_ram_bytes=self.peak, move_energy_j=self.e_move)
