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

import numpy as np

from poetsim.baselines.base import (
    BaselineResult,
    OutOfTime,
    Ticker,
    check_budget,
    costs_for,
    finish,
    infeasible,
    ran_out_of_time,
)
from poetsim.baselines.program import Program
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph

__all__ = ["dtr", "dtr_program"]

METHOD = "dtr"

#: Staleness floor, so that a tensor touched at this very instant still ranks.
_EPS_S = 1e-12
#: Steps of the vectorised walk back through evicted ancestors, and the fewest candidates
#: worth the eviction scan in numpy (see _Dtr).
_WALK = 64
_SCAN = 128


def _least(total: np.ndarray, den: np.ndarray, which: np.ndarray) -> float:
    """The least ``total / den`` over the positions ``which`` (inf for none)."""
    return float(np.min(total[which] / den[which])) if len(which) else np.inf


class _NoRoom(Exception):
    pass


class _Thrashing(Exception):
    pass


class _Dtr:
    """One DTR simulation: the program, the pins and the clock every step reads and moves
    (shared state, hence a class; :func:`dtr_program` runs it).

    The eviction scan runs in numpy: ``resident[t]`` mirrors ``prog.resident``, ``touched``
    ``last_access``. For each candidate the projected cost is summed by walking back through
    single-input ops that are not resident, all candidates at once and in the order
    :meth:`projected_cost` adds them, so the sum and h(t) are bit for bit
    :meth:`projected_cost`'s. A walk that meets an op with several inputs, or runs longer than
    _WALK steps, stops there: its partial sum is a lower bound, and :meth:`projected_cost`
    itself is called only for such candidates whose bound does not already lose to the best
    h. Same choice as computing h for every resident tensor, in a fraction of the time.
    """

    def __init__(self, graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                 max_steps: int | None, ticker: Ticker | None) -> None:
        n = len(graph)
        self.graph = graph
        self.budget_bytes = budget_bytes
        self.prog = Program(graph, ticker)
        self.size = self.prog.size
        self.workspace = self.prog.workspace
        self.ct = [float(x) for x in costs.compute_time_s]
        self.last_use = [max(graph.successors(i), default=i) for i in range(n)]
        self.last_access = [0.0] * n
        self.pins: Counter[int] = Counter()
        self.pinned: set[int] = set()  # the tensors with pins
        self.clock_s = 0.0
        self.evictions = 0
        self.limit = max_steps if max_steps is not None else 200 * n + 10_000
        self.resident = np.zeros(n, dtype=bool)
        self.touched = np.zeros(n, dtype=float)
        self.ct_array = np.asarray(self.ct, dtype=float)
        self.size_array = np.asarray(self.size, dtype=float)
        # an in-place update cannot be computed again, so its output is pinned
        self.evictable_size = (self.size_array > 0) & np.array([op.recomputable
                                                                for op in graph.ops])
        self.inputs = np.array([len(graph.predecessors(i)) for i in range(n)], dtype=np.int64)
        self.only_input = np.array([graph.predecessors(i)[0] if self.inputs[i] == 1 else -1
                                    for i in range(n)], dtype=np.int64)
        self.tick = ticker.tick if ticker is not None and ticker.stop_at is not None else None
        self.single = [graph.predecessors(i)[0] if len(graph.predecessors(i)) == 1 else -1
                       for i in range(n)]

    # ------------------------------------------------------------------ h(t)

    def projected_cost(self, t: int) -> float:
        """``t``'s compute time plus that of every ancestor not resident (recomputed with it)."""
        ct, single, is_resident = self.ct, self.single, self.prog.resident
        total = ct[t]
        seen = {t}
        w = single[t]
        if w >= 0:
            # a run of single-input ops: the walk below, without its stack (a chain cannot
            # lead back to an op already seen)
            while not is_resident[w]:
                total += ct[w]
                if single[w] < 0:
                    break
                w = single[w]
            else:
                return total
            seen = {w}
            t = w
        stack = list(self.graph.predecessors(t))
        while stack:
            w = stack.pop()
            if w in seen or is_resident[w]:
                continue
            seen.add(w)
            total += ct[w]
            stack.extend(self.graph.predecessors(w))
        return total

    def h(self, t: int, clock_s: float) -> float:
        """DTR's eviction score: projected cost over size times staleness."""
        return self.projected_cost(t) / (self.size[t]
                                         * max(clock_s - self.last_access[t], _EPS_S))

    # ------------------------------------------------------------------ eviction

    def free(self, t: int) -> None:
        """Free ``t`` in the program and in the numpy mirror."""
        self.prog.free(t)
        self.resident[t] = False

    def choose(self, clock_s: float) -> int | None:
        """The resident tensor with the least h (ties: the lowest index), not pinned."""
        candidates = np.flatnonzero(self.resident & self.evictable_size)
        if self.tick is not None:
            self.tick(1 + len(candidates) // 64)
        if len(candidates) <= _SCAN:  # too few for numpy to pay: h of each, one by one
            return self._least_h_of_each(candidates, clock_s)
        total = self.ct_array[candidates]
        den = self.size_array[candidates] * np.maximum(clock_s - self.touched[candidates],
                                                       _EPS_S)
        free_to_go = self._unpinned(candidates)
        exact = self._walk(candidates, total, den, free_to_go)
        return self._least_h_scanned(candidates, total, den, exact, free_to_go, clock_s)

    def _least_h_of_each(self, candidates: np.ndarray, clock_s: float) -> int | None:
        """:meth:`choose` on few candidates: h of each unpinned one, in index order."""
        best, best_h = None, np.inf
        for t in candidates.tolist():
            if self.pins[t]:
                continue
            value = self.h(t, clock_s)
            if best is None or value < best_h or (value == best_h and t < best):
                best, best_h = t, value
        return best

    def _unpinned(self, candidates: np.ndarray) -> np.ndarray:
        """Which of the (sorted) ``candidates`` carry no pin."""
        free_to_go = np.ones(len(candidates), dtype=bool)
        for t in self.pinned:  # few: the inputs of the ops being computed
            if self.resident[t] and self.size[t] > 0:
                free_to_go[np.searchsorted(candidates, t)] = False
        return free_to_go

    def _walk(self, candidates: np.ndarray, total: np.ndarray, den: np.ndarray,
              free_to_go: np.ndarray) -> np.ndarray:
        """Add to ``total`` (in place) the compute time of the non-resident single-input
        ancestors of every candidate, all at once; return which sums are exact (the walk
        reached a resident tensor or a source), the rest being lower bounds."""
        resident, inputs, only_input = self.resident, self.inputs, self.only_input
        exact = inputs[candidates] == 0
        least = _least(total, den, np.flatnonzero(exact & free_to_go))
        walking = np.flatnonzero(inputs[candidates] == 1)
        at = only_input[candidates[walking]]
        for _ in range(_WALK):
            if len(walking) < _SCAN // 16:  # the rest is cheaper one by one (if at all)
                break
            stop = resident[at]
            exact[walking[stop]] = True
            least = min(least, _least(total, den, walking[stop & free_to_go[walking]]))
            walking, at = walking[~stop], at[~stop]
            total[walking] += self.ct_array[at]
            fan_in = inputs[at]
            source = fan_in == 0
            exact[walking[source]] = True
            least = min(least, _least(total, den, walking[source & free_to_go[walking]]))
            # walks on while the partial h does not already lose to an exact one
            more = (fan_in == 1) & (total[walking] / den[walking] <= least)
            walking, at = walking[more], only_input[at[more]]
        return exact

    def _least_h_scanned(self, candidates: np.ndarray, total: np.ndarray, den: np.ndarray,
                         exact: np.ndarray, free_to_go: np.ndarray,
                         clock_s: float) -> int | None:
        """The least h from the walked sums: the best exact one, then :meth:`h` of each
        inexact candidate whose lower bound does not already lose to it."""
        hs = total / den
        best, best_h = None, np.inf
        if exact.any():
            exact_h = np.where(exact & free_to_go, hs, np.inf)
            first = int(np.argmin(exact_h))  # the first of the least: the lowest index
            if exact_h[first] < np.inf:
                best, best_h = int(candidates[first]), float(exact_h[first])
        for i in np.flatnonzero(~exact & free_to_go & (hs <= best_h)).tolist():
            t = int(candidates[i])
            if self.tick is not None:
                self.tick()
            value = self.h(t, clock_s)
            if best is None or value < best_h or (value == best_h and t < best):
                best, best_h = t, value
        return best

    def make_room(self, need_bytes: int, op: int) -> None:
        """Evict by least h until ``need_bytes`` more fit the budget (``_NoRoom`` if not)."""
        prog = self.prog
        while prog.live + need_bytes > self.budget_bytes:
            best = self.choose(self.clock_s)
            if best is None:
                held = sum(self.size[t] for t in prog.in_ram)
                raise _NoRoom(f"op {self.graph.ops[op].name!r} needs {need_bytes} B beside "
                              f"{held} B of pinned tensors, over the budget of "
                              f"{self.budget_bytes} B")
            self.free(best)
            self.evictions += 1

    # ------------------------------------------------------------------ computing

    def compute_ready(self, k: int, p: int) -> None:
        """Compute op ``k``, whose inputs are resident and pinned, at program position ``p``."""
        prog, pins = self.prog, self.pins
        preds = self.graph.predecessors(k)
        self.make_room(self.size[k] + self.workspace[k], k)
        prog.compute(k)
        self.resident[k] = True
        if len(prog) > self.limit:
            raise _Thrashing(f"more than {self.limit} steps")
        self.clock_s += self.ct[k]
        for w in (*preds, k):
            self.last_access[w] = self.clock_s
            self.touched[w] = self.clock_s
        for w in preds:
            pins[w] -= 1
            if not pins[w]:
                self.pinned.discard(w)
                if prog.resident[w] and self.last_use[w] < p:
                    self.free(w)  # only a rematerialization needed it

    def run(self, root: int, p: int) -> None:
        """Compute op ``root`` (first time or rematerialization) at program position ``p``.

        Every input is pinned first, so fetching one cannot evict another, then each one
        not resident is rematerialized the same way, depth first. An explicit stack (op,
        next input to look at) instead of recursion, so chains of any length work.
        """
        stack = [(root, -1)]
        while stack:
            k, next_input = stack[-1]
            preds = self.graph.predecessors(k)
            if next_input < 0:
                for w in preds:
                    self.pins[w] += 1
                    self.pinned.add(w)
                next_input = 0
            while next_input < len(preds) and self.prog.resident[preds[next_input]]:
                next_input += 1
            if next_input < len(preds):
                stack[-1] = (k, next_input + 1)
                stack.append((preds[next_input], -1))
                continue
            stack.pop()
            self.compute_ready(k, p)

    def program(self) -> tuple[Program, int]:
        """Every op once, in graph order, banishing each tensor after its last reader."""
        graph, prog = self.graph, self.prog
        for p in range(len(graph)):
            self.run(p, p)
            for u in (*graph.predecessors(p), p):
                if prog.resident[u] and self.last_use[u] <= p:
                    self.free(u)
        return prog, self.evictions


def dtr_program(graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                *, max_steps: int | None = None, ticker: Ticker | None = None
                ) -> tuple[Program, int]:
    """Simulate DTR; return the op list and the number of evictions.

    Raises ``_NoRoom`` / ``_Thrashing`` (module-private) when it cannot continue, and
    :class:`~poetsim.baselines.base.OutOfTime` once the ``ticker``'s ``stop_at`` passes.
    """
    return _Dtr(graph, costs, budget_bytes, max_steps, ticker).program()


def dtr(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
        deadline_s: float | None = None, stop_at: float | None = None) -> BaselineResult:
    """DTR's greedy eviction and on-demand rematerialization within ``budget_bytes``
    (``infeasible``, saying so, when ``stop_at`` passes before the simulation ends, see
    :func:`~poetsim.baselines.base.out_of_time`)."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    try:
        prog, evictions = dtr_program(graph, costs, budget_bytes, ticker=Ticker(stop_at))
    except _NoRoom as error:
        return infeasible(METHOD, f"nothing left to evict: {error}", budget_bytes, deadline_s)
    except _Thrashing as error:
        return infeasible(METHOD, f"thrashing: the simulation ran {error} without finishing",
                          budget_bytes, deadline_s)
    except OutOfTime:
        return ran_out_of_time(METHOD, budget_bytes, deadline_s,
                               why="before its simulation of the op list ended")
    return finish(METHOD, graph, board, costs, budget_bytes, prog.steps, deadline_s=deadline_s,
                  details={"evictions": evictions})
