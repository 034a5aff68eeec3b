"""What a solve returns: :class:`SolveStatus` and :class:`SolveResult`, with units in the
names, and the tolerance within which a plan's energy counts as proven equal to a bound."""

from __future__ import annotations

from typing import Any

import attrs

from poetsim.optimizer.plan import PlanMetrics, StagePlan
from poetsim.request import Request
from poetsim.schedule import Schedule
from poetsim.status import Status
from poetsim.units import energy_overhead

__all__ = ["SAME_ENERGY", "SolveResult", "SolveStatus", "method_name"]


#: Relative difference below which a plan's energy counts as equal to a proven lower bound
#: (far below the energy of the cheapest op of any zoo model relative to its iteration).
SAME_ENERGY = 1e-10


def method_name(remat: bool, paging: bool) -> str:
    """The method a formulation is: ``poet`` or one of the paper's ablations."""
    if remat and paging:
        return "poet"
    return "remat-only" if remat else "paging-only"


#: What a solve answered: optimal, feasible, infeasible or no_solution of the one
#: vocabulary (:class:`poetsim.status.Status`).
SolveStatus = Status


@attrs.frozen
class SolveResult:
    """Everything a solve produced, with units in the names.

    ``deadline_s`` is the deadline the solver planned against: the request's, or a
    tighter one its caller asked for (the request keeps the user's).
    """

    status: SolveStatus
    message: str
    request: Request = attrs.field(repr=False)
    method: str
    restricted: bool
    deadline_s: float | None
    schedule: Schedule | None = None
    plan: StagePlan | None = attrs.field(default=None, repr=False)
    metrics: PlanMetrics | None = None
    objective_j: float | None = None
    bound_j: float | None = None
    gap: float | None = None
    binaries: int = 0
    build_time_s: float = 0.0
    solve_time_s: float = 0.0
    warm_start: str | None = None
    effort: int | None = None
    limits_hit: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (no schedule steps)."""
        m = self.metrics
        r = self.request
        return {
            "status": self.status.value,
            "message": self.message,
            "graph": r.graph.name,
            "board": r.board.name,
            "method": self.method,
            "restricted_formulation": self.restricted,
            **r.metadata(),
            "solver_deadline_s": self.deadline_s,
            "energy_j": m.energy_j if m else None,
            "compute_energy_j": m.compute_energy_j if m else None,
            "pagein_energy_j": m.pagein_energy_j if m else None,
            "pageout_energy_j": m.pageout_energy_j if m else None,
            "time_s": m.time_s if m else None,
            "peak_ram_bytes": m.peak_ram_bytes if m else None,
            "peak_total_bytes": m.peak_ram_bytes + r.resident_bytes if m else None,
            "recomputations": m.recomputations if m else None,
            "page_ins": m.page_ins if m else None,
            "page_outs": m.page_outs if m else None,
            "weight_holds": m.weight_holds if m else None,
            "weight_holds_possible": int((r.costs.hold_owner >= 0).sum()),
            "bound_j": self.bound_j,
            "gap": self.gap,
            "binaries": self.binaries,
            "build_time_s": self.build_time_s,
            "solve_time_s": self.solve_time_s,
            "warm_start": self.warm_start,
            "effort_nodes": self.effort,
            "time_cap_bound": "time" in self.limits_hit,
            "plain_energy_j": r.plain_energy_j,
            "plain_time_s": r.plain_time_s,
            "energy_overhead": energy_overhead(m.energy_j if m else None, r.plain_energy_j),
        }
