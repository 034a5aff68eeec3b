"""The storage device (SD card, eMMC, NOR flash): transfer timing, power states, space.

Transfer timing
---------------
:func:`transfer_timing` runs one page-in or page-out in the phases of
:func:`poetsim.costs.transfer_phases`, the one transfer formula (see :mod:`poetsim.costs`):
a command phase (per-command latency, no bus traffic), an erase phase (NOR writes only)
and a data phase (the only one on the bus). When the :class:`~poetsim.costs.OpCosts` time
differs from this (measured costs), every phase is scaled so that the uncontended total
equals the OpCosts time. The
transfer's power is ``energy_j / time_s`` from OpCosts, split between the storage device and
the mover (DMA engine, or CPU on a board without DMA) in the proportion of the analytic
formula; a transfer stretched by bus contention draws that power for longer.

Write-busy variance
-------------------
A board may give ``storage.write_busy`` (:class:`~poetsim.boards.spec.WriteBusy`), the
distribution of the extra busy time of one write command. The nominal simulation (no seed)
never draws from it. A seeded one draws every page-out's extra busy time up front, in the
order of the transfer plan, with one :class:`numpy.random.Generator` seeded from the
seed (:func:`draw_write_busy`): :func:`write_commands` commands per page-out, one body and
one stall draw each, so the same seed gives the same numbers on any machine and the draws do
not depend on event order. The extra time is a ``busy`` phase after the data phase
(:attr:`TransferTiming.busy_s`): the device is held (it counts against the queue depth),
off the bus, drawing ``write_busy.power_w`` (default ``write_power_w``), and the mover keeps
its transfer power while it polls for the end of busy. One timeout per page-out: durations
are computed, never simulated per byte.

Power states
------------
``read`` / ``write`` / ``erase`` / ``busy`` while serving (power from the transfers being
served),
``idle`` at ``idle_power_w``, ``sleep`` at ``sleep_power_w``, and ``wake`` for
``wakeup_latency_s`` at ``wakeup_energy_j / wakeup_latency_s`` when a command arrives while
the device sleeps (the command starts after it). The device falls asleep by itself after
``auto_sleep_timeout_s`` of idle; that transition is placed analytically when the next
command arrives (or at the end of the run), so it costs no event. The device starts the
run asleep.

Space
-----
Paged tensors occupy ``output_bytes`` each (the checker's ``storage_full`` rule), never
released within an iteration; going over ``capacity_bytes`` is a violation the report
records.

Wear
----
Every page-out wears the device; the report gives the bytes worn per iteration
(``storage_wear_bytes``) and the iterations until the board file's endurance is reached
(``storage_lifetime_iterations``), for every kind of device:

* NOR flash counts erases per sector (:mod:`poetsim.sim.flash`): the bytes worn are the
  erased sectors, and the lifetime is the one of its most-worn sector under log-structured
  placement.
* Wear-levelled devices (SD cards, eMMC) program NAND in pages of ``wear_page_bytes``
  (absent: ``block_bytes``), so each write command wears a whole number of pages however
  few bytes it carries (:func:`worn_bytes`: the write amplification of small writes). The
  commands are the ones the transfer moves, ``device_bytes`` split at
  ``max_command_bytes`` as in :func:`poetsim.costs.transfer_phases`, and each is taken to
  start on a page boundary (sequential, log-structured placement). The card's wear
  levelling spreads the pages over the device, so the lifetime is
  ``endurance_bytes_written / storage_wear_bytes`` (``None`` when the board gives no
  endurance or nothing is written). The card's own garbage collection beyond page
  rounding is in its rated endurance, not modelled here.

Wear is bookkeeping only: it changes no duration and no energy.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import simpy

from poetsim.boards.spec import Board, Profile, Storage, StorageKind, WriteBusy
from poetsim.costs import transfer_phases
from poetsim.sim.flash import FlashWear
from poetsim.sim.power import EnergyLedger, PowerMachine

__all__ = ["StorageModel", "TransferTiming", "draw_write_busy", "transfer_timing",
           "with_write_busy", "worn_bytes", "write_commands"]

#: Precedence of storage states when transfers overlap: the highest one is reported.
_PRECEDENCE = {"read": 1, "busy": 2, "write": 3, "erase": 4}


class TransferTiming(NamedTuple):
    """The phases of one transfer and its power split (see the module docstring)."""

    nbytes: int
    device_bytes: int
    command_s: float
    erase_s: float
    data_s: float
    time_s: float
    energy_j: float
    storage_power_w: float
    mover_power_w: float
    #: Extra write-busy time drawn for this transfer (seeded simulations only; in
    #: ``time_s``), and the storage power while busy.
    busy_s: float = 0.0
    busy_power_w: float = 0.0

    @property
    def data_rate_bytes_per_s(self) -> float:
        """Uncontended data-phase rate (0 when there is no data phase)."""
        return self.device_bytes / self.data_s if self.data_s > 0.0 else 0.0


def transfer_timing(board: Board, nbytes: int, *, write: bool, time_s: float,
                    energy_j: float) -> TransferTiming:
    """Phases of moving ``nbytes`` whose OpCosts figures are ``time_s`` and ``energy_j``.

    The phases are :func:`poetsim.costs.transfer_phases` (the one transfer formula),
    scaled to ``time_s`` when a measured cost replaced the analytic one.
    """
    phases = transfer_phases(board, nbytes, write=write)
    command_s, erase_s, data_s = phases.command_s, phases.erase_s, phases.data_s
    analytic_s = phases.time_s
    if time_s != analytic_s:
        if analytic_s > 0.0:
            scale = time_s / analytic_s
            command_s, erase_s, data_s = command_s * scale, erase_s * scale, data_s * scale
        else:
            command_s, erase_s, data_s = time_s, 0.0, 0.0
    if data_s <= 0.0:
        device_bytes_moved = 0
        command_s += data_s
        data_s = 0.0
    else:
        device_bytes_moved = phases.device_bytes
    analytic_j = phases.energy_j
    storage_share = phases.storage_energy_j / analytic_j if analytic_j > 0.0 else 1.0
    power = energy_j / time_s if time_s > 0.0 else 0.0
    storage_power = power * storage_share
    return TransferTiming(
        nbytes=max(int(nbytes), 0), device_bytes=device_bytes_moved, command_s=command_s,
        erase_s=erase_s, data_s=data_s, time_s=time_s, energy_j=energy_j,
        storage_power_w=storage_power, mover_power_w=power - storage_power,
    )


def write_commands(board: Board, nbytes: int) -> list[int]:
    """The blocks (``block_bytes`` each) of every write command a page-out of ``nbytes``
    issues; each command draws its own busy time.

    Physical boards: one command per ``max_command_bytes`` of block-rounded bytes, as in
    :func:`poetsim.costs.transfer_phases`; paper-profile boards: one command per tensor
    (POET's latency once per tensor).
    """
    storage = board.storage
    if board.profile is Profile.PAPER:
        return [max(math.ceil(max(int(nbytes), 0) / storage.block_bytes), 1)]
    device_bytes = transfer_phases(board, nbytes, write=True).device_bytes
    full, rest = divmod(device_bytes, storage.max_command_bytes)
    per_command = storage.max_command_bytes // storage.block_bytes
    return [per_command] * full + ([math.ceil(rest / storage.block_bytes)] if rest else [])


def worn_bytes(storage: Storage, device_bytes: int) -> int:
    """Bytes of a wear-levelled device (SD card, eMMC) that one page-out of
    ``device_bytes`` wears: each of its write commands (``device_bytes`` split at
    ``max_command_bytes``) rounded up to whole ``wear_page_bytes`` pages (absent:
    ``block_bytes``). Zero for nothing written."""
    device_bytes = max(int(device_bytes), 0)
    if device_bytes == 0:
        return 0
    page = storage.wear_unit_bytes
    full, rest = divmod(device_bytes, storage.max_command_bytes)
    return (full * math.ceil(storage.max_command_bytes / page) * page
            + math.ceil(rest / page) * page)


def draw_write_busy(busy: WriteBusy, rng: np.random.Generator,
                    commands: list[list[int]]) -> list[float]:
    """The extra busy time of each transfer; ``commands[i]`` holds the block count of
    every write command of transfer ``i`` (:func:`write_commands`).

    Draws exactly ``3 * (number of commands)`` numbers in a fixed order (a standard normal
    for every command's body, then a uniform deciding every stall, then a uniform for every
    stall's length), whatever the parameters, so a seed's stream never shifts.
    """
    blocks = np.array([b for transfer in commands for b in transfer], dtype=np.int64)
    total = len(blocks)
    if total == 0:
        return [0.0] * len(commands)
    extra = busy.median_s * np.exp(busy.sigma * rng.standard_normal(total))
    decide = rng.random(total)
    length = rng.random(total)
    if busy.stall_min_s is not None and busy.stall_max_s is not None:
        chance = -np.expm1(blocks * np.log1p(-busy.block_stall_probability)) \
            if busy.block_stall_probability < 1 else np.ones(total)
        span = busy.stall_max_s - busy.stall_min_s
        extra = extra + np.where(decide < chance, busy.stall_min_s + span * length, 0.0)
    out, start = [], 0
    for transfer in commands:
        n = len(transfer)
        out.append(float(extra[start:start + n].sum()))
        start += n
    return out


def with_write_busy(timing: TransferTiming, busy_s: float, busy_power_w: float
                    ) -> TransferTiming:
    """``timing`` lengthened by a busy phase of ``busy_s`` at ``busy_power_w`` (storage)
    plus the mover's power."""
    if busy_s <= 0.0:
        return timing
    return timing._replace(
        time_s=timing.time_s + busy_s, busy_s=busy_s, busy_power_w=busy_power_w,
        energy_j=timing.energy_j + busy_s * (busy_power_w + timing.mover_power_w))


class StorageModel:
    """Power states, wake-up, auto-sleep, space and wear of the storage device.

    Transfers use it as ``delay = request(); [wait delay]; begin(job, state); ...;
    phase(job, state); ...; end(job)``; ``job`` needs the attributes ``kind``,
    ``storage_state`` and ``timing``.
    """

    def __init__(self, env: simpy.Environment, spec: Storage, ledger: EnergyLedger, *,
                 record: bool = False) -> None:
        self.env = env
        self.spec = spec
        self.machine = PowerMachine("storage", "sleep", (("idle", spec.sleep_power_w),), ledger,
                                    record=record)
        self.users = 0
        self.jobs: list = []
        self.asleep = True
        self.idle_since = 0.0
        self.waking_until = -math.inf
        self.wakeups = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.used_bytes = 0
        self.peak_used_bytes = 0
        #: bytes a wear-levelled device wears (page-rounded per write command, worn_bytes)
        self.worn_bytes = 0
        #: worn_bytes per write size met so far (a run writes few distinct sizes)
        self._worn_by_size: dict[int, int] = {}
        self.wear: FlashWear | None = None
        if spec.kind is StorageKind.QSPI_NOR:
            self.wear = FlashWear(spec.capacity_bytes, spec.erase_sector_bytes or 1,
                                  spec.endurance_cycles or 1)

    # ------------------------------------------------------------------ space
    def store(self, nbytes: int) -> bool:
        """Reserve space for a paged-out tensor; False if it goes over the capacity."""
        self.used_bytes += nbytes
        if self.used_bytes > self.peak_used_bytes:
            self.peak_used_bytes = self.used_bytes
        return self.used_bytes <= self.spec.capacity_bytes

    def _worn(self, device_bytes: int) -> int:
        worn = self._worn_by_size.get(device_bytes)
        if worn is None:
            worn = self._worn_by_size[device_bytes] = worn_bytes(self.spec, device_bytes)
        return worn

    # ------------------------------------------------------------------ states
    def _fall_asleep_if_due(self, now: float) -> None:
        if self.users == 0 and not self.asleep:
            due = self.idle_since + self.spec.auto_sleep_timeout_s
            if now >= due:
                self.machine.set(due, "sleep", (("idle", self.spec.sleep_power_w),))
                self.asleep = True

    def request(self) -> float:
        """A transfer wants the device now; returns the wake-up delay before it may start."""
        now = self.env.now
        if now < self.waking_until:
            self.users += 1
            return self.waking_until - now
        self._fall_asleep_if_due(now)
        self.users += 1
        if not self.asleep:
            return 0.0
        self.asleep = False
        self.wakeups += 1
        spec = self.spec
        if spec.wakeup_latency_s > 0.0:
            self.machine.set(now, "wake",
                             (("wakeup", spec.wakeup_energy_j / spec.wakeup_latency_s),))
            self.waking_until = now + spec.wakeup_latency_s
            return spec.wakeup_latency_s
        self.machine.set(now, "wake", ())
        self.machine.quantum("wake", "wakeup", spec.wakeup_energy_j)
        return 0.0

    def _refresh(self) -> None:
        jobs = self.jobs
        if not jobs:
            return
        if len(jobs) == 1:  # one transfer: its state and power (the common case)
            job = jobs[0]
            state = job.storage_state
            power = (job.timing.busy_power_w if state == "busy"
                     else job.timing.storage_power_w)
            self.machine.set(self.env.now, state, ((job.kind, power),))
            return
        state = "read"
        powers: dict[str, float] = {}
        for job in jobs:
            if _PRECEDENCE[job.storage_state] > _PRECEDENCE[state]:
                state = job.storage_state
            power = (job.timing.busy_power_w if job.storage_state == "busy"
                     else job.timing.storage_power_w)
            powers[job.kind] = powers.get(job.kind, 0.0) + power
        self.machine.set(self.env.now, state, tuple(powers.items()))

    def begin(self, job, state: str) -> None:
        """``job`` starts being served, in ``state`` (read, write or erase)."""
        job.storage_state = state
        self.jobs.append(job)
        if job.kind == "page_out" and self.wear is not None:
            self.wear.write(job.timing.device_bytes)
        self._refresh()

    def phase(self, job, state: str) -> None:
        """``job`` moves on to ``state`` (``write`` after an erase, ``busy`` after data)."""
        job.storage_state = state
        self._refresh()

    def end(self, job) -> None:
        """``job`` is done."""
        self.jobs.remove(job)
        self.users -= 1
        if job.kind == "page_out":
            self.bytes_written += job.timing.device_bytes
            if self.wear is None:
                self.worn_bytes += self._worn(job.timing.device_bytes)
        else:
            self.bytes_read += job.timing.device_bytes
        if self.users == 0:
            now = self.env.now
            self.machine.set(now, "idle", (("idle", self.spec.idle_power_w),))
            self.idle_since = now
        elif self.jobs:
            self._refresh()

    # ------------------------------------------------------------------ streamed weights
    def read_weights(self, device_bytes: int) -> None:
        """Book the bytes an op read from the device (its time and energy are the op's)."""
        self.bytes_read += device_bytes

    # ------------------------------------------------------------------ wear
    def write_back(self, device_bytes: int, commands: int = 1) -> None:
        """Book ``commands`` writes of ``device_bytes`` each made inside an op (weights on
        storage written back by their in-place update, :mod:`poetsim.graph.streaming`):
        their wear and their bytes, like page-outs'; their time and energy are the op's."""
        self.bytes_written += commands * device_bytes
        if self.wear is not None:
            for _ in range(commands):  # each command erases its own sectors
                self.wear.write(device_bytes)
        else:
            self.worn_bytes += commands * self._worn(device_bytes)

    @property
    def wear_bytes(self) -> int:
        """Bytes worn so far: erased sectors on NOR flash, page-rounded write commands on
        a wear-levelled device (see the module docstring)."""
        if self.wear is not None:
            return self.wear.erases * self.wear.sector_bytes
        return self.worn_bytes

    def lifetime_iterations(self) -> float | None:
        """Iterations (runs like this one) until the device's endurance is reached: the
        NOR flash lifetime of :class:`FlashWear`, or ``endurance_bytes_written`` over the
        bytes worn. ``None`` without an endurance or when nothing was written."""
        if self.wear is not None:
            return self.wear.lifetime_iterations()
        endurance = self.spec.endurance_bytes_written
        if endurance is None or self.worn_bytes == 0:
            return None
        return endurance / self.worn_bytes

    def finish(self, t_end: float) -> None:
        """Close the books at the end of the run (placing a due auto-sleep)."""
        self._fall_asleep_if_due(t_end)
        self.machine.finish(t_end)
