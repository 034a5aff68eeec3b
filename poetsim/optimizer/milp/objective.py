"""The objective's coefficients: what each decision of the MILP costs in energy.

Each op's and transfer's own energy, plus the wait energy (:class:`~poetsim.costs.WaitPower`)
spread over the variables that cause it: every second of the makespan costs
``cpu_wait + rest``; a second the CPU computes (or, without DMA, moves bytes) saves
``cpu_wait`` of it, a second the storage is busy or waking saves ``rest``. With DMA the
makespan is a variable (:func:`stage_w` is its coefficient); without, it is the compute,
transfers and wake-up latency of every stage, so their coefficients carry the stage's
power.
"""

from __future__ import annotations

from poetsim.costs import OpCosts

__all__ = ["compute_j", "stage_w", "transfer_j", "wake_j"]


def stage_w(costs: OpCosts) -> float:
    """The power of a second of the makespan (0 when time is not priced)."""
    wait = costs.wait
    return wait.cpu_wait_w + wait.rest_w if wait.prices_time else 0.0


def compute_j(costs: OpCosts, k: int, *, held: bool = False) -> float:
    """Op ``k``'s run (with its weights held when ``held``)."""
    energy, seconds = ((float(costs.held_compute_energy_j[k]),
                        float(costs.held_compute_time_s[k]))
                       if held else (float(costs.compute_energy_j[k]),
                                     float(costs.compute_time_s[k])))
    if not costs.wait.prices_time:
        return energy
    if costs.cpu_moves:
        return energy + costs.wait.rest_w * seconds
    return energy - costs.wait.cpu_wait_w * seconds


def transfer_j(costs: OpCosts, energy: float, seconds: float) -> float:
    """A page-in or page-out of ``energy`` joules taking ``seconds``."""
    if not costs.wait.prices_time or costs.cpu_moves:
        return energy
    return energy - costs.wait.rest_w * seconds


def wake_j(costs: OpCosts) -> float:
    """A wake-up of the storage."""
    wait = costs.wait
    if costs.cpu_moves:
        return wait.wake_j + wait.cpu_wait_w * wait.wakeup_s
    return wait.wake_j - wait.rest_w * wait.wakeup_s
