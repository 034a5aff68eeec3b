"""The CPU: power states, the op it runs, and the sleep decision while it waits.

States
------
``active``
    running an op; the power is the op's own ``compute_energy_j / compute_time_s`` from
    :class:`~poetsim.costs.OpCosts`, so paper-profile boards and measured costs are honoured.
``transfer``
    moving a tensor itself (board without DMA); the power is part of the transfer's
    (``pagein_energy_j`` / ``pageout_energy_j`` already include the CPU as the mover on such
    boards), so the CPU's own contribution is whatever share the transfer assigns it.
``idle``
    awake and waiting, at ``cpu.idle_power_w``.
``sleep``
    asleep while waiting, at ``cpu.sleep_power_w``.
``wake``
    leaving sleep: ``cpu.wakeup_latency_s`` at ``wakeup_energy_j / wakeup_latency_s``.

Sleep policy
------------
When the CPU has to wait (a page-in has not arrived, RAM is held by a write in flight),
it predicts the gap from the expected completion time of what it waits for. It sleeps only
when the gap exceeds the break-even time::

    t_break_even = max(wakeup_latency_s, wakeup_energy_j / (idle_power_w - sleep_power_w))

(infinite when sleeping saves no power). A sleeping CPU is woken by the completion
interrupt and resumes ``wakeup_latency_s`` later, which counts as stall time.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from poetsim.boards.spec import Cpu
from poetsim.sim.power import EnergyLedger, PowerMachine

__all__ = ["CpuModel", "break_even_s"]


def break_even_s(cpu: Cpu) -> float:
    """Shortest idle gap for which sleeping saves energy (``inf`` if it never does)."""
    saving_w = cpu.idle_power_w - cpu.sleep_power_w
    if saving_w <= 0.0:
        return math.inf
    return max(cpu.wakeup_latency_s, cpu.wakeup_energy_j / saving_w)


class CpuModel:
    """The CPU's power machine plus the wait-with-sleep logic."""

    __slots__ = ("env", "spec", "machine", "break_even_s", "wakeups")

    def __init__(self, env: simpy.Environment, spec: Cpu, ledger: EnergyLedger, *,
                 record: bool = False) -> None:
        self.env = env
        self.spec = spec
        self.machine = PowerMachine("cpu", "idle", (("idle", spec.idle_power_w),), ledger,
                                    record=record)
        self.break_even_s = break_even_s(spec)
        self.wakeups = 0

    def run(self, kind: str, power_w: float) -> None:
        """Start running an op of ``kind`` (compute / recompute) at ``power_w``."""
        self.machine.set(self.env.now, "active", ((kind, power_w),))

    def move(self, contributions: tuple[tuple[str, float], ...]) -> None:
        """Start moving a tensor itself (no DMA)."""
        self.machine.set(self.env.now, "transfer", contributions)

    def idle(self, kind: str = "idle") -> None:
        """Awake, waiting; the idle power is booked as ``kind`` (idle or stall)."""
        self.machine.set(self.env.now, "idle", ((kind, self.spec.idle_power_w),))

    def wait(self, event: simpy.Event, eta_s: float, kind: str, *,
             wake: bool = True) -> Generator[simpy.Event, Any, None]:
        """Wait for ``event`` (expected at ``eta_s``), sleeping if the gap is worth it.

        With ``wake=False`` (the end of the iteration) a sleeping CPU stays asleep.
        """
        env = self.env
        if event.processed:
            return
        gap = eta_s - env.now
        spec = self.spec
        if gap > self.break_even_s:
            self.machine.set(env.now, "sleep", ((kind, spec.sleep_power_w),))
            yield event
            if not wake:
                return
            self.wakeups += 1
            if spec.wakeup_latency_s > 0.0:
                self.machine.set(env.now, "wake",
                                 (("wakeup", spec.wakeup_energy_j / spec.wakeup_latency_s),))
                yield env.timeout(spec.wakeup_latency_s)
            else:
                self.machine.set(env.now, "wake", ())
                self.machine.quantum("wake", "wakeup", spec.wakeup_energy_j)
            self.machine.set(env.now, "idle", ((kind, spec.idle_power_w),))
        else:
            self.machine.set(env.now, "idle", ((kind, spec.idle_power_w),))
            yield event
