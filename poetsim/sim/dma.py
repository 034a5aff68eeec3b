"""Transfers and who moves them: the DMA engine's channels, or the CPU itself.

A :class:`TransferJob` is one page-in or page-out. :func:`run_transfer` carries it out:
wait for the tensor's write if a page-in overtakes it, wake the storage if it sleeps, then
the erase phase (NOR writes), the command phase, the data phase on the bus, and in seeded
runs a drawn write-busy phase (see :mod:`poetsim.sim.storage` and :mod:`poetsim.sim.bus`).

The *mover* books the mover's share of the transfer's power:

* :class:`DmaEngine`: ``dma.channels`` long-lived SimPy processes take jobs first-in
  first-out from one queue; the engine's power machine is ``active`` while any channel
  serves a job (contributions per job kind) and ``idle`` otherwise. The CPU is free to
  compute meanwhile. While the CPU *holds* the engine (:meth:`DmaEngine.hold`: an op
  streams weights from the same storage device) no queued job starts.
* :class:`CpuMover` (``dma.channels = 0``): the CPU runs the transfer in its own program, in
  state ``transfer``, and can do nothing else.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import simpy

from poetsim.sim.cpu import CpuModel
from poetsim.sim.power import EnergyLedger, PowerMachine
from poetsim.sim.storage import StorageModel, TransferTiming

__all__ = ["CpuMover", "DmaEngine", "TransferJob", "run_transfer"]

PLANNED, QUEUED, RUNNING, DONE, CANCELLED = "planned", "queued", "running", "done", "cancelled"


class TransferJob:
    """One page-in or page-out and what happened to it."""

    __slots__ = ("kind", "tensor", "op", "step", "timing", "state", "allocated", "issued_s",
                 "started_s", "service_s", "ended_s", "event", "eta_s", "after", "free_on_done",
                 "storage_state", "stall_s", "channel", "plan")

    def __init__(self, kind: str, tensor: int, op: str, step: int, timing: TransferTiming,
                 plan: Any = None) -> None:
        self.kind = kind
        self.tensor = tensor
        self.op = op
        self.step = step
        self.timing = timing
        self.plan = plan
        self.state = PLANNED
        self.allocated = False
        self.issued_s = -1.0
        self.started_s = -1.0
        self.service_s = -1.0
        self.ended_s = -1.0
        self.event: simpy.Event | None = None
        self.eta_s = 0.0
        self.after: TransferJob | None = None
        self.free_on_done = False
        self.storage_state = "read"
        self.stall_s = 0.0
        self.channel = -1

    @property
    def done(self) -> bool:
        return self.state == DONE

    def done_event(self, env: simpy.Environment) -> simpy.Event:
        """An event that fires when the job ends (created on demand)."""
        if self.event is None:
            self.event = env.event()
            if self.state == DONE:
                self.event.succeed()
        return self.event


class CpuMover:
    """The CPU moves the bytes (no DMA)."""

    __slots__ = ("cpu", "wait_s")

    def __init__(self, cpu: CpuModel) -> None:
        self.cpu = cpu
        self.wait_s = 0.0

    def waiting(self, job: TransferJob) -> None:
        self.cpu.idle("stall")

    def begin(self, job: TransferJob) -> None:
        self.cpu.move(((job.kind, job.timing.mover_power_w),))

    def end(self, job: TransferJob) -> None:
        """The program sets the CPU's next state itself."""


def run_transfer(env: simpy.Environment, job: TransferJob, storage: StorageModel, bus: Any,
                 mover: Any) -> Generator[simpy.Event, Any, None]:
    """Carry out ``job`` (a SimPy generator; see the module docstring)."""
    job.state = RUNNING
    job.started_s = env.now
    timing = job.timing
    if timing.time_s <= 0.0:
        # Nothing to move (a 0-byte tensor): no command, no wake-up, no time.
        if timing.energy_j:
            storage.machine.quantum(storage.machine.state, job.kind, timing.energy_j)
        job.service_s = job.ended_s = env.now
        job.state = DONE
        return
    after = job.after
    if after is not None and after.state != DONE:
        mover.waiting(job)
        yield after.done_event(env)
    delay = storage.request()
    if delay > 0.0:
        mover.waiting(job)
        yield env.timeout(delay)
    job.service_s = env.now
    job.eta_s = env.now + timing.time_s
    mover.begin(job)
    write = job.kind == "page_out"
    if timing.erase_s > 0.0:
        storage.begin(job, "erase")
        yield env.timeout(timing.erase_s)
        storage.phase(job, "write")
    else:
        storage.begin(job, "write" if write else "read")
    if timing.data_s > 0.0:
        if bus.merges_lead:
            yield bus.transfer(timing.device_bytes, timing.data_rate_bytes_per_s,
                               timing.command_s)
        else:
            if timing.command_s > 0.0:
                yield env.timeout(timing.command_s)
            yield bus.transfer(timing.device_bytes, timing.data_rate_bytes_per_s)
    elif timing.command_s > 0.0:
        yield env.timeout(timing.command_s)
    if timing.busy_s > 0.0:
        # drawn write-busy time (seeded runs): the device stays held, off the bus
        storage.phase(job, "busy")
        yield env.timeout(timing.busy_s)
    storage.end(job)
    mover.end(job)
    job.ended_s = env.now
    job.state = DONE


