"""Monte Carlo of one schedule on one board: how much the board's timing variance moves it.

:func:`monte_carlo` simulates the same schedule ``runs`` times with the seeds ``seed``,
``seed + 1``, ..., ``seed + runs - 1`` (:func:`poetsim.sim.simulate` with ``seed=``), so run
``i`` alone is ``simulate(..., seed=seed + i)``, and the result is the same on any machine.
Each seeded run draws every page-out's extra write-busy time from the board's
``storage.write_busy`` (:mod:`poetsim.sim.storage`); nothing else varies.

It reports the distribution of makespan, energy and drawn write-busy time over the runs
(p50, p99, mean, min, max; percentiles by linear interpolation between order statistics,
numpy's default); the share of runs that meet a deadline is the verdict's
(:func:`poetsim.verdict.deadline_met_runs`). When nothing
can vary (the board has no ``write_busy``, or the schedule writes nothing) every run is
the nominal run: it is simulated once and :attr:`MonteCarlo.identical_reason` says why.

The Monte Carlo judges nothing: a verdict is the nominal run's (:mod:`poetsim.verdict`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, op_costs
from poetsim.errors import InputError
from poetsim.graph.graph import TrainingGraph
from poetsim.schedule.ops import Action, Schedule
from poetsim.sim import simulate

__all__ = ["MAX_RUNS", "Distribution", "MonteCarlo", "monte_carlo"]

#: The most runs one Monte Carlo may ask for.
MAX_RUNS = 100_000


@attrs.frozen
class Distribution:
    """Summary of one figure over the runs (in the figure's unit)."""

    p50: float
    p99: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        array = np.asarray(values, dtype=np.float64)
        p50, p99 = np.percentile(array, [50, 99])
        return cls(p50=float(p50), p99=float(p99), mean=float(array.mean()),
                   min=float(array.min()), max=float(array.max()))

    def as_dict(self) -> dict[str, float]:
        return attrs.asdict(self)


@attrs.frozen
class MonteCarlo:
    """The result of :func:`monte_carlo` (see the module docstring).

    ``worst_seed`` is the seed of the run with the
    largest makespan (the first such), to reproduce it alone. ``makespans_s`` and
    ``energies_j`` hold every run's figure, in seed order.
    """

    runs: int
    seed: int
    identical_reason: str | None
    makespan_s: Distribution
    energy_j: Distribution
    write_busy_s: Distribution
    worst_seed: int
    makespans_s: tuple[float, ...] = attrs.field(repr=False)
    energies_j: tuple[float, ...] = attrs.field(repr=False)
    wall_s: float = attrs.field(default=0.0, eq=False, repr=False)

    @property
    def varies(self) -> bool:
        """Whether the runs can differ from the nominal run."""
        return self.identical_reason is None

    @property
    def last_seed(self) -> int:
        return self.seed + self.runs - 1

    def as_dict(self, *, samples: bool = False) -> dict[str, Any]:
        """JSON-ready, units in the keys (``samples=True`` adds every run's figures)."""
        out: dict[str, Any] = {
            "runs": self.runs, "seed": self.seed, "last_seed": self.last_seed,
            "varies": self.varies, "identical_reason": self.identical_reason,
            "percentile_method": "linear",
            "makespan_s": self.makespan_s.as_dict(), "energy_j": self.energy_j.as_dict(),
            "write_busy_s": self.write_busy_s.as_dict(), "worst_seed": self.worst_seed,
            "wall_s": self.wall_s,
        }
        if samples:
            out["makespans_s"] = list(self.makespans_s)
            out["energies_j"] = list(self.energies_j)
        return out


def _whole(name: str, value: Any, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low \
            or (high is not None and value > high):
        rule = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise InputError(f"{name} = {value!r}: must be a whole number {rule}")
    return int(value)


def _identical_reason(board: Board, schedule: Schedule) -> str | None:
    if board.storage.write_busy is None:
        return (f"board {board.name!r} gives no storage.write_busy distribution: every run "
                "is the nominal run")
    if not any(step.action is Action.PAGE_OUT for step in schedule.steps):
        return "the schedule writes nothing to storage: every run is the nominal run"
    return None


def monte_carlo(graph: TrainingGraph, board: Board, schedule: Schedule, *, runs: int,
                seed: int = 0, budget_bytes: int | None = None, resident_bytes: int = 0,
                costs: OpCosts | None = None) -> MonteCarlo:
    """Simulate ``schedule`` with the seeds ``seed .. seed + runs - 1`` and summarize.

    ``runs`` in [1, :data:`MAX_RUNS`], ``seed`` >= 0; the other arguments are those of
    :func:`poetsim.sim.simulate`.
    """
    runs = _whole("runs", runs, 1, MAX_RUNS)
    seed = _whole("seed", seed, 0, None)
    started = time.perf_counter()
    if costs is None:
        costs = op_costs(graph, board)
    identical = _identical_reason(board, schedule)
    options = dict(budget_bytes=budget_bytes, resident_bytes=resident_bytes, costs=costs)
    if identical is not None:
        report = simulate(graph, board, schedule, seed=seed, **options)
        makespans = [report.makespan_s] * runs
        energies = [report.energy_j] * runs
        busy = [report.write_busy_s] * runs
    else:
        makespans, energies, busy = [], [], []
        for i in range(runs):
            report = simulate(graph, board, schedule, seed=seed + i, **options)
            makespans.append(report.makespan_s)
            energies.append(report.energy_j)
            busy.append(report.write_busy_s)
    return MonteCarlo(
        runs=runs, seed=seed, identical_reason=identical,
        makespan_s=Distribution.of(makespans), energy_j=Distribution.of(energies),
        write_busy_s=Distribution.of(busy),
        worst_seed=seed + int(np.argmax(makespans)), makespans_s=tuple(makespans),
        energies_j=tuple(energies), wall_s=time.perf_counter() - started)
