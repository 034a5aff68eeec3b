"""The MILP's logical rows: what each decision needs, one function per family.

In the notation of :mod:`poetsim.optimizer.milp` (``S_AUX`` is ``stored`` here):

* :func:`add_stored_levels`: ``S_AUX[t+1,i] = S_AUX[t,i] + Mout[t,i]``, from 0;
* :func:`add_dependencies`: ``R[t,k] <= R[t,u] + S[t,u] + Min[t,u]`` for every input ``u``
  of ``k`` (``>= 1`` for the stage's own op);
* :func:`add_one_way_in`: ``R[t,i] + S[t,i] + Min[t,i] <= 1`` and
  ``Min[t,i] <= S_AUX[t,i]`` (a page-in needs a stored copy);
* :func:`add_page_outs_and_retention`: ``Mout[t,i] <= S[t,i] + R[t,i]`` and
  ``S[t+1,i] <= S[t,i] + R[t,i] + Min[t,i]``;
* :func:`add_write_once`: ``sum_t Mout[t,i] <= 1``, and in the restricted mode a forward op
  recomputed at most once;
* :func:`add_capacity`: ``sum_{t,i} Mout[t,i] m_i <= capacity``.

:func:`add_constraints` adds them stage by stage in the order SCIP has always seen them,
with the memory rows (:mod:`~poetsim.optimizer.milp.memory`) and the timeline
(:mod:`~poetsim.optimizer.milp.timeline`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pyscipopt import quicksum

from poetsim.errors import BuildTimeout
from poetsim.graph.ops import Phase
from poetsim.optimizer.milp.memory import add_frontier_knapsacks, add_memory
from poetsim.optimizer.milp.timeline import add_timeline

if TYPE_CHECKING:
    from poetsim.optimizer.milp.model import MilpModel

__all__ = ["add_constraints"]


def add_constraints(milp: MilpModel, storage_capacity_bytes: int | None) -> None:
    """Every row of the model."""
    add_stored_levels(milp)
    for t in range(milp.n):
        if milp.build_deadline is not None and time.perf_counter() > milp.build_deadline:
            raise BuildTimeout(f"building the model passed the time limit at stage {t} of "
                               f"{milp.n}")
        runnable = milp.runnable(t)
        add_dependencies(milp, t, runnable)
        add_one_way_in(milp, t)
        add_page_outs_and_retention(milp, t)
        add_memory(milp, t, runnable)
    add_write_once(milp)
    add_capacity(milp, storage_capacity_bytes)
    add_frontier_knapsacks(milp)
    add_timeline(milp)


def add_stored_levels(milp: MilpModel) -> None:
    """``stored[t,i]`` (``S_AUX``): a copy of tensor i is on storage when stage t starts.
    Continuous, but integral whenever Mout is: ``A[t+1,i] = A[t,i] + Mout[t,i]``, starting
    from 0 (a constant where no page-out can have happened)."""
    m, Mout = milp.model, milp.Mout
    stored: dict[tuple[int, int], Any] = {}
    for i in sorted({i for (_, i) in milp.Min}):
        level: Any = 0
        for t in range(i + 1, milp.horizon(i) + 1):
            if (t - 1, i) in Mout:
                a = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"A_{t}_{i}")
                m.addCons(a == level + Mout[t - 1, i], name=f"aux_{t}_{i}")
                level = a
            stored[t, i] = level
    milp.stored = stored


def add_dependencies(milp: MilpModel, t: int, runnable: list[int]) -> None:
    """An op runs in stage ``t`` only with each input computed, kept or paged in."""
    m, S, Min = milp.model, milp.S, milp.Min
    for k in runnable:
        for u in milp.graph.predecessors(k):
            supply = [v for v in (milp.R.get((t, u)), S.get((t, u)), Min.get((t, u)))
                      if v is not None]
            if k == t:
                m.addCons(quicksum(supply) >= 1, name=f"dep_{t}_{u}_{k}")
            else:
                m.addCons(milp.R[t, k] <= quicksum(supply), name=f"dep_{t}_{u}_{k}")


def add_one_way_in(milp: MilpModel, t: int) -> None:
    """A tensor comes into stage ``t`` one way at most, and is paged in only from a
    stored copy."""
    m, S, Min = milp.model, milp.S, milp.Min
    for i in range(t):
        parts = [v for v in (milp.R.get((t, i)), S.get((t, i)), Min.get((t, i)))
                 if v is not None]
        if len(parts) > 1:
            m.addCons(quicksum(parts) <= 1, name=f"one_{t}_{i}")
        if (t, i) in Min:
            m.addCons(Min[t, i] <= milp.stored[t, i], name=f"pin_{t}_{i}")


def add_page_outs_and_retention(milp: MilpModel, t: int) -> None:
    """A page-out in stage ``t`` needs the tensor in RAM; a tensor kept into stage
    ``t + 1`` was in RAM in stage ``t``."""
    m, S, Min, Mout = milp.model, milp.S, milp.Min, milp.Mout
    for i in range(t + 1):
        if (t, i) in Mout:
            m.addCons(Mout[t, i] <= S.get((t, i), 0) + milp.r(t, i), name=f"pout_{t}_{i}")
        if (t + 1, i) in S and i != t:
            source = [v for v in (S.get((t, i)), Min.get((t, i)), milp.R.get((t, i)))
                      if v is not None]
            m.addCons(S[t + 1, i] <= quicksum(source), name=f"keep_{t}_{i}")


def add_write_once(milp: MilpModel) -> None:
    """Every tensor is written at most once (storage is never released within an
    iteration); in the restricted mode a forward op is recomputed at most once."""
    m, n, Mout = milp.model, milp.n, milp.Mout
    for i in range(n):
        writes = [Mout[t, i] for t in range(n) if (t, i) in Mout]
        if len(writes) > 1:
            m.addCons(quicksum(writes) <= 1, name=f"once_{i}")
        if milp.formulation.restricted and milp.graph.ops[i].phase is not Phase.BACKWARD:
            recomputes = [milp.R[t, i] for t in range(n) if (t, i) in milp.R]
            if len(recomputes) > 1:
                m.addCons(quicksum(recomputes) <= 1, name=f"twice_{i}")


def add_capacity(milp: MilpModel, storage_capacity_bytes: int | None) -> None:
    """What is paged out fits the storage (a row only when everything would not)."""
    Mout, output_bytes = milp.Mout, milp.costs.output_bytes
    if storage_capacity_bytes is not None and Mout:
        total = sum(int(b) for b in output_bytes)
        if total > storage_capacity_bytes:
            milp.model.addCons(quicksum(v * int(output_bytes[i])
                                        for (t, i), v in Mout.items())
                               <= storage_capacity_bytes, name="capacity")
