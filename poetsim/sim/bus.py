"""The shared system bus: how transfers share bandwidth and how DMA slows compute.

Two models, chosen by ``board.bus.contention_model``:

``none`` (:class:`IdealBus`)
    Transfers and compute do not interfere. A data phase of ``b`` bytes at the device's
    rate ``r`` takes ``b / r``; an op takes its OpCosts time. One SimPy timeout each.

``fair_share`` (:class:`FairShareBus`), a fluid model
    Every active data phase is a *flow* with a cap (the storage device's throughput in its
    direction). The bus bandwidth ``B`` is divided max-min fairly among the flows
    (progressive filling: each flow gets ``min(cap, equal share of what is left)``), and an
    op runs ``compute_slowdown`` times slower while at least one flow is active. Rates are
    recomputed only when a flow or an op starts or ends; the model then advances every
    flow's remaining bytes (and the op's remaining work) analytically and schedules one
    timeout for the next completion. SimPy cannot cancel a timeout, so only the newest one
    counts: one that fires after a newer one was scheduled is ignored. The cost grows with
    the number of rate changes, never with the number of bytes.

Only data phases use the bus: per-command latency, NOR erase and wake-ups do not. Both
models count the time with at least one flow active (``busy_s``) and the bytes moved.
The storage device itself is not a shared server here: up to ``dma.channels`` transfers
stream at the same time, each at most at the device's throughput (see the report notes).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

__all__ = ["FairShareBus", "IdealBus", "make_bus"]


class IdealBus:
    """No contention: every data phase and op runs at its nominal speed."""

    #: :meth:`transfer` can include a command phase in the same timeout
    merges_lead = True

    def __init__(self, env: simpy.Environment, bandwidth_bytes_per_s: float) -> None:
        self.env = env
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.bytes_moved = 0
        self.busy_s = 0.0
        self._intervals: list[tuple[float, float]] = []

    def transfer(self, nbytes: int, cap_bytes_per_s: float, lead_s: float = 0.0) -> simpy.Event:
        """Move ``nbytes`` at ``cap_bytes_per_s`` after ``lead_s`` off the bus (a command
        phase); the event fires when done. One timeout for both phases."""
        now = self.env.now
        data_s = nbytes / cap_bytes_per_s if nbytes else 0.0
        self.bytes_moved += nbytes
        if data_s > 0.0:
            self._intervals.append((now + lead_s, now + lead_s + data_s))
        return self.env.timeout(lead_s + data_s)

    def compute(self, work_s: float) -> Generator[simpy.Event, Any, None]:
        """Run an op of nominal duration ``work_s`` (``yield from`` it)."""
        yield self.env.timeout(work_s)

    def finish(self, t_end: float) -> None:
        """Busy time is the union of the data phases (they may overlap)."""
        busy, end = 0.0, -1.0
        for a, b in sorted(self._intervals):
            if a > end:
                busy += b - a
                end = b
            elif b > end:
                busy += b - end
                end = b
        self.busy_s = busy


class _Flow:
    __slots__ = ("remaining", "cap", "rate", "event", "tol")

    def __init__(self, remaining: float, cap: float, event: simpy.Event) -> None:
        self.remaining = remaining
        self.cap = cap
        self.rate = 0.0
        self.event = event
        self.tol = remaining * 1e-9


class FairShareBus:
    """Fluid max-min fair sharing of the bus, plus compute slowdown while DMA runs.

    Flow completions share one timeout per rate change (the newest one counts). The running op
    has its own timer, re-armed only when its rate changes (a flow starts while none ran, or
    the last one ends); the CPU process follows the newest timer (it is interrupted when the
    new timer fires earlier than the one it waits on), so an op that overlaps no transfer
    costs one event.
    """

    #: :meth:`transfer` cannot include a command phase (it would hold a flow slot)
    merges_lead = False

    def __init__(self, env: simpy.Environment, bandwidth_bytes_per_s: float,
                 compute_slowdown: float) -> None:
        self.env = env
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.slowdown = compute_slowdown
        #: the running op's speed while any flow is active
        self.slow_rate = 1.0 / compute_slowdown
        self.flows: list[_Flow] = []
        self.working = False
        self.work_left = 0.0
        self.work_rate = 1.0
        self.work_timer: simpy.Event | None = None
        self.work_process: simpy.Process | None = None
        self.last = 0.0
        #: the timeout of the next flow completion; an earlier one that fires is stale
        self.timer: simpy.Event | None = None
        self.busy_s = 0.0
        self.bytes_moved = 0

    # ------------------------------------------------------------------ fluid core
    def _advance(self) -> None:
        now = self.env.now
        dt = now - self.last
        if dt > 0.0:
            if self.flows:
                self.busy_s += dt
                for flow in self.flows:
                    flow.remaining -= flow.rate * dt
            if self.working:
                self.work_left -= self.work_rate * dt
        self.last = now

    def _reflow(self) -> None:
        """The flows changed: share the bandwidth again and schedule the next completion."""
        flows = self.flows
        if flows:
            left = self.bandwidth_bytes_per_s
            n = len(flows)
            if n == 1:  # the whole bandwidth, up to the flow's cap
                flow = flows[0]
                flow.rate = flow.cap if flow.cap < left else left
            else:
                for i, flow in enumerate(sorted(flows, key=lambda f: f.cap)):
                    share = left / (n - i)
                    flow.rate = flow.cap if flow.cap < share else share
                    left -= flow.rate
            rate = self.slow_rate
        else:
            rate = 1.0
        if rate != self.work_rate:
            faster = rate > self.work_rate
            self.work_rate = rate
            if self.working:
                left_s = self.work_left / rate
                self.work_timer = self.env.timeout(left_s if left_s > 0.0 else 0.0)
                if faster and self.work_process is not None:
                    # The op waits on a timer that is now too late: move it to the new one.
                    self.work_process.interrupt("rate")
        # the next completion
        horizon = None
        for flow in flows:
            if flow.rate > 0.0:
                t = flow.remaining / flow.rate
                if horizon is None or t < horizon:
                    horizon = t
        if horizon is None:
            self.timer = None
            return
        timer = self.timer = self.env.timeout(horizon if horizon > 0.0 else 0.0)
        timer.callbacks.append(self._fire)  # type: ignore[union-attr]

    def _fire(self, timer: simpy.Event) -> None:
        if timer is not self.timer:
            return  # a stale completion: rates changed since it was scheduled
        self._advance()
        # A flow is done when what is left is below its tolerance, or would take less
        # time than the clock can resolve (otherwise a zero timeout could repeat forever).
        eps_s = 1e-12 * max(1.0, self.env.now)
        flows = self.flows
        if len(flows) == 1:  # the common case: one flow, done or not
            f = flows[0]
            done = flows if f.remaining <= f.tol or f.remaining <= f.rate * eps_s else []
            if done:
                self.flows = []
        else:
            done = [f for f in flows if f.remaining <= f.tol or f.remaining <= f.rate * eps_s]
            if done:
                self.flows = [f for f in flows if f not in done]
        self._reflow()
        for flow in done:
            flow.event.succeed()

    # ------------------------------------------------------------------ interface
    def transfer(self, nbytes: int, cap_bytes_per_s: float, lead_s: float = 0.0) -> simpy.Event:
        """Start a data flow of ``nbytes`` capped at ``cap_bytes_per_s`` (``lead_s`` must be
        waited for separately: a command phase is not on the bus)."""
        if lead_s:
            raise ValueError("FairShareBus.transfer: wait for the command phase first")
        self._advance()
        event = self.env.event()
        self.flows.append(_Flow(float(nbytes), cap_bytes_per_s, event))
        self.bytes_moved += nbytes
        self._reflow()
        return event

    def compute(self, work_s: float) -> Generator[simpy.Event, Any, None]:
        """Run an op of nominal duration ``work_s``, slowed while flows are active."""
        if self.working:
            raise RuntimeError("the CPU runs one op at a time")
        env = self.env
        if self.flows:
            self._advance()
        else:  # nothing to advance: only the clock's mark moves
            self.last = env.now
        self.working = True
        self.work_left = work_s
        self.work_process = env.active_process
        timer = self.work_timer = env.timeout(work_s / self.work_rate)
        while True:
            try:
                yield timer
            except simpy.Interrupt:
                timer = self.work_timer  # sped up: the new timer fires earlier
                continue
            if timer is self.work_timer:
                break
            timer = self.work_timer  # slowed down: follow the re-armed (later) timer
        if self.flows:  # else the op's work left and the clock's mark are of no more use
            self._advance()
        self.working = False
        self.work_timer = None
        self.work_process = None

    def finish(self, t_end: float) -> None:
        """Nothing to close: flows always end before the run does."""


def make_bus(env: simpy.Environment, board) -> IdealBus | FairShareBus:
    """The bus model the board asks for."""
    from poetsim.boards.spec import ContentionModel

    bus = board.bus
    if bus.contention_model is ContentionModel.FAIR_SHARE:
        return FairShareBus(env, bus.bandwidth_bytes_per_s, bus.compute_slowdown)
    return IdealBus(env, bus.bandwidth_bytes_per_s)
