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
:func:`poetsim.runs.run_all_and_judge`, judged by :mod:`poetsim.verdict` as everywhere.
The sweep's ``time_limit_s`` holds for each point as a whole (:func:`poetsim.clock.command`):
reading the model, the method, its simulation, the reference and the corners.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from typing import Any

from poetsim import clock
from poetsim.boards.spec import Board
from poetsim.errors import OutOfTime
from poetsim.graph.graph import TrainingGraph
from poetsim.methods import MethodStatus
from poetsim.request import Request, resolve_request
from poetsim.runs import (
    Outcome,
    RunCache,
    corners_by,
    reference_energy_by,
    run_all_and_judge,
    with_overheads,
)
from poetsim.sweep.spec import ModelChoice, Point

__all__ = ["run_point"]


@functools.lru_cache(maxsize=8)
def _graph(model: ModelChoice) -> TrainingGraph:
    from poetsim.zoo import build_model

    return build_model(model.name, **dict(model.options))


_REFERENCE: dict[tuple[str, str], float] = {}

#: How the limit of a point is named when it runs out (the sweep file's [solver] key).
LIMIT_NAME = "time_limit_s"


def _reference_j(point: Point, request: Request, board: Board) -> float | None:
    """Every op once with unlimited RAM on this board variant, once per worker process
    (None when the point's time limit runs out first)."""
    key = (point.model.label, point.variant + repr(board))
    if key not in _REFERENCE:
        if len(_REFERENCE) > 256:
            _REFERENCE.clear()
        reference = reference_energy_by(request, None)
        if reference is None:
            return None
        _REFERENCE[key] = reference
    return _REFERENCE[key]


def _evaluate(point: Point, cache_dir: str | None) -> dict[str, Any]:
    """The point's row; its ``time_limit_s`` holds for all of it, from reading the model
    (built once per worker) to the reference and the corners."""
    started = time.perf_counter()
    with clock.command(started, point.solver.time_limit_s, LIMIT_NAME):
        try:
            with clock.doing("reading the model"):
                request = resolve_request(_graph(point.model), point.board, ram=point.ram,
                                          deadline=point.deadline,
                                          accounting=point.accounting)
        except OutOfTime as err:
            return {"status": "done", "method_status": MethodStatus.NO_SOLUTION.value,
                    "feasible": False, "reason": str(err), "cached": False,
                    "solve_time_s": time.perf_counter() - started, "sim_time_s": 0.0}
        cache = RunCache(cache_dir) if cache_dir else None
        # the method's share of the point's limit, as compare's methods share theirs
        (outcome,) = run_all_and_judge(request, [point.method], point.solver, cache=cache,
                                       started=started)
        judged = time.perf_counter()
        return _row(point, request, outcome, started, judged)


def _row(point: Point, request: Request, outcome: Outcome, started: float, judged: float
         ) -> dict[str, Any]:
    reference = None
    if outcome.energy_j is not None:
        reference = _reference_j(point, request, point.board)
        (outcome,) = with_overheads([outcome], reference)
    row = outcome.as_dict()
    return {
        "status": "done", "method_status": row["status"], "feasible": row["feasible"],
        "reason": row["why_not"], "verdict": row["verdict"],
        "violations": json.dumps(row["violations"]), "fits_board_ram": row["fits_board_ram"],
        "energy_j": row["energy_j"], "predicted_energy_j": row["predicted_energy_j"],
        "reference_energy_j": reference, "energy_overhead": row["energy_overhead"],
        "makespan_s": row["makespan_s"], "peak_total_bytes": row["peak_total_bytes"],
        "arena_bytes": row["arena_bytes"], "board_ram_bytes": request.board_ram_bytes,
        "budget_bytes": row["budget_bytes"],
        "budget_activation_bytes": row["budget_activation_bytes"],
        "resident_bytes": row["resident_bytes"],
        # where the request put the weights and how it split the front (request.py decides)
        "flash_weight_bytes": request.flash_weight_bytes,
        "streamed_weight_bytes": request.streamed_weight_bytes,
        "row_bands": request.graph.metadata.get("row_bands", 1),
        "deadline_s": row["deadline_s"],
        "within_budget": row.get("within_budget"), "deadline_met": row.get("deadline_met"),
        "gap": row["gap"], "bound_j": row["bound_j"],
        "recomputations": row["recomputations"], "page_outs": row["page_outs"],
        "page_ins": row["page_ins"], "cached": row["cached"],
        # a cached run costs nothing now: report the time it took here, not originally
        "solve_time_s": judged - started, "sim_time_s": 0.0,
        **_corners(point, request, outcome),
    }


def _corners(point: Point, request: Request, outcome: Outcome) -> dict[str, Any]:
    """The slow and costly corners' figures, when the sweep asks, the board has ranges and
    the point's time limit leaves the time to judge them."""
    if not (point.corners and point.board.ranges):
        return {}
    corners = corners_by(request, outcome, None)
    if len(corners) < 3:
        return {}
    _, slow, costly = corners
    return {"slow_verdict": slow.verdict.label, "slow_makespan_s": slow.verdict.makespan_s,
            "slow_energy_j": slow.verdict.energy_j, "costly_verdict": costly.verdict.label,
            "costly_energy_j": costly.verdict.energy_j}


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
