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
from the method's internal model.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, op_costs
from poetsim.errors import InputError, OutOfTime
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import fingerprint_known, graph_fingerprint
from poetsim.graph.streaming import weight_steps
from poetsim.schedule import Action, Schedule, Step, check_schedule
from poetsim.schedule.ops import ram_during_steps, with_weight_steps

__all__ = ["INFEASIBLE", "NOT_APPLICABLE", "OK", "OUT_OF_TIME", "STATUSES", "BaselineResult",
           "OpListFigures", "OutOfTime", "Ticker", "check_budget", "costs_for", "finish",
           "finish_estimate_s", "infeasible", "not_applicable", "out_of_time", "predict",
           "ran_out_of_time"]

OK = "ok"
INFEASIBLE = "infeasible"
NOT_APPLICABLE = "not_applicable"
#: ``ok``: a schedule within the budget; ``infeasible``: the method found none that fits
#: (not a proof that none exists, except where the reason says so); ``not_applicable``:
#: the method does not handle this graph (the reason says why).
STATUSES = (OK, INFEASIBLE, NOT_APPLICABLE)


def _status(instance: Any, attribute: Any, value: str) -> None:
    if value not in STATUSES:
        raise ValueError(f"status = {value!r}: must be one of {', '.join(STATUSES)}")


@attrs.frozen
class BaselineResult:
    """The outcome of one baseline on one (graph, board, budget).

    ``energy_j`` / ``time_s`` / ``peak_ram_bytes`` are predicted from the op list
    (:func:`predict`); ``peak_ram_bytes`` is activation bytes (no resident region), the
    figure ``budget_bytes`` bounds. They are ``None`` without a schedule. ``details``
    holds method-specific facts (checkpoints chosen, thresholds, solver status, ...).
    """

    method: str
    status: str = attrs.field(validator=_status)
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
            "method": self.method, "status": self.status, "reason": self.reason,
            "budget_activation_bytes": self.budget_bytes, "deadline_s": self.deadline_s,
            "energy_j": self.energy_j, "time_s": self.time_s,
            "peak_ram_bytes": self.peak_ram_bytes, "recomputations": self.recomputations,
            "page_outs": self.page_outs, "page_ins": self.page_ins,
            "details": dict(self.details),
        }


@attrs.frozen
class OpListFigures:
    """Energy, time and peak of an op list under the per-op cost model."""

    energy_j: float
    compute_energy_j: float
    transfer_energy_j: float
    wait_energy_j: float
    storage_wakeups: int
    time_s: float
    peak_ram_bytes: int


def costs_for(graph: TrainingGraph, board: Board, costs: OpCosts | None) -> OpCosts:
    """``costs`` if given (checked to cover the graph), else ``op_costs(graph, board)``."""
    if costs is None:
        return op_costs(graph, board)
    if len(costs) != len(graph.ops):
        raise InputError(f"costs cover {len(costs)} ops, but graph {graph.name!r} has "
                         f"{len(graph.ops)}")
    return costs


