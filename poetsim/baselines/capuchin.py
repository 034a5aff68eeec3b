"""Capuchin (Peng et al., ASPLOS 2020): tensor-access-driven swapping first, recomputation second.

Capuchin profiles one plain iteration (here: every op at its OpCosts time, in graph order)
to learn each tensor's accesses, then repeatedly lowers the peak memory:

1. Find the peak of the current plan (the op list of :func:`~poetsim.baselines.program.run_policy`)
   and the *candidates*: forward tensors a backward op reads, resident at the peak, whose
   last forward access is before the peak and whose first backward access is after it
   (evicting them lowers this peak), and not yet decided.
2. **Swap first, when it can be hidden.** A candidate's free time
   ``FT = (start of its first backward access - end of its last forward access)
   - page-out time - page-in time - transfer time of swaps already chosen whose idle
   window overlaps its own`` (one transfer lane). If any candidate has ``FT >= 0`` on a
   board with DMA, the one with the largest FT is swapped (paged out after it is made,
   paged in before its backward access).
3. **Otherwise, by memory saving per second (MSPS).** For every candidate, the swap
   overhead (its transfer time not hidden by its idle window, or all of it without DMA)
   and the recomputation overhead (its compute time plus that of the ancestors it must be
   rebuilt from: dropped ones and the ones the forward pass already freed, plus page-ins of
   swapped ancestors) are compared; the candidate
   with the largest ``size / min(overheads)`` is evicted the cheaper way.

A decision that raises the peak (its recomputation or page-in lands on a new, higher
peak) is undone and the tensor is not considered again: a stand-in for Capuchin's run-time
feedback. This repeats until the plan fits the budget (``ok``) or no candidate is left
(``infeasible``). Capuchin optimises time, not energy: it pays for paging whenever paging
is hidden, however much energy the storage spends. Deviations: no run-time re-measurement
(Capuchin re-profiles on the GPU; here the profile is the cost model), one decision per
iteration, and a recomputed tensor is kept until its last backward reader rather than
re-evicted; the ancestors recomputed (or paged in) only to rebuild it are freed at once.
Tensors Capuchin leaves alone live as in the plain schedule (they are not checkpoints), so
a recomputation goes back to the nearest tensor still resident.
"""

from __future__ import annotations

import time

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
    ran_out_of_time,
)
from poetsim.baselines.program import DROP, KEEP, OFFLOAD, Program, run_policy, saved_tensors
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase

__all__ = ["capuchin"]

METHOD = "capuchin"


