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

from poetsim.baselines.base import INFEASIBLE, OK
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, op_costs
from poetsim.graph.graph import TrainingGraph, resident_memory
from poetsim.graph.memory import plain_peak
from poetsim.optimizer.solve import SolveStatus
from poetsim.runs import MethodRun, RunCache, run_method, simulate_run
from poetsim.schedule import plain_schedule
from poetsim.sim import SimReport, simulate

__all__ = ["ComparisonRow", "compare", "comparison_row", "format_table", "reference_energy_j",
           "with_overheads"]


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


def comparison_row(run: MethodRun, report: SimReport | None) -> ComparisonRow:
    """``run`` and its simulation (None without a schedule) as a row; the energy overhead
    is left for the caller, who knows the reference."""
    feasible_status = run.status in (OK, SolveStatus.OPTIMAL.value, SolveStatus.FEASIBLE.value)
    status = OK if feasible_status else run.status
    if run.method == "poet" and run.status == SolveStatus.NO_SOLUTION.value:
        status = INFEASIBLE
    if report is None or run.schedule is None:
        return ComparisonRow(method=run.method, feasible=False, status=status,
                             reason=run.reason)
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
        method=run.method, feasible=feasible_status and budget_ok and deadline_ok,
        status=status, reason="; ".join([run.reason] * bool(run.reason) + problems),
        energy_j=report.energy_j, makespan_s=report.makespan_s,
        peak_ram_bytes=report.peak_ram_bytes, budget_ok=budget_ok, deadline_ok=deadline_ok,
        predicted_energy_j=run.energy_j, recomputations=run.schedule.recomputations(),
        page_outs=run.schedule.page_outs, page_ins=run.schedule.page_ins)


def reference_energy_j(graph: TrainingGraph, board: Board, costs: OpCosts | None = None
                       ) -> float:
    """Simulated energy of checkpoint-all with unlimited RAM: the overhead reference."""
    resident = resident_memory(graph).total_bytes
    return simulate(graph, board, plain_schedule(graph),
                    budget_bytes=plain_peak(graph).bytes + resident,
                    resident_bytes=resident, costs=costs).energy_j


def compare(graph: TrainingGraph, board: Board, *, ram: str | int,
            deadline: str | float | None = None, time_limit_s: float = 30.0,
            methods: Iterable[str] | None = None,
            cache: RunCache | None = None) -> list[ComparisonRow]:
    """Run POET and the baselines (all of :data:`BASELINES`, or ``methods``) and simulate.

    ``ram`` as for :func:`poetsim.optimizer.solve` (``"70%"`` of the plain peak,
    ``"256KiB"``, bytes: the activation budget); ``deadline`` as there (``"1.5x"``,
    seconds). ``time_limit_s`` bounds each MILP solve (POET, Checkmate, paging-only).
    Every method gets a row, ``not_applicable`` ones included; POET's comes first.
    ``cache`` reuses runs solved before (:class:`poetsim.runs.RunCache`).
    """
    from poetsim.baselines import BASELINES

    costs = op_costs(graph, board)
    names = ["poet", *(BASELINES if methods is None else methods)]
    rows = []
    for name in names:
        run = run_method(graph, board, name, ram=ram, deadline=deadline,
                         time_limit_s=time_limit_s, costs=costs, cache=cache)
        rows.append(comparison_row(run, simulate_run(graph, board, run, costs=costs)))
    return with_overheads(rows, reference_energy_j(graph, board, costs))


def with_overheads(rows: Iterable[ComparisonRow], reference_j: float) -> list[ComparisonRow]:
    """``rows`` with ``energy_overhead = energy_j / reference_j - 1`` filled in."""
    return [attrs.evolve(r, energy_overhead=(r.energy_j / reference_j - 1
                                             if r.energy_j is not None and reference_j > 0
                                             else None)) for r in rows]


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