def predict(graph: TrainingGraph, board: Board, costs: OpCosts, steps: Schedule | list[Step]
            ) -> OpListFigures:
    """Predicted energy, time and activation peak of an op list.

    Energy: every COMPUTE at its op's compute energy, every PAGE_OUT / PAGE_IN at its
    transfer energy, plus the time-proportional energy of the timeline below
    (:class:`poetsim.costs.WaitPower`). Time: without DMA everything runs in list order on
    the CPU; with DMA, transfers run one at a time on a transfer lane, a page-out starts at
    its step, a page-in starts at its step (or when the lane frees up) and a COMPUTE waits
    for the page-ins of its inputs, and for the writes of tensors freed while they were
    written when their RAM is needed to stay within the schedule's own peak (as the
    simulator's CPU does); an op that streams weights (``OpCosts.streams``) waits for
    every transfer before it, as it holds the storage, when it reads them (READ_WEIGHTS
    right before it) or writes them back (WRITE_WEIGHTS right after it); a run on held
    weights that writes nothing back does not. A COMPUTE right after its READ_WEIGHTS costs
    the op's compute time and energy, any other its held ones (``held_compute_*``: the
    same for an op reading no weights from storage). A transfer that finds the storage
    asleep (the first, or one more than the auto-sleep timeout after the previous one
    ended) waits for its wake-up first. Peak: activation bytes by the contract's rule
    (:func:`poetsim.schedule.ops.ram_during_steps`), held weights included.
    """
    steps = list(steps.steps if isinstance(steps, Schedule) else steps)
    ram = ram_during_steps(steps, costs.output_bytes.tolist(), costs.workspace_bytes.tolist(),
                           held_bytes=costs.held_bytes.tolist())
    peak = max(ram, default=0)
    wait = costs.wait
    written: dict[int, float] = {}  # tensor -> when its page-out ends
    held: list[tuple[float, int]] = []  # heap of (write end, bytes) of tensors freed while written
    held_bytes = 0
    e_compute = e_transfer = 0.0
    overlap = not costs.cpu_moves  # the cost model says who moves the bytes
    cpu = lane = 0.0
    busy_cpu = busy_storage = 0.0
    wakeups = 0
    last_end: float | None = None  # when the storage's last transfer ended
    ready: dict[int, float] = {}

    def transfer(start: float, seconds: float) -> float:
        """Run one transfer from ``start`` (waking the storage if it sleeps); its end."""
        nonlocal wakeups, last_end, busy_storage
        if last_end is None or start - last_end > wait.awake_s:
            wakeups += 1
            start += wait.wakeup_s
        last_end = start + seconds
        busy_storage += seconds
        return last_end

    for number, step in enumerate(steps):
        k = step.op
        if step.action is Action.COMPUTE:
            read = number > 0 and steps[number - 1].action is Action.READ_WEIGHTS
            seconds = float((costs.compute_time_s if read else costs.held_compute_time_s)[k])
            e_compute += float((costs.compute_energy_j if read
                                else costs.held_compute_energy_j)[k])
            start = max([cpu] + [ready.get(u, 0.0) for u in graph.predecessors(k)])
            # as the contract prices it: a run holds the storage when it reads its weights
            # (READ_WEIGHTS before it) or writes them back (WRITE_WEIGHTS after it)
            occupies = costs.streams[k] and (read or bool(costs.writeback_bytes[k]))
            if overlap and occupies:  # it holds the storage: transfers end first
                start = max(start, lane)
            # a freed tensor's RAM returns when its write ends: wait for as many writes as
            # the schedule's own peak needs
            while held and (held[0][0] <= start or ram[number] + held_bytes > peak):
                end, nbytes = heapq.heappop(held)
                start, held_bytes = max(start, end), held_bytes - nbytes
            cpu = start + seconds
            busy_cpu += seconds
            ready[k] = cpu
        elif step.action in (Action.PAGE_OUT, Action.PAGE_IN):
            write = step.action is Action.PAGE_OUT
            seconds = float((costs.pageout_time_s if write else costs.pagein_time_s)[k])
            e_transfer += float((costs.pageout_energy_j if write else costs.pagein_energy_j)[k])
            if overlap:
                lane = transfer(max(lane, cpu), seconds)
            else:
                cpu = transfer(cpu, seconds)
                busy_cpu += seconds
            if write:
                written[k] = lane if overlap else cpu
            else:
                ready[k] = lane if overlap else cpu
        elif step.action is Action.FREE and written.get(k, 0.0) > cpu:
            heapq.heappush(held, (written[k], int(costs.output_bytes[k])))
            held_bytes += int(costs.output_bytes[k])
    makespan = max(cpu, lane)
    e_wait = wait.energy_j(makespan_s=makespan, cpu_busy_s=busy_cpu,
                           storage_busy_s=busy_storage, wakeups=wakeups)
    return OpListFigures(energy_j=e_compute + e_transfer + e_wait, compute_energy_j=e_compute,
                         transfer_energy_j=e_transfer, wait_energy_j=e_wait,
                         storage_wakeups=wakeups, time_s=makespan,
                         peak_ram_bytes=peak)


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
    capacity = board.storage.capacity_bytes
    schedule = Schedule(graph.name, graph_fingerprint(graph), raw, {})
    check = check_schedule(graph, schedule, storage_capacity_bytes=capacity)
    if not check.valid and check.violation.rule == "storage_full":
        # like a schedule over the RAM budget: the method's plan does not fit this board
        return infeasible(method, f"its schedule does not fit the board's storage: "
                          f"{check.violation.message}", budget_bytes, deadline_s, details)
    if not check.valid:
        raise AssertionError(f"{method} produced an invalid schedule: "
                             f"{check.violation.message} [{check.violation.rule}]")
    details = dict(details or {})
    if check.peak_ram_bytes > budget_bytes:
        return infeasible(method, (
            f"its schedule needs {check.peak_ram_bytes} B of activation RAM, over the budget "
            f"of {budget_bytes} B"), budget_bytes, deadline_s,
            {**details, "peak_ram_bytes": check.peak_ram_bytes})
    figures = predict(graph, board, costs, raw)
    assert figures.peak_ram_bytes == check.peak_ram_bytes
    meta: dict[str, Any] = {
        "method": method, "board": board.name, "budget_activation_bytes": int(budget_bytes),
        "predicted_energy_j": figures.energy_j, "predicted_time_s": figures.time_s,
        "predicted_peak_ram_bytes": figures.peak_ram_bytes,
    }
    if deadline_s is not None:
        meta["deadline_s"] = float(deadline_s)
    meta.update(metadata or {})
    # The check above is the check at the budget too (its peak is within it): a second
    # replay of the stamped schedule, metadata aside the same, would only cost time
    schedule = schedule.with_metadata(**meta)
    return BaselineResult(
        method=method, status=OK, schedule=schedule, budget_bytes=budget_bytes,
        deadline_s=deadline_s, energy_j=figures.energy_j, time_s=figures.time_s,
        peak_ram_bytes=figures.peak_ram_bytes, recomputations=check.recomputes,
        page_outs=check.page_outs, page_ins=check.page_ins, details=details)


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
#: A baseline finishes its schedule when that should end at most this long after its
#: ``stop_at``; else it answers that it ran out of its time.
GRACE_S = 0.25


