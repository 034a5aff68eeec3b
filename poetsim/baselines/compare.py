"""Side-by-side comparison: POET and every baseline on one (graph, board, RAM, deadline).

Every schedule is simulated (:func:`poetsim.sim.simulate`) on the board, with the budget
``activation budget + resident bytes`` (parameters, gradients; :func:`poetsim.graph.resident_memory`)
and the deadline. The reference for the energy overhead is checkpoint-all with unlimited
RAM: the plain schedule simulated on the same board with a budget it fits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from poetsim.baselines.base import INFEASIBLE, OK, BaselineResult
from poetsim.boards.spec import Board
from poetsim.costs import op_costs
from poetsim.graph.graph import TrainingGraph, resident_memory
from poetsim.graph.memory import plain_peak
from poetsim.baselines.seeded import seeded_solve
from poetsim.optimizer.solve import SolveStatus, parse_deadline, resolve_budget
from poetsim.schedule import Schedule, plain_schedule
from poetsim.sim import SimReport, simulate

__all__ = ["ComparisonRow", "compare", "format_table"]


@attrs.frozen
class ComparisonRow:
    """One method's simulated outcome.

    ``feasible``: a schedule exists and its simulation stays within the budget and the
    deadline. ``status`` is the method's own (``ok`` / ``infeasible`` /
    ``not_applicable``), ``reason`` says why a row is not feasible. ``energy_j``,
    ``makespan_s`` and ``peak_ram_bytes`` (total: activations + resident) are simulated;
    ``energy_overhead`` is ``energy_j / reference - 1`` against checkpoint-all with
    unlimited RAM on the same board. ``deadline_ok`` is True without a deadline.
    """

    method: str
    feasible: bool
    status: str
    reason: str = ""
    energy_j: float | None = None
    energy_overhead: float | None = None
    makespan_s: float | None = None
    peak_ram_bytes: int | None = None
    budget_ok: bool | None = None
    deadline_ok: bool | None = None
    predicted_energy_j: float | None = None
    recomputations: int = 0
    page_outs: int = 0
    page_ins: int = 0

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _row(method: str, status: str, reason: str, schedule: Schedule | None,
         predicted: float | None, run: Any) -> ComparisonRow:
    if schedule is None:
        return ComparisonRow(method=method, feasible=False, status=status, reason=reason)
    report: SimReport = run(schedule)
    budget_ok = report.peak_ram_bytes <= report.budget_bytes
    deadline_ok = report.deadline_s is None or report.makespan_s <= report.deadline_s
    problems = []
    if not budget_ok:
        problems.append(f"simulated peak {report.peak_ram_bytes} B over the budget of "
                        f"{report.budget_bytes} B")
    if not deadline_ok:
        problems.append(f"makespan {report.makespan_s:.6g} s over the deadline of "
                        f"{report.deadline_s:.6g} s")
    return ComparisonRow(
        method=method, feasible=status == OK and budget_ok and deadline_ok, status=status,
        reason="; ".join([reason] * bool(reason) + problems), energy_j=report.energy_j,
        makespan_s=report.makespan_s, peak_ram_bytes=report.peak_ram_bytes,
        budget_ok=budget_ok, deadline_ok=deadline_ok, predicted_energy_j=predicted,
        recomputations=schedule.recomputations(), page_outs=schedule.page_outs,
        page_ins=schedule.page_ins)


def compare(graph: TrainingGraph, board: Board, *, ram: str | int,
            deadline: str | float | None = None, time_limit_s: float = 30.0,
            methods: Iterable[str] | None = None) -> list[ComparisonRow]:
    """Run POET and the baselines (all of :data:`BASELINES`, or ``methods``) and simulate.

    ``ram`` as for :func:`poetsim.optimizer.solve` (``"70%"`` of the plain peak,
    ``"256KiB"``, bytes: the activation budget); ``deadline`` as there (``"1.5x"``,
    seconds). ``time_limit_s`` bounds each MILP solve (POET, Checkmate, paging-only).
    Every method gets a row, ``not_applicable`` ones included; POET's comes first.
    """
    from poetsim.baselines import BASELINES

    costs = op_costs(graph, board)
    budget = resolve_budget(graph, ram)
    resident = resident_memory(graph).total_bytes
    plain_time = float(costs.compute_time_s.sum())
    deadline_s = parse_deadline(deadline, plain_time)
    sim_budget = budget.activation_bytes + resident

    def run(schedule: Schedule) -> SimReport:
        return simulate(graph, board, schedule, budget_bytes=sim_budget,
                        resident_bytes=resident, deadline_s=deadline_s, costs=costs)

    reference = simulate(graph, board, plain_schedule(graph),
                         budget_bytes=plain_peak(graph).bytes + resident,
                         resident_bytes=resident, costs=costs)
    rows: list[ComparisonRow] = []
    poet = seeded_solve(graph, board, ram=ram, deadline=deadline, time_limit_s=time_limit_s)
    if poet.schedule is not None:
        status, reason = OK, ("" if poet.status is SolveStatus.OPTIMAL else poet.message)
    else:
        status, reason = INFEASIBLE, poet.message
    rows.append(_row("poet", status, reason, poet.schedule,
                     poet.metrics.energy_j if poet.metrics else None, run))
    names = list(BASELINES) if methods is None else list(methods)
    for name in names:
        method = BASELINES[name]
        extra = {"time_limit_s": time_limit_s} if name in ("checkmate", "paging_only") else {}
        result: BaselineResult = method(graph, board, costs, budget.activation_bytes,
                                        deadline_s=deadline_s, **extra)
        rows.append(_row(name, result.status, result.reason, result.schedule,
                         result.energy_j, run))
    ref = reference.energy_j
    return [attrs.evolve(r, energy_overhead=(r.energy_j / ref - 1 if r.energy_j is not None
                                             and ref > 0 else None)) for r in rows]


def format_table(rows: Iterable[ComparisonRow]) -> str:
    """A plain-text table of the rows (one line each)."""

    def cell(value: Any, spec: str, width: int) -> str:
        if value is None:
            return "-".rjust(width)
        if isinstance(value, bool):
            return ("yes" if value else "no").rjust(width)
        return format(value, spec).rjust(width)

    header = (f"{'method':<15} {'feasible':>8} {'status':<14} {'energy_J':>11} "
              f"{'overhead':>9} {'makespan_s':>11} {'peak_B':>10} {'budget':>6} "
              f"{'deadline':>8} {'remat':>5} {'out':>4} {'in':>4}  reason")
    lines = [header]
    for r in rows:
        overhead = None if r.energy_overhead is None else f"{100 * r.energy_overhead:.2f}%"
        lines.append(
            f"{r.method:<15} {cell(r.feasible, '', 8)} {r.status:<14} "
            f"{cell(r.energy_j, '.6g', 11)} {cell(overhead, '', 9)} "
            f"{cell(r.makespan_s, '.6g', 11)} {cell(r.peak_ram_bytes, 'd', 10)} "
            f"{cell(r.budget_ok, '', 6)} {cell(r.deadline_ok, '', 8)} {r.recomputations:>5} "
            f"{r.page_outs:>4} {r.page_ins:>4}  {r.reason}")
    return "\n".join(lines)
