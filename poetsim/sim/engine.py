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
import numpy as np
import simpy

from poetsim.boards.spec import Board, WriteBusy
from poetsim.costs import OpCosts, transfer_phases
from poetsim.graph.streaming import WeightsOnStorage, stream_commands
from poetsim.schedule.arena import adopt_layout, plan_arena
from poetsim.schedule.model import predict
from poetsim.schedule.ops import Action
from poetsim.schedule.replay import Replay
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
from poetsim.sim.planner import plan_transfers, program_profile
from poetsim.sim.power import EnergyLedger
from poetsim.sim.ram import RamModel
from poetsim.sim.report import Prediction, SimReport, SimViolation, TransferRecord
from poetsim.sim.storage import (
    StorageModel,
    TransferTiming,
    draw_write_busy,
    transfer_timing,
    with_write_busy,
    write_commands,
)
from poetsim.sim.timeline import Slice, StateSlice, Timeline
from poetsim.units import meets_deadline

__all__ = ["Simulation"]

_COMPUTE, _PAGE_OUT, _PAGE_IN, _FREE = Action.COMPUTE, Action.PAGE_OUT, Action.PAGE_IN, Action.FREE
_HOLD_WEIGHTS, _DROP_WEIGHTS = Action.HOLD_WEIGHTS, Action.DROP_WEIGHTS


