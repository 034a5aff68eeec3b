"""Stage plans: the optimizer's decision matrices and their exact accounting (lowered to an
op list by :mod:`poetsim.optimizer.lowering`).

A :class:`StagePlan` is POET's solution in matrix form, over Checkmate's
frontier-advancing stages: stage ``t`` computes op ``t`` for the first time, after
recomputing whatever it needs. For stage ``t`` (row) and tensor ``i`` (column):

* ``compute[t, i]`` (POET's ``R``): op ``i`` runs in stage ``t``; ``compute[t, t]`` is
  always set and ``compute[t, i]`` is clear for ``i > t``. Ops of a stage run in index order.
* ``keep[t, i]`` (``S_RAM``): tensor ``i`` is resident when stage ``t`` starts.
* ``stored[t, i]`` (``S_AUX``): a copy of tensor ``i`` is on storage when stage ``t`` starts.
* ``page_in[t, i]`` (``M_in``): tensor ``i`` is read back at the start of stage ``t``.
* ``page_out[t, i]`` (``M_out``): tensor ``i`` is written during stage ``t``, as soon as it
  is in RAM (at the start if kept, right after it is computed otherwise).

A tensor's life in a plan ends at its horizon, the last stage that reads it (with
rematerialization, the last stage of its last descendant, which may rebuild a reader):
no keep, page-in or page-out of it past there (the MILP has no such variables). Past it
a transfer would serve no op; it could only keep the storage awake through a gap, which
is the board's auto-sleep policy, not a schedule decision.

Memory accounting (shared, byte for byte, by the MILP, :func:`evaluate_plan` and the
schedule checker after :func:`lower_plan`): stage ``t`` starts with its kept and paged-in
tensors; each op adds its output (and, while it runs, its workspace); after op ``k``, a
tensor read by ``k`` (or ``k``'s own output) is freed when no later op of the stage reads it
and it is not kept into stage ``t + 1``; an op with an in-place kernel whose input is freed
after it adds no output while it runs (:func:`poetsim.graph.memory.inplace_saving`).
Tensors that are neither read in the stage nor kept are freed when the stage ends.

Weight holds (``hold[b]``, one per op): on a graph whose weights live on storage, backward
op ``b`` may keep the weights it reads in RAM from its forward op's first run (``f =
OpCosts.hold_owner[b]``, stage ``f``) until its own first run (stage ``b``), instead of
reading them from storage again (:func:`poetsim.graph.streaming.hold_owners`). Their
``held_bytes[b]`` count from op ``f``'s run in stage ``f`` (which loads them whole) to op
``b``'s in stage ``b``, where it runs at ``held_compute_*`` (no read; a write-back still
holds the storage). Recomputations stream their weights as always.

Time and energy (:func:`stage_timeline`, :func:`evaluate_plan`): without DMA a stage lasts
its compute and its transfers. With DMA the transfers run on one storage lane beside the
CPU and may run on into later stages: the CPU waits for a page-in before the stage that
reads it computes, for a write before the tensor's RAM is given back (where the plan
stops keeping it), and for every transfer before a stage that streams weights (the op
holds the storage). The first stage that transfers, and every one that does after the
storage had time to fall asleep, also waits for the storage's wake-up. The energy is the
ops' and transfers' own plus the time-proportional part of
:class:`poetsim.costs.WaitPower` over this timeline.
"""

from __future__ import annotations

import attrs
import numpy as np

from poetsim.costs import OpCosts
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.memory import inplace_saving
from poetsim.graph.streaming import hold_owners

__all__ = ["PlanMetrics", "StagePlan", "StageTimeline", "drop_idle_keeps",
           "drop_unread_page_outs", "evaluate_plan", "held_bytes_in", "held_savings",
           "plan_violations", "reads_own_page_in", "stage_peak_bytes", "stage_streams",
           "stage_timeline", "storage_near"]

_MATRICES = ("compute", "keep", "stored", "page_in", "page_out")


