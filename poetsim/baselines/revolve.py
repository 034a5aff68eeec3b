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
computed by the recursion's own dynamic program), as Revolve assumes; the actual per-op
costs and sizes are *not* used to place snapshots. The number of slots is the only knob:
every ``c`` from 0 (least memory) to ``N-1`` is lowered, checked, and the feasible
schedule with the least predicted energy is returned. Intermediate tensors are freed as
soon as the advance has moved past them; backward tensors as soon as their last reader
has run. Because every reverse step recomputes what it reads beyond ``x(j-1)``, Revolve
recomputes at every budget (ReLU outputs, the loss), unlike checkpoint-all.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from poetsim.baselines.base import (
    BaselineResult,
    check_budget,
    costs_for,
    finish,
    infeasible,
    not_applicable,
    out_of_time,
)
from poetsim.baselines.program import Program, backward_op_of, chain_order
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.schedule import Action

__all__ = ["binomial_advances", "revolve", "revolve_program"]

METHOD = "revolve"


#: Per number of free slots ``c``: (least forward advances, best first split) for
#: 0, 1, 2, ... unit steps. Filled on demand and kept between calls.
_TABLE: list[tuple[np.ndarray, np.ndarray]] = []


def _fill(steps: int, slots: int) -> None:
    """Fill the dynamic program for every ``c <= slots`` up to ``steps`` steps.

    Bottom-up (by slots, then steps) instead of the recursion
    ``advances(s, c) = min over 0 < m < s of m + advances(s - m, c - 1) + advances(m, c)``,
    so any chain length works; the split is the smallest of the best ``m``.
    """
    for c in range(slots + 1):
        filled = len(_TABLE[c][0]) if c < len(_TABLE) else 0
        if filled > steps:
            continue
        advances = np.zeros(steps + 1, dtype=np.int64)
        splits = np.zeros(steps + 1, dtype=np.int64)
        if c == 0:
            s = np.arange(steps + 1, dtype=np.int64)
            advances[:] = s * (s - 1) // 2  # no slot: restart from x0 for every step
        else:
            if filled:
                advances[:filled], splits[:filled] = _TABLE[c]
            # Up to c + 1 steps: one sweep with a snapshot per step (see _plan).
            sweep = np.arange(filled, min(c + 1, steps) + 1, dtype=np.int64)
            advances[sweep] = np.maximum(sweep - 1, 0)
            splits[sweep] = np.minimum(sweep, 1)
            fewer = _TABLE[c - 1][0]
            m = np.arange(1, steps + 1, dtype=np.int64)
            for s in range(max(c + 2, filled), steps + 1):
                cost = m[:s - 1] + fewer[s - 1:0:-1] + advances[1:s]
                best = int(np.argmin(cost))  # the first of the least, as a strict < scan
                advances[s] = cost[best]
                splits[s] = best + 1
        if c < len(_TABLE):
            _TABLE[c] = (advances, splits)
        else:
            _TABLE.append((advances, splits))


def _plan(steps: int, slots: int) -> tuple[int, int]:
    """(least forward advances, best first split) to reverse ``steps`` unit steps."""
    if steps <= 1:
        return 0, 0
    if slots == 0:
        return steps * (steps - 1) // 2, 0
    if slots >= steps - 1:
        # A snapshot for every step: one sweep of steps - 1 advances, the least possible
        # (each of x1 .. x(steps-1) must be computed once), reached first at m = 1.
        return steps - 1, 1
    _fill(steps, slots)
    advances, splits = _TABLE[slots]
    return int(advances[steps]), int(splits[steps])


def binomial_advances(steps: int, slots: int) -> int:
    """Forward advances Revolve needs for ``steps`` unit steps and ``slots`` free snapshots."""
    return _plan(steps, slots)[0]


