"""Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021), simulated over the op list.

DTR is an online, greedy runtime: the program (every op once, in graph order) runs as
written; when an allocation would take RAM over the budget, DTR evicts the resident tensor
with the smallest

    h(t) = cost(t) / (size(t) * staleness(t))

and when an op needs an evicted tensor it rematerializes it on demand, recursively
rematerializing evicted inputs first. Here:

* ``cost(t)`` is the *projected* recompute time: ``t``'s compute time plus that of every
  ancestor that is not resident and would have to be recomputed with it (DTR's
  evicted-neighbourhood cost restricted to ancestors; the descendant half of ``e*`` is
  left out);
* ``staleness(t)`` is the compute time elapsed since ``t`` was last computed or read;
* the inputs of the op being computed (at every level of a rematerialization) are pinned;
* a tensor whose last reader in the program has run is freed at once ("banished"); if a
  rematerialization needs it again it is recomputed like any evicted tensor.

Every tensor is evictable, gradients included; the recursion makes that safe, and the
cost term makes deep cascades unattractive. DTR has no paging. It is ``infeasible`` when an
op's pinned inputs plus its output and workspace do not fit (nothing left to evict), or
when the simulation thrashes past a step limit.
"""

from __future__ import annotations

from collections import Counter

from poetsim.baselines.base import BaselineResult, check_budget, costs_for, finish, infeasible
from poetsim.baselines.program import Program
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph

__all__ = ["dtr", "dtr_program"]

METHOD = "dtr"

#: Staleness floor, so that a tensor touched at this very instant still ranks.
_EPS_S = 1e-12


class _NoRoom(Exception):
    pass


class _Thrashing(Exception):
    pass


def dtr_program(graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                *, max_steps: int | None = None) -> tuple[Program, int]:
    """Simulate DTR; return the op list and the number of evictions.

    Raises ``_NoRoom`` / ``_Thrashing`` (module-private) when it cannot continue.
    """
    n = len(graph)
    prog = Program(graph)
    size = prog.size
    workspace = prog.workspace
    ct = [float(x) for x in costs.compute_time_s]
    last_use = [max(graph.successors(i), default=i) for i in range(n)]
    last_access = [0.0] * n
    pins: Counter[int] = Counter()
    state = {"clock": 0.0, "evictions": 0}
    limit = max_steps if max_steps is not None else 200 * n + 10_000

    def projected_cost(t: int) -> float:
        total = ct[t]
        seen = {t}
        stack = list(graph.predecessors(t))
        while stack:
            w = stack.pop()
            if w in seen or prog.resident[w]:
                continue
            seen.add(w)
            total += ct[w]
            stack.extend(graph.predecessors(w))
        return total

    def make_room(need: int, op: int) -> None:
        while prog.live + need > budget_bytes:
            clock = state["clock"]
            best, best_h = None, None
            for t in prog.in_ram:
                if pins[t] or size[t] == 0:
                    continue
                h = projected_cost(t) / (size[t] * max(clock - last_access[t], _EPS_S))
                if best_h is None or h < best_h or (h == best_h and t < best):
                    best, best_h = t, h
            if best is None:
                pinned = sum(size[t] for t in prog.in_ram)
                raise _NoRoom(f"op {graph.ops[op].name!r} needs {need} B beside {pinned} B "
                              f"of pinned tensors, over the budget of {budget_bytes} B")
            prog.free(best)
            state["evictions"] += 1

    def compute_ready(k: int, p: int) -> None:
        """Compute op ``k``, whose inputs are resident and pinned, at program position ``p``."""
        preds = graph.predecessors(k)
        make_room(size[k] + workspace[k], k)
        prog.compute(k)
        if len(prog.steps) > limit:
            raise _Thrashing(f"more than {limit} steps")
        state["clock"] += ct[k]
        for w in (*preds, k):
            last_access[w] = state["clock"]
        for w in preds:
            pins[w] -= 1
            if not pins[w] and prog.resident[w] and last_use[w] < p:
                prog.free(w)  # only a rematerialization needed it

    def run(root: int, p: int) -> None:
        """Compute op ``root`` (first time or rematerialization) at program position ``p``.

        Every input is pinned first, so fetching one cannot evict another, then each one
        not resident is rematerialized the same way, depth first. An explicit stack (op,
        next input to look at) instead of recursion, so chains of any length work.
        """
        stack = [(root, -1)]
        while stack:
            k, next_input = stack[-1]
            preds = graph.predecessors(k)
            if next_input < 0:
                for w in preds:
                    pins[w] += 1
                next_input = 0
            while next_input < len(preds) and prog.resident[preds[next_input]]:
                next_input += 1
            if next_input < len(preds):
                stack[-1] = (k, next_input + 1)
                stack.append((preds[next_input], -1))
                continue
            stack.pop()
            compute_ready(k, p)

    for p in range(n):
        run(p, p)
        for u in (*graph.predecessors(p), p):
            if prog.resident[u] and last_use[u] <= p:
                prog.free(u)
    return prog, state["evictions"]


def dtr(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
        deadline_s: float | None = None) -> BaselineResult:
    """DTR's greedy eviction and on-demand rematerialization within ``budget_bytes``."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    try:
        prog, evictions = dtr_program(graph, costs, budget_bytes)
    except _NoRoom as error:
        return infeasible(METHOD, f"nothing left to evict: {error}", budget_bytes, deadline_s)
    except _Thrashing as error:
        return infeasible(METHOD, f"thrashing: the simulation ran {error} without finishing",
                          budget_bytes, deadline_s)
    return finish(METHOD, graph, board, costs, budget_bytes, prog.steps, deadline_s=deadline_s,
                  details={"evictions": evictions})
