"""The MILP's RAM rows: Checkmate's memory recurrence per stage, and the redundant
frontier knapsacks that give SCIP a useful LP bound.

Per stage ``t`` over the ops that can run in it (index order):
``U[t,first] = sum_i (S[t,i] + Min[t,i]) m_i + R[t,first] m_first``,
``U[t,next] = U[t,k] - sum_i F[t,i,k] m_i + R[t,next] m_next`` and
``U[t,k] + R[t,k] w_k - F[t,u,k] m_k <= budget`` (the last term for an op in place on
``u``), with the continuous free indicators ``F`` bounded from above only (see
:mod:`poetsim.optimizer.milp`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyscipopt import quicksum

if TYPE_CHECKING:
    from poetsim.optimizer.milp.model import MilpModel

__all__ = ["add_frontier_knapsacks", "add_memory"]


def add_frontier_knapsacks(milp: MilpModel) -> None:
    """Redundant but strong rows: while op ``t`` runs (the last op of stage ``t``), RAM
    holds its inputs, its output, its workspace and every tensor kept into stage
    ``t + 1``. In binaries only, these are knapsack rows that SCIP tightens and derives
    cover cuts from; the recurrence with continuous ``U`` and ``F`` gives it none, and its
    LP relaxation keeps fractions of large tensors for free."""
    m, graph, mem = milp.model, milp.graph, milp.mem
    for t in range(milp.n - 1):
        inputs = set(graph.predecessors(t))
        room = (milp.budget_units - mem[t] - milp.ws[t] - sum(mem[u] for u in inputs))
        terms = [mem[i] * milp.S[t + 1, i] for i in range(t)
                 if i not in inputs and (t + 1, i) in milp.S and mem[i] > 0]
        if milp.inplace[t]:  # op t runs in place unless its input is kept
            room += milp.inplace[t]
            kept = milp.S.get((t + 1, graph.overwrites(t)))
            if kept is not None:
                terms.append(milp.inplace[t] * kept)
        terms += [size * h for size, h in (*milp.held_at[t], *milp.loaded_at[t])]
        if terms:
            m.addCons(quicksum(terms) <= room, name=f"frontier_{t}")
    for t in range(1, milp.n):
        # When stage t starts, everything kept or paged in is resident at once.
        start = [mem[i] * v for family in (milp.S, milp.Min)
                 for i in range(t) if (v := family.get((t, i))) is not None and mem[i]]
        start += [size * h for size, h in milp.held_at[t]]
        if start:
            m.addCons(quicksum(start) <= milp.budget_units, name=f"start_{t}")


def _free_pairs(milp: MilpModel, runnable: list[int]) -> list[tuple[int, int, list[int]]]:
    """(tensor i, op k, later readers of i in the stage) for every possible free."""
    graph = milp.graph
    run = set(runnable)
    pairs = []
    for k in runnable:
        for i in (*graph.predecessors(k), k):
            later = [j for j in graph.successors(i) if j > k and j in run]
            pairs.append((i, k, later))
    return pairs


def _add_frees(milp: MilpModel, t: int, runnable: list[int]
               ) -> dict[int, list[tuple[int, Any]]]:
    """``F[t,i,k]`` with its upper bounds, and a tensor freed at most once per stage;
    returns, per op ``k``, the (tensor, ``F``) pairs freed right after it."""
    m, S = milp.model, milp.S
    frees_after: dict[int, list[tuple[int, Any]]] = {}
    frees_of: dict[int, list[Any]] = {}
    for i, k, later in _free_pairs(milp, runnable):
        if milp.mem[i] == 0:
            continue
        f = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"F_{t}_{i}_{k}")
        milp.F[t, i, k] = f
        if k != t:
            m.addCons(f <= milp.R[t, k], name=f"fr_{t}_{i}_{k}")
        if (t + 1, i) in S:
            m.addCons(f <= 1 - S[t + 1, i], name=f"fs_{t}_{i}_{k}")
        for j in later:
            m.addCons(f <= 1 - milp.r(t, j), name=f"fl_{t}_{i}_{k}_{j}")
        frees_after.setdefault(k, []).append((i, f))
        frees_of.setdefault(i, []).append(f)
    for i, fs in frees_of.items():
        if len(fs) > 1:
            # a tensor leaves RAM at most once per stage (redundant; tightens the LP)
            m.addCons(quicksum(fs) <= 1, name=f"fone_{t}_{i}")
    return frees_after


def add_memory(milp: MilpModel, t: int, runnable: list[int]) -> None:
    """Stage ``t``'s memory recurrence ``U`` and its budget row after every op."""
    m, S, Min, mem = milp.model, milp.S, milp.Min, milp.mem
    start_terms = [mem[i] * S[t, i] for i in range(t) if (t, i) in S]
    start_terms += [mem[i] * Min[t, i] for i in range(t) if (t, i) in Min]
    start_terms += [size * h for size, h in milp.held_at[t]]
    loads = quicksum(size * h for size, h in milp.loaded_at[t])
    frees_after = _add_frees(milp, t, runnable)
    previous = None
    for k in runnable:
        u = m.addVar(vtype="C", lb=0.0, name=f"U_{t}_{k}")
        milp.U[t, k] = u
        produced = mem[k] * milp.r(t, k)
        if previous is None:
            m.addCons(u == quicksum(start_terms) + produced, name=f"u_{t}_{k}")
        else:
            freed = quicksum(mem[i] * f for i, f in frees_after.get(previous, ()))
            m.addCons(u == milp.U[t, previous] - freed + produced, name=f"u_{t}_{k}")
        # in place: the output lands in the buffer of the input freed right after it
        f_in = milp.F.get((t, milp.graph.overwrites(k), k)) if milp.inplace[k] else None
        saved = milp.inplace[k] * f_in if f_in is not None else 0
        m.addCons(u + milp.ws[k] * milp.r(t, k) + (loads if k == t else 0) - saved
                  <= milp.budget_units, name=f"mem_{t}_{k}")
        previous = k