def _bool_matrix(value: np.ndarray) -> np.ndarray:
    array = np.array(value, dtype=bool)
    array.flags.writeable = False
    return array


def _no_holds(plan: StagePlan) -> np.ndarray:
    return np.zeros(plan.compute.shape[0], dtype=bool)


@attrs.frozen
class StagePlan:
    """The five n x n decision matrices and the weight holds (see the module docstring)."""

    compute: np.ndarray = attrs.field(converter=_bool_matrix, eq=attrs.cmp_using(np.array_equal))
    keep: np.ndarray = attrs.field(converter=_bool_matrix, eq=attrs.cmp_using(np.array_equal))
    stored: np.ndarray = attrs.field(converter=_bool_matrix, eq=attrs.cmp_using(np.array_equal))
    page_in: np.ndarray = attrs.field(converter=_bool_matrix, eq=attrs.cmp_using(np.array_equal))
    page_out: np.ndarray = attrs.field(converter=_bool_matrix, eq=attrs.cmp_using(np.array_equal))
    hold: np.ndarray = attrs.field(default=attrs.Factory(_no_holds, takes_self=True),
                                   converter=_bool_matrix, eq=attrs.cmp_using(np.array_equal))

    @property
    def n(self) -> int:
        return self.compute.shape[0]

    @classmethod
    def empty(cls, n: int) -> dict[str, np.ndarray]:
        """Writable zero matrices to fill in before building a plan."""
        return {name: np.zeros((n, n), dtype=bool) for name in _MATRICES}


def drop_unread_page_outs(plan: StagePlan) -> StagePlan:
    """``plan`` without the page-outs whose copy no later stage pages in: they cost energy,
    time and storage wear and buy nothing (a tensor is paged out at most once, and a page-in
    at stage ``t`` reads a copy written before ``t``). The same plan when there are none."""
    written = np.argwhere(plan.page_out)
    unread = [(t, i) for t, i in written if not plan.page_in[t + 1:, i].any()]
    if not unread:
        return plan
    page_out, stored = plan.page_out.copy(), plan.stored.copy()
    for t, i in unread:
        page_out[t, i] = False
        stored[t + 1:, i] = False
    return attrs.evolve(plan, page_out=page_out, stored=stored)


def drop_idle_keeps(graph: TrainingGraph, plan: StagePlan) -> StagePlan:
    """``plan`` without its idle keeps: a tensor kept into stage ``t`` that no op of the
    stage reads, that is not kept into ``t + 1`` and has no copy on storage is only freed
    when the stage ends (the accounting rule), so it holds RAM through the stage for
    nothing; not keeping it frees it when stage ``t - 1`` ends instead. (A written tensor
    may be held for its write, :func:`stage_timeline`.) Energy and time are unchanged and
    no stage's memory grows. Stages are visited from the last, so that
    a keep made idle by a later one goes too. The same plan when there are none.

    An op list that frees a tensor in the middle of a stage that does not read it (DTR
    evicts one there to make room) lifts to such a keep (:func:`plan_from_schedule` keeps
    what the list keeps at the stage boundaries); without it the lifted plan can need
    more RAM than the list."""
    n = plan.n
    keep = plan.keep.copy()
    for t in range(n - 1, 0, -1):
        for i in np.flatnonzero(keep[t]):
            i = int(i)
            read = any(plan.compute[t, j] for j in graph.successors(i))
            written = plan.page_out[t, i] or plan.stored[t, i]
            if not (read or written or (t + 1 < n and keep[t + 1, i])):
                keep[t, i] = False
    if np.array_equal(keep, plan.keep):
        return plan
    return attrs.evolve(plan, keep=keep)