def capuchin(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
             deadline_s: float | None = None, stop_at: float | None = None) -> BaselineResult:
    """Capuchin's hybrid swap/recompute policy, iterated until the peak fits (``infeasible``,
    saying so, when ``stop_at`` passes first, see
    :func:`~poetsim.baselines.base.out_of_time`: every plan before the last is over the
    budget)."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    ticker = Ticker(stop_at)
    try:
        return _capuchin(graph, board, costs, budget_bytes, deadline_s, ticker)
    except OutOfTime:
        return ran_out_of_time(METHOD, budget_bytes, deadline_s,
                               why="before its plan fit the budget")


class _Plan:
    """What Capuchin learns from one plain iteration, and the plan it is building: each
    saved tensor's idle window between its last forward and first backward access, and
    the policy and swaps decided so far (read by every score, hence a class)."""

    def __init__(self, graph: TrainingGraph, board: Board, costs: OpCosts) -> None:
        ops = graph.ops
        self.graph = graph
        self.board = board
        self.ct = np.asarray(costs.compute_time_s, dtype=float)
        self.t_out = np.asarray(costs.pageout_time_s, dtype=float)
        self.t_in = np.asarray(costs.pagein_time_s, dtype=float)
        self.size = [op.output_bytes for op in ops]
        self.can_page = board.storage.capacity_bytes > 0
        self.hidden_possible = self.can_page and board.dma.present
        # start[k]: op k starts (plain profile)
        self.start = np.concatenate([[0.0], np.cumsum(self.ct)])
        self.saved = saved_tensors(graph)
        self.last_fwd = {
            t: max([s for s in graph.successors(t) if ops[s].phase is not Phase.BACKWARD]
                   + [t]) for t in self.saved}
        self.first_bwd = {
            t: min(s for s in graph.successors(t) if ops[s].phase is Phase.BACKWARD)
            for t in self.saved}
        self.window = {t: float(self.start[self.first_bwd[t]]
                                - self.start[self.last_fwd[t] + 1]) for t in self.saved}
        self.policy = [KEEP] * len(graph)
        self.swaps: list[int] = []

    def interval(self, t: int) -> tuple[float, float]:
        """``t``'s idle window: from the end of its last forward access to its first
        backward one."""
        return float(self.start[self.last_fwd[t] + 1]), float(self.start[self.first_bwd[t]])

    def free_time(self, t: int) -> float:
        """Capuchin's FT: the idle window left once ``t``'s own transfers and those of the
        overlapping swaps already chosen are done (one transfer lane)."""
        lo, hi = self.interval(t)
        shared = sum(self.t_out[u] + self.t_in[u] for u in self.swaps
                     if self.interval(u)[0] < hi and lo < self.interval(u)[1])
        return self.window[t] - self.t_out[t] - self.t_in[t] - shared

    def recompute_time(self, t: int) -> float:
        """``t``'s compute time plus that of the ancestors it must be rebuilt from (and the
        page-ins of the swapped ones)."""
        policy, ct, t_in = self.policy, self.ct, self.t_in
        total, seen, stack = ct[t], {t}, list(self.graph.predecessors(t))
        while stack:
            w = stack.pop()
            if w in seen:
                continue
            seen.add(w)
            if policy[w] == OFFLOAD:
                total += t_in[w]
            elif policy[w] == DROP or w not in self.saved:
                # dropped, or gone since the forward pass (nothing backward reads it)
                total += ct[w]
                stack.extend(self.graph.predecessors(w))
        return float(total)

    def swap_time(self, t: int) -> float:
        """The transfer time of swapping ``t`` not hidden by its idle window (all of it
        without DMA; inf without storage)."""
        swap = np.inf
        if self.can_page:
            exposed = self.t_out[t] + self.t_in[t]
            if self.board.dma.present:
                exposed = max(0.0, -self.free_time(t))
            swap = float(exposed)
        return swap

    def by_msps(self, candidates: list[int], ticker: Ticker) -> tuple[int, str, str]:
        """The candidate with the most memory saved per second of overhead, and how."""
        best = None
        for t in candidates:
            ticker.tick(4)
            recompute = self.recompute_time(t)
            swap = self.swap_time(t)
            overhead = min(swap, recompute)
            msps = np.inf if overhead <= 0 else self.size[t] / overhead
            key = (msps, -t)
            if best is None or key > best[0]:
                best = (key, t, OFFLOAD if swap < recompute else DROP)
        assert best is not None
        _, t, action = best
        return t, action, ("swap {} (MSPS)" if action == OFFLOAD else "recompute {} (MSPS)")

    def choose(self, candidates: list[int], ticker: Ticker) -> tuple[int, str, str]:
        """Swap the candidate with the most free time if any swap hides; else by MSPS."""
        hideable = [(self.free_time(t), t) for t in candidates] if self.hidden_possible else []
        hideable = [(ft, t) for ft, t in hideable if ft >= 0]
        if hideable:
            _, t = max(hideable)
            return t, OFFLOAD, "swap {} (hidden)"
        return self.by_msps(candidates, ticker)

    def candidates(self, prog: Program, rejected: set[int]) -> list[int]:
        """Saved tensors resident at ``prog``'s peak, idle across it, not yet decided."""
        graph, p = self.graph, prog.peak_stage
        busy = {prog.peak_op, *graph.predecessors(prog.peak_op)}
        return [t for t in sorted(prog.peak_resident)
                if t in self.saved and self.policy[t] == KEEP and t not in busy
                and self.size[t] > 0 and t not in rejected
                and self.last_fwd[t] < p < self.first_bwd[t]]


def _lower(graph: TrainingGraph, policy: list[str], ticker: Ticker) -> tuple[Program, float]:
    """The plan's op list (Capuchin's executor: tensors it leaves alone live as in the plain
    schedule) and the seconds it took to build."""
    started = time.perf_counter()
    prog = run_policy(graph, policy, keep_rebuilt_ancestors=False, hold_checkpoints=False,
                      ticker=ticker)
    return prog, time.perf_counter() - started


def _capuchin(graph: TrainingGraph, board: Board, costs: OpCosts, budget_bytes: int,
              deadline_s: float | None, ticker: Ticker) -> BaselineResult:
    ops = graph.ops
    plan = _Plan(graph, board, costs)
    policy = plan.policy
    decisions: list[str] = []
    rejected: set[int] = set()
    prog, built_s = _lower(graph, policy, ticker)
    while prog.peak > budget_bytes:
        candidates = plan.candidates(prog, rejected)
        if not candidates:
            return infeasible(METHOD, (
                f"the peak of {prog.peak} B of activation RAM (at op "
                f"{ops[prog.peak_op].name!r}) has no tensor left to swap or recompute; the "
                f"budget is {budget_bytes} B"), budget_bytes, deadline_s,
                {"decisions": decisions})
        ticker.tick(ticker.every)  # looks at the clock before scoring the candidates
        t, action, why = plan.choose(candidates, ticker)
        policy[t] = action
        ticker.tick(len(candidates))
        trial, built_s = _lower(graph, policy, ticker)
        if trial.peak > prog.peak:
            # Feedback: the eviction made the peak worse (its recomputation or page-in
            # lands on a new peak); undo it and do not consider the tensor again.
            policy[t] = KEEP
            rejected.add(t)
            continue
        prog = trial
        if action == OFFLOAD:
            plan.swaps.append(t)
        decisions.append(why.format(ops[t].name))
    if not ticker.can_finish(finish_estimate_s(graph, built_s)):
        return ran_out_of_time(METHOD, budget_bytes, deadline_s,
                               why="before it could check its plan")
    return finish(METHOD, graph, board, costs, budget_bytes, prog.steps, deadline_s=deadline_s,
                  details={"decisions": decisions,
                           "swapped": sum(1 for x in policy if x == OFFLOAD),
                           "recomputed": sum(1 for x in policy if x == DROP),
                           "rejected": [ops[t].name for t in sorted(rejected)]})

