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

Power states
------------
``read`` / ``write`` / ``erase`` while serving (power from the transfers being served),
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
records. NOR flash also counts erases per sector (:mod:`poetsim.sim.flash`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import simpy

from poetsim.boards.spec import Board, Storage, StorageKind
from poetsim.costs import transfer_phases
from poetsim.sim.flash import FlashWear
from poetsim.sim.power import EnergyLedger, PowerMachine

__all__ = ["StorageModel", "TransferTiming", "transfer_timing"]

#: Precedence of storage states when transfers overlap: the highest one is reported.
_PRECEDENCE = {"read": 1, "write": 2, "erase": 3}


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
        state = "read"
        powers: dict[str, float] = {}
        for job in jobs:
            if _PRECEDENCE[job.storage_state] > _PRECEDENCE[state]:
                state = job.storage_state
            powers[job.kind] = powers.get(job.kind, 0.0) + job.timing.storage_power_w
        self.machine.set(self.env.now, state, tuple(powers.items()))

    def begin(self, job, state: str) -> None:
        """``job`` starts being served, in ``state`` (read, write or erase)."""
        job.storage_state = state
        self.jobs.append(job)
        if job.kind == "page_out" and self.wear is not None:
            self.wear.write(job.timing.device_bytes)
        self._refresh()

    def phase(self, job, state: str) -> None:
        """``job`` moves on to ``state``."""
        job.storage_state = state
        self._refresh()

    def end(self, job) -> None:
        """``job`` is done."""
        self.jobs.remove(job)
        self.users -= 1
        if job.kind == "page_out":
            self.bytes_written += job.timing.device_bytes
        else:
            self.bytes_read += job.timing.device_bytes
        if self.users == 0:
            now = self.env.now
            self.machine.set(now, "idle", (("idle", self.spec.idle_power_w),))
            self.idle_since = now
        elif self.jobs:
            self._refresh()

    def finish(self, t_end: float) -> None:
        """Close the books at the end of the run (placing a due auto-sleep)."""
        self._fall_asleep_if_due(t_end)
        self.machine.finish(t_end)
