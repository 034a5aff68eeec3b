"""Execution of a schedule on the simulated board (the CPU's program and its bookkeeping).

The CPU runs the schedule's steps in list order, as one long-lived SimPy process:

``COMPUTE k``
    Waits until every input is in RAM (a page-in still in flight stalls the CPU), makes
    room if the RAM limit needs it (see below), allocates the output and workspace, starts
    the page-ins the planner triggers at this step, and runs the op for its OpCosts time
    (slower while DMA is active on a ``fair_share`` bus). An in-place COMPUTE
    (:meth:`~poetsim.schedule.replay.Replay.in_place`) allocates its workspace only, after
    a write of the input it overwrites, if still in flight, has ended.
``PAGE_OUT k``
    Reserves storage space and hands the write to the DMA engine; the CPU goes on. Without
    DMA the CPU performs the write itself, there and then.
``PAGE_IN k``
    Allocates the buffer (unless a prefetch already did) and starts the transfer if the
    planner has not started it yet and its trigger has passed. The transfer itself starts
    when the planner says (:mod:`poetsim.sim.planner`); the CPU waits for it only at the
    consumer. Without DMA the CPU reads the tensor itself, there and then.
``MOVE k``
    Compaction: waits (stalled) for a read or write of the tensor still in flight, takes
    the destination bytes beyond the source (:func:`~poetsim.schedule.replay.move_extra_bytes`)
    and copies the tensor for its move time (:func:`poetsim.costs.move_cost`): on the DMA
    engine (state ``active``, kind ``move``) while the CPU waits awake (kind ``move``), or,
    without DMA, on the CPU (state ``active``, kind ``move``); then releases those bytes.
``FREE k``
    Releases the tensor's RAM, except while its write is in flight (the RAM is released
    when the write ends) or its page-in is in flight (released when it ends; a page-in
    not started yet is cancelled).

RAM limit: the smaller of the budget and the schedule's own peak in list order. The CPU
waits for writes in flight (whose FREE has passed) only when the next allocation would
exceed that limit with them still holding RAM; if it still does not fit, the allocation
happens anyway and the RAM model records the overflow when it exceeds the budget.

At the end of the list the CPU waits (idle, possibly asleep) for the transfers still in
flight; the makespan is when the last one ends.

Timing variance: with a ``seed`` and a board whose storage gives ``write_busy``, every
page-out's extra write-busy time is drawn once, before the run, in plan order
(:func:`poetsim.sim.storage.draw_write_busy`), then every weight write-back's, in list
order: the run that writes the weights back waits (stalled) while the card is busy, and the
card spends its write power meanwhile. Without a seed the run is nominal.

The data input op is a COMPUTE like any other: its OpCosts cost is already the read of the
batch from storage (:mod:`poetsim.costs`), so it runs on the CPU for that time and energy,
without occupying the storage device or waking it (a simplification). An op that streams
weights from storage (:mod:`poetsim.graph.streaming`; its COMPUTE follows its
READ_WEIGHTS step, and a WRITE_WEIGHTS step follows it when it writes them back) has its
reads, write-backs and the storage's wake-ups between them in its cost too: of its energy
the storage's share (``OpCosts.storage_energy_j``) is booked on the storage in state
``stream``, the DMA engine's on the DMA, the rest on the CPU, its reads count in
``bytes_read`` and each WRITE_WEIGHTS books its bytes and wear on the device, and the trace
shows the stream on the storage's track. It occupies the device: once its
inputs are in RAM, the CPU holds the DMA engine (no queued page transfer starts) and
waits, stalled, for the transfers running to end, and it releases the engine when the op
ends. The storage serves one command stream at a time.

Held weights (``HOLD_WEIGHTS k`` ... ``DROP_WEIGHTS k``): the hold allocates the op's
``held_bytes`` in RAM at its step (as a PAGE_IN's buffer, taking no time: the owner's run
right after it reads them), the drop frees them. A COMPUTE without READ_WEIGHTS right
before it runs for the op's ``held_compute_time_s`` and ``held_compute_energy_j`` (the
same as its compute cost for an op that reads no weights), and holds the storage device
only when WRITE_WEIGHTS follows it (the write-back still streams).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from functools import partial
from typing import Any

import attrs
import simpy

from poetsim.boards.spec import Board
from poetsim.clock import Ticker, stop_at
from poetsim.costs import OpCosts
from poetsim.schedule.arena import ArenaPlan, adopt_layout, plan_arena
from poetsim.schedule.ops import Action
from poetsim.schedule.replay import Replay, move_extra_bytes
from poetsim.sim.bus import make_bus
from poetsim.sim.cpu import CpuModel
from poetsim.sim.dma import (
    CANCELLED,
    DONE,
    PLANNED,
    QUEUED,
    RUNNING,
    CpuMover,
    DmaEngine,
    TransferJob,
    run_transfer,
)
from poetsim.sim.jobs import draw_run_write_busy, transfer_jobs
from poetsim.sim.planner import plan_transfers, program_profile
from poetsim.sim.power import EnergyLedger
from poetsim.sim.ram import RamModel
from poetsim.sim.report import SimReport, SimViolation
from poetsim.sim.reporting import finished_report
from poetsim.sim.storage import (
    StorageModel,
)

__all__ = ["Simulation"]

_COMPUTE, _PAGE_OUT, _PAGE_IN, _FREE = Action.COMPUTE, Action.PAGE_OUT, Action.PAGE_IN, Action.FREE
_HOLD_WEIGHTS, _DROP_WEIGHTS = Action.HOLD_WEIGHTS, Action.DROP_WEIGHTS
_MOVE = Action.MOVE
_WEIGHT_STEPS = frozenset((Action.READ_WEIGHTS, Action.WRITE_WEIGHTS))


class Simulation:
    """One training iteration of ``schedule`` on ``board``; :meth:`run` returns the report."""

    def __init__(self, replay: Replay, board: Board, costs: OpCosts, *, budget_bytes: int,
                 resident_bytes: int, trace: bool,
                 seed: int | None = None) -> None:
        graph = replay.graph
        self.graph = graph
        self.board = board
        self.replay = replay
        self.schedule = replay.schedule
        self.costs = costs
        self.steps = replay.steps
        self.budget_bytes = budget_bytes
        self.resident_bytes = resident_bytes
        self.trace = trace
        self.env = env = simpy.Environment()
        self.ledger = ledger = EnergyLedger()
        self.cpu = CpuModel(env, board.cpu, ledger, record=trace)
        self.storage = StorageModel(env, board.storage, ledger, record=trace)
        self.bus = make_bus(env, board)
        self.ram = RamModel(budget_bytes, resident_bytes, record=trace)
        self._read_costs(costs)

        dma = board.dma.present
        self.profile = program_profile(replay, costs, resident_bytes=resident_bytes,
                                       cpu_moves_bytes=not dma)
        self.ram_limit = min(budget_bytes, self.profile.peak_bytes)
        self.plan = plan_transfers(replay, costs, self.profile,
                                   ram_limit_bytes=self.ram_limit, dma=dma,
                                   wakeup_latency_s=board.storage.wakeup_latency_s)
        self.arena = self._lay_out(resident_bytes, budget_bytes)
        self.jobs = transfer_jobs(board, costs, self.plan)
        self.job_at: dict[int, TransferJob] = {job.step: job for job in self.jobs}
        self.plain = self._plain_steps()
        self.triggers: dict[int, list[TransferJob]] = {}
        for job in self.jobs:
            if dma and job.kind == "page_in":
                self.triggers.setdefault(job.plan.trigger_step, []).append(job)

        self.seed = seed
        #: COMPUTE position -> (extra write-busy seconds, storage joules) of the weights it
        #: writes back, drawn by a seeded run
        self.writeback_busy: dict[int, tuple[float, float]] = {}
        busy = board.storage.write_busy
        if seed is not None and busy is not None:
            self.writeback_busy = draw_run_write_busy(replay, costs, board, self.jobs, busy, seed)

        self.dma: DmaEngine | None = None
        if dma:
            # The storage serves queue_depth commands at once: channels beyond that wait.
            channels = min(board.dma.channels, board.storage.concurrent_commands)
            self.dma = DmaEngine(env, channels, board.dma.idle_power_w, self.storage,
                                 self.bus, ledger, self._on_done, record=trace)
            self.mover: Any = self.dma
        else:
            self.mover = CpuMover(self.cpu)

        self.pos = 0
        self.arriving: dict[int, TransferJob] = {}
        self.writing: dict[int, TransferJob] = {}
        #: tensor -> bytes of its buffer an in-place output took over
        self.shared: dict[int, int] = {}
        self.pending_frees: list[TransferJob] = []
        self.outstanding: list[TransferJob] = []
        self.deferred: list[TransferJob] = []
        self.computed = [False] * len(graph.ops)
        self.violations: list[SimViolation] = []
        self.compute_s = self.cpu_transfer_s = self.stall_s = self.tail_s = 0.0
        self.slices: list[tuple[str, str, float, float, dict]] | None = [] if trace else None
        self.main = env.process(self._program())

    def _read_costs(self, costs: OpCosts) -> None:
        """The per-op figures the program reads at every step, as lists (fast to index),
        and each COMPUTE's run worked out once (:meth:`_runs`)."""
        graph = self.graph
        self.names = [op.name for op in graph.ops]
        self.size = costs.output_bytes.tolist()
        self.workspace = costs.workspace_bytes.tolist()
        self.held_bytes = costs.held_bytes.tolist()
        self.move_time = costs.move_time_s.tolist()
        self.move_energy = costs.move_energy_j.tolist()
        self.preds = [graph.predecessors(k) for k in range(len(graph.ops))]
        self.overwrites = self.replay.overwrites
        self.runs = self._runs(costs)

    def _runs(self, costs: OpCosts
              ) -> list[tuple[int, int, bool, float, float, float, float, float]]:
        """Per step (COMPUTE steps only; others hold a placeholder): the bytes it allocates
        (output and workspace; the workspace alone in place), the input whose buffer its
        output overwrites in place (-1: none), whether it streams weights
        through the storage device (reads them, or writes them back: it holds the device
        while it computes), its time, the CPU's power over it, the storage's and the DMA
        engine's shares of its energy (a streamed run's, booked on the parts that spend
        them), and the CPU's joules (booked at once by a run of no time)."""
        replay = self.replay
        size, workspace = self.size, self.workspace
        compute_time = costs.compute_time_s.tolist()
        compute_energy = costs.compute_energy_j.tolist()
        held_time, held_energy = (costs.held_compute_time_s.tolist(),
                                  costs.held_compute_energy_j.tolist())
        storage_share, dma_share = costs.storage_energy_j.tolist(), costs.dma_energy_j.tolist()
        held_storage, held_dma = (costs.held_storage_energy_j.tolist(),
                                  costs.held_dma_energy_j.tolist())
        runs: list[tuple[int, int, bool, float, float, float, float, float]] = []
        for i, step in enumerate(self.steps):
            k = step.op
            if step.action is not _COMPUTE:
                runs.append((0, -1, False, 0.0, 0.0, 0.0, 0.0, 0.0))
                continue
            into = self.overwrites.get(i, -1)
            need = workspace[k] if into >= 0 else size[k] + workspace[k]
            streams = replay.reads_weights[i] or replay.writes_weights[i]
            if replay.reads_weights[i]:  # streams its weights from storage
                duration, energy = compute_time[k], compute_energy[k]
                storage_j, dma_j = storage_share[k], dma_share[k]
            else:  # reads no weights from storage, or they are held
                duration, energy = held_time[k], held_energy[k]
                storage_j, dma_j = held_storage[k], held_dma[k]
            if not streams:
                storage_j = dma_j = 0.0
            if storage_j or dma_j:
                energy -= storage_j + dma_j
            power_w = energy / duration if duration > 0.0 else 0.0
            runs.append((need, into, streams, duration, power_w, storage_j, dma_j, energy))
        return runs

    def _lay_out(self, resident_bytes: int, budget_bytes: int) -> ArenaPlan:
        """Where the runtime keeps every buffer, and the plan's prefetches clamped to it.

        The schedule's own layout when it has one for this resident state, else one planned,
        a prefetch holding its buffer from its trigger (or, when that does not fit, from
        where the layout leaves room); a layout for another resident state is still checked
        against the steps."""
        replay = self.replay
        layout = replay.schedule.layout if replay.schedule is not None else None
        if layout is not None and layout.resident_bytes != resident_bytes:
            adopt_layout(replay, layout, resident_bytes=None)
            layout = None
        if layout is not None:
            arena = adopt_layout(replay, layout, resident_bytes=resident_bytes)
        else:
            arena = plan_arena(replay, resident_bytes=resident_bytes, prefetch_from={
                p.step: p.trigger_step for p in self.plan
                if p.kind == "page_in" and p.trigger_step < p.step}, fit_bytes=budget_bytes)
        # a prefetch starts no earlier than the layout holds its buffer
        earliest = arena.prefetch_from
        self.plan = [
            attrs.evolve(p, trigger_step=earliest.get(p.step, p.step), offset_s=0.0)
            if p.kind == "page_in" and p.trigger_step < earliest.get(p.step, p.step)
            else p for p in self.plan]
        return arena

    # ------------------------------------------------------------------ transfers
    def _on_done(self, job: TransferJob) -> None:
        now = self.env.now
        outstanding = self.outstanding
        if job in outstanding:
            outstanding.remove(job)
        k = job.tensor
        if job.kind == "page_in" and self.arriving.get(k) is job:
            del self.arriving[k]
        if job.free_on_done:
            self.ram.free(now, self.size[k])
            self.pending_frees.remove(job)
        if job.event is not None and not job.event.triggered:
            job.event.succeed()
        if self.slices is not None:
            where = f"dma{job.channel}" if job.channel >= 0 else "cpu"
            self.slices.append((where, f"{job.kind} {job.op}", job.service_s, job.ended_s,
                                {"step": job.step, "bytes": job.timing.nbytes,
                                 "device_bytes": job.timing.device_bytes}))

    def _issue(self, job: TransferJob) -> None:
        """Hand a page-in to the DMA queue."""
        if job in self.deferred:
            self.deferred.remove(job)
        write = self.writing.get(job.tensor)
        if write is not None and write.state != DONE:
            job.after = write
        self.outstanding.append(job)
        self.dma.submit(job)  # type: ignore[union-attr]

    def _prefetch(self, job: TransferJob, _event: Any = None) -> None:
        """A page-in's trigger fired: allocate its buffer if RAM allows, and start it."""
        if job.state != PLANNED:
            return
        if not job.allocated:
            k = job.tensor
            if not self.ram.fits(self.size[k], self.ram_limit):
                if job not in self.deferred:
                    self.deferred.append(job)
                return
            step = self.steps[self.pos]
            self.ram.alloc(self.env.now, self.size[k], self.pos, self.names[step.op],
                           f"prefetch {job.op}")
            job.allocated = True
        self._issue(job)

    def _fire(self, jobs: list[TransferJob]) -> None:
        for job in jobs:
            if job.state != PLANNED:
                continue
            offset = job.plan.offset_s
            if offset > 0.0:
                self.env.timeout(offset).callbacks.append(partial(self._prefetch, job))
            else:
                self._prefetch(job)

    def _move(self, job: TransferJob) -> Generator[simpy.Event, Any, None]:
        """The CPU carries out a transfer itself (no DMA)."""
        env = self.env
        job.issued_s = env.now
        yield from run_transfer(env, job, self.storage, self.bus, self.mover)
        self.stall_s += job.service_s - job.issued_s
        self.cpu_transfer_s += job.ended_s - job.service_s
        self._on_done(job)

    # ------------------------------------------------------------------ waiting
    def _stall_for(self, job: TransferJob) -> Generator[simpy.Event, Any, None]:
        """The CPU waits, stalled, for ``job`` to end (issued first if its trigger has
        not come yet); the wait counts as the job's stall."""
        if job.state is PLANNED:
            self._issue(job)
        env = self.env
        t0 = env.now
        yield from self.cpu.wait(job.done_event(env), job.eta_s, "stall")
        waited = env.now - t0
        if self.slices is not None and waited > 0:
            self.slices.append(("cpu", "stall", t0, env.now,
                                {"waiting_for": f"{job.kind} {job.op}", "step": self.pos}))
        self.stall_s += waited
        job.stall_s += waited

    def _hold_storage(self) -> Generator[simpy.Event, Any, None]:
        """Hold the DMA engine for an op that streams weights, stalled until the transfers
        running now have ended."""
        dma = self.dma
        drained = dma.hold()  # type: ignore[union-attr]
        if drained is None:
            return
        env = self.env
        t0 = env.now
        eta = max((job.eta_s for job in dma.active), default=t0)  # type: ignore[union-attr]
        yield from self.cpu.wait(drained, eta, "stall")
        self.stall_s += env.now - t0
        if self.slices is not None and env.now > t0:
            self.slices.append(("cpu", "stall", t0, env.now,
                                {"waiting_for": "storage (streamed weights)", "step": self.pos}))

    def _make_room(self, need: int) -> Generator[simpy.Event, Any, None]:
        """Wait for writes in flight whose RAM is already freed, while ``need`` does not fit."""
        ram, limit = self.ram, self.ram_limit
        while self.pending_frees and not ram.fits(need, limit):
            pending = self.pending_frees
            job = (pending[0] if len(pending) == 1
                   else min(pending, key=lambda j: (j.eta_s, j.step)))
            yield from self._stall_for(job)

    def _retry_deferred(self) -> None:
        for job in list(self.deferred):
            if job.state != PLANNED:
                self.deferred.remove(job)
            else:
                self._prefetch(job)

    def _free(self, k: int) -> None:
        now = self.env.now
        write = self.writing.get(k)
        if write is not None and write.state != DONE and not write.free_on_done:
            write.free_on_done = True
            self.pending_frees.append(write)
            return
        job = self.arriving.get(k)
        if job is not None:
            if job.state == PLANNED or (job.state == QUEUED and self.dma is not None
                                        and self.dma.cancel(job)):
                job.state = CANCELLED
                del self.arriving[k]
                if job in self.deferred:
                    self.deferred.remove(job)
                if job in self.outstanding:
                    self.outstanding.remove(job)
                if job.allocated:
                    self.ram.free(now, self.size[k])
                return
            if job.state == RUNNING:
                job.free_on_done = True
                self.pending_frees.append(job)
                return
        # an in-place output keeps its part of the buffer (no write or page-in of the
        # tensor is in flight then: the in-place COMPUTE waited for both)
        self.ram.free(now, self.size[k] - self.shared.pop(k, 0))

    # ------------------------------------------------------------------ the program
    def _program(self) -> Generator[simpy.Event, Any, None]:
        env, steps, triggers = self.env, self.steps, self.triggers
        compute, plain, ram, size = self._compute, self.plain, self.ram, self.size
        ticker = Ticker(stop_at(), every=256)  # a command's limit
        for i, step in enumerate(steps):
            ticker.tick()
            self.pos = i
            if self.deferred:
                self._retry_deferred()
            action, k = step.action, step.op
            if action is _COMPUTE:
                yield from compute(i, k, step.stage)
                continue
            if plain[i]:  # nothing but the bytes of a FREE (READ/WRITE_WEIGHTS: nothing)
                if action is _FREE:
                    ram.free(env.now, size[k])
            elif action is _FREE:
                self._free(k)
            elif action is _PAGE_OUT:
                job = self._page_out(i, k)
                if self.dma is None:
                    yield from self._move(job)
            elif action is _PAGE_IN:
                yield from self._page_in(i, k)
            elif action is _HOLD_WEIGHTS:  # the owner's run right after reads them
                yield from self._allocate(self.held_bytes[k], i, k, "hold_weights")
            elif action is _DROP_WEIGHTS:
                self.ram.free(env.now, self.held_bytes[k])
            elif action is _MOVE:
                yield from self._relocate(i, k)
            fired = triggers.get(i)
            if fired:
                self._fire(fired)
        yield from self._drain()

    def _drain(self) -> Generator[simpy.Event, Any, None]:
        """The end of the list: the CPU waits (idle, possibly asleep) for the transfers
        still in flight."""
        env = self.env
        while self.outstanding:
            job = min(self.outstanding, key=lambda j: (j.eta_s, j.step))
            t0 = env.now
            yield from self.cpu.wait(job.done_event(env), job.eta_s, "idle", wake=False)
            self.tail_s += env.now - t0

    def _allocate(self, nbytes: int, i: int, k: int, what: str
                  ) -> Generator[simpy.Event, Any, None]:
        """Allocate ``nbytes`` at step ``i``, first waiting for writes in flight whose RAM
        is already freed if they keep it from fitting."""
        if self.pending_frees:
            yield from self._make_room(nbytes)
        self.ram.alloc(self.env.now, nbytes, i, self.names[k], what)

    def _plain_steps(self) -> list[bool]:
        """Per step: a FREE of a tensor that no transfer moves and no in-place output
        takes over (it releases the tensor's bytes there and then), or a READ_WEIGHTS or
        WRITE_WEIGHTS step (the stream is priced in its op's COMPUTE: nothing to do)."""
        touched = {job.tensor for job in self.jobs} | set(self.overwrites.values())
        return [step.action in _WEIGHT_STEPS
                or (step.action is _FREE and step.op not in touched) for step in self.steps]

    def _compute(self, i: int, k: int, stage: int) -> Generator[simpy.Event, Any, None]:
        """COMPUTE k at step ``i``: inputs in RAM, output allocated, the op run, the
        workspace released. (The hot path: one call per op, no nested generator unless
        the CPU has to wait.)"""
        env, ram = self.env, self.ram
        arriving = self.arriving
        if arriving:
            for u in self.preds[k]:
                job = arriving.get(u)
                if job is not None and job.state is not DONE:
                    yield from self._stall_for(job)
        need, into, streams, duration, power_w, storage_j, dma_j, energy_j = self.runs[i]
        if into >= 0:  # in place: the output overwrites the input's buffer
            yield from self._overwrite(k, into)
        if self.pending_frees:  # it may have to wait for RAM
            yield from self._allocate(need, i, k, "compute")
        else:
            ram.alloc(env.now, need, i, self.names[k], "compute")
        fired = self.triggers.get(i)
        if fired:
            self._fire(fired)
        # the run holds the storage device while it streams or writes back
        occupies = streams and self.dma is not None
        if occupies:
            yield from self._hold_storage()
        computed = self.computed
        kind = "recompute" if computed[k] else "compute"
        computed[k] = True
        t0 = env.now
        if storage_j or dma_j:
            self._book_stream(kind, storage_j, dma_j)
        cpu = self.cpu
        if duration > 0.0:
            cpu.run(kind, power_w)
            yield from self.bus.compute(duration)
        else:
            cpu.run(kind, 0.0)
            cpu.machine.quantum("active", kind, energy_j)
        now = env.now
        self.compute_s += now - t0
        if self.writeback_busy:  # a seeded run: the card may still be writing back
            yield from self._wait_for_write_back(i)
            now = env.now
        if occupies:
            self.dma.release()  # type: ignore[union-attr]
        if self.slices is not None:
            self._record_run(i, k, stage, kind, t0, now, storage_j if streams else None)
        ram.free(now, self.workspace[k])

    def _overwrite(self, k: int, into: int) -> Generator[simpy.Event, Any, None]:
        """Op ``k`` is about to write its output over tensor ``into``'s buffer: once a
        write of ``into`` in flight has ended (its copy must be on storage)."""
        write = self.writing.get(into)
        if write is not None and write.state is not DONE:
            yield from self._stall_for(write)
        self.shared[into] = self.size[k]

    def _book_stream(self, kind: str, storage_j: float, dma_j: float) -> None:
        """A streamed run's shares of its energy, booked on the parts that spend them."""
        self.storage.machine.quantum("stream", kind, storage_j)
        if dma_j:
            self.dma.machine.quantum("stream", kind, dma_j)  # type: ignore[union-attr]

    def _record_run(self, i: int, k: int, stage: int, kind: str, t0: float, t1: float,
                    storage_j: float | None) -> None:
        """The trace's slice of a run, and of its weights streaming on the storage
        (``storage_j`` None: it streams none)."""
        name = self.names[k]
        self.slices.append(("cpu", f"{kind} {name}", t0, t1,  # type: ignore[union-attr]
                            {"step": i, "op": k, "stage": stage}))
        if storage_j is not None:  # the storage reads and writes the op's weights meanwhile
            self.slices.append(("storage", f"weights {name}", t0, t1,  # type: ignore[union-attr]
                                {"step": i, "op": k, "energy_j": storage_j}))

    def _wait_for_write_back(self, i: int) -> Generator[simpy.Event, Any, None]:
        """Stall while the card finishes writing back the weights of step ``i``'s run, if
        the run drew extra write-busy time."""
        extra = self.writeback_busy.get(i)
        if extra is None:
            return
        busy_s, storage_j = extra
        env = self.env
        t1 = env.now
        self.storage.machine.quantum("stream", "write_busy", storage_j)
        yield from self.cpu.wait(env.timeout(busy_s), t1 + busy_s, "stall")
        self.stall_s += env.now - t1
        if self.slices is not None:
            self.slices.append(("cpu", "stall", t1, env.now, {
                "waiting_for": "storage (weights written back)", "step": i}))

    def _relocate(self, i: int, k: int) -> Generator[simpy.Event, Any, None]:
        """MOVE k at step ``i``: after a transfer of the tensor in flight, the destination's
        extra bytes taken, the copy made (on the DMA engine, the CPU waiting, or on the
        CPU), those bytes released."""
        env = self.env
        for job in (self.arriving.get(k), self.writing.get(k)):
            if job is not None and job.state not in (DONE, CANCELLED):
                yield from self._stall_for(job)  # the copy reads what the transfer moves
        extra = move_extra_bytes(self.steps[i], self.size[k])
        yield from self._allocate(extra, i, k, "move")
        seconds, energy = self.move_time[k], self.move_energy[k]
        t0 = env.now
        if seconds <= 0.0:
            self.cpu.machine.quantum("active", "move", energy)
        elif self.dma is not None:
            self.dma.copy(energy / seconds)
            yield from self.cpu.wait(env.timeout(seconds), t0 + seconds, "move")
            self.dma.copy(0.0)
        else:
            self.cpu.run("move", energy / seconds)
            yield env.timeout(seconds)
            self.cpu.idle()
        self.ram.free(env.now, extra)
        if self.slices is not None:
            self.slices.append(("dma copy" if self.dma is not None else "cpu",
                                f"move {self.names[k]}", t0, env.now, {"step": i, "op": k}))

    def _page_out(self, i: int, k: int) -> TransferJob:
        """PAGE_OUT k: reserve storage space and hand the write to the DMA; the job (the
        CPU moves it itself without DMA)."""
        job = self.job_at[i]
        if not self.storage.store(self.size[k]):
            name = self.names[k]
            self.violations.append(SimViolation(
                "storage_full",
                f"step {i} (page_out {name!r}): storage holds "
                f"{self.storage.used_bytes} B, over its capacity of "
                f"{self.board.storage.capacity_bytes} B", i, name, self.env.now))
        self.writing[k] = job
        if self.dma is not None:
            self.outstanding.append(job)
            self.dma.submit(job)
        return job

    def _page_in(self, i: int, k: int) -> Generator[simpy.Event, Any, None]:
        """PAGE_IN k: the buffer allocated (unless a prefetch did), the read started if
        its trigger has passed (or done by the CPU)."""
        job = self.job_at[i]
        self.arriving[k] = job
        if not job.allocated:
            yield from self._allocate(self.size[k], i, k, "page_in")
            job.allocated = True
        if self.dma is None:
            yield from self._move(job)
        elif job.state is PLANNED and job.plan.trigger_step <= i:
            self._issue(job)

    # ------------------------------------------------------------------ run and report
    def run(self) -> SimReport:
        started, cpu_started = time.perf_counter(), time.process_time()
        env = self.env
        env.run(until=self.main)
        makespan = env.now
        self.cpu.machine.finish(makespan)
        self.storage.finish(makespan)
        self.bus.finish(makespan)
        machines = [self.cpu.machine, self.storage.machine]
        if self.dma is not None:
            self.dma.machine.finish(makespan)
            machines.append(self.dma.machine)
        events = next(env._eid)  # type: ignore[attr-defined]
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        return finished_report(self, makespan, machines, events, wall, cpu)
