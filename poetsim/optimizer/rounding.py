"""Rounding a fractional (LP) solution of the MILP into a consistent stage plan.

SCIP's LP bound on these models is tight after the root cuts (often equal to the
optimum), while its general-purpose primal heuristics find no schedule near it: rounding a
variable breaks the dependency, retention and page-in rules that tie it to others. Like
Checkmate's two-phase rounding, :func:`round_plan` rounds only the decisions that
carry the schedule's shape (keep in RAM, page out, page in) and then derives the rest
so that every rule holds by construction: within each stage it recomputes exactly what
the stage's ops need and cannot get from RAM or storage. The result satisfies
:func:`~poetsim.optimizer.plan.plan_violations`; whether it fits the budget and deadline
is for the caller to check.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from pyscipopt import SCIP_HEURTIMING, SCIP_LPSOLSTAT, SCIP_RESULT, Heur

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.optimizer.heuristic import greedy_plan
from poetsim.optimizer.plan import StagePlan, evaluate_plan

__all__ = ["THRESHOLDS", "TIME_SHARE", "RoundingHeuristic", "round_plan"]


def round_plan(graph: TrainingGraph, values: dict[str, np.ndarray], threshold: float, *,
               remat: bool = True, paging: bool = True,
               pageable: np.ndarray | None = None) -> StagePlan | None:
    """A plan from fractional ``values`` (matrices ``compute``, ``keep``, ``page_in``,
    ``page_out`` with entries in [0, 1]), rounding at ``threshold``.

    Stage by stage: keep the tensors whose keep value reaches the threshold and that were
    in RAM in the previous stage; page in stored tensors whose page-in value reaches it;
    then supply every missing input of the stage's ops, preferring a page-in when the
    fractional solution leans that way (or when recomputing is not allowed), otherwise
    recomputing it; tensors the next stage wants to keep are made resident too. Page-outs
    follow their values for tensors in RAM and not yet stored. ``pageable`` marks the
    tensors that may be paged (default: all). None when the rounding cannot satisfy a
    dependency (e.g. paging-only and an input neither kept nor stored).
    """
    n = len(graph)
    preds = [graph.predecessors(k) for k in range(n)]
    keep_v, in_v = values["keep"], values["page_in"]
    out_v, compute_v = values["page_out"], values["compute"]
    can_page = np.ones(n, dtype=bool) if pageable is None else np.asarray(pageable, dtype=bool)
    mats = StagePlan.empty(n)
    compute, keep, stored = mats["compute"], mats["keep"], mats["stored"]
    page_in, page_out = mats["page_in"], mats["page_out"]
    in_ram_before = np.zeros(n, dtype=bool)
    for t in range(n):
        if t > 0:
            stored[t] = stored[t - 1] | page_out[t - 1]
            keep[t, :t] = (keep_v[t, :t] >= threshold) & in_ram_before[:t]
        if paging:
            page_in[t, :t] = (in_v[t, :t] >= threshold) & stored[t, :t] & ~keep[t, :t]
        # What this stage must make resident: op t, and what the next stage keeps.
        wanted = [t]
        if t + 1 < n:
            wanted += [int(i) for i in np.flatnonzero(keep_v[t + 1, :t] >= threshold)]
        compute[t, t] = True
        # (tensor, whether an op of this stage reads it); kept-only wishes may be dropped
        stack = [(k, k == t) for k in wanted]
        while stack:
            k, required = stack.pop()
            if not (keep[t, k] or page_in[t, k] or compute[t, k]):
                if paging and stored[t, k] and (not remat or in_v[t, k] >= compute_v[t, k]):
                    page_in[t, k] = True
                    continue
                if not remat:
                    if required:
                        return None
                    continue
                compute[t, k] = True
            if compute[t, k]:
                stack += [(u, True) for u in preds[k]
                          if not (keep[t, u] or page_in[t, u] or compute[t, u])]
        in_ram = keep[t] | page_in[t] | compute[t]
        if paging:
            page_out[t] = (out_v[t] >= threshold) & in_ram & ~stored[t] & can_page
        in_ram_before = in_ram
    return StagePlan(**mats)


#: Rounding thresholds tried on each LP solution, most natural first.
THRESHOLDS = (0.5, 0.3, 0.7, 0.1, 0.9)
#: Largest share of the wall time since the heuristic was included that it may use.
TIME_SHARE = 0.15


class RoundingHeuristic(Heur):
    """A SCIP primal heuristic: :func:`round_plan` of the current LP solution at several
    thresholds, and the greedy guided by its keep values; each plan that fits the budget,
    the deadline and the storage and beats the incumbent is handed to SCIP (which checks
    it against every constraint again). It is written in Python, so it limits itself to
    :data:`TIME_SHARE` of the search's time."""

    def __init__(self, milp: Any, costs: OpCosts, budget_bytes: int,
                 deadline_s: float | None, storage_capacity_bytes: int | None, *,
                 max_runs: int | None = None) -> None:
        super().__init__()
        self.milp = milp
        self.costs = costs
        self.budget_bytes = budget_bytes
        self.deadline_s = deadline_s
        self.storage_capacity_bytes = storage_capacity_bytes
        self.pageable = np.asarray(costs.output_bytes) > 0
        self.found = 0
        self.started = time.perf_counter()
        self.spent_s = 0.0
        # Deterministic effort: a number of runs instead of a share of the time.
        self.max_runs = max_runs
        self.runs = 0

    def include(self) -> None:
        """Register with the MILP's SCIP model: after every LP of the root's cut loop and
        after each node's LP."""
        self.milp.model.includeHeur(
            self, "lpround", "rounds the LP solution into a stage plan", "L", 10_000, 1, 0, -1,
            SCIP_HEURTIMING.AFTERLPNODE | SCIP_HEURTIMING.DURINGLPLOOP)

    def heurexec(self, heurtiming: Any, nodeinfeasible: bool) -> dict[str, Any]:
        now = time.perf_counter()
        if self.max_runs is not None:
            over_budget = self.runs >= self.max_runs
        else:
            over_budget = self.spent_s > TIME_SHARE * (now - self.started) + 0.2
        if self.model.getLPSolstat() != SCIP_LPSOLSTAT.OPTIMAL or over_budget:
            return {"result": SCIP_RESULT.DIDNOTRUN}
        self.runs += 1
        try:
            return {"result": self._round()}
        finally:
            self.spent_s += time.perf_counter() - now

    def _round(self) -> Any:
        milp = self.milp
        values = milp.lp_values()
        incumbent = self.model.getPrimalbound()
        result = SCIP_RESULT.DIDNOTFIND
        tried: list[StagePlan] = []
        for plan in self._candidates(values):
            if plan is None or plan in tried:
                continue
            tried.append(plan)
            metrics = evaluate_plan(milp.graph, self.costs, plan)
            if not metrics.fits(self.budget_bytes, self.deadline_s,
                                self.storage_capacity_bytes):
                continue
            if metrics.energy_j * milp.energy_scale >= incumbent * (1 - 1e-9):
                continue
            if milp.try_plan(plan, self):
                incumbent = metrics.energy_j * milp.energy_scale
                self.found += 1
                result = SCIP_RESULT.FOUNDSOL
        return result

    def _candidates(self, values: dict[str, np.ndarray]) -> Iterator[StagePlan | None]:
        """Threshold roundings, then the greedy with the LP's keep values as its guide
        (which repairs the memory overruns that plain rounding leaves)."""
        milp, formulation = self.milp, self.milp.formulation
        for threshold in THRESHOLDS:
            yield round_plan(milp.graph, values, threshold, remat=formulation.remat,
                             paging=formulation.paging, pageable=self.pageable)
        for by_time in (False, True):
            for cascade in ((False, True) if formulation.remat else (False,)):
                yield greedy_plan(milp.graph, self.costs, self.budget_bytes,
                                  remat=formulation.remat, paging=formulation.paging,
                                  by_time=by_time, cascade=cascade, keep_guide=values["keep"])
