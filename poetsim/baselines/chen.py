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
  checkpoint-all, so with a generous budget the greedy does not recompute.
"""

from __future__ import annotations

import math

import numpy as np

from poetsim.baselines.base import (
    BaselineResult,
    check_budget,
    costs_for,
    finish,
    infeasible,
    out_of_time,
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
from poetsim.schedule import Action

__all__ = ["chen_greedy", "chen_policy", "chen_sqrt_n", "greedy_checkpoints",
           "sqrt_n_checkpoints"]

#: At most this many thresholds are tried by :func:`chen_greedy`.
MAX_THRESHOLDS = 2000


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
    candidates = set(checkpoint_candidates(graph))
    temp, chosen = 0, []
    for v in forward_indices(graph):
        temp += graph.ops[v].output_bytes
        if v in candidates and temp > threshold:
            chosen.append(v)
            temp = 0
    return chosen


def _details(graph: TrainingGraph, checkpoints: list[int], **extra) -> dict:
    return {"checkpoints": [graph.ops[v].name for v in checkpoints],
            "candidates": len(checkpoint_candidates(graph)), **extra}


def chen_sqrt_n(graph: TrainingGraph, board: Board, costs: OpCosts | None, budget_bytes: int,
                *, deadline_s: float | None = None) -> BaselineResult:
    """Chen's sqrt(n) checkpointing on the articulation points of the forward graph."""
    budget_bytes = check_budget(budget_bytes)
    costs = costs_for(graph, board, costs)
    checkpoints = sqrt_n_checkpoints(graph)
    program = run_policy(graph, chen_policy(graph, set(checkpoints)))
    return finish("chen_sqrt_n", graph, board, costs, budget_bytes, program.steps,
                  deadline_s=deadline_s, details=_details(graph, checkpoints))


def _thresholds(graph: TrainingGraph) -> list[float]:
    """Every value at which the greedy's checkpoint set can change (sums of consecutive
    forward output sizes), thinned evenly to :data:`MAX_THRESHOLDS`."""
    sizes = [graph.ops[v].output_bytes for v in forward_indices(graph)]
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    values = {0.0}
    for i in range(len(sizes)):
        values.update(float(x) for x in prefix[i + 1:] - prefix[i])
    ordered = sorted(values)
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
    best = None
    tried: set[tuple[int, ...]] = set()
    smallest_peak = None
    for threshold in _thresholds(graph):
        if out_of_time(stop_at):
            break
        checkpoints = tuple(greedy_checkpoints(graph, threshold))
        if checkpoints in tried:
            continue
        tried.add(checkpoints)
        program = run_policy(graph, chen_policy(graph, set(checkpoints)))
        if smallest_peak is None or program.peak < smallest_peak:
            smallest_peak = program.peak
        if program.peak > budget_bytes:
            continue
        e = float(sum(energy[s.op] for s in program.steps if s.action is Action.COMPUTE))
        key = (e, program.recomputations)
        if best is None or key < best[0]:
            best = (key, threshold, checkpoints, program)
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