def revolve_program(graph: TrainingGraph, chain: list[int], slots: int) -> Program:
    """The op list of binomial checkpointing with ``slots`` free snapshot slots."""
    prog = Program(graph)
    ops = graph.ops
    bwd = backward_op_of(graph)
    position = {op: j for j, op in enumerate(chain)}
    held: Counter[int] = Counter()
    computed_once = prog.computed

    def x(j: int) -> int:
        return chain[j]

    def release(j: int) -> None:
        if prog.resident[x(j)] and not held[j]:
            prog.free(x(j))

    def advance(s: int, t: int) -> None:
        for i in range(s + 1, t + 1):
            if not prog.resident[x(i)]:
                prog.compute(x(i))
            if i - 1 > s:
                release(i - 1)

    def reverse_step(j: int) -> None:
        b = bwd.get(x(j))
        if b is None:
            return
        for u in graph.predecessors(b):
            if ops[u].phase is not Phase.BACKWARD and not prog.resident[u]:
                pos = position[u]
                base = max(i for i in range(pos) if prog.resident[x(i)])
                advance(base, pos)
        if x(j - 1) not in graph.predecessors(b):
            release(j - 1)  # the state was only needed to recompute xj
        prog.compute(b)
        for u in graph.predecessors(b):
            if ops[u].phase is Phase.BACKWARD and all(computed_once[s]
                                                      for s in graph.successors(u)):
                prog.free(u)
        if not graph.successors(b):
            prog.free(b)
        for u in graph.predecessors(b):
            if ops[u].phase is not Phase.BACKWARD and position[u] >= j:
                release(position[u])

    def reverse(s0: int, e0: int, c0: int) -> None:
        """Reverse steps ``s0+1..e0`` from a resident ``x(s0)`` with ``c0`` free slots.

        The recursion of the module docstring, run from an explicit stack of tasks
        (``("reverse", s, e, c)`` or ``("release", j, 0, 0)``, the snapshot ``j``), so any
        chain length and any number of slots work.
        """
        tasks = [("reverse", s0, e0, c0)]
        while tasks:
            task, s, e, c = tasks.pop()
            if task == "release":
                held[s] -= 1
                release(s)
                continue
            if e - s == 1:
                reverse_step(e)
                continue
            if c == 0:
                for j in range(e, s, -1):
                    advance(s, j - 1)
                    reverse_step(j)
                    if j - 1 > s:
                        release(j - 1)
                continue
            m = _plan(e - s, c)[1]
            advance(s, s + m)
            held[s + m] += 1
            # Popped last first: reverse s+m+1..e with one slot less, release the snapshot,
            # then reverse s+1..s+m with all the slots.
            tasks.append(("reverse", s, s + m, c))
            tasks.append(("release", s + m, 0, 0))
            tasks.append(("reverse", s + m, e, c - 1))

    prog.compute(x(0))
    held[0] += 1
    reverse(0, len(chain) - 1, slots)
    return prog


def revolve(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int, *,
            deadline_s: float | None = None, stop_at: float | None = None) -> BaselineResult:
    """Binomial checkpointing with the number of snapshots searched for the budget (the
    best so far at ``stop_at``, see :func:`~poetsim.baselines.base.out_of_time`)."""
    budget_bytes = check_budget(budget_bytes)
    chain, reason = chain_order(graph)
    if chain is None:
        return not_applicable(METHOD, reason, budget_bytes, deadline_s)
    costs = costs_for(graph, board, costs)
    energy = costs.compute_energy_j
    steps = len(chain) - 1
    best = None
    smallest = None
    for slots in range(max(1, steps)):
        if out_of_time(stop_at):
            break
        prog = revolve_program(graph, chain, slots)
        smallest = prog.peak if smallest is None else min(smallest, prog.peak)
        if prog.peak > budget_bytes:
            continue
        e = float(sum(energy[s.op] for s in prog.steps if s.action is Action.COMPUTE))
        if best is None or e < best[0]:
            best = (e, slots, prog)
    if best is None and out_of_time(stop_at):
        return infeasible(METHOD, "ran out of its time before a snapshot count fit the budget",
                          budget_bytes, deadline_s)
    if best is None:
        return infeasible(METHOD, (
            f"even with no snapshot (quadratic recomputation) it needs {smallest} B of "
            f"activation RAM, over the budget of {budget_bytes} B"), budget_bytes, deadline_s,
            {"smallest_peak_bytes": smallest})
    _, slots, prog = best
    return finish(METHOD, graph, board, costs, budget_bytes, prog.steps, deadline_s=deadline_s,
                  details={"snapshots": slots, "chain_steps": steps,
                           "unit_cost_advances": binomial_advances(steps, slots)})
