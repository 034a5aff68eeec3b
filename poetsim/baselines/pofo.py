"""POFO (Beaumont, Eyraud-Dubois and Shilova, NeurIPS 2021): remat + offloading on chains, by DP.

POFO combines rematerialization and offloading of activations for a *chain* of layers,
optimally for its own model, by dynamic programming. As POET's paper summarises it
(section 2), each layer's activation gets a single operation (kept, offloaded once or
recomputed once), all page-outs happen before the loss, and paging is assumed
asynchronous. That is the model implemented here, on the chain ``x0 -> x1 -> ... -> xN``
(``xN`` the loss):

* every chain tensor is **kept** (in RAM until its last backward reader), **offloaded**
  (paged out as soon as it is made, paged in once when the backward pass needs it), or
  **dropped** (recomputed once in the backward pass, from the nearest kept or paged-in
  tensor before it; the recomputed run stays until its backward ops are done);
* kept and offloaded tensors are the *anchors*; the dropped tensors between two anchors
  form a segment, recomputed together.

The DP walks the anchors left to right. Its state is the last anchor and its kind, with a
Pareto front of (bytes of kept anchors that stay resident, objective). A transition from
anchor ``a`` to anchor ``b`` checks the segment's backward working set against the budget:
the kept anchors before ``a``, ``xa``, the saved dropped tensors still waiting for their
backward op, what each backward op reads, its incoming and outgoing gradients and
workspace, and the recomputation's transient tensors. It adds the recomputation time of
the dropped tensors and, for an offloaded anchor, the transfer time *not hidden*: with DMA,
a page-out overlaps the forward compute after it up to the loss and a page-in the backward
compute before its use (POFO's asynchronous-transfer assumption; the single transfer lane
is not modelled as shared); without DMA the whole transfer counts. The objective is
POFO's, time; energy breaks ties.

The DP's working sets are an estimate of the executed op list, so every plan is lowered
with :func:`~poetsim.baselines.program.run_policy` and checked exactly, and the DP's
internal budget is calibrated (raised while the plans fit or none is found, lowered by the
overshoot, then bisected; at most :data:`MAX_ROUNDS` DP runs); the fitting plan with the
best DP objective is returned. Not applicable to graphs that are not chains.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from poetsim.baselines.base import (
    BaselineResult,
    OutOfTime,
    Ticker,
    check_budget,
    costs_for,
    finish,
    finish_estimate_s,
    infeasible,
    not_applicable,
    ran_out_of_time,
)
from poetsim.baselines.program import (
    DROP,
    KEEP,
    OFFLOAD,
    Program,
    backward_op_of,
    chain_order,
    run_policy,
    saved_tensors,
)
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph

__all__ = ["pofo", "pofo_policy"]

METHOD = "pofo"
#: DP runs spent calibrating the internal budget.
MAX_ROUNDS = 16
#: Kept bytes are rounded to budget / FRONT_RESOLUTION to keep the Pareto fronts short.
FRONT_RESOLUTION = 1024


class _State(NamedTuple):
    kept: int                 # bytes of kept anchors before this anchor that stay resident
    key: tuple[float, float]  # (extra time, extra energy): the objective, lexicographic
    back: tuple | None        # (previous anchor, previous kind, previous state)


def _pareto(states: list[_State]) -> list[_State]:
    """States not dominated in (kept bytes, objective), sorted by kept bytes."""
    states.sort(key=lambda s: (s.kept, s.key))
    front: list[_State] = []
    for s in states:
        if front and front[-1].key <= s.key:
            continue
        front.append(s)
    return front


class _Chain:
    """Per-position facts of the chain the DP needs (index j = chain position)."""

    def __init__(self, graph: TrainingGraph, board: Board, costs: OpCosts, chain: list[int]):
        ops = graph.ops
        bwd = backward_op_of(graph)
        saved = saved_tensors(graph)
        m = len(chain)
        self.m = m
        self.size = [ops[c].output_bytes for c in chain]
        self.saved = [c in saved for c in chain]
        b_of = [bwd.get(c) for c in chain]
        self.grad = [ops[b].output_bytes if b is not None else 0 for b in b_of]
        self.ws_f = [ops[c].workspace_bytes for c in chain]
        reads = [set(graph.predecessors(b)) if b is not None else set() for b in b_of]
        self.reads_self = [chain[j] in reads[j] for j in range(m)]
        # What backward op j holds while it runs, beside the ladder and the anchors.
        self.running = [
            (self.size[j] if self.reads_self[j] else 0)
            + (self.grad[j + 1] if j + 1 < m else 0) + self.grad[j]
            + (ops[b_of[j]].workspace_bytes if b_of[j] is not None else 0)
            for j in range(m)]
        ladder = [self.size[j] if self.saved[j] else 0 for j in range(m)]
        self.prefix = np.concatenate([[0], np.cumsum(ladder)]).astype(int)  # P(j) = sum_{i<j}
        ct = np.array([costs.compute_time_s[c] for c in chain], dtype=float)
        ce = np.array([costs.compute_energy_j[c] for c in chain], dtype=float)
        bt = np.array([costs.compute_time_s[b] if b is not None else 0.0 for b in b_of])
        self.ct_prefix = np.concatenate([[0.0], np.cumsum(ct)])
        self.ce_prefix = np.concatenate([[0.0], np.cumsum(ce)])
        fwd_after = self.ct_prefix[-1] - self.ct_prefix[1:]          # forward of j+1..N
        bwd_before = np.concatenate([np.cumsum(bt[::-1])[::-1][1:], [0.0]])  # backward j+1..
        self.offload_cost: list[tuple[float, float]] = []
        for j, c in enumerate(chain):
            out_t, in_t = float(costs.pageout_time_s[c]), float(costs.pagein_time_s[c])
            energy = float(costs.pageout_energy_j[c] + costs.pagein_energy_j[c])
            if board.dma.present:
                t = max(0.0, out_t - fwd_after[j]) + max(0.0, in_t - bwd_before[j])
            else:
                t = out_t + in_t
            self.offload_cost.append((t, energy))

    def transient(self, i: int, a: int) -> int:
        """Unsaved bytes alive while dropped op i is recomputed (after anchor a)."""
        t = (0 if self.saved[i] else self.size[i]) + self.ws_f[i]
        if i - 1 > a and not self.saved[i - 1]:
            t += self.size[i - 1]
        return t


def pofo_policy(graph: TrainingGraph, board: Board, costs: OpCosts, chain: list[int],
                budget_bytes: int, stop_at: float | None = None
                ) -> tuple[list[str], tuple[float, float]] | None:
    """The DP's policy (op index -> keep / offload / drop) and its objective
    (extra time over one plain pass, energy of that extra work), or None (also when
    ``stop_at`` passes first)."""
    try:
        return _policy(graph, board, costs, chain, budget_bytes, Ticker(stop_at))
    except OutOfTime:
        return None


def _policy(graph: TrainingGraph, board: Board, costs: OpCosts, chain: list[int],
            budget_bytes: int, ticker: Ticker) -> tuple[list[str], tuple[float, float]] | None:
    """:func:`pofo_policy`, raising :class:`~poetsim.baselines.base.OutOfTime` when the
    ``ticker``'s time is up."""
    c = _Chain(graph, board, costs, chain)
    m, last = c.m, c.m - 1
    can_page = board.storage.capacity_bytes > 0
    unit = max(1, budget_bytes // FRONT_RESOLUTION)
    kinds_of = [(KEEP, OFFLOAD) if can_page and b < last and c.size[b] > 0 else (KEEP,)
                for b in range(m)]
    # states[a + 1]: the (kind, front) of anchor a that have any, in kind order; anchor -1
    # is "nothing before the chain". The transitions visit them by anchor, then kind.
    states: list[list[tuple[str, list[_State]]]] = [[] for _ in range(m + 1)]
    states[0].append((KEEP, [_State(0, (0.0, 0.0), None)]))
    prefix = c.prefix.tolist()
    for b in range(m):
        ticker.tick()
        need = _segment_needs(c, b, prefix, budget_bytes)
        ticker.tick(len(need))
        for kind_b in kinds_of[b]:
            found = _arrivals(c, states, need, b, kind_b, unit, budget_bytes, ticker)
            if found:
                ticker.tick(len(found))
                states[b + 1].append((kind_b, _pareto(found)))
    finals = dict(states[last + 1]).get(KEEP)
    if not finals:
        return None
    best = min(finals, key=lambda s: s.key)
    return _unwind(best, chain, len(graph)), best.key


def _segment_needs(c: _Chain, b: int, prefix: list[int], budget_bytes: int) -> dict[int, int]:
    """Working set of segment (a, b] without the kept anchors, for every a < b, down to
    the first a whose ladder alone, prefix[b] - prefix[a + 1], is over the budget: every
    need from there down is, so no state of such an anchor leads to b."""
    m = c.m
    need: dict[int, int] = {}
    best_j = -1
    transient = 0
    for a in range(b - 1, -2, -1):
        if prefix[b] - prefix[a + 1] > budget_bytes:
            break
        j = a + 1  # backward op j joins the segment
        best_j = max(best_j, prefix[j] + c.running[j])
        if j < b:
            transient = max(transient, c.transient(j, a))
        # xa is resident through the segment if a backward op reads it or the dropped
        # tensors are rebuilt from it; otherwise it was freed in the forward pass.
        s_a = c.size[a] if a >= 0 and (c.saved[a] or b > a + 1) else 0
        base = s_a - prefix[a + 1]
        backward = base + best_j
        recompute = (base + prefix[b] + transient
                     + (c.grad[b + 1] if b + 1 < m else 0)
                     + (c.size[b] if c.reads_self[b] else 0))
        need[a] = max(backward, recompute)
    return need


def _arrivals(c: _Chain, states: list[list[tuple[str, list[_State]]]], need: dict[int, int],
              b: int, kind_b: str, unit: int, budget_bytes: int, ticker: Ticker) -> list[_State]:
    """Every state of anchor ``b`` of kind ``kind_b`` reached from an earlier anchor within
    the budget, by anchor, then kind, then kept bytes (not yet reduced to a front)."""
    found: list[_State] = []
    for a in range(b - len(need), b):
        for kind_a, front in states[a + 1]:
            extra_t = float(c.ct_prefix[b] - c.ct_prefix[a + 1])
            extra_e = float(c.ce_prefix[b] - c.ce_prefix[a + 1])
            if kind_b == OFFLOAD:
                dt, de = c.offload_cost[b]
                extra_t += dt
                extra_e += de
            keeps_a = a >= 0 and kind_a == KEEP and (c.saved[a] or b > a + 1)
            add = round(c.size[a] / unit) * unit if keeps_a else 0
            before = len(found)
            for s in front:
                if s.kept + need[a] > budget_bytes:
                    break  # the front is sorted by kept bytes
                found.append(_State(s.kept + add, (s.key[0] + extra_t, s.key[1] + extra_e),
                                    (a, kind_a, s)))
            ticker.tick(1 + len(found) - before)
    return found


def _unwind(best: _State, chain: list[int], ops: int) -> list[str]:
    """The policy of ``ops`` ops the back pointers of the final ``best`` state spell: the
    anchors' kinds, every other chain tensor dropped, the loss and backward ops kept."""
    m = len(chain)
    policy = [KEEP] * ops
    kinds = [DROP] * m
    kinds[m - 1] = KEEP
    node: _State = best
    while node.back is not None:
        a, kind_a, prev = node.back
        if a >= 0:
            kinds[a] = kind_a
        node = prev
    for j, op in enumerate(chain):
        policy[op] = kinds[j]
    return policy


class _Calibration:
    """The search for the DP's internal budget: raised while the plans fit or none is
    found, lowered by the overshoot, then bisected; it keeps the fitting plan with the best
    DP objective (state across the rounds, hence a class)."""

    def __init__(self, graph: TrainingGraph, board: Board, costs: OpCosts, chain: list[int],
                 budget_bytes: int, ticker: Ticker) -> None:
        self.graph, self.board, self.costs, self.chain = graph, board, costs, chain
        self.budget_bytes = budget_bytes
        self.ticker = ticker
        self.tolerance = max(1, budget_bytes // 1000)
        self.step = max(self.tolerance, budget_bytes // 16)
        self.internal = budget_bytes
        # largest internal budget that asked for more, smallest for less
        self.up: int | None = None
        self.down: int | None = None
        self.best: tuple[tuple[float, float], int, list[str], Program] | None = None
        self.best_to_finish = 0.0
        self.smallest: int | None = None
        self.rounds = 0

    def run(self) -> None:
        """At most :data:`MAX_ROUNDS` rounds (raises ``OutOfTime`` when time is up)."""
        for rounds in range(1, MAX_ROUNDS + 1):
            self.rounds = rounds
            overshoot = self.try_budget()
            if self.best is not None and self.best[0] == (0.0, 0.0):
                break  # nothing beyond one plain pass: no plan can do better
            if not self.move(overshoot):
                break

    def try_budget(self) -> int:
        """One DP run at the internal budget, its plan lowered and checked; return how far
        its peak is over the budget (0 if it fits or there is none)."""
        found = _policy(self.graph, self.board, self.costs, self.chain, self.internal,
                        self.ticker)
        if found is None:
            self.up = self.internal
            return 0
        policy, key = found
        started = time.perf_counter()
        prog = run_policy(self.graph, policy, ticker=self.ticker)
        to_finish = finish_estimate_s(self.graph, time.perf_counter() - started)
        self.ticker.reserve(to_finish)  # the time to finish a program like it
        self.smallest = prog.peak if self.smallest is None else min(self.smallest, prog.peak)
        if prog.peak > self.budget_bytes:
            self.down = self.internal
            return prog.peak - self.budget_bytes
        self.up = self.internal
        if self.best is None or key < self.best[0]:
            self.best = (key, self.internal, policy, prog)
            self.best_to_finish = to_finish
        return 0

    def move(self, overshoot: int) -> bool:
        """Set the internal budget of the next round; False when the search is over."""
        if self.down is None:
            if self.internal > 4 * self.budget_bytes:
                return False
            self.internal += self.step
            self.step *= 2
        elif self.up is None:
            self.internal -= max(1, overshoot)
            if self.internal <= 0:
                return False
        else:
            if self.down - self.up <= self.tolerance:
                return False
            self.internal = (self.up + self.down) // 2
        return True


def pofo(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
         deadline_s: float | None = None, stop_at: float | None = None) -> BaselineResult:
    """POFO's keep / offload / recompute-once DP on a chain, checked against the budget
    (the best so far at ``stop_at``, see :func:`~poetsim.baselines.base.out_of_time`)."""
    budget_bytes = check_budget(budget_bytes)
    chain, reason = chain_order(graph)
    if chain is None:
        return not_applicable(METHOD, reason, budget_bytes, deadline_s)
    costs = costs_for(graph, board, costs)
    ticker = Ticker(stop_at)
    search = _Calibration(graph, board, costs, chain, budget_bytes, ticker)
    try:
        search.run()
    except OutOfTime:
        if search.best is None:
            return ran_out_of_time(METHOD, budget_bytes, deadline_s,
                                   {"smallest_peak_bytes": search.smallest,
                                    "rounds": search.rounds})
    best, smallest, rounds = search.best, search.smallest, search.rounds
    if best is not None and not ticker.can_finish(search.best_to_finish):
        return ran_out_of_time(METHOD, budget_bytes, deadline_s, {"rounds": rounds},
                               why="before it could check its best schedule")
    if best is None:
        why = ("the dynamic program finds no plan whose estimated working sets fit"
               if smallest is None else
               f"its best plan needs {smallest} B of activation RAM, over the budget")
        return infeasible(METHOD, f"{why} (budget {budget_bytes} B)", budget_bytes, deadline_s,
                          {"smallest_peak_bytes": smallest, "rounds": rounds})
    (dp_time, _), internal, policy, prog = best

    def names(kind: str) -> list[str]:
        return [graph.ops[op].name for op in chain if policy[op] == kind]

    return finish(METHOD, graph, board, costs, budget_bytes, prog.steps, deadline_s=deadline_s,
                  details={"offloaded": names(OFFLOAD), "dropped": names(DROP),
                           "dp_extra_time_s": dp_time, "dp_budget_bytes": internal,
                           "rounds": rounds})
