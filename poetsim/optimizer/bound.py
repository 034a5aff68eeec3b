"""A lower bound on the optimal energy from a small relaxation of the MILP.

At ResNet and BERT size SCIP's root LP of the full model takes tens of seconds, and until
it is solved the only bound is the every-op-once energy. This module solves a much
smaller integer program whose optimum no stage plan can beat, in the stage notation of
:mod:`poetsim.optimizer.plan`:

* **Frontiers.** While op ``t`` runs (the last op of stage ``t``), RAM holds its inputs,
  its output, its workspace and every tensor kept into stage ``t + 1``; the rest of the
  budget is the room at frontier ``t``.
* **Segments.** Let tensor ``i`` be read by ops ``j_1 < j_2 < ...``. A frontier
  ``t > i`` that is not a reader of ``i`` lies in the segment of the first reader
  ``j_k > t``. If ``i`` is not kept into stage ``t + 1``, op ``j_k`` (which runs in stage
  ``j_k``) can only get it back by a recomputation or a page-in in some stage of
  ``(t, j_k]``, which lies inside ``(j_{k-1}, j_k]``. Different segments of one tensor
  therefore need different restores.
* **The relaxation.** For each segment, ``r`` (restored by recomputation, costs the op's
  compute energy) or ``p`` (by a page-in, costs the page-in energy and needs the tensor
  written once, ``z``, which costs the page-out energy). At every frontier the tensors of
  segments with neither must fit the room. Recomputations add at least their compute time
  to the iteration, and page-ins and page-outs their transfer time (added to compute time
  without DMA; with DMA the iteration still lasts at least the sum of all transfers).
  Written bytes respect the storage capacity.
* **Inputs of a recomputation.** Recomputing ``i`` in a later segment needs each input
  ``u``. When ``i`` is ``u``'s only reader (``fc -> relu``, ``bn -> relu``), nothing else
  keeps ``u`` around: it is restored as well (one more restore, paid), or it stays in RAM
  from the segment's start until ``i`` is recomputed, at every frontier where ``i`` is
  away; where ``i`` is back, ``i`` itself is resident. So "held" puts the smaller of the two
  sizes at every frontier of the segment. Without this, a cheap op over an expensive one
  (a ReLU over a linear layer) looks almost free to restore, and the bound is weak.

* **Weight holds.** An op that can hold its weights (:mod:`poetsim.optimizer.plan`) runs
  once at its held cost at least; ``u`` (not held) pays the difference, and a hold puts
  its bytes at every frontier from its owner to the op.

Every stage plan maps onto a feasible point of this program with no more energy and no
more memory at any frontier (restores of other inputs and second restores within a segment
are simply not counted), so its optimum plus the every-op-once energy is a lower bound.
SCIP's dual bound of the small program is used, so the result is valid even when the time
limit stops it. The tests check it against brute force on random tiny graphs.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from pyscipopt import Model, quicksum

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.optimizer.effort import WorkLimit

__all__ = ["relaxation_bound_j"]

#: How far up a chain of single-reader inputs a recomputation's needs are followed.
_CASCADE_DEPTH = 4


def _restore_energies(costs: OpCosts
                      ) -> tuple[list[float], list[float], list[float], list[float]]:
    """Energies of a recomputation, a page-in and a page-out, and of each op's first run
    (its held cost where less), that no plan can undercut (the time-proportional energy
    folded in).

    A plan's wait energy (:class:`poetsim.costs.WaitPower`) is at least ``rest_w`` times
    (compute time - storage busy time): the iteration lasts at least its compute, the CPU's
    waits and the wake-ups cost nothing negative. So each recomputation costs at least
    ``E + rest_w t`` and each transfer at least ``E - rest_w t``, which is still the least
    cost of a restore as long as no transfer comes out negative; otherwise the active
    energies alone (the wait energy is never negative) are used. A plan that pages at all
    also wakes the storage at least once, which :func:`relaxation_bound_j` adds.
    """
    rest_w = costs.wait.rest_w
    compute = costs.compute_energy_j + rest_w * costs.compute_time_s
    held = np.minimum(compute, costs.held_compute_energy_j + rest_w * costs.held_compute_time_s)
    pagein = costs.pagein_energy_j - rest_w * costs.pagein_time_s
    pageout = costs.pageout_energy_j - rest_w * costs.pageout_time_s
    if rest_w and min(pagein.min(initial=0.0), pageout.min(initial=0.0)) < 0.0:
        compute, pagein, pageout = (costs.compute_energy_j, costs.pagein_energy_j,
                                    costs.pageout_energy_j)
        held = np.minimum(compute, costs.held_compute_energy_j)
    return compute.tolist(), pagein.tolist(), pageout.tolist(), held.tolist()


def relaxation_bound_j(graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                       deadline_s: float | None, *, remat: bool = True, paging: bool = True,
                       storage_capacity_bytes: int | None = None,
                       time_limit_s: float = 5.0, seed: int = 0, node_limit: int | None = None,
                       limits_hit: list[str] | None = None) -> float | None:
    """A lower bound (joules) on the energy of every stage plan within the budget and
    deadline, or None when the relaxation is infeasible (then no plan exists).

    ``node_limit`` bounds SCIP's work (deterministic effort, see
    :mod:`poetsim.optimizer.effort`); the time limit is then a safety cap. ``limits_hit``
    gets ``"time"`` appended when the time limit ended the search (its bound then depends
    on the machine's speed).
    """
    n = len(graph)
    mem = [int(b) for b in costs.output_bytes]
    plain_s = costs.plain_time_s
    compute_j, pagein_j, pageout_j, first_j = _restore_energies(costs)
    plain_j = float(sum(first_j))
    # Energies relative to the plain schedule, so that the objective is of order one.
    scale = 1.0 / plain_j if plain_j > 0 else 1.0

    give_up_at = time.perf_counter() + time_limit_s

    def out_of_time() -> bool:
        """Building the program is quadratic on long graphs; past the time limit the plain
        energy (every op once), itself a valid lower bound, stands."""
        if time.perf_counter() <= give_up_at:
            return False
        if limits_hit is not None:
            limits_hit.append("time")
        return True

    model = Model("poet_bound")
    model.hideOutput()
    model.setParam("randomization/randomseedshift", int(seed))
    model.setParam("limits/time", max(0.1, float(time_limit_s)))
    if node_limit is not None:
        WorkLimit(model).set(node_limit)

    written: dict[int, Any] = {}
    recomputes: list[tuple[int, Any]] = []
    page_ins: list[tuple[int, Any]] = []

    def restore(x: int, tag: str) -> tuple[Any, Any]:
        """Binaries for one restore of tensor ``x``: (their sum, the recompute or None)."""
        parts, r = [], None
        if remat:
            r = model.addVar(vtype="B", name=f"r_{x}_{tag}",
                             obj=scale * compute_j[x])
            recomputes.append((x, r))
            parts.append(r)
        if paging:
            if x not in written:
                written[x] = model.addVar(vtype="B", name=f"z_{x}",
                                          obj=scale * pageout_j[x])
            p = model.addVar(vtype="B", name=f"p_{x}_{tag}",
                             obj=scale * pagein_j[x])
            model.addCons(p <= written[x], name=f"written_{x}_{tag}")
            page_ins.append((x, p))
            parts.append(p)
        if len(parts) > 1:
            model.addCons(quicksum(parts) <= 1, name=f"once_{x}_{tag}")
        return (quicksum(parts) if parts else 0), r

    def needs_inputs(x: int, recompute: Any, smallest: int, frontiers: tuple[int, ...],
                     tag: str, depth: int) -> None:
        """Recomputing ``x`` within a segment needs each input u. An input read by x alone
        is not needed after x's first run: either it is restored too within the segment,
        or it stays in RAM from the segment's start until x is recomputed. Then at every
        frontier of the segment x, u or (when x itself came back by recomputation) an
        input further up this chain is resident: the smallest of their sizes at least."""
        for u in graph.predecessors(x):
            if mem[u] == 0 or graph.successors(u) != (x,):
                continue
            size = min(smallest, mem[u])
            held = model.addVar(vtype="B", name=f"h_{u}_{tag}")
            for t in frontiers:
                held_at[t].append((size, held))
            back, recomputed = restore(u, f"{tag}_{u}")
            model.addCons(recompute <= held + back, name=f"needs_{tag}_{x}_{u}")
            if recomputed is not None and depth > 1:
                needs_inputs(u, recomputed, size, frontiers, f"{tag}_{u}", depth - 1)

    room = []
    for t in range(n):
        inputs = graph.predecessors(t)
        room.append(budget_bytes - mem[t] - int(costs.workspace_bytes[t])
                    - sum(mem[u] for u in inputs))
    away_at: list[dict[int, Any]] = [dict() for _ in range(n)]  # tracked tensor -> away
    held_at: list[list[tuple[int, Any]]] = [[] for _ in range(n)]  # (bytes, held)
    for i in range(n):
        if i % 256 == 0 and out_of_time():
            return plain_j
        if mem[i] == 0:
            continue
        previous = i
        for end in sorted(graph.successors(i)):
            frontiers = range(previous + 1, end)  # a reader's frontier holds i as input
            start, previous = previous, end
            if not frontiers:
                continue
            away, recompute = restore(i, str(end))
            for t in frontiers:
                away_at[t][i] = away
            if recompute is not None and start != i:
                needs_inputs(i, recompute, mem[i], (start, *frontiers), str(end),
                             _CASCADE_DEPTH)

    # u: the op runs its first time without its hold; otherwise the hold's bytes are in RAM
    # at every frontier from its owner's to its own
    unheld: list[tuple[int, Any]] = []
    for b in np.flatnonzero(costs.hold_owner >= 0):
        b = int(b)
        u = model.addVar(vtype="B", name=f"u_{b}", obj=scale * (compute_j[b] - first_j[b]))
        unheld.append((b, u))
        size = int(costs.held_bytes[b])
        for t in range(int(costs.hold_owner[b]), b + 1):
            # held (1 - u) as "held" terms: size at the frontier, less size * u
            room[t] -= size
            held_at[t].append((-size, u))
    for t in range(n):
        tracked, held = away_at[t], held_at[t]
        total = sum(mem[i] for i in tracked)
        if not held and total <= room[t]:
            continue
        if not tracked and not held:
            return None  # room[t] < 0: op t cannot run at all
        # resident tracked + held <= room  <=>  sum m away - sum m held >= total - room
        model.addCons(quicksum(mem[i] * away for i, away in tracked.items())
                      - quicksum(size * h for size, h in held)
                      >= total - room[t], name=f"frontier_{t}")

    if deadline_s is not None and math.isfinite(deadline_s):
        slack = (deadline_s - plain_s) / deadline_s
        compute = quicksum(float(costs.compute_time_s[i]) / deadline_s * r for i, r in recomputes)
        compute += quicksum(float(costs.compute_time_s[b] - costs.held_compute_time_s[b])
                            / deadline_s * u for b, u in unheld
                            if costs.compute_time_s[b] > costs.held_compute_time_s[b])
        transfers = (quicksum(float(costs.pagein_time_s[i]) / deadline_s * p for i, p in page_ins)
                     + quicksum(float(costs.pageout_time_s[i]) / deadline_s * z
                                for i, z in written.items()))
        if not costs.cpu_moves:
            model.addCons(compute <= slack, name="deadline_compute")
            model.addCons(transfers <= 1.0, name="deadline_transfers")
        else:
            model.addCons(compute + transfers <= slack, name="deadline")
    wake_j = costs.wait.wake_j - costs.wait.rest_w * costs.wait.wakeup_s
    if written and wake_j > 0:
        # the storage starts asleep: any paging wakes it at least once
        woken = model.addVar(vtype="B", name="woken", obj=scale * wake_j)
        for x, z in written.items():
            model.addCons(woken >= z, name=f"woken_{x}")
    if storage_capacity_bytes is not None and written:
        model.addCons(quicksum(mem[i] * z for i, z in written.items()) <= storage_capacity_bytes,
                      name="capacity")

    model.optimize()
    if model.getStatus() == "infeasible":
        return None
    if model.getStatus() == "timelimit" and limits_hit is not None:
        limits_hit.append("time")
    dual = model.getDualbound()
    if not math.isfinite(dual) or abs(dual) >= 1e19:
        return plain_j
    return plain_j + max(0.0, dual) / scale
