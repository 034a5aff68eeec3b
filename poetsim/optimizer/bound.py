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

* **The CPU's idle time** (boards with DMA, :class:`_Lane`): a page-in cannot arrive
  before its tensor is made, the storage woken and the write done, a written tensor's RAM
  is not given back before its write ends, and the CPU idles, at its idle power, for
  what its ops do not cover. Every write is read back (an unread page-out is no plan's).

* **Weight holds.** An op that can hold its weights (:mod:`poetsim.optimizer.plan`) runs
  once at its held cost at least; ``u`` (not held) pays the difference, and a hold puts
  its bytes at every frontier from its owner to the op.

Every stage plan maps onto a feasible point of this program with no more energy and no
more memory at any frontier (restores of other inputs and second restores within a segment
are simply not counted), so its optimum plus the every-op-once energy is a lower bound.
SCIP's dual bound of the small program is used, so the result is valid even when the time
limit stops it. The tests check it against brute force on random tiny graphs.

Its solution, what it leaves out of RAM where and what it writes (:class:`Relaxation`), is
also a plan's outline: where the bound is tight, the greedy that follows it
(:func:`~poetsim.optimizer.heuristic.greedy_plan`) often ends within a percent of it.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
from pyscipopt import quicksum

from poetsim import interrupt
from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.memory import inplace_saving
from poetsim.interrupt import scip_model
from poetsim.optimizer.effort import WorkLimit

__all__ = ["Relaxation", "relax"]

#: How far up a chain of single-reader inputs a recomputation's needs are followed.
_CASCADE_DEPTH = 4
#: At most this many binaries per paged segment for its frontiers where being away makes
#: the CPU wait for the write (:meth:`_Lane.free_after_write`).
_FREE_BLOCKS = 8


def _restore_energies(costs: OpCosts
                      ) -> tuple[list[float], list[float], list[float], list[float], float]:
    """Energies of a recomputation, a page-in and a page-out, and of each op's first run
    (its held cost where less), that no plan can undercut (the time-proportional energy
    folded in), and the rest power folded in (0 when it is not).

    A plan's wait energy (:class:`poetsim.costs.WaitPower`) is at least ``rest_w`` times
    (compute time - storage busy time): the iteration lasts at least its compute, the CPU's
    waits and the wake-ups cost nothing negative. So each recomputation costs at least
    ``E + rest_w t`` and each transfer at least ``E - rest_w t``, which is still the least
    cost of a restore as long as no transfer comes out negative; otherwise the active
    energies alone (the wait energy is never negative) are used. A plan that pages at all
    also wakes the storage at least once, which :func:`relax` adds.
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
        rest_w = 0.0
    return compute.tolist(), pagein.tolist(), pageout.tolist(), held.tolist(), rest_w


@attrs.frozen
class Relaxation:
    """The relaxation's answer: its lower bound (joules; None when the relaxation is
    infeasible, and then no plan exists) and, when SCIP found a solution, that solution's
    shape: ``away[t, i]``, tensor ``i`` is not in RAM at frontier ``t`` (so not kept into
    stage ``t``), and ``paged[i]``, some segment of ``i`` is restored by a page-in. The
    shape is what a plan that does as the relaxation says would leave out and write
    (:func:`~poetsim.optimizer.heuristic.greedy_plan`'s ``leave`` and ``write``)."""

    bound_j: float | None
    away: np.ndarray | None = attrs.field(default=None, eq=False, repr=False)
    paged: np.ndarray | None = attrs.field(default=None, eq=False, repr=False)


def relax(graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
          deadline_s: float | None, *, remat: bool = True, paging: bool = True,
          storage_capacity_bytes: int | None = None,
          time_limit_s: float = 5.0, seed: int = 0, node_limit: int | None = None,
          limits_hit: list[str] | None = None) -> Relaxation:
    """The relaxation of the stage plans within the budget and deadline: its lower bound
    and its solution's shape (:class:`Relaxation`).

    ``node_limit`` bounds SCIP's work (deterministic effort, see
    :mod:`poetsim.optimizer.effort`); the time limit is then a safety cap. ``limits_hit``
    gets ``"time"`` appended when the time limit ended the search (its bound then depends
    on the machine's speed).
    """
    energies = _restore_energies(costs)
    plain_j = float(sum(energies[3]))
    # Energies relative to the plain schedule, so that the objective is of order one.
    scale = 1.0 / plain_j if plain_j > 0 else 1.0

    give_up_at = time.perf_counter() + time_limit_s
    model = scip_model("poet_bound")
    model.setParam("randomization/randomseedshift", int(seed))
    if node_limit is not None:
        WorkLimit(model).set(node_limit)

    lane = _Lane(model, costs, deadline_s, scale, energies[4]) if paging and not costs.cpu_moves \
        else None
    program = _Program(graph, costs, budget_bytes, model, scale, energies, lane,
                       remat=remat, paging=paging)
    for i in range(len(graph)):
        if i % _CLOCK_EVERY == 0 and _out_of_time(give_up_at, limits_hit):
            return Relaxation(plain_j)
        program.add_segments(i)
    program.add_holds()
    frontiers = program.add_frontiers(give_up_at, limits_hit)
    if frontiers is None:
        return Relaxation(plain_j)
    if not frontiers:
        return Relaxation(None)  # some op cannot run at all
    program.add_deadline(deadline_s)
    program.add_writes(storage_capacity_bytes)

    if _out_of_time(give_up_at, limits_hit):
        return Relaxation(plain_j)
    # the time limit covers building the program too
    model.setParam("limits/time", max(0.1, give_up_at - time.perf_counter()))
    with interrupt.solving():
        model.optimize()
    if model.getStatus() == "infeasible":
        return Relaxation(None)
    if model.getStatus() == "timelimit" and limits_hit is not None:
        limits_hit.append("time")
    away, paged = program.solution_shape()
    dual = model.getDualbound()
    bound_j = (plain_j if not math.isfinite(dual) or abs(dual) >= 1e19
               else plain_j + max(0.0, dual) / scale)
    return Relaxation(bound_j, away, paged)


#: The program's build reads the clock every this many ops: each adds rows over every
#: frontier it spans (quadratic on a long chain), so a second can pass between readings of
#: a coarser cadence on a loaded machine.
_CLOCK_EVERY = 16


def _out_of_time(give_up_at: float, limits_hit: list[str] | None) -> bool:
    """Whether the clock has passed ``give_up_at`` (then ``"time"`` goes to
    ``limits_hit``). Building the program is quadratic on long graphs; past the time limit
    the plain energy (every op once), itself a valid lower bound, stands."""
    if time.perf_counter() <= give_up_at:
        return False
    if limits_hit is not None:
        limits_hit.append("time")
    return True


def _frontier_room_bytes(graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                         mem: list[int]) -> list[int]:
    """The room at each frontier ``t``: the budget less what op ``t``'s run holds (its
    inputs, its output, its workspace)."""
    room = []
    for t in range(len(graph)):
        inputs = graph.predecessors(t)
        # an in-place op may not hold its output beside its input (valid, if weaker)
        room.append(budget_bytes - mem[t] - int(costs.workspace_bytes[t])
                    - sum(mem[u] for u in inputs) + inplace_saving(graph, t, inputs))
    return room


class _Program:
    """The relaxation's integer program while it is built, one family of rows per method
    (in the order :func:`relax` adds them, which SCIP's answer depends on): the restores
    of each segment, the weight holds, the memory at each frontier, the deadline, and the
    writes. ``away_at[t]`` maps each tensor tracked at frontier ``t`` to the expression
    that is 1 when it is away there; ``held_at[t]`` lists (bytes, binary) terms that put
    bytes at ``t`` (inputs a recomputation needs, holds)."""

    def __init__(self, graph: TrainingGraph, costs: OpCosts, budget_bytes: int, model: Any,
                 scale: float, energies: tuple[list[float], list[float], list[float],
                                               list[float], float],
                 lane: _Lane | None, *, remat: bool, paging: bool) -> None:
        n = len(graph)
        self.graph, self.costs, self.model, self.scale = graph, costs, model, scale
        self.compute_j, self.pagein_j, self.pageout_j, self.first_j, _ = energies
        self.lane, self.remat, self.paging = lane, remat, paging
        self.mem = [int(b) for b in costs.output_bytes]
        self.written: dict[int, Any] = {}
        self.recomputes: list[tuple[int, Any]] = []
        self.page_ins: list[tuple[int, Any, int]] = []  # (tensor, page-in, last stage)
        self.unheld: list[tuple[int, Any]] = []
        self.room = _frontier_room_bytes(graph, costs, budget_bytes, self.mem)
        self.away_at: list[dict[int, Any]] = [dict() for _ in range(n)]  # tracked -> away
        self.held_at: list[list[tuple[int, Any]]] = [[] for _ in range(n)]  # (bytes, held)

    def restore(self, x: int, tag: str, end: int) -> tuple[Any, Any, Any]:
        """Binaries for one restore of tensor ``x`` in a stage up to ``end``: (their sum,
        the recompute or None, the page-in or None)."""
        model, scale, written = self.model, self.scale, self.written
        parts, r, p = [], None, None
        if self.remat:
            r = model.addVar(vtype="B", name=f"r_{x}_{tag}",
                             obj=scale * self.compute_j[x])
            self.recomputes.append((x, r))
            parts.append(r)
        if self.paging:
            if x not in written:
                written[x] = model.addVar(vtype="B", name=f"z_{x}",
                                          obj=scale * self.pageout_j[x])
            p = model.addVar(vtype="B", name=f"p_{x}_{tag}",
                             obj=scale * self.pagein_j[x])
            model.addCons(p <= written[x], name=f"written_{x}_{tag}")
            self.page_ins.append((x, p, end))
            parts.append(p)
        if len(parts) > 1:
            model.addCons(quicksum(parts) <= 1, name=f"once_{x}_{tag}")
        return (quicksum(parts) if parts else 0), r, p

    def add_segments(self, i: int) -> None:
        """The restores of tensor ``i``, one per segment (the frontiers between two of its
        readers), and its memory credit at each frontier of the segment."""
        if self.mem[i] == 0:
            return
        previous = i
        for end in sorted(self.graph.successors(i)):
            frontiers = range(previous + 1, end)  # a reader's frontier holds i as input
            start, previous = previous, end
            if not frontiers:
                continue
            away, recompute, paged = self.restore(i, str(end), end)
            for t in frontiers:
                self.away_at[t][i] = away
            if self.lane is not None and paged is not None:
                for t, q in self.lane.free_after_write(i, paged, frontiers).items():
                    self.away_at[t][i] = away - paged + q
            if recompute is not None and start != i:
                self.needs_inputs(i, recompute, self.mem[i], (start, *frontiers), end,
                                  str(end), _CASCADE_DEPTH)

    def needs_inputs(self, x: int, recompute: Any, smallest: int, frontiers: tuple[int, ...],
                     end: int, tag: str, depth: int) -> None:
        """Recomputing ``x`` within a segment needs each input u. An input read by x alone
        is not needed after x's first run: either it is restored too within the segment,
        or it stays in RAM from the segment's start until x is recomputed. Then at every
        frontier of the segment x, u or (when x itself came back by recomputation) an
        input further up this chain is resident: the smallest of their sizes at least."""
        graph, mem, held_at = self.graph, self.mem, self.held_at
        for u in graph.predecessors(x):
            if mem[u] == 0 or graph.successors(u) != (x,):
                continue
            size = min(smallest, mem[u])
            held = self.model.addVar(vtype="B", name=f"h_{u}_{tag}")
            for t in frontiers:
                held_at[t].append((size, held))
            back, recomputed, paged = self.restore(u, f"{tag}_{u}", end)
            self.model.addCons(recompute <= held + back, name=f"needs_{tag}_{x}_{u}")
            if self.lane is not None and paged is not None:
                # paged back, u stays until its write ends (or the CPU waits for it)
                for t, q in self.lane.free_after_write(u, paged, frontiers).items():
                    held_at[t].append((size, paged - q))
            if recomputed is not None and depth > 1:
                self.needs_inputs(u, recomputed, size, frontiers, end, f"{tag}_{u}",
                                  depth - 1)

    def add_holds(self) -> None:
        """The weight holds: ``u``, the op runs its first time without its hold; otherwise
        the hold's bytes are in RAM at every frontier from its owner's to its own."""
        costs = self.costs
        for b in np.flatnonzero(costs.hold_owner >= 0):
            b = int(b)
            u = self.model.addVar(vtype="B", name=f"u_{b}",
                                  obj=self.scale * (self.compute_j[b] - self.first_j[b]))
            self.unheld.append((b, u))
            size = int(costs.held_bytes[b])
            for t in range(int(costs.hold_owner[b]), b + 1):
                # held (1 - u) as "held" terms: size at the frontier, less size * u
                self.room[t] -= size
                self.held_at[t].append((-size, u))

    def add_frontiers(self, give_up_at: float, limits_hit: list[str] | None) -> bool | None:
        """The memory at each frontier, where it can exceed the room; False when some op
        cannot run at all (its own working set is over the budget), None when the clock
        passed ``give_up_at`` first."""
        mem = self.mem
        for t in range(len(self.graph)):
            if t % _CLOCK_EVERY == 0 and _out_of_time(give_up_at, limits_hit):
                return None
            tracked, held = self.away_at[t], self.held_at[t]
            total = sum(mem[i] for i in tracked)
            if not held and total <= self.room[t]:
                continue
            if not tracked and not held:
                return False  # room[t] < 0: op t cannot run at all
            # resident tracked + held <= room  <=>  sum m away - sum m held >= total - room
            self.model.addCons(quicksum(mem[i] * away for i, away in tracked.items())
                               - quicksum(size * h for size, h in held)
                               >= total - self.room[t], name=f"frontier_{t}")
        return True

    def add_deadline(self, deadline_s: float | None) -> None:
        """The deadline: recomputations and unheld runs add their compute time, transfers
        their transfer time (to the compute time without DMA). With page-ins on a DMA board
        the lane's rows hold the deadline instead (:meth:`_Lane.finish`)."""
        costs, model = self.costs, self.model
        if deadline_s is None or not math.isfinite(deadline_s) or (self.lane and self.page_ins):
            return
        slack = (deadline_s - costs.plain_time_s) / deadline_s
        compute = quicksum(float(costs.compute_time_s[i]) / deadline_s * r
                           for i, r in self.recomputes)
        compute += quicksum(float(costs.compute_time_s[b] - costs.held_compute_time_s[b])
                            / deadline_s * u for b, u in self.unheld
                            if costs.compute_time_s[b] > costs.held_compute_time_s[b])
        transfers = (quicksum(float(costs.pagein_time_s[i]) / deadline_s * p
                              for i, p, _ in self.page_ins)
                     + quicksum(float(costs.pageout_time_s[i]) / deadline_s * z
                                for i, z in self.written.items()))
        if not costs.cpu_moves:
            model.addCons(compute <= slack, name="deadline_compute")
            model.addCons(transfers <= 1.0, name="deadline_transfers")
        else:
            model.addCons(compute + transfers <= slack, name="deadline")

    def add_writes(self, storage_capacity_bytes: int | None) -> None:
        """The writes: each is read back (an unread page-out is no plan's, see the MILP),
        any wakes the storage (it starts asleep), the lane's rows on a DMA board, and the
        written bytes within the storage capacity."""
        model, written = self.model, self.written
        if not written:
            return
        reads: dict[int, list[Any]] = {}
        for x, p, _ in self.page_ins:
            reads.setdefault(x, []).append(p)
        for x, z in written.items():
            model.addCons(z <= quicksum(reads[x]), name=f"read_{x}")
        wait = self.costs.wait
        wake_j = wait.wake_j - wait.rest_w * wait.wakeup_s
        woken = model.addVar(vtype="B", name="woken", obj=self.scale * max(0.0, wake_j))
        for x, z in written.items():
            model.addCons(woken >= z, name=f"woken_{x}")
        if self.lane is not None and self.page_ins:
            self.lane.finish(self.recomputes, self.unheld, self.page_ins, written, woken)
        if storage_capacity_bytes is not None:
            model.addCons(quicksum(self.mem[i] * z for i, z in written.items())
                          <= storage_capacity_bytes, name="capacity")

    def solution_shape(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The best solution's ``away`` and ``paged`` (:class:`Relaxation`); None and None
        when SCIP found none."""
        model = self.model
        if model.getNSols() == 0:
            return None, None
        n = len(self.graph)
        solution = model.getBestSol()
        away = np.zeros((n, n), dtype=bool)
        values: dict[int, bool] = {}  # a segment's expression is shared by its frontiers
        for t in range(n):
            for i, gone in self.away_at[t].items():
                if id(gone) not in values:
                    values[id(gone)] = (gone if isinstance(gone, int)
                                        else model.getSolVal(solution, gone)) > 0.5
                away[t, i] = values[id(gone)]
        paged = np.zeros(n, dtype=bool)
        for x, p, _ in self.page_ins:
            paged[x] |= model.getSolVal(solution, p) > 0.5
        return away, paged


class _Lane:
    """The CPU's idle time on a board with DMA (one storage lane beside the CPU), priced
    at its idle power and the rest power the restores do not already carry, in the stage
    model of :func:`~poetsim.optimizer.plan.stage_timeline`:

    * op ``i`` ends no sooner than ops ``0 .. i`` take once (``made[i]``), and tensor
      ``i``'s write ends ``out_i`` after that on the one lane; the first transfer of the
      iteration also wakes the storage, and it comes before ``i``'s write unless a tensor
      made before ``i`` is written;
    * a page-in of ``i`` for a stage up to ``j`` starts after that write, and the CPU then
      has at least the ops after ``j`` left to run: the iteration lasts at least
      ``made[i] + wake + out_i + in_i + tail(j)``;
    * a written tensor's RAM is not given back before its write ends, so a tensor
      restored only by page-ins within its segment, away at frontier ``t`` (its write
      came first: nothing else brings it back for a later one), makes the iteration last
      at least ``made[i] + wake + out_i + tail(t)``. Where that exceeds the ops' own time,
      its memory credit at ``t`` gets its own binary, tied to this row;
    * the lane also carries every transfer and the first wake-up.

    The idle time is the makespan less the busy time the relaxation counts (every op
    once, the counted recomputations): charging it overcharges by the busy time of runs
    the relaxation does not count, which their energy covers as long as no run draws
    less than the idle power, so that power is capped at the least energy-per-second of
    any run."""

    def __init__(self, model: Any, costs: OpCosts, deadline_s: float | None, scale: float,
                 rest_w: float) -> None:
        self.model, self.costs = model, costs
        wait = costs.wait
        self.first_s = costs.first_run_time_s
        power = [wait.cpu_wait_w]
        for energy, seconds in ((costs.compute_energy_j, costs.compute_time_s),
                                (costs.held_compute_energy_j, costs.held_compute_time_s)):
            busy = seconds > 0
            if busy.any():
                power.append(float((energy[busy] / seconds[busy]).min()))
        idle_w = max(0.0, min(power)) + rest_w
        self.finite = deadline_s is not None and math.isfinite(deadline_s) and deadline_s > 0
        self.unit_s = deadline_s if self.finite else max(float(self.first_s.sum()), 1e-12)
        self.made = np.cumsum(self.first_s)  # op i ends no sooner than made[i]
        self.total_s = float(self.made[-1])
        self.wake_s = wait.wakeup_s
        self.idle = model.addVar(vtype="C", lb=0.0, name="idle",
                                 obj=scale * idle_w * self.unit_s)
        self.frees: list[tuple[int, Any, float]] = []  # (tensor, away at t, seconds)

    def free_after_write(self, i: int, paged: Any, frontiers: Sequence[int]
                         ) -> dict[int, Any]:
        """For a segment of tensor ``i`` restored by page-in ``paged``: the frontiers where
        being away needs the iteration to last longer than its ops, each with the binary
        that replaces ``paged`` in the memory credit there. They come in at most
        :data:`_FREE_BLOCKS` runs of frontiers, one binary each, priced at the run's last
        frontier (the least left to run), so that long graphs stay small."""
        written_s = float(self.made[i] + self.costs.pageout_time_s[i])
        early = []
        for t in frontiers:
            if written_s + self.total_s - float(self.made[t]) + self.wake_s <= self.total_s:
                break  # later frontiers have less left to run
            early.append(t)
        away: dict[int, Any] = {}
        if not early:
            return away
        size = -(-len(early) // _FREE_BLOCKS)
        for first in range(0, len(early), size):
            block = early[first:first + size]
            q = self.model.addVar(vtype="B", name=f"q_{i}_{block[0]}")
            self.model.addCons(q <= paged, name=f"q_{i}_{block[0]}")
            self.frees.append((i, q, written_s + self.total_s - float(self.made[block[-1]])))
            away.update(dict.fromkeys(block, q))
        return away

    def finish(self, recomputes: list[tuple[int, Any]], unheld: list[tuple[int, Any]],
               page_ins: list[tuple[int, Any, int]], written: dict[int, Any],
               woken: Any) -> None:
        """The rows, once every restore exists. The busy time and the count of tensors
        written before each one are variables of their own, so that each row stays short."""
        model, costs, unit_s = self.model, self.costs, self.unit_s
        busy = model.addVar(vtype="C", lb=0.0, name="busy")
        model.addCons(busy == float(self.first_s.sum()) / unit_s
                      + quicksum(float(costs.compute_time_s[i]) / unit_s * r
                                 for i, r in recomputes)
                      + quicksum(float(costs.compute_time_s[b] - self.first_s[b]) / unit_s * u
                                 for b, u in unheld), name="busy")
        lane = quicksum(float(costs.pagein_time_s[i]) / unit_s * p for i, p, _ in page_ins)
        lane += quicksum(float(costs.pageout_time_s[i]) / unit_s * z
                         for i, z in written.items())
        wake = self.wake_s / unit_s
        model.addCons(busy + self.idle >= lane + wake * woken, name="lane_total")
        if self.finite:
            model.addCons(busy + self.idle <= 1.0, name="lane_deadline")
        # before[k]: how many of the first k written tensors (by index) are written
        order = sorted(written)
        before: list[Any] = [0.0]
        for x in order:
            count = model.addVar(vtype="C", lb=0.0, name=f"before_{x}")
            model.addCons(count == before[-1] + written[x], name=f"before_{x}")
            before.append(count)
        lasts = [(i, p, float(self.made[i] + costs.pageout_time_s[i] + costs.pagein_time_s[i])
                  + self.total_s - float(self.made[end])) for i, p, end in page_ins]
        for k, (i, v, seconds) in enumerate(lasts + self.frees):
            if seconds + self.wake_s <= self.total_s:
                continue  # never longer than the ops once: implied by idle >= 0
            earlier = before[bisect.bisect_left(order, i)]
            model.addCons(busy + self.idle >= seconds / unit_s * v + wake * (v - earlier),
                          name=f"lane_{k}")