def finish_estimate_s(graph: TrainingGraph, built_s: float) -> float:
    """How long :func:`finish` may take on a program of ``graph`` built in ``built_s``."""
    return built_s * (FINISH_COST if fingerprint_known(graph) else FINISH_COST_UNHASHED)


class Ticker:
    """Counts work and looks at the clock every ``every`` units of it.

    :meth:`tick` raises :class:`OutOfTime` once ``stop_at`` (a :func:`time.perf_counter`
    instant, or None: never) has passed. A unit is a step of a program or a state of a
    dynamic program (about a microsecond), so the clock is read every millisecond or so and
    a search stops well within a tenth of a second of ``stop_at``. A search that builds
    programs keeps the time to finish one (:meth:`reserve`): it stops that much earlier,
    and finishes its best one only if that ends in time (:meth:`can_finish`).
    """

    __slots__ = ("every", "left", "stop_at", "until")

    def __init__(self, stop_at: float | None, every: int = 2048) -> None:
        self.stop_at = stop_at
        self.until = stop_at
        self.every = every
        self.left = every

    def tick(self, work: int = 1) -> None:
        if self.until is None:
            return
        self.left -= work
        if self.left <= 0:
            self.left = self.every
            if time.perf_counter() > self.until:
                raise OutOfTime

    def reserve(self, seconds: float) -> None:
        """From now on, stop ``seconds`` before ``stop_at`` (the time to finish a schedule,
        :func:`finish_estimate_s`)."""
        if self.stop_at is not None:
            self.until = self.stop_at - seconds

    def can_finish(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now ends by ``stop_at`` (and :data:`GRACE_S`)."""
        return self.stop_at is None or time.perf_counter() + seconds <= self.stop_at + GRACE_S


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