def plan_violations(graph: TrainingGraph, plan: StagePlan) -> list[str]:
    """Structural rules of the MILP that ``plan`` breaks (empty when it is consistent)."""
    problems: list[str] = []
    for t in range(len(graph)):
        problems += _stage_violations(graph, plan, t)
        problems += _carry_violations(plan, t, len(graph))
    if plan.keep[0].any() or plan.stored[0].any():
        problems.append("stage 0: starts with tensors in RAM or on storage")
    owners = hold_owners(graph)
    for b in np.flatnonzero(plan.hold):
        if owners[b] < 0:
            problems.append(f"stage {b}: holds weights op {b} cannot hold")
    return problems


def _stage_violations(graph: TrainingGraph, plan: StagePlan, t: int) -> list[str]:
    """The rules stage ``t`` breaks on its own: its op, what it decides about, its inputs
    and its transfers."""
    R, S, A, Min, Mout = plan.compute, plan.keep, plan.stored, plan.page_in, plan.page_out
    problems: list[str] = []
    if not R[t, t]:
        problems.append(f"stage {t}: op {t} is not computed")
    if R[t, t + 1:].any() or S[t, t:].any() or Min[t, t:].any() or Mout[t, t + 1:].any():
        problems.append(f"stage {t}: decision about an op not reached yet")
    available = S[t] | Min[t]
    for k in np.flatnonzero(R[t]):
        for u in graph.predecessors(int(k)):
            if not (R[t, u] or available[u]):
                problems.append(f"stage {t}: op {k} needs tensor {u}")
    if (R[t] & S[t]).any() or (Min[t] & S[t]).any() or (Min[t] & R[t]).any():
        problems.append(f"stage {t}: tensor made resident twice")
    if (Min[t] & ~A[t]).any():
        problems.append(f"stage {t}: page-in of a tensor not on storage")
    if (Mout[t] & ~(S[t] | R[t])).any() or (Mout[t] & A[t]).any():
        problems.append(f"stage {t}: page-out of a tensor not in RAM or already stored")
    return problems


def _carry_violations(plan: StagePlan, t: int, n: int) -> list[str]:
    """The rules broken between stage ``t`` and the next (of ``n``): what it keeps must
    have been in RAM, and the storage set grows by its page-outs."""
    R, S, A, Min, Mout = plan.compute, plan.keep, plan.stored, plan.page_in, plan.page_out
    problems: list[str] = []
    if t + 1 < n:
        if (S[t + 1] & ~(S[t] | R[t] | Min[t])).any():
            problems.append(f"stage {t + 1}: keeps a tensor that was not in RAM")
        if (A[t + 1] != (A[t] | Mout[t])).any():
            problems.append(f"stage {t + 1}: storage set does not follow the page-outs")
    return problems


def held_bytes_in(costs: OpCosts, plan: StagePlan, t: int) -> tuple[int, int]:
    """The bytes of held weights in RAM when stage ``t`` starts, and those its own op's
    run loads (the holds owned by op ``t``, in RAM from its run on)."""
    start = loads = 0
    for b in np.flatnonzero(plan.hold):
        f, size = int(costs.hold_owner[b]), int(costs.held_bytes[b])
        start += size if f < t <= b else 0
        loads += size if f == t else 0
    return start, loads


def held_savings(costs: OpCosts, plan: StagePlan) -> tuple[np.ndarray, np.ndarray]:
    """Per stage, the compute time and energy its held op does not spend (op ``b`` runs at
    ``held_compute_*`` in stage ``b`` when ``hold[b]``)."""
    held = plan.hold.astype(float)
    return (held * (costs.compute_time_s - costs.held_compute_time_s),
            held * (costs.compute_energy_j - costs.held_compute_energy_j))


def stage_streams(costs: OpCosts, plan: StagePlan) -> np.ndarray:
    """Per stage, whether one of its runs holds the storage device (``OpCosts.streams``; a
    held op's run only when it writes back)."""
    runs = plan.compute & costs.streams
    quiet = np.flatnonzero(plan.hold & (costs.writeback_bytes == 0))
    if len(quiet):
        runs = runs.copy()
        runs[quiet, quiet] = False
    return runs.any(axis=1)


