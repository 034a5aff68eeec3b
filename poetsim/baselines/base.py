"""What every baseline returns, and the shared finishing step.

A baseline is a plain function::

    method(graph, board, costs, budget_bytes, *, deadline_s=None, stop_at=None) -> BaselineResult

``budget_bytes`` is the *activation* budget (the request's ``activation_budget_bytes``:
activations and working buffers; parameters, gradients and optimizer state live beside
it). ``costs`` is :func:`poetsim.costs.op_costs` of the graph on the board (``None``
computes it). ``deadline_s`` is recorded in the schedule's metadata; no heuristic
optimises against it (the MILP methods in :mod:`poetsim.methods` do). ``stop_at`` (every
baseline but checkpoint-all takes it) is a :func:`time.perf_counter` instant by which the
method returns, with its best schedule so far or ``infeasible`` saying that it ran out of
its time (:func:`out_of_time`).

Every schedule a baseline returns passes :func:`poetsim.schedule.check_schedule` at the
budget (``finish`` asserts it) and carries metadata ``{"method", "budget_activation_bytes",
...}``. The predicted figures are computed from the op list itself (:func:`predict`), not
from the method's internal model: :func:`poetsim.schedule.model.predict`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from poetsim.boards.spec import Board
from poetsim.clock import GRACE_S, Ticker
from poetsim.costs import OpCosts, op_costs
from poetsim.errors import InputError, OutOfTime
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import fingerprint_known, graph_fingerprint
from poetsim.graph.streaming import weight_steps
from poetsim.schedule import Action, Schedule, Step
from poetsim.schedule.metadata import stamped
from poetsim.schedule.model import predict
from poetsim.schedule.ops import with_weight_steps
from poetsim.schedule.replay import ContractViolation, replay
from poetsim.status import Status

__all__ = ["GRACE_S", "INFEASIBLE", "NOT_APPLICABLE", "OK", "OUT_OF_TIME", "STATUSES",
           "BaselineResult", "OutOfTime", "Ticker", "check_budget", "costs_for", "finish",
           "finish_estimate_s", "infeasible", "not_applicable", "out_of_time",
           "ran_out_of_time"]

OK = Status.OK
INFEASIBLE = Status.INFEASIBLE
NOT_APPLICABLE = Status.NOT_APPLICABLE
#: ``ok``: a schedule within the budget; ``infeasible``: the method found none that fits
#: (not a proof that none exists, except where the reason says so); ``not_applicable``:
#: the method does not handle this graph (the reason says why).
STATUSES = (OK, INFEASIBLE, NOT_APPLICABLE)


def _status(instance: Any, attribute: Any, value: Status) -> None:
    if value not in STATUSES:
        raise ValueError(f"status = {value!r}: must be one of "
                         f"{', '.join(s.value for s in STATUSES)}")


@attrs.frozen
class BaselineResult:
    """The outcome of one baseline on one (graph, board, budget).

    ``energy_j`` / ``time_s`` / ``peak_ram_bytes`` are predicted from the op list
    (:func:`~poetsim.schedule.model.predict`); ``peak_ram_bytes`` is activation bytes (no
    resident region), the figure ``budget_bytes`` bounds. They are ``None`` without a
    schedule. ``details`` holds method-specific facts (checkpoints chosen, thresholds, solver
    status, ...).
    """

    method: str
    status: Status = attrs.field(validator=_status)
    schedule: Schedule | None = None
    reason: str = ""
    budget_bytes: int = 0
    deadline_s: float | None = None
    energy_j: float | None = None
    time_s: float | None = None
    peak_ram_bytes: int | None = None
    recomputations: int = 0
    page_outs: int = 0
    page_ins: int = 0
    details: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, hash=False)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def deadline_ok(self) -> bool | None:
        """Predicted time within the deadline (None without a deadline or a schedule)."""
        if self.deadline_s is None or self.time_s is None:
            return None
        return self.time_s <= self.deadline_s

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (no steps)."""
        return {
            "method": self.method, "status": self.status.value, "reason": self.reason,
            "budget_activation_bytes": self.budget_bytes, "deadline_s": self.deadline_s,
            "energy_j": self.energy_j, "time_s": self.time_s,
            "peak_ram_bytes": self.peak_ram_bytes, "recomputations": self.recomputations,
            "page_outs": self.page_outs, "page_ins": self.page_ins,
            "details": dict(self.details),
        }


def costs_for(graph: TrainingGraph, board: Board, costs: OpCosts | None) -> OpCosts:
    """``costs`` if given (checked to cover the graph), else ``op_costs(graph, board)``."""
    if costs is None:
        return op_costs(graph, board)
    if len(costs) != len(graph.ops):
        raise InputError(f"costs cover {len(costs)} ops, but graph {graph.name!r} has "
                         f"{len(graph.ops)}")
    return costs


def not_applicable(method: str, reason: str, budget_bytes: int,
                   deadline_s: float | None = None) -> BaselineResult:
    return BaselineResult(method=method, status=NOT_APPLICABLE, reason=reason,
                          budget_bytes=budget_bytes, deadline_s=deadline_s)