class Simulation:
    """One training iteration of ``schedule`` on ``board``; :meth:`run` returns the report."""

    def __init__(self, replay: Replay, board: Board, costs: OpCosts, *, budget_bytes: int,
                 resident_bytes: int, deadline_s: float | None, trace: bool,
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
        self.deadline_s = deadline_s
        self.trace = trace
        self.env = env = simpy.Environment()
        self.ledger = ledger = EnergyLedger()
        self.cpu = CpuModel(env, board.cpu, ledger, record=trace)
        self.storage = StorageModel(env, board.storage, ledger, record=trace)
        self.bus = make_bus(env, board)
        self.ram = RamModel(budget_bytes, resident_bytes, record=trace)
        self.names = [op.name for op in graph.ops]
        self.size = costs.output_bytes.tolist()
        self.workspace = costs.workspace_bytes.tolist()
        self.compute_time = costs.compute_time_s.tolist()
        self.compute_energy = costs.compute_energy_j.tolist()
        self.held_time = costs.held_compute_time_s.tolist()
        self.held_energy = costs.held_compute_energy_j.tolist()
        self.held_bytes = costs.held_bytes.tolist()
        # the storage's and the DMA engine's shares of a run that streams weights
        self.shares = (costs.storage_energy_j.tolist(), costs.dma_energy_j.tolist())
        self.held_shares = (costs.held_storage_energy_j.tolist(),
                            costs.held_dma_energy_j.tolist())
        self.preds = [graph.predecessors(k) for k in range(len(graph.ops))]

        dma = board.dma.present
        self.profile = program_profile(replay, costs, resident_bytes=resident_bytes,
                                       cpu_moves_bytes=not dma)
        self.ram_limit = min(budget_bytes, self.profile.peak_bytes)
        self.plan = plan_transfers(replay, costs, self.profile,
                                   ram_limit_bytes=self.ram_limit, dma=dma,
                                   wakeup_latency_s=board.storage.wakeup_latency_s)
        # where the runtime keeps every buffer: the schedule's own layout when it has one
        # for this resident state, else one planned, a prefetch holding its buffer from its
        # trigger (or, when that does not fit, from where the layout leaves room); a layout
        # for another resident state is still checked against the steps
        layout = replay.schedule.layout if replay.schedule is not None else None
        if layout is not None and layout.resident_bytes != resident_bytes:
            adopt_layout(replay, layout, resident_bytes=None)
            layout = None
        if layout is not None:
            self.arena = adopt_layout(replay, layout, resident_bytes=resident_bytes)
        else:
            self.arena = plan_arena(replay, resident_bytes=resident_bytes, prefetch_from={
                p.step: p.trigger_step for p in self.plan
                if p.kind == "page_in" and p.trigger_step < p.step}, fit_bytes=budget_bytes)
        # a prefetch starts no earlier than the layout holds its buffer
        earliest = self.arena.prefetch_from
        self.plan = [
            attrs.evolve(p, trigger_step=earliest.get(p.step, p.step), offset_s=0.0)
            if p.kind == "page_in" and p.trigger_step < earliest.get(p.step, p.step)
            else p for p in self.plan]
        timings: dict[tuple[int, bool, float, float], TransferTiming] = {}
        in_s, in_j = costs.pagein_time_s.tolist(), costs.pagein_energy_j.tolist()
        out_s, out_j = costs.pageout_time_s.tolist(), costs.pageout_energy_j.tolist()
        self.jobs: list[TransferJob] = []
        self.job_at: dict[int, TransferJob] = {}
        self.triggers: dict[int, list[TransferJob]] = {}
        for planned in self.plan:
            k, write = planned.tensor, planned.kind == "page_out"
            key = ((self.size[k], True, out_s[k], out_j[k]) if write
                   else (self.size[k], False, in_s[k], in_j[k]))
            timing = timings.get(key)
            if timing is None:
                timing = timings[key] = transfer_timing(board, key[0], write=write,
                                                        time_s=key[2], energy_j=key[3])
            job = TransferJob(planned.kind, k, planned.op, planned.step, timing, planned)
            self.jobs.append(job)
            self.job_at[planned.step] = job
            if dma and not write:
                self.triggers.setdefault(planned.trigger_step, []).append(job)

        self.seed = seed
        #: COMPUTE position -> (extra write-busy seconds, storage joules) of the weights it
        #: writes back, drawn by a seeded run
        self.writeback_busy: dict[int, tuple[float, float]] = {}
        busy = board.storage.write_busy
        if seed is not None and busy is not None:
            self._draw_write_busy(busy, seed)

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
        self.compute_s = 0.0
        self.cpu_transfer_s = 0.0
        self.stall_s = 0.0
        self.tail_s = 0.0
        self.slices: list[tuple[str, str, float, float, dict]] | None = [] if trace else None
        self.main = env.process(self._program())

    # ------------------------------------------------------------------ transfers
    def _on_done(self, job: TransferJob) -> None:
        now = self.env.now
        if job in self.outstanding:
            self.outstanding.remove(job)
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

    def _draw_write_busy(self, busy: WriteBusy, seed: int) -> None:
        """Lengthen every page-out by its drawn extra write-busy time (plan order), then
        every weight write-back (list order; the run that writes them back waits for it)."""
        writes = [job for job in self.jobs if job.kind == "page_out" and job.timing.time_s > 0]
        known: dict[int, list[int]] = {}

        def commands_of(nbytes: int) -> list[int]:
            if nbytes not in known:
                known[nbytes] = write_commands(self.board, nbytes)
            return known[nbytes]

        rng = np.random.default_rng(seed)
        extras = draw_write_busy(busy, rng, [commands_of(job.timing.nbytes) for job in writes])
        power = busy.power_w if busy.power_w is not None else self.board.storage.write_power_w
        for job, extra in zip(writes, extras, strict=True):
            job.timing = with_write_busy(job.timing, extra, power)
        # the same stream, after the page-outs' draws (which stay as they were)
        backs = self.replay.write_back_positions
        commands = []
        for i in backs:
            k = self.steps[i].op
            commands.append([c for size, count in stream_commands(
                self.graph, k, int(self.costs.writeback_bytes[k])) for _ in range(count)
                for c in commands_of(size)])
        for i, extra in zip(backs, draw_write_busy(busy, rng, commands), strict=True):
            if extra > 0.0:
                self.writeback_busy[i - 1] = (extra, extra * power)  # at its COMPUTE

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
    def _wait(self, job: TransferJob, kind: str) -> Generator[simpy.Event, Any, float]:
        env = self.env
        t0 = env.now
        yield from self.cpu.wait(job.done_event(env), job.eta_s, kind)
        waited = env.now - t0
        if self.slices is not None and waited > 0:
            self.slices.append(("cpu", "stall", t0, env.now,
                                {"waiting_for": f"{job.kind} {job.op}", "step": self.pos}))
        return waited

    def _stall_for(self, job: TransferJob) -> Generator[simpy.Event, Any, None]:
        if job.state == PLANNED:
            self._issue(job)
        waited = yield from self._wait(job, "stall")
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
            job = min(self.pending_frees, key=lambda j: (j.eta_s, j.step))
            waited = yield from self._wait(job, "stall")
            self.stall_s += waited
            job.stall_s += waited

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
        env, ram, cpu, bus = self.env, self.ram, self.cpu, self.bus
        names, size, workspace = self.names, self.size, self.workspace
        compute_time, compute_energy, preds = self.compute_time, self.compute_energy, self.preds
        held_time, held_energy = self.held_time, self.held_energy
        arriving, triggers, job_at = self.arriving, self.triggers, self.job_at
        computed, slices, dma = self.computed, self.slices, self.dma
        replay = self.replay
        reads_weights, overwrites = replay.reads_weights, replay.overwrites
        limit = self.ram_limit
        for i, step in enumerate(self.steps):
            self.pos = i
            if self.deferred:
                self._retry_deferred()
            action, k = step.action, step.op
            if action is _COMPUTE:
                for u in preds[k]:
                    job = arriving.get(u)
                    if job is not None and job.state != DONE:
                        yield from self._stall_for(job)
                into = overwrites.get(i, -1)
                if into >= 0:  # in place: the output overwrites the input's buffer
                    write = self.writing.get(into)
                    if write is not None and write.state != DONE:
                        yield from self._stall_for(write)  # its copy must be on storage
                    self.shared[into] = size[k]
                    need = workspace[k]
                else:
                    need = size[k] + workspace[k]
                if self.pending_frees and not ram.fits(need, limit):
                    yield from self._make_room(need)
                ram.alloc(env.now, need, i, names[k], "compute")
                fired = triggers.get(i)
                if fired:
                    self._fire(fired)
                if reads_weights[i]:  # streams its weights from storage
                    duration, energy = compute_time[k], compute_energy[k]
                    storage_j, dma_j = self.shares[0][k], self.shares[1][k]
                else:  # reads no weights from storage, or they are held
                    duration, energy = held_time[k], held_energy[k]
                    storage_j, dma_j = self.held_shares[0][k], self.held_shares[1][k]
                # the run holds the storage device while it streams or writes back
                streams = replay.streams(i)
                occupies = dma is not None and streams
                if occupies:
                    yield from self._hold_storage()
                kind = "recompute" if computed[k] else "compute"
                computed[k] = True
                t0 = env.now
                if not streams:
                    storage_j = dma_j = 0.0
                if storage_j or dma_j:
                    # a streamed run's shares, booked on the components that spend them
                    self.storage.machine.quantum("stream", kind, storage_j)
                    if dma_j:
                        dma.machine.quantum("stream", kind, dma_j)  # type: ignore[union-attr]
                    energy -= storage_j + dma_j
                if duration > 0.0:
                    cpu.run(kind, energy / duration)
                    yield from bus.compute(duration)
                else:
                    cpu.run(kind, 0.0)
                    cpu.machine.quantum("active", kind, energy)
                self.compute_s += env.now - t0
                extra = self.writeback_busy.get(i)
                if extra is not None:  # the card is still busy writing the weights back
                    t1 = env.now
                    self.storage.machine.quantum("stream", "write_busy", extra[1])
                    yield from cpu.wait(env.timeout(extra[0]), t1 + extra[0], "stall")
                    self.stall_s += env.now - t1
                    if slices is not None:
                        slices.append(("cpu", "stall", t1, env.now, {
                            "waiting_for": "storage (weights written back)", "step": i}))
                if occupies:
                    dma.release()
                if slices is not None:
                    slices.append(("cpu", f"{kind} {names[k]}", t0, env.now,
                                   {"step": i, "op": k, "stage": step.stage}))
                    if streams:  # the storage reads and writes the op's weights meanwhile
                        slices.append(("storage", f"weights {names[k]}", t0, env.now,
                                       {"step": i, "op": k, "energy_j": storage_j}))
                ram.free(env.now, workspace[k])
                continue
            if action is _PAGE_OUT:
                job = job_at[i]
                if not self.storage.store(size[k]):
                    self.violations.append(SimViolation(
                        "storage_full",
                        f"step {i} (page_out {names[k]!r}): storage holds "
                        f"{self.storage.used_bytes} B, over its capacity of "
                        f"{self.board.storage.capacity_bytes} B", i, names[k], env.now))
                self.writing[k] = job
                if dma is not None:
                    self.outstanding.append(job)
                    dma.submit(job)
                else:
                    yield from self._move(job)
            elif action is _PAGE_IN:
                job = job_at[i]
                arriving[k] = job
                if not job.allocated:
                    if self.pending_frees and not ram.fits(size[k], limit):
                        yield from self._make_room(size[k])
                    ram.alloc(env.now, size[k], i, names[k], "page_in")
                    job.allocated = True
                if dma is None:
                    yield from self._move(job)
                elif job.state == PLANNED and job.plan.trigger_step <= i:
                    self._issue(job)
            elif action is _FREE:
                self._free(k)
            elif action is _HOLD_WEIGHTS:  # the owner's run right after reads them
                nbytes = self.held_bytes[k]
                if self.pending_frees and not ram.fits(nbytes, limit):
                    yield from self._make_room(nbytes)
                ram.alloc(env.now, nbytes, i, names[k], "hold_weights")
            elif action is _DROP_WEIGHTS:
                ram.free(env.now, self.held_bytes[k])
            # READ_WEIGHTS, WRITE_WEIGHTS: the stream is priced in its op's COMPUTE
            fired = triggers.get(i)
            if fired:
                self._fire(fired)
        self.program_end_s = env.now
        while self.outstanding:
            job = min(self.outstanding, key=lambda j: (j.eta_s, j.step))
            t0 = env.now
            yield from self.cpu.wait(job.done_event(env), job.eta_s, "idle", wake=False)
            self.tail_s += env.now - t0

    # ------------------------------------------------------------------ run and report
    def run(self) -> SimReport:
        started = time.perf_counter()
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
        wall = time.perf_counter() - started
        return self._report(makespan, machines, events, wall)

    def _report(self, makespan: float, machines: list, events: int, wall: float) -> SimReport:
        board, ram, storage, ledger = self.board, self.ram, self.storage, self.ledger
        on_storage = WeightsOnStorage.of(self.graph)
        for i, read in enumerate(self.replay.reads_weights):  # weights streamed by the ops
            if read:
                k = self.steps[i].op
                for size, count in stream_commands(self.graph, k,
                                                   on_storage.bytes_read(self.graph, k)):
                    device = transfer_phases(board, size, write=False).device_bytes
                    storage.read_weights(count * device)
        for i in self.replay.write_back_positions:  # weights written back by their ops' runs
            k = self.steps[i].op
            written = int(self.costs.writeback_bytes[k])
            for size, count in stream_commands(self.graph, k, written):
                device = transfer_phases(board, size, write=True).device_bytes
                for _ in range(count):
                    storage.write_back(device)
        violations = list(self.violations)
        for over in ram.overflows:
            violations.append(SimViolation(
                "ram_overflow",
                f"step {over.step} ({over.action} {over.op!r}) at {over.time_s:.6g} s: RAM "
                f"reaches {over.ram_bytes} B, {over.excess_bytes} B over the budget of "
                f"{over.budget_bytes} B", over.step, over.op, over.time_s))
        if self.deadline_s is not None and not meets_deadline(makespan, self.deadline_s):
            violations.append(SimViolation(
                "deadline_missed",
                f"makespan {makespan:.6g} s exceeds the deadline of {self.deadline_s:.6g} s "
                f"by {makespan - self.deadline_s:.6g} s"))
        wear = storage.wear
        if wear is not None and wear.max_erase_count > wear.endurance_cycles:
            violations.append(SimViolation(
                "flash_worn_out",
                f"a flash sector was erased {wear.max_erase_count} times, over the endurance "
                f"of {wear.endurance_cycles} cycles"))
        counts = self.profile.counts
        # what the op-list model says of this schedule, recomputed (never a file's figure)
        model = predict(self.graph, self.costs, self.replay)
        prediction = Prediction(
            predicted_energy_j=model.energy_j, simulated_energy_j=ledger.total_j,
            predicted_time_s=model.time_s, simulated_time_s=makespan,
            predicted_peak_ram_bytes=model.peak_ram_bytes,
            simulated_peak_ram_bytes=ram.peak - ram.resident_bytes)
        residency = {m.component: dict(sorted(m.residency.items())) for m in machines}
        transitions = {m.component: {f"{a}->{b}": n for (a, b), n in sorted(m.transitions.items())}
                       for m in machines}
        wakeups = {"cpu": self.cpu.wakeups, "storage": storage.wakeups}
        transfers = tuple(self._record(job) for job in self.jobs)
        timeline = None
        if self.trace:
            states = []
            for m in machines:
                states.extend(StateSlice(m.component, st, a, b, p)
                              for a, b, st, p in m.intervals)
            timeline = Timeline(
                slices=tuple(Slice(c, n, a, b, args) for c, n, a, b, args in self.slices or ()),
                states=tuple(sorted(states, key=lambda s: (s.start_s, s.component))),
                ram=tuple(ram.samples or ()))
        bytes_in = sum(job.timing.nbytes for job in self.jobs
                       if job.kind == "page_in" and job.state == DONE)
        bytes_out = sum(job.timing.nbytes for job in self.jobs
                        if job.kind == "page_out" and job.state == DONE)
        dma_busy = self.dma.busy_s if self.dma is not None else 0.0
        return SimReport(
            graph_name=self.graph.name, board_name=board.name, steps=len(self.steps),
            violations=tuple(violations),
            makespan_s=makespan, deadline_s=self.deadline_s, compute_s=self.compute_s,
            cpu_transfer_s=self.cpu_transfer_s, stall_s=self.stall_s, tail_s=self.tail_s,
            peak_ram_bytes=ram.peak, peak_step=ram.peak_step, peak_op=ram.peak_op,
            peak_action=ram.peak_action, peak_time_s=ram.peak_time_s,
            budget_bytes=ram.budget_bytes, resident_bytes=ram.resident_bytes,
            ram_limit_bytes=self.ram_limit, program_peak_ram_bytes=self.profile.peak_bytes,
            arena_bytes=self.arena.arena_bytes,
            fragmentation_bytes=self.arena.fragmentation_bytes,
            layout=self.arena.layout, layout_from_schedule=self.arena.order == "file",
            energy_j=ledger.total_j,
            energy_by_component_j=dict(sorted(ledger.by(0).items())),
            energy_by_state_j=dict(sorted(ledger.by_state().items())),
            energy_by_kind_j=dict(sorted(ledger.by(2).items())),
            residency_s=residency, transitions=transitions, wakeups=wakeups,
            bytes_read=storage.bytes_read, bytes_written=storage.bytes_written,
            bytes_paged_in=bytes_in, bytes_paged_out=bytes_out,
            peak_storage_bytes=storage.peak_used_bytes,
            storage_capacity_bytes=board.storage.capacity_bytes,
            bus_busy_s=self.bus.busy_s, bus_bytes=self.bus.bytes_moved,
            bus_bandwidth_bytes_per_s=board.bus.bandwidth_bytes_per_s, dma_busy_s=dma_busy,
            flash_erases=wear.erases if wear else 0,
            flash_max_erase_count=wear.max_erase_count if wear else 0,
            flash_sectors_used=wear.sectors_used if wear else 0,
            flash_endurance_cycles=wear.endurance_cycles if wear else None,
            flash_lifetime_iterations=wear.lifetime_iterations() if wear else None,
            storage_wear_bytes=storage.wear_bytes,
            storage_lifetime_iterations=storage.lifetime_iterations(),
            computes=counts[Action.COMPUTE], recomputes=self.profile.recomputes,
            page_ins=counts[Action.PAGE_IN], page_outs=counts[Action.PAGE_OUT],
            frees=counts[Action.FREE], transfers=transfers, prediction=prediction,
            events=events, timeline=timeline, wall_s=wall, seed=self.seed,
            write_busy_s=sum(job.timing.busy_s for job in self.jobs if job.state == DONE)
            + sum(busy_s for busy_s, _ in self.writeback_busy.values()),
        )

    @staticmethod
    def _record(job: TransferJob) -> TransferRecord:
        plan = job.plan
        return TransferRecord(
            kind=job.kind, tensor=job.tensor, op=job.op, step=job.step,
            consumer_step=plan.consumer_step, trigger_step=plan.trigger_step,
            planned_start_s=plan.planned_start_s, needed_s=plan.needed_s,
            issued_s=job.issued_s, started_s=job.started_s, service_s=job.service_s,
            ended_s=job.ended_s, stall_s=job.stall_s, ram_delayed=plan.ram_delayed,
            channel=job.channel, bytes=job.timing.nbytes, device_bytes=job.timing.device_bytes)
