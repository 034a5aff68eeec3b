"""The built MILP: :class:`MilpModel` holds the SCIP model, its variable maps and the
figures the rows are written in (memory units, scaled energy and time); the families of
rows are added by :mod:`~poetsim.optimizer.milp.variables`,
:mod:`~poetsim.optimizer.milp.constraints`, :mod:`~poetsim.optimizer.milp.memory` and
:mod:`~poetsim.optimizer.milp.timeline`, plans go in and out through
:mod:`~poetsim.optimizer.milp.solution`.

Scaling: memory is counted in units of ``unit_bytes``, the gcd of all sizes when that keeps
the budget under ten million units (exact); otherwise sizes are rounded up and the budget
down (``exact_memory`` is then false: every plan found is safe, but SCIP's bound and
infeasibility proofs hold for the rounded model only, so :func:`~poetsim.optimizer.solve`
does not report them as proofs). Energy is scaled so that the plain schedule costs 1000;
times are divided by the deadline (by the plain time without one).
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import attrs
import numpy as np

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.interrupt import scip_model
from poetsim.optimizer.milp import solution
from poetsim.optimizer.milp.constraints import add_constraints
from poetsim.optimizer.milp.objective import compute_j
from poetsim.optimizer.milp.variables import create_variables
from poetsim.optimizer.plan import StagePlan, storage_near

__all__ = ["Formulation", "MilpModel", "build_milp"]


_OBJECTIVE_SCALE = 1000.0
_MAX_MEMORY_UNITS = 10_000_000


@attrs.frozen
class Formulation:
    """Which decisions the model may take."""

    remat: bool = True
    paging: bool = True
    restricted: bool = False


def _memory_unit(sizes: np.ndarray, budget_bytes: int) -> tuple[int, bool]:
    """Bytes per memory unit, and whether counting in such units is exact.

    The gcd of all sizes is exact. When it would leave the budget above
    ``_MAX_MEMORY_UNITS`` units, sizes are rounded up to coarser units: still safe (a plan
    that fits in units fits in bytes) but no longer exact near the budget.
    """
    values = [int(v) for v in sizes if v > 0] + [int(budget_bytes)]
    unit = reduce(math.gcd, values) or 1
    if budget_bytes / unit > _MAX_MEMORY_UNITS:
        return math.ceil(budget_bytes / _MAX_MEMORY_UNITS), False
    return unit, True


class MilpModel:
    """A built SCIP model with its variable maps."""

    def __init__(self, graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                 deadline_s: float | None, formulation: Formulation, *,
                 storage_capacity_bytes: int | None, energy_reference_j: float,
                 build_deadline: float | None = None) -> None:
        self.build_deadline = build_deadline
        self.graph = graph
        self.costs = costs
        self.n = n = len(graph)
        self.formulation = formulation
        self.deadline_s = deadline_s
        self.unit_bytes, self.exact_memory = _memory_unit(
            np.concatenate([costs.output_bytes, costs.workspace_bytes, costs.held_bytes]),
            budget_bytes)
        self.budget_units = budget_bytes // self.unit_bytes
        self.energy_scale = _OBJECTIVE_SCALE / energy_reference_j if energy_reference_j > 0 else 1.0
        self.model = scip_model(f"poet_{graph.name}")
        self._empty_maps()
        self.near = storage_near(costs)
        self.priced = costs.wait.prices_time
        # times in units of the deadline (or of the plain time when there is none)
        finite = deadline_s is not None and math.isfinite(deadline_s) and deadline_s > 0
        reference_s = deadline_s if finite else costs.plain_time_s
        self.time_scale = 1.0 / reference_s if reference_s and reference_s > 0 else 1.0

        self.last_reader = [max(graph.successors(i), default=i) for i in range(n)]
        self.last_desc = _last_descendants(graph)
        self.mem = [math.ceil(int(b) / self.unit_bytes) for b in costs.output_bytes]
        self.ws = [math.ceil(int(b) / self.unit_bytes) for b in costs.workspace_bytes]
        self.held = [math.ceil(int(b) / self.unit_bytes) for b in costs.held_bytes]
        # an in-place kernel saves its output while it runs (rounded down: safe in units)
        self.inplace = [int(costs.output_bytes[k]) // self.unit_bytes
                        if graph.overwrites(k) >= 0 else 0 for k in range(n)]
        create_variables(self)
        add_constraints(self, storage_capacity_bytes)
        # Every op runs once in its own stage: a constant part of the objective.
        self.model.addObjoffset(self.energy_scale * sum(compute_j(costs, k) for k in range(n)))

    def _empty_maps(self) -> None:
        """The variable maps, filled as the model is built."""
        self.R: dict[tuple[int, int], Any] = {}
        self.S: dict[tuple[int, int], Any] = {}
        self.Min: dict[tuple[int, int], Any] = {}
        self.Mout: dict[tuple[int, int], Any] = {}
        self.F: dict[tuple[int, int, int], Any] = {}
        self.H: dict[int, Any] = {}
        self.U: dict[tuple[int, int], Any] = {}
        # per stage: (units, H[b]) of the holds in RAM when it starts, and of those its
        # own op's run loads (filled by create_variables)
        self.held_at: list[list[tuple[int, Any]]] = []
        self.loaded_at: list[list[tuple[int, Any]]] = []
        # the DMA timeline (:func:`~poetsim.optimizer.milp.timeline.add_lane`)
        self.P: dict[int, Any] = {}
        self.C: dict[int, Any] = {}
        self.L: dict[int, Any] = {}
        self.E: dict[int, Any] = {}
        self.y: dict[int, Any] = {}
        self.hold: dict[int, Any] = {}
        self.v: dict[int, Any] = {}
        self.behind: dict[tuple[int, int], Any] = {}
        self.makespan: Any = None
        self.stored: dict[tuple[int, int], Any] = {}
        self.moves: dict[int, Any] = {}
        self.wake: dict[int, Any] = {}
        self.moved_before: dict[int, Any] = {}

    # ------------------------------------------------------------------ structure

    def horizon(self, i: int) -> int:
        """Last stage in which tensor ``i`` can still be read."""
        if self.formulation.remat:
            return self.last_desc[i]
        return self.last_reader[i]

    def recomputable(self, i: int) -> bool:
        f = self.formulation
        op = self.graph.ops[i]
        if not f.remat or not op.recomputable:
            return False
        return not (f.restricted and op.phase is Phase.BACKWARD)

    def r(self, t: int, i: int) -> Any:
        """R[t,i] as a variable or the constant it is fixed to."""
        if i == t:
            return 1
        return self.R.get((t, i), 0)

    def runnable(self, t: int) -> list[int]:
        return [k for k in range(t + 1) if k == t or (t, k) in self.R]

    @property
    def binaries(self) -> int:
        return len(self.R) + len(self.S) + len(self.Min) + len(self.Mout) + len(self.H)

    # ------------------------------------------------------------------ plans

    def plan_from_solution(self, sol: Any) -> StagePlan:
        return solution.plan_from_solution(self, sol)

    def fits(self, plan: StagePlan) -> bool:
        """Whether every decision of ``plan`` has a variable (or constant) in this model."""
        return solution.fits(self, plan)

    def add_warm_start(self, plan: StagePlan) -> bool:
        """Offer ``plan`` to SCIP as a complete solution; True if SCIP accepted it."""
        if not self.fits(plan):
            return False
        return bool(self.model.addSol(solution.solution(self, plan), free=True))

    def try_plan(self, plan: StagePlan, heuristic: Any) -> bool:
        """During the search, from a primal heuristic: True if SCIP accepted ``plan``."""
        if not self.fits(plan):
            return False
        return bool(self.model.trySol(solution.solution(self, plan, heuristic),
                                      printreason=False, free=True))

    def lp_values(self) -> dict[str, np.ndarray]:
        """The current LP solution as fractional plan matrices (``compute[t, t]`` is 1)."""
        return solution.lp_values(self)

    def fix_outside(self, plan: StagePlan, first: int, last: int) -> int:
        """Fix every decision outside stages ``first..last`` to ``plan``'s; returns how
        many binaries stay free. Call :meth:`unfix` to release them again."""
        return solution.fix_outside(self, plan, first, last)

    def unfix(self) -> None:
        solution.unfix(self)


def build_milp(graph: TrainingGraph, costs: OpCosts, budget_bytes: int, deadline_s: float | None,
               formulation: Formulation, *, storage_capacity_bytes: int | None,
               energy_reference_j: float, build_deadline: float | None = None) -> MilpModel:
    """Build the SCIP model for one solve.

    ``build_deadline`` (a ``time.perf_counter()`` value) aborts the build with
    :class:`~poetsim.errors.BuildTimeout` once passed, so a short time limit still returns
    promptly.
    """
    return MilpModel(graph, costs, budget_bytes, deadline_s, formulation,
                     storage_capacity_bytes=storage_capacity_bytes,
                     energy_reference_j=energy_reference_j, build_deadline=build_deadline)


def _last_descendants(graph: TrainingGraph) -> list[int]:
    """For every op, its last descendant in graph order (itself without one): one sweep
    from the end, since every successor comes after its op."""
    last = list(range(len(graph)))
    for i in range(len(graph) - 1, -1, -1):
        for s in graph.successors(i):
            if last[s] > last[i]:
                last[i] = last[s]
    return last
