"""A fast greedy stage plan: the optimizer's starting point and its fallback.

The greedy walks the stages in order. Stage ``t`` computes op ``t`` after bringing back
what it needs: a missing input is paged in if a copy is on storage (and paging it in is
cheaper than recomputing it), otherwise recomputed, recursively. At the end of each stage it
keeps every tensor a later op reads, then looks one stage ahead: if the next stage would
exceed the RAM budget, it evicts tensors the next stage does not read, cheapest per byte
first, either paging them out now (to page them in later) or dropping them (to recompute
them later). It never proves anything; the MILP does that. It only needs to be fast and to
find a feasible plan whenever an easy one exists.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import numpy as np

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.memory import inplace_saving
from poetsim.optimizer.plan import (
    PlanMetrics,
    StagePlan,
    StageTimeline,
    evaluate_plan,
    stage_peak_bytes,
    stage_timeline,
)

__all__ = ["add_holds", "greedy_plan", "overlap_transfers", "plain_plan"]

#: How many stages :func:`overlap_transfers` keeps a written tensor longer, or moves a
#: page-in earlier, at most.
_OVERLAP_REACH = 16
#: How many times :func:`overlap_transfers` goes over the writes at most.
_OVERLAP_PASSES = 4


def plain_plan(graph: TrainingGraph) -> StagePlan:
    """Every op once, every tensor kept until its last reader: checkpoint-all."""
    n = len(graph)
    m = StagePlan.empty(n)
    np.fill_diagonal(m["compute"], True)
    last_reader = np.array([max(graph.successors(i), default=-1) for i in range(n)])
    stage = np.arange(n)[:, None]
    # keep[t, i]: tensor i was made before stage t and a reader at t or later needs it
    m["keep"][:] = (np.arange(n)[None, :] < stage) & (last_reader[None, :] >= stage)
    return StagePlan(**m)


#: The greedy pass reads the clock every this many stages.
_CLOCK_EVERY = 16


class _Greedy:
    def __init__(self, graph: TrainingGraph, costs: OpCosts, budget_bytes: int, *,
                 remat: bool, paging: bool, by_time: bool, cascade: bool,
                 keep_guide: np.ndarray | None = None, leave: np.ndarray | None = None,
                 write: np.ndarray | None = None, stop_at: float | None = None) -> None:
        self.graph = graph
        self.stop_at = stop_at
        self.keep_guide = keep_guide
        self.leave = leave
        self.write = write
        self.n = len(graph)
        self.size = costs.output_bytes
        self.workspace = costs.workspace_bytes
        self.budget = budget_bytes
        self.remat = remat
        self.paging = paging
        self.cascade = cascade
        if by_time:
            self.c_compute, self.c_in, self.c_out = (
                costs.compute_time_s, costs.pagein_time_s, costs.pageout_time_s)
        else:
            self.c_compute, self.c_in, self.c_out = (
                costs.compute_energy_j, costs.pagein_energy_j, costs.pageout_energy_j)
        self.last_reader = [max(graph.successors(i), default=-1) for i in range(self.n)]
        # A dropped tensor pins its inputs: they may be paged but not dropped, so that
        # bringing it back is one recomputation, not a cascade.
        self.dropped: dict[int, tuple[int, ...]] = {}
        self.pins = [0] * self.n

    def closure(self, t: int, resident: set[int], stored: set[int]
                ) -> tuple[list[int], list[int]] | None:
        """Ops to compute and tensors to page in for stage ``t``; None if impossible."""
        graph = self.graph
        computes, page_ins = {t}, set()
        stack = [t]
        while stack:
            k = stack.pop()
            for u in graph.predecessors(k):
                if u in resident or u in computes or u in page_ins:
                    continue
                inputs_ready = all(p in resident for p in graph.predecessors(u))
                if u in stored and (not self.remat or not inputs_ready
                                    or self.c_in[u] <= self.c_compute[u]):
                    page_ins.add(u)
                elif self.remat:
                    computes.add(u)
                    stack.append(u)
                else:
                    return None
        return sorted(computes), sorted(page_ins)

    def leaves(self, t: int, i: int) -> bool:
        """Whether ``leave`` evicts tensor ``i`` before stage ``t``."""
        return self.leave is not None and t < self.n and bool(self.leave[t, i])

    def stage_peak(self, start: set[int], page_ins: list[int], computes: list[int],
                   keep_after: set[int]) -> int:
        graph, size = self.graph, self.size
        last: dict[int, int] = {}
        for k in computes:
            for u in graph.predecessors(k):
                last[u] = k
            last.setdefault(k, k)
        mem = int(sum(size[i] for i in start) + sum(size[i] for i in page_ins))
        peak = mem
        for k in computes:
            freed = [i for i, j in last.items() if j == k and i not in keep_after]
            mem += int(size[k])
            peak = max(peak, mem + int(self.workspace[k]) - inplace_saving(graph, k, freed))
            mem -= int(sum(size[i] for i in freed))
        return peak

    def eviction_cost(self, v: int, keep: set[int], stored: set[int]) -> tuple[float, bool]:
        """Cheapest way to give up tensor ``v`` for now: (cost, page it out?)."""
        options: list[tuple[float, bool]] = []
        if v in stored:
            options.append((float(self.c_in[v]), False))
        elif self.paging:
            options.append((float(self.c_out[v] + self.c_in[v]), True))
        if self.remat and v not in stored:
            preds = self.graph.predecessors(v)
            if self.cascade:
                cost = float(self.c_compute[v]) + sum(
                    float(self.c_compute[u]) for u in preds if u not in keep and u not in stored)
                options.append((cost, False))
            elif not self.pins[v] and all(u in keep for u in preds):
                options.append((float(self.c_compute[v]), False))
        return min(options) if options else (np.inf, False)

    def run(self) -> StagePlan | None:
        """The plan, stage by stage; None when a stage cannot be made to fit (or the clock
        passes ``stop_at``)."""
        n = self.n
        m = StagePlan.empty(n)
        resident: set[int] = set()
        stored: set[int] = set()
        for t in range(n):
            if (self.stop_at is not None and t % _CLOCK_EVERY == 0
                    and time.perf_counter() > self.stop_at):
                return None  # out of time: no plan
            m["keep"][t, sorted(resident)] = True
            m["stored"][t, sorted(stored)] = True
            keep = self.compute_stage(m, t, resident, stored)
            if keep is None:
                return None
            newly_stored = self.leave_guided(m, t, keep, stored)
            if t + 1 < n and not self.make_room(m, t, keep, stored, newly_stored):
                return None
            resident = keep
            stored |= newly_stored
        return StagePlan(**m)

    def compute_stage(self, m: dict[str, np.ndarray], t: int, resident: set[int],
                      stored: set[int]) -> set[int] | None:
        """Stage ``t``'s computations and page-ins into ``m``, and the tensors it could keep
        (every one a later op reads); None when the stage is impossible (or stage 0 alone
        is over the budget)."""
        plan = self.closure(t, resident, stored)
        if plan is None:
            return None
        computes, page_ins = plan
        for v in computes:
            for u in self.dropped.pop(v, ()):
                self.pins[u] -= 1
        m["compute"][t, computes] = True
        m["page_in"][t, page_ins] = True
        in_ram = resident | set(computes) | set(page_ins)
        keep = {i for i in in_ram if self.last_reader[i] > t}
        if t == 0 and self.stage_peak(set(), [], computes, keep) > self.budget:
            return None
        return keep

    def leave_guided(self, m: dict[str, np.ndarray], t: int, keep: set[int],
                     stored: set[int]) -> set[int]:
        """Take out of ``keep`` what ``leave`` evicts before stage ``t + 1`` (where
        something can bring it back), writing it where ``write`` says; the tensors newly
        written."""
        newly_stored: set[int] = set()
        for v in sorted(i for i in keep if self.leaves(t + 1, i)):
            write = self.paging and self.write is not None and bool(self.write[v])
            if not (write or self.remat or v in stored):
                continue  # nothing could bring it back
            keep.discard(v)
            if write and v not in stored:  # (a tensor paged in is stored)
                # written right after it was made (kept since): the write starts early,
                # and the op list says the same (a write at the start of the stage after
                # the one that made it lowers to the same list)
                made = int(np.flatnonzero(m["compute"][:t + 1, v])[-1])
                m["page_out"][made, v] = True
                m["stored"][made + 1:t + 1, v] = True
                newly_stored.add(v)
        return newly_stored

    def make_room(self, m: dict[str, np.ndarray], t: int, keep: set[int], stored: set[int],
                  newly_stored: set[int]) -> bool:
        """Look one stage ahead: evict from ``keep`` (into ``m``), cheapest first, until
        stage ``t + 1`` fits the budget; False when it cannot."""
        nxt = self.closure(t + 1, keep, stored)
        if nxt is None:
            return False
        c2, p2 = nxt
        after = {i for i in keep | set(c2) | set(p2)
                 if self.last_reader[i] > t + 1 and not self.leaves(t + 2, i)}
        deficit = self.stage_peak(keep, p2, c2, after) - self.budget
        if deficit <= 0:
            return True
        read = set(c2) | {u for k in c2 for u in self.graph.predecessors(k)}
        for *_, v, page in sorted(self.eviction_candidates(t, keep - read, keep, stored)):
            if deficit <= 0:
                break
            keep.discard(v)
            deficit -= int(self.size[v])
            self.evict(m, t, v, page, stored, newly_stored)
        return deficit <= 0

    def eviction_candidates(self, t: int, unread: set[int], keep: set[int], stored: set[int]
                            ) -> list[tuple[Any, ...]]:
        """The tensors of ``unread`` (kept, not read by stage ``t + 1``) that can be given
        up, as sort keys: cheapest per byte first; among equals, the one needed last (with
        a guide, the least wanted in RAM first)."""
        candidates = []
        for v in unread:
            if self.size[v] == 0:
                continue
            cost, page = self.eviction_cost(v, keep, stored)
            if np.isfinite(cost):
                wanted = 0.0 if self.keep_guide is None else self.keep_guide[t + 1, v]
                candidates.append((wanted, cost / self.size[v], -self.last_reader[v], v, page))
        return candidates

    def evict(self, m: dict[str, np.ndarray], t: int, v: int, page: bool, stored: set[int],
              newly_stored: set[int]) -> None:
        """Give up tensor ``v`` after stage ``t``: page it out now, or drop it (pinning its
        inputs, so that bringing it back is one recomputation)."""
        if page:
            m["page_out"][t, v] = True
            newly_stored.add(v)
        elif v not in stored:
            self.dropped[v] = self.graph.predecessors(v)
            for u in self.dropped[v]:
                self.pins[u] += 1


def greedy_plan(graph: TrainingGraph, costs: OpCosts, budget_bytes: int, *, remat: bool = True,
                paging: bool = True, by_time: bool = False, cascade: bool = False,
                keep_guide: np.ndarray | None = None, leave: np.ndarray | None = None,
                write: np.ndarray | None = None, stop_at: float | None = None
                ) -> StagePlan | None:
    """A feasible plan within ``budget_bytes`` of activation memory, or None (also when
    the clock passes ``stop_at``, a ``time.perf_counter()`` reading, before it is done).

    ``by_time`` ranks evictions by the time they cost instead of the energy, which helps
    when the deadline is tight. ``cascade`` lets a dropped tensor's inputs be dropped too
    (needed when recomputation is the only option); without it, bringing a tensor back is
    always a single recomputation. ``keep_guide[t, i]`` (e.g. an LP solution's keep
    values) ranks evictions before the cost does: the tensor least wanted in RAM in
    stage ``t`` goes first. ``leave[t, i]`` (e.g. the relaxation bound's solution,
    :class:`~poetsim.optimizer.bound.Relaxation`) evicts tensor ``i`` before stage ``t``
    whether or not the budget needs it, paging it out when ``write[i]`` (and paging is
    allowed), dropping it otherwise; the stage that reads it brings it back as any other
    (paged in when written, else recomputed, with whatever of its inputs is away too).
    """
    return _Greedy(graph, costs, budget_bytes, remat=remat, paging=paging, by_time=by_time,
                   cascade=cascade, keep_guide=keep_guide, leave=leave, write=write,
                   stop_at=stop_at).run()


def overlap_transfers(graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                      plan: StagePlan, *, reach: int = _OVERLAP_REACH,
                      max_work: int | None = None) -> StagePlan:
    """``plan`` with its transfers hidden behind more compute, where the RAM budget allows.

    On the DMA timeline (:func:`~poetsim.optimizer.plan.stage_timeline`) the CPU waits for
    a write where the plan stops keeping the tensor, and for a page-in in the stage that
    reads it. So, transfer by transfer in stage order, with every stage within the
    budget: a written tensor is kept up to ``reach`` stages longer, until its write ends
    before the stage that frees it has computed (its RAM is held until its write ends
    anyway: the simulator's CPU waits for it only when it needs the room; a longer keep
    never makes anything later); then a page-in moves up to ``reach`` stages earlier, kept
    into the stage that reads it (the simulator prefetches it), where that lowers the
    energy most without lengthening the iteration. A lifted op list
    (:func:`~poetsim.optimizer.lowering.plan_from_schedule`) has neither: its page-outs free
    the tensor where the list does, its page-ins sit in the stage of their reader. The
    same plan on a board without DMA or without transfers. ``max_work`` bounds the work,
    counted in stages timed (each timeline of the plan times all its stages): past it, the
    plan as it is then.
    """
    if costs.cpu_moves or not (plan.page_in.any() or plan.page_out.any()):
        return plan
    overlap = _Overlap(graph, costs, budget_bytes, plan, reach, max_work)
    if overlap.keep_writes_longer():
        overlap.prefetch_page_ins()
    return StagePlan(**overlap.m)


class _Overlap:
    """The state of :func:`overlap_transfers`: the plan's matrices as they change (``m``),
    the work spent (stages timed) and the best wait energy and makespan so far."""

    def __init__(self, graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                 plan: StagePlan, reach: int, max_work: int | None) -> None:
        self.graph, self.costs, self.budget_bytes = graph, costs, budget_bytes
        self.reach, self.max_work = reach, max_work
        self.work = 0
        self.n = plan.n
        self.m = {name: getattr(plan, name).copy() for name in ("compute", "keep", "stored",
                                                                "page_in", "page_out", "hold")}
        timeline = self.timed(plan)
        self.best = [timeline.wait_energy_j(costs), timeline.makespan_s]

    def spent(self) -> bool:
        """Whether the work has reached ``max_work``."""
        return self.max_work is not None and self.work >= self.max_work

    def timed(self, candidate: StagePlan) -> StageTimeline:
        """The timeline of ``candidate``, its stages counted as work."""
        self.work += candidate.n
        return stage_timeline(self.graph, self.costs, candidate)

    def over_budget(self, candidate: StagePlan, stage: int) -> bool:
        """Whether stage ``stage`` of ``candidate`` needs more RAM than the budget."""
        return stage_peak_bytes(self.graph, self.costs, candidate, stage)[0] > self.budget_bytes

    def score(self, stages: list[int]) -> tuple[float, float] | None:
        """The wait energy and makespan of the plan in ``m``; None if one of ``stages``
        is over the budget."""
        candidate = StagePlan(**self.m)
        if any(self.over_budget(candidate, s) for s in stages):
            return None
        changed = self.timed(candidate)
        return changed.wait_energy_j(self.costs), changed.makespan_s

    def choose(self, options: list[tuple[int, float, float]]) -> int | None:
        """The option (a reach) that beats the best most, which becomes the best; None
        when none does (the plan then stays as it was)."""
        better = [(energy, reach, makespan) for reach, energy, makespan in options
                  if energy < self.best[0] * (1 - 1e-12) and makespan <= self.best[1]]
        if not better:
            return None
        energy, chosen, makespan = min(better)
        self.best[:] = [energy, makespan]
        return chosen

    def keep_writes_longer(self) -> bool:
        """Keeping a written tensor longer never makes anything later: extend the keep
        while the CPU would wait for the write where it stops and the stage has room; a
        longer keep lets the CPU run ahead, so that earlier writes may bind again: repeat
        until none does. False when the work ran out."""
        for _ in range(_OVERLAP_PASSES):
            extended = False
            for t, i in np.argwhere(self.m["page_out"]):
                if self.spent():
                    return False
                extended |= self.keep_write_longer(int(t), int(i))
            if not extended:
                break
        return True

    def keep_write_longer(self, t: int, i: int) -> bool:
        """Keep tensor ``i``, written in stage ``t``, up to ``reach`` stages past its last
        keep while its write ends after the stage before has computed and the stage fits;
        whether it is kept longer."""
        m = self.m
        extended = False
        last_reader = max(self.graph.successors(i), default=i)
        u = t
        while u + 1 < self.n and m["keep"][u + 1, i]:
            u += 1
        timeline = self.timed(StagePlan(**m))
        for s in range(u + 1, min(u + self.reach, last_reader) + 1):
            if (timeline.write_end_s[i] <= timeline.compute_end_s[s - 1]
                    or m["compute"][s, i] or m["page_in"][s, i]):
                break
            m["keep"][s, i] = True
            candidate = StagePlan(**m)
            if self.over_budget(candidate, s):
                m["keep"][s, i] = False
                break
            timeline = self.timed(candidate)
            extended = True
        return extended

    def prefetch_page_ins(self) -> None:
        """Move each page-in, in stage order, to the earlier stage (up to ``reach`` before
        its own) that lowers the energy most without lengthening the iteration."""
        timeline = self.timed(StagePlan(**self.m))
        self.best[:] = [timeline.wait_energy_j(self.costs), timeline.makespan_s]
        for t, i in np.argwhere(self.m["page_in"]):
            if self.spent():
                break
            t, i = int(t), int(i)
            chosen = self.choose(self.prefetch_options(t, i))
            if chosen is not None:
                self.prefetch(t, i, chosen)

    def prefetch_options(self, t: int, i: int) -> list[tuple[int, float, float]]:
        """(stages earlier, wait energy, makespan) of the page-in of ``i`` in stage ``t``
        moved earlier one stage at a time, while the stage before has its copy on storage
        and neither keeps, computes nor pages it in, and the stages fit; ``m`` is left as it
        was."""
        m = self.m
        options = []
        s = t
        while (s - 1 > i and t - (s - 1) <= self.reach and m["stored"][s - 1, i]
               and not (m["keep"][s - 1, i] or m["compute"][s - 1, i]
                        or m["page_in"][s - 1, i])):
            s -= 1
            m["page_in"][s + 1, i], m["page_in"][s, i], m["keep"][s + 1, i] = False, True, True
            result = self.score([s, s + 1])
            if result is None:
                break
            options.append((t - s, *result))
        m["page_in"][s:t, i] = False
        m["keep"][s + 1:t + 1, i] = False
        m["page_in"][t, i] = True
        return options

    def prefetch(self, t: int, i: int, count: int) -> None:
        """Page ``i`` in ``count`` stages before stage ``t``, kept into stage ``t``."""
        m = self.m
        m["page_in"][t, i] = False
        m["page_in"][t - count, i] = True
        m["keep"][t - count + 1:t + 1, i] = True


def add_holds(graph: TrainingGraph, costs: OpCosts, budget_bytes: int, plan: StagePlan,
              deadline_s: float | None = None, storage_capacity_bytes: int | None = None,
              metrics: PlanMetrics | None = None) -> tuple[StagePlan, PlanMetrics]:
    """``plan`` with weight holds taken (:mod:`poetsim.optimizer.plan`), one by one, the
    largest energy saving first, each where it lowers the energy and the plan still meets
    the budget, the deadline and the storage capacity; and its metrics. The same plan
    on a graph without holds. One evaluation per candidate hold."""
    if metrics is None:
        metrics = evaluate_plan(graph, costs, plan)
    saving = costs.compute_energy_j - costs.held_compute_energy_j
    candidates = [int(b) for b in np.flatnonzero((costs.hold_owner >= 0) & ~plan.hold)]
    for b in sorted(candidates, key=lambda b: (-saving[b], b)):
        hold = plan.hold.copy()
        hold[b] = True
        candidate = attrs.evolve(plan, hold=hold)
        measured = evaluate_plan(graph, costs, candidate)
        if measured.energy_j < metrics.energy_j and measured.fits(
                budget_bytes, deadline_s, storage_capacity_bytes):
            plan, metrics = candidate, measured
    return plan, metrics