def infeasible(method: str, reason: str, budget_bytes: int, deadline_s: float | None = None,
               details: Mapping[str, Any] | None = None) -> BaselineResult:
    return BaselineResult(method=method, status=INFEASIBLE, reason=reason,
                          budget_bytes=budget_bytes, deadline_s=deadline_s,
                          details=details or {})


def finish(method: str, graph: TrainingGraph, board: Board, costs: OpCosts, budget_bytes: int,
           steps: Schedule | list[Step], *, deadline_s: float | None = None,
           details: Mapping[str, Any] | None = None,
           metadata: Mapping[str, Any] | None = None) -> BaselineResult:
    """Wrap ``steps`` as a schedule, check it, and predict its figures.

    A schedule over the budget or over the board's storage capacity gives an
    ``infeasible`` result (the method's own schedule does not fit); a structural violation
    is a bug of the method and raises ``AssertionError``.
    """
    raw = with_weight_steps(steps.steps if isinstance(steps, Schedule) else steps,
                            *weight_steps(graph))
    schedule = Schedule(graph.name, graph_fingerprint(graph), raw, {})
    try:
        replayed = replay(graph, schedule, storage_capacity_bytes=board.storage.capacity_bytes)
    except ContractViolation as err:
        if err.violation.rule != "storage_full":
            raise AssertionError(f"{method} produced an invalid schedule: {err}") from None
        # like a schedule over the RAM budget: the method's plan does not fit this board
        return infeasible(method, f"its schedule does not fit the board's storage: "
                          f"{err.violation.message}", budget_bytes, deadline_s, details)
    details = dict(details or {})
    if replayed.peak_bytes > budget_bytes:
        return infeasible(method, (
            f"its schedule needs {replayed.peak_bytes} B of activation RAM, over the budget "
            f"of {budget_bytes} B"), budget_bytes, deadline_s,
            {**details, "peak_ram_bytes": replayed.peak_bytes})
    figures = predict(graph, costs, replayed)
    meta: dict[str, Any] = {
        "board": board.name, "budget_activation_bytes": int(budget_bytes),
        "predicted_energy_j": figures.energy_j, "predicted_time_s": figures.time_s,
        "predicted_peak_ram_bytes": figures.peak_ram_bytes,
    }
    if deadline_s is not None:
        meta["deadline_s"] = float(deadline_s)
    meta.update(metadata or {})
    # The replay above is the check at the budget too (its peak is within it): a second
    # replay of the stamped schedule, metadata aside the same, would only cost time
    schedule = stamped(schedule, method=method, **meta)
    return BaselineResult(
        method=method, status=OK, schedule=schedule, budget_bytes=budget_bytes,
        deadline_s=deadline_s, energy_j=figures.energy_j, time_s=figures.time_s,
        peak_ram_bytes=figures.peak_ram_bytes, recomputations=replayed.recomputes,
        page_outs=replayed.counts[Action.PAGE_OUT], page_ins=replayed.counts[Action.PAGE_IN],
        details=details)


def out_of_time(stop_at: float | None) -> bool:
    """Whether ``stop_at`` (a :func:`time.perf_counter` instant, or None: never) has passed.

    Every baseline but checkpoint-all takes ``stop_at``, so that it keeps within a solve's
    time limit when it runs as one of POET's warm starts: it then returns the best schedule
    found so far, or ``infeasible`` saying that it ran out of its time
    (:func:`ran_out_of_time`), by ``stop_at`` or a fraction of a second later: the searches
    look at the clock inside their loops every few thousand steps of work (:class:`Ticker`),
    not only between the candidates they try, and keep the time to finish their best
    schedule.
    """
    return stop_at is not None and time.perf_counter() > stop_at


#: What a baseline that ran out of its time without a schedule says (the start of its reason).
OUT_OF_TIME = "ran out of its time"




#: Finishing a schedule (:func:`finish`: making its steps, checking it, predicting its
#: figures) takes up to this many times as long as building its program did, and this many
#: when it hashes the graph as well (the first schedule finished on a graph).
FINISH_COST = 2.5
FINISH_COST_UNHASHED = 5.0


def finish_estimate_s(graph: TrainingGraph, built_s: float) -> float:
    """How long :func:`finish` may take on a program of ``graph`` built in ``built_s``."""
    return built_s * (FINISH_COST if fingerprint_known(graph) else FINISH_COST_UNHASHED)


def ran_out_of_time(method: str, budget_bytes: int, deadline_s: float | None = None,
                    details: Mapping[str, Any] | None = None, why: str = "") -> BaselineResult:
    """``infeasible``: the method's ``stop_at`` passed before it found a schedule that fits."""
    reason = f"{OUT_OF_TIME} {why}".strip() + f" (budget {budget_bytes} B)"
    return infeasible(method, reason, budget_bytes, deadline_s,
                      {**(details or {}), "out_of_time": True})


def check_budget(budget_bytes: Any) -> int:
    """``budget_bytes`` as an int, or :class:`~poetsim.errors.InputError`."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, np.integer)) \
            or budget_bytes < 0:
        raise InputError(f"budget_bytes = {budget_bytes!r}: must be a non-negative whole "
                         "number of bytes")
    return int(budget_bytes)
