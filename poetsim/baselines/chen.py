"""Chen et al. 2016, "Training deep nets with sublinear memory cost": segment checkpointing.

The forward pass keeps only *checkpoints* (segment boundaries); the tensors inside a
segment are freed as soon as the forward pass is done with them and, in the backward pass,
the segment is recomputed from its checkpoint when its first tensor is needed and kept
until its own backward ops are done (Checkmate's "checkpoint ladder"), so each dropped
tensor is recomputed once.

Candidate checkpoints are the articulation points of the forward graph (Checkmate's
``articulation_points``; on a chain, every forward op but the loss), so a segment is
entered only through its checkpoint, also on residual graphs. As in Checkmate, the data
input is a candidate like any other: when it is not a checkpoint it is dropped and its
"recomputation" re-reads the batch from storage (the input op's cost). The last segment
(after the last checkpoint) is kept: the backward pass needs it at once, so dropping it
would only add recomputation (PyTorch's ``checkpoint_sequential`` runs it plainly too).
A checkpoint is held until the dropped tensors of its segment are no longer needed, even
when no backward op reads it (the output of a residual addition).

* :func:`chen_sqrt_n`: every ``floor(sqrt(|C|))``-th candidate is a checkpoint (Checkmate's
  ``solve_chen_sqrtn``). Budget-oblivious: infeasible when its peak exceeds the budget.
* :func:`chen_greedy`: walking the forward ops in order, accumulate output bytes and make
  a candidate a checkpoint once the accumulated segment memory exceeds a threshold
  (Checkmate's ``solve_chen_greedy``); the threshold is searched over every value that
  changes the checkpoint set, and the feasible schedule with the least predicted energy
  wins (ties: fewer recomputations). A threshold above the whole forward memory gives
  checkpoint-all, so with a generous budget the greedy does not recompute. On a long
  forward pass (over :data:`EXACT_PAIRS` sums of consecutive sizes) the values are those
  of the sums that start at evenly spaced ops only, so that listing them stays linear.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

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
from poetsim.baselines.program import (
    DROP,
    KEEP,
    checkpoint_candidates,
    forward_indices,
    run_policy,
)
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph

__all__ = ["chen_greedy", "chen_policy", "chen_sqrt_n", "greedy_checkpoints",
           "sqrt_n_checkpoints"]

#: At most this many thresholds are tried by :func:`chen_greedy`.
MAX_THRESHOLDS = 2000
#: Sums of consecutive forward output sizes listed to find the thresholds: every one of them
#: up to this many (2,047 forward ops), else those that start at evenly spaced ops.
EXACT_PAIRS = 1 << 21


def chen_policy(graph: TrainingGraph, checkpoints: set[int]) -> list[str]:
    """Keep the checkpoints and the last segment; drop the rest of the forward."""
    policy = [KEEP] * len(graph)
    last = max(checkpoints, default=-1)
    for v in forward_indices(graph):
        if v not in checkpoints and v < last:
            policy[v] = DROP
    return policy


def sqrt_n_checkpoints(graph: TrainingGraph) -> list[int]:
    """Every ``floor(sqrt(|C|))``-th articulation point."""
    candidates = checkpoint_candidates(graph)
    if not candidates:
        return []
    k = max(1, int(math.sqrt(len(candidates))))
    return [v for idx, v in enumerate(candidates) if (idx + 1) % k == 0]


def greedy_checkpoints(graph: TrainingGraph, threshold: float) -> list[int]:
    """Checkmate's greedy: checkpoint a candidate once the segment holds > threshold bytes."""
    return _greedy(_forward_sizes(graph), threshold)


def _forward_sizes(graph: TrainingGraph) -> list[tuple[int, int, bool]]:
    """(op, output bytes, whether a candidate checkpoint) of every forward op, in order."""
    candidates = set(checkpoint_candidates(graph))
    return [(v, graph.ops[v].output_bytes, v in candidates) for v in forward_indices(graph)]


def _greedy(forward: list[tuple[int, int, bool]], threshold: float) -> list[int]:
    temp, chosen = 0, []
    for v, size, candidate in forward:
        temp += size
        if candidate and temp > threshold:
            chosen.append(v)
            temp = 0
    return chosen


def _details(graph: TrainingGraph, checkpoints: list[int], **extra) -> dict:
    return {"checkpoints": [graph.ops[v].name for v in checkpoints],
            "candidates": len(checkpoint_candidates(graph)), **extra}