def _frees(graph: TrainingGraph, plan: StagePlan, t: int) -> tuple[dict[int, list[int]], list[int]]:
    """Tensors freed after each op of stage ``t``, and those freed when the stage ends."""
    n = len(graph)
    R = plan.compute[t]
    keep_next = plan.keep[t + 1] if t + 1 < n else np.zeros(n, dtype=bool)
    last_reader: dict[int, int] = {}
    for k in np.flatnonzero(R):
        k = int(k)
        for u in graph.predecessors(k):
            last_reader[u] = k
        last_reader.setdefault(k, k)
    after: dict[int, list[int]] = {}
    for i, k in sorted(last_reader.items()):
        if not keep_next[i]:
            after.setdefault(k, []).append(i)
    in_ram = plan.keep[t] | plan.page_in[t] | R
    at_end = [int(i) for i in np.flatnonzero(in_ram & ~keep_next) if int(i) not in last_reader]
    return after, at_end


@attrs.frozen
class PlanMetrics:
    """Energy, time and memory of a plan under the optimizer's model."""

    energy_j: float
    compute_energy_j: float
    pagein_energy_j: float
    pageout_energy_j: float
    #: the time-proportional part (:class:`poetsim.costs.WaitPower`): CPU waiting, storage
    #: and DMA at rest, storage wake-ups
    wait_energy_j: float
    storage_wakeups: int
    time_s: float
    compute_time_s: float
    transfer_time_s: float
    peak_ram_bytes: int
    peak_stage: int
    peak_op: int
    recomputations: int
    page_ins: int
    page_outs: int
    peak_storage_bytes: int
    #: backward ops that keep the weights they read in RAM (see the module docstring)
    weight_holds: int = 0

    def fits(self, budget_bytes: int, deadline_s: float | None = None,
             storage_capacity_bytes: int | None = None) -> bool:
        """Within the RAM budget, the deadline and the storage capacity (None: no limit)."""
        return (self.peak_ram_bytes <= budget_bytes
                and (deadline_s is None or self.time_s <= deadline_s)
                and (storage_capacity_bytes is None
                     or self.peak_storage_bytes <= storage_capacity_bytes))


def storage_near(costs: OpCosts) -> list[int]:
    """For each stage ``t``, the earliest stage ``s`` whose transfers keep the storage awake
    into stage ``t``: the ops strictly between ``s`` and ``t`` take less than the storage's
    auto-sleep timeout (at their own compute time, a stage's least). The stage model's rule
    for wake-ups: stage ``t`` wakes the storage when it transfers and no stage in
    ``near[t] .. t - 1`` does."""
    # prefix[k]: compute time of ops 0 .. k-1; ops s+1 .. t-1 take prefix[t] - prefix[s+1]
    prefix = np.concatenate([[0.0], np.cumsum(costs.compute_time_s)])
    stages = np.arange(len(costs))
    first = np.searchsorted(prefix, prefix[stages] - costs.wait.awake_s, side="right") - 1
    return np.clip(first, 0, stages).tolist()


@attrs.frozen
class StageTimeline:
    """The stage model's timeline of a plan (:func:`stage_timeline`), per stage: compute
    time (the CPU's, the op's own and recomputations), storage transfer time, whether the
    stage wakes the storage and whether it reads a tensor it pages in; and when its
    page-ins have arrived, its compute ends, the storage lane is done with its transfers
    and the stage ends. ``write_end_s[i]``: when tensor ``i``'s page-out ends (0 if none)."""

    compute_s: np.ndarray
    transfer_s: np.ndarray
    wakes: np.ndarray
    reads_page_in: np.ndarray
    pagein_end_s: np.ndarray
    compute_end_s: np.ndarray
    lane_end_s: np.ndarray
    end_s: np.ndarray
    write_end_s: np.ndarray

    @property
    def makespan_s(self) -> float:
        """The CPU's last stage or the lane's last transfer, whichever ends later."""
        return float(max(self.end_s[-1], self.lane_end_s[-1])) if len(self.end_s) else 0.0

    def wait_energy_j(self, costs: OpCosts) -> float:
        cpu_busy = self.compute_s.sum() + (self.transfer_s.sum() if costs.cpu_moves else 0.0)
        return costs.wait.energy_j(makespan_s=self.makespan_s,
                                   cpu_busy_s=float(cpu_busy),
                                   storage_busy_s=float(self.transfer_s.sum()),
                                   wakeups=int(self.wakes.sum()))


