"""What a Dask worker does with one sweep point: solve (or fetch), simulate, summarise.

:func:`run_point` takes a :class:`~poetsim.sweep.spec.Point` (small and picklable: the
model's name and options, the overridden board, budget, deadline, method, solver
settings) and the schedule cache folder, builds the graph on the worker, and returns the
result columns of the results store as a plain dict. It never raises: a failure comes
back as ``status = "error"`` with the exception's type and message, so one bad point
does not stop the sweep.

The schedule is produced by :func:`poetsim.runs.run_method` with a
:class:`poetsim.runs.RunCache` in ``cache_dir`` (content-addressed, atomic entries, so
concurrent workers on one machine share it safely) and checked by
:func:`poetsim.runs.simulate_run`; feasibility is judged as ``poetsim compare`` does.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from typing import Any

from poetsim.boards.spec import Board
from poetsim.compare import comparison_row, reference_energy_j, with_overheads
from poetsim.costs import OpCosts, op_costs
from poetsim.graph.graph import TrainingGraph
from poetsim.runs import RunCache, run_method, simulate_run
from poetsim.sweep.spec import BOARD_BUDGET, ModelChoice, Point

__all__ = ["run_point"]


@functools.lru_cache(maxsize=8)
def _graph(model: ModelChoice) -> TrainingGraph:
    from poetsim.zoo import build_model

    return build_model(model.name, **dict(model.options))


_REFERENCE: dict[tuple[str, str], float] = {}


def _reference_j(point: Point, graph: TrainingGraph, board: Board, costs: OpCosts) -> float:
    """Checkpoint-all with unlimited RAM on this board variant, once per worker process."""
    key = (point.model.label, point.variant + repr(board))
    if key not in _REFERENCE:
        if len(_REFERENCE) > 256:
            _REFERENCE.clear()
        _REFERENCE[key] = reference_energy_j(graph, board, costs)
    return _REFERENCE[key]


def _budget(point: Point, board: Board) -> int | str:
    """The ``ram`` argument of run_method: the point's, or the board's usable RAM.

    ``"board"`` follows poetsim's default budget semantics (POET's mu_RAM): the budget
    holds activations and working buffers, parameters and gradients are counted beside it.
    """
    return board.ram.usable_bytes if point.ram == BOARD_BUDGET else point.ram


def _evaluate(point: Point, cache_dir: str | None) -> dict[str, Any]:
    graph = _graph(point.model)
    board = point.board
    costs = op_costs(graph, board)
    ram = _budget(point, board)
    cache = RunCache(cache_dir) if cache_dir else None
    started = time.perf_counter()
    run = run_method(graph, board, point.method, ram=ram, deadline=point.deadline,
                     time_limit_s=point.solver.time_limit_s, gap_limit=point.solver.gap_limit,
                     seed=point.solver.seed, costs=costs, cache=cache)
    solved = time.perf_counter()
    report = simulate_run(graph, board, run, costs=costs)
    row = comparison_row(run, report)
    simulated = time.perf_counter()
    reference = None
    if row.energy_j is not None:
        reference = _reference_j(point, graph, board, costs)
        (row,) = with_overheads([row], reference)
    return {
        "status": "done", "method_status": run.status, "feasible": row.feasible,
        "reason": row.reason, "energy_j": row.energy_j, "predicted_energy_j": run.energy_j,
        "reference_energy_j": reference,
        "energy_overhead": row.energy_overhead,
        "makespan_s": row.makespan_s, "peak_ram_bytes": row.peak_ram_bytes,
        "budget_activation_bytes": run.budget_activation_bytes,
        "resident_bytes": run.resident_bytes, "deadline_s": run.deadline_s,
        "budget_ok": row.budget_ok, "deadline_ok": row.deadline_ok, "gap": run.gap,
        "bound_j": run.bound_j, "recomputations": row.recomputations,
        "page_outs": row.page_outs, "page_ins": row.page_ins, "cached": run.cached,
        # a cached run costs nothing now: report the time it took here, not originally
        "solve_time_s": solved - started, "sim_time_s": simulated - solved,
    }


def run_point(point: Point, cache_dir: str | None) -> dict[str, Any]:
    """Run one point; the store's result columns (never raises for the point's own errors)."""
    started = time.perf_counter()
    try:
        result = _evaluate(point, cache_dir)
    except Exception as err:  # noqa: BLE001 - a failing point is recorded, the sweep goes on
        message = str(err).strip().splitlines()[0] if str(err).strip() else ""
        result = {"status": "error", "error": f"{type(err).__name__}: {message}"}
    result["wall_s"] = time.perf_counter() - started
    result["worker"] = f"{socket.gethostname()}:{os.getpid()}"
    return result