def chen_sqrt_n(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int,
                *, deadline_s: float | None = None, stop_at: float | None = None
                ) -> BaselineResult:
    """Chen's sqrt(n) checkpointing on the articulation points of the forward graph
    (``infeasible``, saying so, when ``stop_at`` passes before its one program is built, see
    :func:`~poetsim.baselines.base.out_of_time`)."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    checkpoints = sqrt_n_checkpoints(graph)
    ticker = Ticker(stop_at)
    started = time.perf_counter()
    try:
        program = run_policy(graph, chen_policy(graph, set(checkpoints)), ticker=ticker)
    except OutOfTime:
        return ran_out_of_time("chen_sqrt_n", budget_bytes, deadline_s,
                               why="before its program was built")
    if not ticker.can_finish(finish_estimate_s(graph, time.perf_counter() - started)):
        return ran_out_of_time("chen_sqrt_n", budget_bytes, deadline_s,
                               why="before it could check its schedule")
    return finish("chen_sqrt_n", graph, board, costs, budget_bytes, program.steps,
                  deadline_s=deadline_s, details=_details(graph, checkpoints))


def _thresholds(graph: TrainingGraph, ticker: Ticker | None = None) -> list[float]:
    """Every value at which the greedy's checkpoint set can change (sums of consecutive
    forward output sizes; on a long forward pass, see :data:`EXACT_PAIRS`, those that
    start at evenly spaced ops), thinned evenly to :data:`MAX_THRESHOLDS`."""
    sizes = np.array([graph.ops[v].output_bytes for v in forward_indices(graph)],
                     dtype=np.int64)
    prefix = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    k = len(sizes)
    if k * (k + 1) // 2 <= EXACT_PAIRS:
        starts: Iterable[int] = range(k)
    else:
        starts = np.unique(np.linspace(0, k - 1, max(1, EXACT_PAIRS // k)).round()
                           .astype(np.int64)).tolist()
    sums = [np.zeros(1, dtype=np.int64)]
    for i in starts:
        sums.append(prefix[i + 1:] - prefix[i])
        if ticker is not None:
            ticker.tick(1 + (k - i) // 64)
    # whole numbers of bytes, exact as floats
    ordered = np.unique(np.concatenate(sums)).astype(float).tolist()
    if len(ordered) > MAX_THRESHOLDS:
        picks = np.linspace(0, len(ordered) - 1, MAX_THRESHOLDS).round().astype(int)
        ordered = [ordered[i] for i in sorted(set(picks))]
    return ordered


def chen_greedy(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int,
                *, deadline_s: float | None = None, stop_at: float | None = None
                ) -> BaselineResult:
    """Chen's greedy checkpointing with the threshold searched for the budget (the best so
    far at ``stop_at``, see :func:`~poetsim.baselines.base.out_of_time`)."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    energy = costs.compute_energy_j
    ticker = Ticker(stop_at)
    best = None
    best_to_finish = 0.0
    tried: set[tuple[int, ...]] = set()
    smallest_peak = None
    try:
        forward = _forward_sizes(graph)
        ticker.tick(len(forward))
        thresholds = _thresholds(graph, ticker)
        for threshold in thresholds:
            ticker.tick(ticker.every)  # looks at the clock
            checkpoints = tuple(_greedy(forward, threshold))
            if checkpoints in tried:
                continue
            tried.add(checkpoints)
            started = time.perf_counter()
            program = run_policy(graph, chen_policy(graph, set(checkpoints)), ticker=ticker)
            to_finish = finish_estimate_s(graph, time.perf_counter() - started)
            ticker.reserve(to_finish)  # the time to finish a program like it
            if smallest_peak is None or program.peak < smallest_peak:
                smallest_peak = program.peak
            if program.peak > budget_bytes:
                continue
            e = program.compute_sum(energy)
            key = (e, program.recomputations)
            if best is None or key < best[0]:
                best = (key, threshold, checkpoints, program)
                best_to_finish = to_finish
    except OutOfTime:
        if best is None:
            return ran_out_of_time("chen_greedy", budget_bytes, deadline_s, {
                "checkpoint_sets_tried": len(tried), "smallest_peak_bytes": smallest_peak},
                why=f"before any of the {len(tried)} checkpoint sets it tried fit")
    if best is not None and not ticker.can_finish(best_to_finish):
        return ran_out_of_time("chen_greedy", budget_bytes, deadline_s, {
            "checkpoint_sets_tried": len(tried), "smallest_peak_bytes": smallest_peak},
            why="before it could check its best schedule")
    if best is None:
        return infeasible("chen_greedy", (
            f"no threshold fits: the smallest peak over {len(tried)} checkpoint sets is "
            f"{smallest_peak} B of activation RAM, over the budget of {budget_bytes} B"),
            budget_bytes, deadline_s, {"checkpoint_sets_tried": len(tried),
                                       "smallest_peak_bytes": smallest_peak})
    _, threshold, checkpoints, program = best
    return finish("chen_greedy", graph, board, costs, budget_bytes, program.steps,
                  deadline_s=deadline_s,
                  details=_details(graph, list(checkpoints), threshold_bytes=threshold,
                                   checkpoint_sets_tried=len(tried)))
