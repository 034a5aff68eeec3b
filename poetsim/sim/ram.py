"""RAM: exact byte accounting of every live tensor, the peak and where it occurs, overflows.

The accounting is that of the schedule contract (:mod:`poetsim.schedule.ops`): the fixed
resident region (``resident_bytes``) plus the ``output_bytes`` of every live tensor, plus
the running op's output and workspace. In the simulator "live" is physical: a page-in
buffer counts from the moment its transfer is issued (or from its PAGE_IN step, whichever
comes first), and a tensor freed while its write is still in flight counts until the write
ends.

Going over the budget is never turned into a silent wait: the allocation happens, the run
continues, and an :class:`Overflow` records the step, the op, the bytes and the time.
"""

from __future__ import annotations

import attrs

__all__ = ["Overflow", "RamModel"]


@attrs.frozen
class Overflow:
    """One allocation that took RAM over the budget."""

    step: int
    op: str
    action: str
    time_s: float
    ram_bytes: int
    budget_bytes: int

    @property
    def excess_bytes(self) -> int:
        return self.ram_bytes - self.budget_bytes


class RamModel:
    """Live bytes over time, with the peak and every overflow.

    :param budget_bytes: the bound (activations plus ``resident_bytes``).
    :param resident_bytes: the fixed region, live from the start.
    :param record: keep ``(time_s, bytes)`` samples for traces and plots.
    """

    __slots__ = ("budget_bytes", "resident_bytes", "live", "peak", "peak_step", "peak_op",
                 "peak_action", "peak_time_s", "overflows", "samples")

    def __init__(self, budget_bytes: int, resident_bytes: int, *, record: bool = False) -> None:
        self.budget_bytes = budget_bytes
        self.resident_bytes = resident_bytes
        self.live = resident_bytes
        self.peak = resident_bytes
        self.peak_step = -1
        self.peak_op = ""
        self.peak_action = ""
        self.peak_time_s = 0.0
        self.overflows: list[Overflow] = []
        self.samples: list[tuple[float, int]] | None = [(0.0, resident_bytes)] if record else None
        if resident_bytes > budget_bytes:
            self.overflows.append(Overflow(-1, "", "resident", 0.0, resident_bytes,
                                           budget_bytes))

    def alloc(self, t: float, nbytes: int, step: int, op: str, action: str) -> None:
        """Add ``nbytes`` at time ``t`` while the program is at ``step`` (op ``op``)."""
        if nbytes == 0:
            return
        live = self.live + nbytes
        self.live = live
        if self.samples is not None:
            self.samples.append((t, live))
        if live > self.peak:
            self.peak, self.peak_step, self.peak_op = live, step, op
            self.peak_action, self.peak_time_s = action, t
        if live > self.budget_bytes:
            self.overflows.append(Overflow(step, op, action, t, live, self.budget_bytes))

    def free(self, t: float, nbytes: int) -> None:
        """Release ``nbytes`` at time ``t``."""
        if nbytes == 0:
            return
        self.live -= nbytes
        if self.samples is not None:
            self.samples.append((t, self.live))

    def fits(self, nbytes: int, limit: int) -> bool:
        """Would ``nbytes`` more stay within ``limit``?"""
        return self.live + nbytes <= limit
