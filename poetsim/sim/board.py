"""The ideal variant of a board: what the optimizer's model assumes.

:func:`ideal_board` keeps every active power, throughput and latency (so
:func:`poetsim.costs.op_costs` gives the same per-op costs) and removes what the optimizer
does not model: idle and sleep power (CPU, DMA, storage), wake-up latency and energy, bus
contention and the compute slowdown under DMA. On the ideal board the simulated energy is
exactly the optimizer's ``sum(compute) + sum(page-in) + sum(page-out)``, and the simulated
peak RAM is the optimizer's peak: the consistency tests rest on it.
"""

from __future__ import annotations

import attrs

from poetsim.boards.spec import Board, ContentionModel

__all__ = ["ideal_board"]


def ideal_board(board: Board) -> Board:
    """``board`` with idle/sleep powers and wake-up costs at 0 and no bus contention.

    The name gets an ``_ideal`` suffix so that reports and traces cannot be mistaken for the
    real board's.
    """
    return attrs.evolve(
        board,
        name=f"{board.name}_ideal",
        title=f"{board.title} (ideal: no idle power, wake-ups or contention)",
        cpu=attrs.evolve(board.cpu, idle_power_w=0.0, sleep_power_w=0.0,
                         wakeup_latency_s=0.0, wakeup_energy_j=0.0),
        dma=attrs.evolve(board.dma, idle_power_w=0.0),
        storage=attrs.evolve(board.storage, idle_power_w=0.0, sleep_power_w=0.0,
                             wakeup_latency_s=0.0, wakeup_energy_j=0.0),
        bus=attrs.evolve(board.bus, contention_model=ContentionModel.NONE,
                         compute_slowdown=1.0),
    )
