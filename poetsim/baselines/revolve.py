"""Griewank and Walther's binomial checkpointing (Revolve, ACM TOMS 2000), on chains.

The forward ops form a chain ``x0 -> x1 -> ... -> xN`` (``xN`` the loss); reversing step
``j`` means running the backward op of ``xj``, which reads ``x(j-1)`` and possibly ``xj``
(a ReLU's backward reads its output). With ``c`` free snapshot slots beside the input
``x0``, the reversal of steps ``s+1..e`` from a resident ``xs`` is, recursively:

* one step: reverse it (recomputing ``xe`` from ``xs`` if the backward op reads it: the
  "youturn", which Revolve counts as part of the reverse step; ``xs`` is released first
  when the backward op does not read it and no snapshot holds it);
* no free slot: for ``j = e .. s+1``, advance from ``xs`` to ``x(j-1)`` and reverse step
  ``j`` (quadratic recomputation);
* otherwise advance ``m`` steps, take a snapshot of ``x(s+m)``, reverse ``s+m+1..e`` with
  ``c-1`` slots, release the snapshot and reverse ``s+1..s+m`` with ``c`` slots.

``m`` minimises the number of forward advances for unit-cost steps (the binomial optimum,
the smallest such ``m``, in Griewank and Walther's closed form), as Revolve assumes; the
actual per-op costs and sizes are *not* used to place snapshots. The number of slots is
the only knob: every ``c`` from 0 (least memory) to ``N-1`` is lowered, checked, and the
feasible schedule with the least predicted energy is returned (ties: fewer slots). A count
is not lowered when a bound proves it cannot win: the snapshots its first descent holds
together exceed the budget (:func:`_first_descent`), or its forward advances, each a
recomputation at least as dear as the cheapest chain state, cost more than the best so
far (:func:`_energy_floor`). The counts are tried the likely best first, the largest
that fits (:func:`_slot_order`), so that a search cut short by its ``stop_at`` returns a
sensible schedule rather than the quadratic recomputation of no snapshot at all.
Intermediate tensors are freed as soon as the advance has moved past them; backward
tensors as soon as their last reader has run. Because every reverse step recomputes what
it reads beyond ``x(j-1)``, Revolve recomputes at every budget (ReLU outputs, the loss),
unlike checkpoint-all.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence

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
from poetsim.baselines.program import Program, backward_op_of, chain_order
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase

__all__ = ["binomial_advances", "revolve", "revolve_program"]

METHOD = "revolve"
#: Relative slack of the energy bound against the float rounding of the sums it is
#: compared with.
_ROUNDING = 1e-9


def _beta(c: int, r: int) -> int:
    """``C(c + r, c)``: the most steps ``c`` checkpoints reverse with ``r`` sweeps (0 for
    ``r < 0``)."""
    return math.comb(c + r, c) if r >= 0 else 0


def _plan(steps: int, slots: int) -> tuple[int, int]:
    """(least forward advances, smallest best first split) to reverse ``steps`` unit steps.

    The optimum of the recursion ``advances(s, c) = min over 0 < m < s of
    m + advances(s - m, c - 1) + advances(m, c)`` (``advances(s, 0) = s (s - 1) / 2``), in
    closed form (Griewank and Walther): with ``c = slots + 1`` checkpoints, x0 included, and
    ``r`` the repetition number, ``beta(c, r - 1) < steps <= beta(c, r)``, it is
    ``r * steps - beta(c + 1, r - 1)``, and the smallest ``m`` reaching it is
    ``max(1, steps - beta(c - 1, r), beta(c, r - 2))``. The test suite checks both against
    the recursion itself; the closed form spares the dynamic program's
    O(slots * steps^2) table on long chains.
    """
    if steps <= 1:
        return 0, 0
    if slots == 0:
        return steps * (steps - 1) // 2, 0
    if slots >= steps - 1:
        # A snapshot for every step: one sweep of steps - 1 advances, the least possible
        # (each of x1 .. x(steps-1) must be computed once), reached first at m = 1.
        return steps - 1, 1
    c = slots + 1
    r, reach = 0, 1  # reach = beta(c, r)
    while reach < steps:
        r += 1
        reach = reach * (c + r) // r
    return (r * steps - _beta(c + 1, r - 1),
            max(1, steps - _beta(c - 1, r), _beta(c, r - 2)))


def binomial_advances(steps: int, slots: int) -> int:
    """Forward advances Revolve needs for ``steps`` unit steps and ``slots`` free snapshots."""
    return _plan(steps, slots)[0]


def _first_descent(steps: int, slots: int) -> Iterator[int]:
    """The positions of the snapshots taken before the first step is reversed: the
    recursion's first path, each level with one slot less. All of them (and ``x0``) are
    resident together when that step runs, so their bytes bound the peak from below."""
    s, c = 0, slots
    while steps - s > 1 and c > 0:
        s += _plan(steps - s, c)[1]
        yield s
        c -= 1


def _energy_floor(energy: Sequence[float], chain: list[int], slots: int) -> float:
    """A lower bound on the compute energy of the program with ``slots`` snapshots: every
    op once, and every forward advance beyond the chain's one pass a recomputation of a
    chain state (never ``x0``), each at least the cheapest. The program advances exactly
    as the unit-step recursion does (:func:`binomial_advances` counts those advances)."""
    steps = len(chain) - 1
    extra = binomial_advances(steps, slots) - steps
    once = math.fsum(energy)
    if extra <= 0 or steps < 1:
        return once
    return once + extra * min(energy[u] for u in chain[1:])


class _Revolve:
    """:func:`revolve_program`'s state: the program, the chain and the snapshots held
    (``held[j]``: how many tasks hold ``x(j)``), which every move reads (hence a class)."""

    def __init__(self, graph: TrainingGraph, chain: list[int], ticker: Ticker | None) -> None:
        self.graph = graph
        self.chain = chain
        self.prog = Program(graph, ticker)
        self.tick = ticker.tick if ticker is not None and ticker.stop_at is not None else None
        self.bwd = backward_op_of(graph)
        self.position = {op: j for j, op in enumerate(chain)}
        self.held: Counter[int] = Counter()

    def is_forward(self, u: int) -> bool:
        """Whether op ``u`` is a chain state (forward or the loss), not a backward op."""
        return self.graph.ops[u].phase is not Phase.BACKWARD

    def release(self, j: int) -> None:
        """Free ``x(j)`` unless a snapshot holds it."""
        u = self.chain[j]
        if self.prog.resident[u] and not self.held[j]:
            self.prog.free(u)

    def advance(self, s: int, t: int) -> None:
        """From a resident ``x(s)`` to ``x(t)``, freeing the states passed on the way."""
        # the quadratic sweeps spend their time here: names bound once, not per state
        prog, chain, held = self.prog, self.chain, self.held
        resident = prog.resident
        for i in range(s + 1, t + 1):
            if not resident[chain[i]]:
                prog.compute(chain[i])
            if i - 1 > s and resident[chain[i - 1]] and not held[i - 1]:
                prog.free(chain[i - 1])  # release(i - 1)

    def reverse_step(self, j: int) -> None:
        """Run the backward op of ``x(j)``, recomputing the states it reads first."""
        b = self.bwd.get(self.chain[j])
        if b is None:
            return
        reads = self.graph.predecessors(b)
        self._recompute_reads(reads)
        if self.chain[j - 1] not in reads:
            self.release(j - 1)  # the state was only needed to recompute xj
        self.prog.compute(b)
        self._free_reads(b, reads, j)

    def _recompute_reads(self, reads: list[int]) -> None:
        """Make every chain state among ``reads`` resident, advancing from the nearest
        state still resident before it (x0 always is)."""
        for u in reads:
            if self.is_forward(u) and not self.prog.resident[u]:
                pos = self.position[u]
                base = pos - 1
                while not self.prog.resident[self.chain[base]]:
                    base -= 1
                self.advance(base, pos)

    def _free_reads(self, b: int, reads: list[int], j: int) -> None:
        """After backward op ``b`` (step ``j``): free the gradients it was the last to read,
        its own output if nothing reads it, and the states from ``x(j)`` on that it read."""
        prog, graph = self.prog, self.graph
        for u in reads:
            if not self.is_forward(u) and all(prog.computed[s] for s in graph.successors(u)):
                prog.free(u)
        if not graph.successors(b):
            prog.free(b)
        for u in reads:
            if self.is_forward(u) and self.position[u] >= j:
                self.release(self.position[u])

    def sweep(self, s: int, e: int) -> None:
        """Reverse ``s+1..e`` with no free slot: advance from ``x(s)`` for every step."""
        for j in range(e, s, -1):
            self.advance(s, j - 1)
            self.reverse_step(j)
            if j - 1 > s:
                self.release(j - 1)

    def reverse(self, s0: int, e0: int, c0: int) -> None:
        """Reverse steps ``s0+1..e0`` from a resident ``x(s0)`` with ``c0`` free slots.

        The recursion of the module docstring, run from an explicit stack of tasks
        (``("reverse", s, e, c)`` or ``("release", j, 0, 0)``, the snapshot ``j``), so any
        chain length and any number of slots work.
        """
        tasks = [("reverse", s0, e0, c0)]
        while tasks:
            if self.tick is not None:
                self.tick()
            task, s, e, c = tasks.pop()
            if task == "release":
                self.held[s] -= 1
                self.release(s)
                continue
            if e - s == 1:
                self.reverse_step(e)
                continue
            if c == 0:
                self.sweep(s, e)
                continue
            m = _plan(e - s, c)[1]
            self.advance(s, s + m)
            self.held[s + m] += 1
            # Popped last first: reverse s+m+1..e with one slot less, release the snapshot,
            # then reverse s+1..s+m with all the slots.
            tasks.append(("reverse", s, s + m, c))
            tasks.append(("release", s + m, 0, 0))
            tasks.append(("reverse", s + m, e, c - 1))


def revolve_program(graph: TrainingGraph, chain: list[int], slots: int,
                    ticker: Ticker | None = None) -> Program:
    """The op list of binomial checkpointing with ``slots`` free snapshot slots (raises
    :class:`~poetsim.baselines.base.OutOfTime` once the ``ticker``'s ``stop_at`` passes)."""
    run = _Revolve(graph, chain, ticker)
    run.prog.compute(chain[0])
    run.held[0] += 1
    run.reverse(0, len(chain) - 1, slots)
    return run.prog


def revolve(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
            deadline_s: float | None = None, stop_at: float | None = None) -> BaselineResult:
    """Binomial checkpointing with the number of snapshots searched for the budget (the
    best so far at ``stop_at``, see :func:`~poetsim.baselines.base.out_of_time`).

    Every slot count is tried (the least energy wins, ties: fewer slots), the likely best
    first (:func:`_slot_order`), so that a search cut short by ``stop_at`` still returns
    a sensible schedule: on a long chain a small slot count costs quadratic recomputation,
    in energy and in the time it takes to lower.
    """
    budget_bytes = check_budget(budget_bytes)
    chain, reason = chain_order(graph)
    if chain is None:
        return not_applicable(METHOD, reason, budget_bytes, deadline_s)
    costs = costs_for(graph, board, costs)
    energy = costs.compute_energy_j
    steps = len(chain) - 1
    ticker = Ticker(stop_at)
    best: tuple[tuple[float, int], Program] | None = None
    best_to_finish = 0.0
    peaks: dict[int, int] = {}
    size = [op.output_bytes for op in graph.ops]
    order = _slot_order(max(1, steps), budget_bytes, peaks)
    try:
        for slots in order:
            ticker.tick(ticker.every)  # looks at the clock
            held = size[chain[0]] + sum(size[chain[j]] for j in _first_descent(steps, slots))
            if held > budget_bytes:
                peaks[slots] = held  # a lower bound: enough to rule the count out
                continue
            if best is not None and _energy_floor(energy, chain, slots) * (1 - _ROUNDING) \
                    > best[0][0]:
                continue
            started = time.perf_counter()
            prog = revolve_program(graph, chain, slots, ticker)
            to_finish = finish_estimate_s(graph, time.perf_counter() - started)
            ticker.reserve(to_finish)  # the time to finish a program like it
            peaks[slots] = prog.peak
            if prog.peak > budget_bytes:
                continue
            key = (prog.compute_sum(energy), slots)
            if best is None or key < best[0]:
                best = (key, prog)
                best_to_finish = to_finish
    except OutOfTime:
        if best is None:
            return ran_out_of_time(METHOD, budget_bytes, deadline_s, {
                "snapshot_counts_tried": len(peaks),
                "smallest_peak_bytes": min(peaks.values(), default=None)},
                why="before a snapshot count fit the budget")
    if best is not None and not ticker.can_finish(best_to_finish):
        return ran_out_of_time(METHOD, budget_bytes, deadline_s, {
            "snapshot_counts_tried": len(peaks)}, why="before it could check its best schedule")
    if best is None:
        smallest = min(peaks.values())  # of every count, lowered or bounded from below
        return infeasible(METHOD, (
            f"even with no snapshot (quadratic recomputation) it needs at least {smallest} B of "
            f"activation RAM, over the budget of {budget_bytes} B"), budget_bytes, deadline_s,
            {"smallest_peak_bytes": smallest})
    (_, slots), prog = best
    return finish(METHOD, graph, board, costs, budget_bytes, prog.steps, deadline_s=deadline_s,
                  details={"snapshots": slots, "chain_steps": steps,
                           "unit_cost_advances": binomial_advances(steps, slots),
                           "snapshot_counts_tried": len(peaks)})


def _slot_order(counts: int, budget_bytes: int, peaks: dict[int, int]) -> Iterator[int]:
    """Every slot count in ``range(counts)`` once, the likely best first.

    More snapshots mean fewer advances and a higher peak, so the best is most likely the
    largest count that fits. It is searched first, assuming the peak grows with the count
    (a count that fits below one that does not; the interpolated count between them,
    alternating with the midpoint when that converges slowly; before any count fits, one
    aimed a tenth under the budget, so that a search cut short soon has a schedule), from
    the peaks the caller records in ``peaks`` as it lowers each count; then the counts
    below it, then those above. Without the assumption the search still tries every count,
    only in a worse order.
    """
    top = counts - 1
    yield top
    lo, hi = (top, counts) if peaks[top] <= budget_bytes else (-1, top)
    bisect = False
    while hi - lo > 1:
        if bisect:
            probe = (lo + hi) // 2
        elif lo < 0:  # the peak taken as proportional to the count, aiming a little low:
            probe = hi * (9 * budget_bytes // 10) // max(1, peaks[hi])  # a fit comes first
        else:
            probe = lo + (budget_bytes - peaks[lo]) * (hi - lo) // max(1, peaks[hi] - peaks[lo])
        probe = min(max(probe, lo + 1), hi - 1)
        yield probe
        width = hi - lo
        if peaks[probe] <= budget_bytes:
            lo = probe
        else:
            hi = probe
        bisect = not bisect and 2 * (hi - lo) > width  # halve the bracket at least every other time
    rest = [*range(lo - 1, -1, -1), *range(hi + 1, counts)]
    yield from (slots for slots in rest if slots not in peaks)