class DmaEngine:
    """``channels`` processes serving one FIFO queue of transfer jobs."""

    def __init__(self, env: simpy.Environment, channels: int, idle_power_w: float,
                 storage: StorageModel, bus: Any, ledger: EnergyLedger,
                 on_done: Callable[[TransferJob], None], *, record: bool = False) -> None:
        self.env = env
        self.storage = storage
        self.bus = bus
        self.on_done = on_done
        self.idle_power_w = idle_power_w
        self.machine = PowerMachine("dma", "idle", (("idle", idle_power_w),), ledger,
                                    record=record)
        self.queue: deque[TransferJob] = deque()
        self.idle_channels: list[simpy.Event] = []
        self.active: list[TransferJob] = []
        self.channel_free_s = [0.0] * channels
        #: held by the CPU while an op streams weights from the same storage device
        self.held = False
        self.running = 0
        self._drained: simpy.Event | None = None
        self.busy_s = 0.0
        self._busy_since = 0.0
        #: the power of a memory-to-memory copy running now (a MOVE step), 0: none
        self.copy_power_w = 0.0
        self.processes = [env.process(self._channel(c)) for c in range(channels)]

    # ---------------------------------------------------------------- mover interface
    def waiting(self, job: TransferJob) -> None:
        """The channel waits (storage wake-up, a write to finish): nothing to book."""

    def _refresh(self) -> None:
        now = self.env.now
        copying = (("move", self.copy_power_w),) if self.copy_power_w else ()
        active = self.active
        if len(active) == 1:  # one transfer: its own power (the common case)
            job = active[0]
            self.machine.set(now, "active", ((job.kind, job.timing.mover_power_w),) + copying)
        elif active:
            powers: dict[str, float] = {}
            for job in active:
                powers[job.kind] = powers.get(job.kind, 0.0) + job.timing.mover_power_w
            self.machine.set(now, "active", tuple(powers.items()) + copying)
        elif copying:  # a copy within RAM: the engine's power on top of its rest
            self.machine.set(now, "active", (("idle", self.idle_power_w), *copying))
        else:
            self.machine.set(now, "idle", (("idle", self.idle_power_w),))

    def copy(self, power_w: float) -> None:
        """A copy within RAM (a MOVE) draws ``power_w`` from now on (0: it ended). It
        runs on a memory-to-memory channel of its own, beside the storage transfers."""
        self.copy_power_w = power_w
        self._refresh()

    def begin(self, job: TransferJob) -> None:
        if not self.active:
            self._busy_since = self.env.now
        self.active.append(job)
        self._refresh()

    def end(self, job: TransferJob) -> None:
        self.active.remove(job)
        if not self.active:
            self.busy_s += self.env.now - self._busy_since
        self._refresh()

    # ---------------------------------------------------------------- queue
    def submit(self, job: TransferJob) -> None:
        """Queue ``job``; an idle channel picks it up at once."""
        now = self.env.now
        job.state = QUEUED
        job.issued_s = now
        free = self.channel_free_s
        c = free.index(min(free)) if len(free) > 1 else 0  # the channel free first
        begin = free[c] if free[c] > now else now
        job.eta_s = begin + job.timing.time_s
        free[c] = job.eta_s
        self.queue.append(job)
        if self.idle_channels:
            self.idle_channels.pop().succeed()

    def cancel(self, job: TransferJob) -> bool:
        """Withdraw a job that has not started; False if it already has."""
        if job.state != QUEUED:
            return False
        self.queue.remove(job)
        job.state = CANCELLED
        return True

    def hold(self) -> simpy.Event | None:
        """Start no queued job until :meth:`release` (the CPU is about to use the storage
        device itself, streaming weights); returns an event that fires when the jobs
        running now are done, or None when none is."""
        self.held = True
        if not self.running:
            return None
        self._drained = self.env.event()
        return self._drained

    def release(self) -> None:
        """Queued jobs may start again."""
        self.held = False
        while self.idle_channels and self.queue:
            self.idle_channels.pop().succeed()

    def _channel(self, channel: int) -> Generator[simpy.Event, Any, None]:
        env = self.env
        queue = self.queue
        while True:
            if not queue or self.held:
                wake = env.event()
                self.idle_channels.append(wake)
                yield wake
                continue
            job = queue.popleft()
            job.channel = channel
            self.running += 1
            yield from run_transfer(env, job, self.storage, self.bus, self)
            self.running -= 1
            if not self.running and self._drained is not None:
                self._drained.succeed()
                self._drained = None
            self.on_done(job)
