"""The board simulator: runs any schedule on a simulated board and verifies it.

:func:`simulate` executes a :class:`~poetsim.schedule.Schedule` (the optimizer's, a
baseline's or a hand-built one) for one training iteration on a discrete-event model of a
:class:`~poetsim.boards.Board` built on SimPy, and returns a :class:`SimReport`: the
peak RAM and where it occurs, the makespan, the energy by component, power state and op
kind, stalls, bus and storage traffic, flash wear, and what the run broke against the
limits it was given. Whether that is a PASS is judged by :mod:`poetsim.verdict`.

Modules, one concept each:

* :mod:`~poetsim.sim.power`: power states, energy integrated at transitions;
* :mod:`~poetsim.sim.cpu`: CPU states and the break-even sleep policy;
* :mod:`~poetsim.sim.storage`: transfer phases, storage states, wake-up, auto-sleep, space;
* :mod:`~poetsim.sim.flash`: NOR erase counters and log-structured placement;
* :mod:`~poetsim.sim.bus`: contention models (none, fair-share fluid) and compute slowdown;
* :mod:`~poetsim.sim.dma`: transfer jobs, DMA channels, the CPU as mover;
* :mod:`~poetsim.sim.ram`: byte-exact RAM accounting, peak, overflows;
* :mod:`~poetsim.sim.planner`: just-in-time page-in planning (POET Algorithm 2);
* :mod:`~poetsim.sim.engine`: the CPU's program and the wiring;
* :mod:`~poetsim.sim.report`, :mod:`~poetsim.sim.timeline`, :mod:`~poetsim.sim.trace`:
  results, recorded timeline and the Chrome / Perfetto trace writer;
* :mod:`~poetsim.sim.board`: :func:`ideal_board`, the optimizer's view of a board.

>>> from poetsim.boards import get_board
>>> from poetsim.schedule import plain_schedule
>>> from poetsim.zoo import build_model
>>> graph = build_model("mlp", layers=2)
>>> report = simulate(graph, get_board("nrf52840"), plain_schedule(graph))
>>> report.violations, report.stall_s
((), 0.0)
"""

from __future__ import annotations

from typing import Any

from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, op_costs
from poetsim.errors import InputError, ScheduleError
from poetsim.graph.graph import TrainingGraph
from poetsim.schedule.ops import Schedule
from poetsim.schedule.replay import ContractViolation, replay
from poetsim.sim.board import ideal_board
from poetsim.sim.engine import Simulation
from poetsim.sim.report import Prediction, SimReport, SimViolation, TransferRecord
from poetsim.sim.timeline import Slice, StateSlice, Timeline

__all__ = ["Prediction", "SimReport", "SimViolation", "Slice", "StateSlice", "Timeline",
           "TransferRecord", "ideal_board", "simulate"]


def _whole_bytes(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{name} = {value!r}: must be a non-negative whole number of bytes")
    return value


def simulate(graph: TrainingGraph, board: Board, schedule: Schedule, *,
             budget_bytes: int | None = None, resident_bytes: int = 0,
             costs: OpCosts | None = None, trace: bool = False,
             seed: int | None = None) -> SimReport:
    """Simulate one training iteration of ``schedule`` on ``board``.

    Parameters
    ----------
    graph:
        The training graph the schedule was made for.
    board:
        The board to run on (use :func:`ideal_board` for the optimizer's idealised view).
    schedule:
        Any schedule that follows the contract of :mod:`poetsim.schedule.ops`.
    budget_bytes:
        RAM budget for activations plus ``resident_bytes`` (as in the checker). ``None``:
        the board's usable RAM (``ram.bytes - ram.reserved_bytes``).
    resident_bytes:
        The fixed region (parameters, gradients, optimizer state), live from the start.
    costs:
        Per-op costs; ``None`` computes :func:`poetsim.costs.op_costs` for ``board``.
    trace:
        Keep the timeline (op slices, power states, RAM samples) in ``report.timeline``.
    seed:
        ``None`` (the default): the nominal run, no timing variance. A whole number >= 0:
        every page-out draws its extra write-busy time from ``board.storage.write_busy``
        with a :class:`numpy.random.Generator` seeded from it (same seed, same report);
        on a board without ``write_busy`` the run equals the nominal one. Monte Carlo
        runs: :mod:`poetsim.sim.montecarlo`.

    Raises
    ------
    ~poetsim.schedule.ScheduleError
        The schedule breaks a structural rule of the contract (wrong graph, an input not
        in RAM, ...): it cannot be executed. Budget and storage capacity are not
        structural: the run goes on and the report records them. Deadlines are the
        verdict's (:func:`poetsim.verdict.judge`): the simulator reports the makespan.
    InputError
        A bad argument (negative bytes, costs for another graph, ...).
    """
    if budget_bytes is None:
        budget_bytes = board.ram.usable_bytes
    budget_bytes = _whole_bytes("budget_bytes", budget_bytes)
    resident_bytes = _whole_bytes("resident_bytes", resident_bytes)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise InputError(f"seed = {seed!r}: must be a whole number >= 0")
    if costs is None:
        costs = op_costs(graph, board)
    elif len(costs) != len(graph.ops):
        raise InputError(f"costs cover {len(costs)} ops, but graph {graph.name!r} has "
                         f"{len(graph.ops)}")
    try:
        replayed = replay(graph, schedule)
    except ContractViolation as err:
        raise ScheduleError(f"cannot simulate: {err}") from None
    return Simulation(replayed, board, costs, budget_bytes=budget_bytes,
                      resident_bytes=resident_bytes, trace=trace,
                      seed=seed).run()
