"""NOR flash wear: log-structured sector allocation and a per-sector erase counter.

NOR flash can only clear bits, so every page-out first erases the sectors it will program
(:mod:`poetsim.costs` charges ``ceil(rounded_bytes / erase_sector_bytes)`` erases per
page-out). The simulator places tensors *log-structured*: each page-out takes the next
whole sectors after the previous one, wrapping around at the end of the device, which is
the simplest wear-levelling policy. Each erase increments that sector's counter; the report
gives the largest count and, from the average erases per iteration, how many iterations the
device lasts before its most-worn sector reaches ``endurance_cycles``.
"""

from __future__ import annotations

import math

__all__ = ["FlashWear"]


class FlashWear:
    """Erase counters of a NOR device of ``capacity_bytes`` in ``sector_bytes`` sectors."""

    __slots__ = ("sector_bytes", "sectors", "endurance_cycles", "counts", "next_sector",
                 "erases")

    def __init__(self, capacity_bytes: int, sector_bytes: int, endurance_cycles: int) -> None:
        if sector_bytes <= 0:
            raise ValueError(f'"sector_bytes" must be > 0, not {sector_bytes!r}')
        self.sector_bytes = sector_bytes
        self.sectors = max(1, capacity_bytes // sector_bytes)
        self.endurance_cycles = endurance_cycles
        #: erase count per sector index (sectors never erased are absent)
        self.counts: dict[int, int] = {}
        self.next_sector = 0
        self.erases = 0

    def write(self, rounded_bytes: int) -> tuple[int, ...]:
        """Allocate and erase the sectors for one page-out; returns their indices."""
        if rounded_bytes <= 0:
            return ()
        n = math.ceil(rounded_bytes / self.sector_bytes)
        used = []
        for _ in range(n):
            s = self.next_sector
            self.counts[s] = self.counts.get(s, 0) + 1
            used.append(s)
            self.next_sector = (s + 1) % self.sectors
        self.erases += n
        return tuple(used)

    @property
    def max_erase_count(self) -> int:
        return max(self.counts.values(), default=0)

    @property
    def sectors_used(self) -> int:
        return len(self.counts)

    def lifetime_iterations(self) -> float | None:
        """Iterations until the most-worn sector reaches the endurance (log-structured).

        Each iteration erases ``erases`` sectors spread round-robin over the device, so a
        sector is erased ``erases / sectors`` times per iteration on average. ``None`` if
        nothing was erased.
        """
        if self.erases == 0:
            return None
        return self.endurance_cycles * self.sectors / self.erases