def reads_own_page_in(graph: TrainingGraph, plan: StagePlan) -> np.ndarray:
    """For each stage, whether one of its ops reads a tensor the stage pages in (the
    stage's compute then waits for its page-ins; otherwise they are a prefetch, kept for
    a later stage)."""
    reads = np.zeros(plan.n, dtype=bool)
    for t, i in zip(*np.nonzero(plan.page_in)):
        if any(plan.compute[t, j] for j in graph.successors(int(i))):
            reads[t] = True
    return reads


def stage_timeline(graph: TrainingGraph, costs: OpCosts, plan: StagePlan) -> StageTimeline:
    """When each stage's work happens.

    Without DMA the CPU moves every byte itself, in list order: a stage lasts its
    compute, its transfers and the storage's wake-up latency when it wakes.

    With DMA the transfers run on one storage lane, in stage order, beside the CPU, and
    may run on while later stages compute. Stage ``t`` starts when stage ``t - 1`` ends
    (``E[t-1]``). Its page-ins (after a wake-up) run once the lane is free and the stage
    has started: they arrive at ``P[t] = max(L[t-1], E[t-1]) + wake + in``. Its compute
    starts when the stage does, and not before ``P[t]`` if it reads one of its page-ins,
    nor before ``P[t-1]`` if stage ``t - 1`` paged in (a page-in no op of its stage reads
    is a prefetch, kept for a later stage, and arrives before the next stage computes),
    nor, in a stage that runs an op streaming weights (``OpCosts.streams``: it holds the
    storage), before ``L[t-1]`` and its own page-ins' ``P[t]``; it ends ``compute``
    later, at ``C[t]``. Its page-outs start once its compute and
    page-ins are done (and, in a stage without page-ins, the storage awake) and end at
    ``L[t] = max(P[t], C[t] + wake if no page-in) + out`` (a page-out of a tensor made
    earlier may start sooner in the op list, never later). The stage ends at
    ``E[t] = max(C[t], W[i] for every written tensor i not kept into t + 1)``: a tensor's
    RAM is not given back before its write ends (``W[i]``, the ``L`` of its write's
    stage), so the CPU waits for the write where the plan stops keeping the tensor. The
    iteration lasts until the CPU's last stage and the lane's last transfer are done.
    """
    n = plan.n
    compute = plan.compute.astype(float) @ costs.compute_time_s - held_savings(costs, plan)[0]
    pagein = plan.page_in.astype(float) @ costs.pagein_time_s
    pageout = plan.page_out.astype(float) @ costs.pageout_time_s
    transfer = pagein + pageout
    moves = plan.page_in.any(axis=1) | plan.page_out.any(axis=1)
    near = storage_near(costs)
    wakes = np.array([bool(moves[t]) and not moves[near[t]:t].any() for t in range(n)],
                     dtype=bool)
    wake_s = wakes * costs.wait.wakeup_s
    reads = reads_own_page_in(graph, plan)
    streams = stage_streams(costs, plan)
    written = np.zeros(n)
    if costs.cpu_moves:
        end = np.cumsum(compute + transfer + wake_s)
        return StageTimeline(compute, transfer, wakes, reads, end, end, end, end, written)
    arrived, done, lane, end = (np.zeros(n) for _ in range(4))
    pages_in = plan.page_in.any(axis=1)
    pending: list[int] = []  # written tensors still kept
    last_end = last_lane = prefetched = 0.0
    for t in range(n):
        arrived[t] = max(last_lane, last_end) + wake_s[t] + pagein[t]
        # a stage that streams weights holds the storage: the lane's transfers, its own
        # page-ins among them, end before its compute starts
        held = (max(last_lane, arrived[t] if pages_in[t] else 0.0) if streams[t] else 0.0)
        done[t] = (max(last_end, arrived[t] if reads[t] else 0.0, prefetched, held)
                   + compute[t])
        # a stage that only writes wakes the storage when its writes start
        lane[t] = max(arrived[t], done[t] + (0.0 if pages_in[t] else wake_s[t])) + pageout[t]
        for i in np.flatnonzero(plan.page_out[t]):
            written[i] = lane[t]
            pending.append(int(i))
        keep_next = plan.keep[t + 1] if t + 1 < n else np.zeros(n, dtype=bool)
        freed = [i for i in pending if not keep_next[i]]
        pending = [i for i in pending if keep_next[i]]
        end[t] = max([done[t]] + [float(written[i]) for i in freed])
        last_end, last_lane = end[t], lane[t]
        prefetched = arrived[t] if pages_in[t] else 0.0
    return StageTimeline(compute, transfer, wakes, reads, arrived, done, lane, end, written)


def stage_peak_bytes(graph: TrainingGraph, costs: OpCosts, plan: StagePlan, t: int
                     ) -> tuple[int, int]:
    """The most RAM stage ``t`` holds (the accounting rule of the module docstring) and
    the op it holds it at (the first such)."""
    size = costs.output_bytes
    workspace = costs.workspace_bytes
    after, _ = _frees(graph, plan, t)
    held_start, held_loads = held_bytes_in(costs, plan, t)
    mem = int(size[plan.keep[t] | plan.page_in[t]].sum()) + held_start
    peak, peak_op = -1, t
    for k in np.flatnonzero(plan.compute[t]):
        k = int(k)
        freed = after.get(k, ())
        mem += int(size[k]) + (held_loads if k == t else 0)
        during = mem + int(workspace[k]) - inplace_saving(graph, k, freed)
        if during > peak:
            peak, peak_op = during, k
        mem -= int(sum(size[i] for i in freed))
    return peak, peak_op


def evaluate_plan(graph: TrainingGraph, costs: OpCosts, plan: StagePlan) -> PlanMetrics:
    """Exact accounting of ``plan`` (see the module docstring)."""
    size = costs.output_bytes
    peak, peak_stage, peak_op = -1, 0, 0
    for t in range(plan.n):
        stage_peak, op = stage_peak_bytes(graph, costs, plan, t)
        if stage_peak > peak:
            peak, peak_stage, peak_op = stage_peak, t, op
    R = plan.compute.astype(float)
    e_compute = float((R @ costs.compute_energy_j).sum() - held_savings(costs, plan)[1].sum())
    e_in = float((plan.page_in.astype(float) @ costs.pagein_energy_j).sum())
    e_out = float((plan.page_out.astype(float) @ costs.pageout_energy_j).sum())
    timeline = stage_timeline(graph, costs, plan)
    e_wait = timeline.wait_energy_j(costs)
    stored_final = plan.stored[-1] | plan.page_out[-1]
    return PlanMetrics(
        energy_j=e_compute + e_in + e_out + e_wait,
        compute_energy_j=e_compute,
        pagein_energy_j=e_in,
        pageout_energy_j=e_out,
        wait_energy_j=e_wait,
        storage_wakeups=int(timeline.wakes.sum()),
        time_s=timeline.makespan_s,
        compute_time_s=float(timeline.compute_s.sum()),
        transfer_time_s=float(timeline.transfer_s.sum()),
        peak_ram_bytes=peak,
        peak_stage=peak_stage,
        peak_op=peak_op,
        recomputations=int(plan.compute.sum()) - plan.n,
        page_ins=int(plan.page_in.sum()),
        page_outs=int(plan.page_out.sum()),
        peak_storage_bytes=int(size[stored_final].sum()),
        weight_holds=int(plan.hold.sum()),
    )
