"""The POET MILP in PySCIPOpt: build, warm-start, solve, and read back a stage plan.

Formulation (paper Algorithm 1 on Checkmate's frontier-advancing stages; notation of
:mod:`poetsim.optimizer.plan`), for stages ``t`` and tensors ``i``:

* binaries ``R[t,i]`` (compute), ``S[t,i]`` (keep in RAM), ``Min[t,i]`` (page in),
  ``Mout[t,i]`` (page out); ``R[t,t] = 1``. Storage is never released within an iteration,
  so ``S_AUX[t,i] = sum_{t' < t} Mout[t',i]`` is an expression, not a variable, and every
  tensor is written at most once.
* dependencies: ``R[t,k] <= R[t,u] + S[t,u] + Min[t,u]`` for every input ``u`` of ``k``;
  retention: ``S[t+1,i] <= S[t,i] + R[t,i] + Min[t,i]``; one way in:
  ``R[t,i] + S[t,i] + Min[t,i] <= 1``; page-in needs a stored copy:
  ``Min[t,i] <= S_AUX[t,i]``; page-out needs the tensor in RAM: ``Mout[t,i] <= S[t,i] + R[t,i]``.
* memory, Checkmate's recurrence over the ops that can run in stage ``t`` (index order):
  ``U[t,first] = sum_i (S[t,i] + Min[t,i]) m_i + R[t,first] m_first``,
  ``U[t,next] = U[t,k] - sum_i F[t,i,k] m_i + R[t,next] m_next`` and
  ``U[t,k] + R[t,k] w_k - F[t,u,k] m_k <= budget``, the last term for an op ``k`` with an
  in-place kernel on input ``u`` (``Op.overwrites``: its output lands in the buffer of
  ``u`` freed right after it, as the op list's replay counts it). The free indicator
  ``F[t,i,k]`` (tensor ``i`` freed after op ``k``) is continuous in ``[0, 1]`` with only
  upper bounds:
  ``F <= R[t,k]`` (an op that did not run frees nothing), ``F <= 1 - S[t+1,i]`` and
  ``F <= 1 - R[t,j]`` for every later reader ``j`` of ``i`` in the stage. At integer
  ``R, S`` these bounds are 0 or 1 and freeing only helps, so the relaxation is exact.
  ``sum_k F[t,i,k] <= 1`` (a tensor leaves RAM once per stage) is redundant at integer
  points and keeps the LP from freeing a tensor twice.
* frontier knapsacks (redundant, for the LP bound): while op ``t`` runs, RAM holds its
  inputs, output and workspace and every tensor kept into stage ``t + 1``:
  ``sum_{i < t, i not an input of t} S[t+1,i] m_i <= budget - m_t - w_t - sum_inputs m_u``
  (plus ``m_t (1 - S[t+1,u])`` on the right for an op ``t`` in place on ``u``); and when
  stage ``t`` starts: ``sum_i (S[t,i] + Min[t,i]) m_i <= budget``.
* time (:func:`~poetsim.optimizer.plan.stage_timeline`): without DMA the makespan is
  ``sum_t compute_t + transfers_t``; with DMA continuous stage times on a storage lane
  beside the CPU (:meth:`MilpModel._add_lane`): per stage page-ins arrived ``P_t``,
  compute done ``C_t``, lane done ``L_t``, stage end ``E_t``, each at least the bounds of
  the timeline's rules; a rule that holds only for some plans (the stage reads its page-in,
  the previous stage paged in, the tensor written is no longer kept) is switched by its
  decision and a bound on how far the lane can be ahead of the CPU (all transfers, or the
  deadline); the makespan is at least the last ``E`` and ``L`` and at most the deadline.
  Transfers include the storage's wake-up latency where it wakes: ``W_t`` (binary) marks
  a stage that transfers, ``wake_t >= W_t - sum_{s in near(t)} W_s`` one that wakes the
  storage (:func:`~poetsim.optimizer.plan.storage_near`); every page-out is paged in again
  (``sum_t Mout[t,i] <= sum_t Min[t,i]``), so that no write poses as a keep-awake.
* weight holds: a binary ``H[b]`` per op that can hold its weights
  (:func:`~poetsim.graph.streaming.hold_owners`, owner ``f``): ``H[b] h_b`` joins the
  memory of every stage in ``(f, b]`` from its start and of op ``f``'s row in stage ``f``;
  op ``b``'s run in stage ``b`` is ``held_compute_*`` cheaper and shorter, and holds the
  storage only if it writes back.
* storage capacity: ``sum_{t,i} Mout[t,i] m_i <= capacity``.
* objective: ``sum R E_compute + Min E_pagein + Mout E_pageout`` plus the time-proportional
  energy (:class:`~poetsim.costs.WaitPower`): every second of the makespan at CPU-idle plus
  rest power, less what the CPU's busy seconds and the storage's busy seconds replace, plus
  the wake-ups. Equal, plan by plan, to :func:`~poetsim.optimizer.plan.evaluate_plan`.

Reductions that keep the model exact: a variable exists only where it can be nonzero
(lower triangle; tensor ``i`` matters in stage ``t`` only while ``t`` is at most the index
of ``i``'s last descendant; page-outs of empty tensors are pointless), and the ablations
remove whole families (remat-only: no ``Min``/``Mout``; paging-only: ``R`` is the identity,
and then a tensor is only kept up to its last reader). The restricted mode (a named,
labelled option) also forbids recomputing backward ops and recomputes a forward op at most
once.

Branching is SCIP's own: priorities that branch on the keep decisions first (tried) gave
worse incumbents on every benchmark case where they made a difference (MLP on the
Raspberry Pi 4 at 70%: 3.1% gap at 60 s against 2.3% without).

Scaling: memory is counted in units of ``unit_bytes``, the gcd of all sizes when that keeps
the budget under ten million units (exact); otherwise sizes are rounded up and the budget
down (``exact_memory`` is then false: every plan found is safe, but SCIP's bound and
infeasibility proofs hold for the rounded model only, so :func:`~poetsim.optimizer.solve`
does not report them as proofs). Energy is scaled so that the plain schedule costs 1000;
times are divided by the deadline (by the plain time without one).
"""

from __future__ import annotations

import math
import time
from functools import reduce
from typing import Any

import attrs
import numpy as np
from pyscipopt import quicksum

from poetsim.costs import OpCosts
from poetsim.errors import BuildTimeout
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.interrupt import scip_model
from poetsim.optimizer.plan import StagePlan, stage_streams, stage_timeline, storage_near

__all__ = ["BuildTimeout", "Formulation", "MilpModel", "build_milp"]


_OBJECTIVE_SCALE = 1000.0
_MAX_MEMORY_UNITS = 10_000_000


@attrs.frozen
class Formulation:
    """Which decisions the model may take."""

    remat: bool = True
    paging: bool = True
    restricted: bool = False


def _memory_unit(sizes: np.ndarray, budget_bytes: int) -> tuple[int, bool]:
    """Bytes per memory unit, and whether counting in such units is exact.

    The gcd of all sizes is exact. When it would leave the budget above
    ``_MAX_MEMORY_UNITS`` units, sizes are rounded up to coarser units: still safe (a plan
    that fits in units fits in bytes) but no longer exact near the budget.
    """
    values = [int(v) for v in sizes if v > 0] + [int(budget_bytes)]
    unit = reduce(math.gcd, values) or 1
    if budget_bytes / unit > _MAX_MEMORY_UNITS:
        return math.ceil(budget_bytes / _MAX_MEMORY_UNITS), False
    return unit, True


class MilpModel:
    """A built SCIP model with its variable maps."""

    def __init__(self, graph: TrainingGraph, costs: OpCosts, budget_bytes: int,
                 deadline_s: float | None, formulation: Formulation, *,
                 storage_capacity_bytes: int | None, energy_reference_j: float,
                 build_deadline: float | None = None) -> None:
        self.build_deadline = build_deadline
        self.graph = graph
        self.costs = costs
        self.n = n = len(graph)
        self.formulation = formulation
        self.deadline_s = deadline_s
        self.unit_bytes, self.exact_memory = _memory_unit(
            np.concatenate([costs.output_bytes, costs.workspace_bytes, costs.held_bytes]),
            budget_bytes)
        self.budget_units = budget_bytes // self.unit_bytes
        self.energy_scale = _OBJECTIVE_SCALE / energy_reference_j if energy_reference_j > 0 else 1.0
        self.model = scip_model(f"poet_{graph.name}")
        self.R: dict[tuple[int, int], Any] = {}
        self.S: dict[tuple[int, int], Any] = {}
        self.Min: dict[tuple[int, int], Any] = {}
        self.Mout: dict[tuple[int, int], Any] = {}
        self.F: dict[tuple[int, int, int], Any] = {}
        self.H: dict[int, Any] = {}
        self.U: dict[tuple[int, int], Any] = {}
        # the DMA timeline (:meth:`_add_lane`)
        self.P: dict[int, Any] = {}
        self.C: dict[int, Any] = {}
        self.L: dict[int, Any] = {}
        self.E: dict[int, Any] = {}
        self.y: dict[int, Any] = {}
        self.hold: dict[int, Any] = {}
        self.v: dict[int, Any] = {}
        self.behind: dict[tuple[int, int], Any] = {}
        self.makespan: Any = None
        self.stored: dict[tuple[int, int], Any] = {}
        self.moves: dict[int, Any] = {}
        self.wake: dict[int, Any] = {}
        self.moved_before: dict[int, Any] = {}
        self.near = storage_near(costs)
        self.priced = costs.wait.prices_time
        # times in units of the deadline (or of the plain time when there is none)
        finite = deadline_s is not None and math.isfinite(deadline_s) and deadline_s > 0
        reference_s = deadline_s if finite else costs.plain_time_s
        self.time_scale = 1.0 / reference_s if reference_s and reference_s > 0 else 1.0

        self.last_reader = [max(graph.successors(i), default=i) for i in range(n)]
        self.last_desc = _last_descendants(graph)
        self.mem = [math.ceil(int(b) / self.unit_bytes) for b in costs.output_bytes]
        self.ws = [math.ceil(int(b) / self.unit_bytes) for b in costs.workspace_bytes]
        self.held = [math.ceil(int(b) / self.unit_bytes) for b in costs.held_bytes]
        # an in-place kernel saves its output while it runs (rounded down: safe in units)
        self.inplace = [int(costs.output_bytes[k]) // self.unit_bytes
                        if graph.overwrites(k) >= 0 else 0 for k in range(n)]
        self._create_variables()
        self._add_constraints(storage_capacity_bytes)
        # Every op runs once in its own stage: a constant part of the objective.
        self.model.addObjoffset(self.energy_scale * sum(self._compute_j(k) for k in range(n)))

    # ------------------------------------------------------------------ variables

    def _horizon(self, i: int) -> int:
        """Last stage in which tensor ``i`` can still be read."""
        if self.formulation.remat:
            return self.last_desc[i]
        return self.last_reader[i]

    def recomputable(self, i: int) -> bool:
        f = self.formulation
        op = self.graph.ops[i]
        if not f.remat or not op.recomputable:
            return False
        return not (f.restricted and op.phase is Phase.BACKWARD)

    def _create_variables(self) -> None:
        m, n, c = self.model, self.n, self.costs
        e = self.energy_scale
        for i in range(n):
            if self.build_deadline is not None and time.perf_counter() > self.build_deadline:
                raise BuildTimeout(f"creating the variables passed the time limit at tensor "
                                   f"{i} of {n}")
            horizon = self._horizon(i)
            pageable = self.formulation.paging and self.mem[i] > 0
            for t in range(i + 1, horizon + 1):
                self.S[t, i] = m.addVar(vtype="B", name=f"S_{t}_{i}")
                if self.recomputable(i):
                    self.R[t, i] = m.addVar(vtype="B", name=f"R_{t}_{i}",
                                            obj=e * self._compute_j(i))
                if pageable:
                    self.Min[t, i] = m.addVar(vtype="B", name=f"Min_{t}_{i}",
                                              obj=e * self._transfer_j(
                                                  float(c.pagein_energy_j[i]),
                                                  float(c.pagein_time_s[i])))
            if pageable:
                for t in range(i, horizon):
                    self.Mout[t, i] = m.addVar(vtype="B", name=f"Mout_{t}_{i}",
                                               obj=e * self._transfer_j(
                                                   float(c.pageout_energy_j[i]),
                                                   float(c.pageout_time_s[i])))

        # per stage: (units, H[b]) of the holds in RAM when it starts, and of those its own
        # op's run loads
        self.held_at: list[list[tuple[int, Any]]] = [[] for _ in range(n)]
        self.loaded_at: list[list[tuple[int, Any]]] = [[] for _ in range(n)]
        for b in np.flatnonzero(c.hold_owner >= 0):
            b, f = int(b), int(c.hold_owner[b])
            h = self.H[b] = m.addVar(vtype="B", name=f"H_{b}", obj=e * (
                self._compute_j(b, held=True) - self._compute_j(b)))
            if self.held[b]:
                self.loaded_at[f].append((self.held[b], h))
                for t in range(f + 1, b + 1):
                    self.held_at[t].append((self.held[b], h))

    def r(self, t: int, i: int) -> Any:
        """R[t,i] as a variable or the constant it is fixed to."""
        if i == t:
            return 1
        return self.R.get((t, i), 0)

    def runnable(self, t: int) -> list[int]:
        return [k for k in range(t + 1) if k == t or (t, k) in self.R]

    # ------------------------------------------------------------------ constraints

    def _add_constraints(self, storage_capacity_bytes: int | None) -> None:
        m, n, graph = self.model, self.n, self.graph
        S, Min, Mout = self.S, self.Min, self.Mout

        # A[t,i]: a copy of tensor i is on storage when stage t starts. Continuous, but
        # integral whenever Mout is: A[t+1,i] = A[t,i] + Mout[t,i], starting from 0.
        stored: dict[tuple[int, int], Any] = {}
        for i in sorted({i for (_, i) in Min}):
            level: Any = 0
            for t in range(i + 1, self._horizon(i) + 1):
                if (t - 1, i) in Mout:
                    a = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"A_{t}_{i}")
                    m.addCons(a == level + Mout[t - 1, i], name=f"aux_{t}_{i}")
                    level = a
                stored[t, i] = level
        self.stored = stored

        for t in range(n):
            if self.build_deadline is not None and time.perf_counter() > self.build_deadline:
                raise BuildTimeout(f"building the model passed the time limit at stage {t} of {n}")
            runnable = self.runnable(t)
            for k in runnable:
                for u in graph.predecessors(k):
                    supply = [v for v in (self.R.get((t, u)), S.get((t, u)), Min.get((t, u)))
                              if v is not None]
                    if k == t:
                        m.addCons(quicksum(supply) >= 1, name=f"dep_{t}_{u}_{k}")
                    else:
                        m.addCons(self.R[t, k] <= quicksum(supply), name=f"dep_{t}_{u}_{k}")
            for i in range(t):
                parts = [v for v in (self.R.get((t, i)), S.get((t, i)), Min.get((t, i)))
                         if v is not None]
                if len(parts) > 1:
                    m.addCons(quicksum(parts) <= 1, name=f"one_{t}_{i}")
                if (t, i) in Min:
                    m.addCons(Min[t, i] <= stored[t, i], name=f"pin_{t}_{i}")
            for i in range(t + 1):
                if (t, i) in Mout:
                    m.addCons(Mout[t, i] <= S.get((t, i), 0) + self.r(t, i), name=f"pout_{t}_{i}")
                if (t + 1, i) in S and i != t:
                    source = [v for v in (S.get((t, i)), Min.get((t, i)), self.R.get((t, i)))
                              if v is not None]
                    m.addCons(S[t + 1, i] <= quicksum(source), name=f"keep_{t}_{i}")
            self._add_memory(t, runnable)
        for i in range(n):
            writes = [Mout[t, i] for t in range(n) if (t, i) in Mout]
            if len(writes) > 1:
                m.addCons(quicksum(writes) <= 1, name=f"once_{i}")
            if self.formulation.restricted and graph.ops[i].phase is not Phase.BACKWARD:
                recomputes = [self.R[t, i] for t in range(n) if (t, i) in self.R]
                if len(recomputes) > 1:
                    m.addCons(quicksum(recomputes) <= 1, name=f"twice_{i}")
        if storage_capacity_bytes is not None and Mout:
            total = sum(int(b) for b in self.costs.output_bytes)
            if total > storage_capacity_bytes:
                m.addCons(quicksum(v * int(self.costs.output_bytes[i])
                                   for (t, i), v in Mout.items()) <= storage_capacity_bytes,
                          name="capacity")
        self._add_frontier_knapsacks()
        self._add_timeline()

    def _add_frontier_knapsacks(self) -> None:
        """Redundant but strong rows: while op ``t`` runs (the last op of stage ``t``), RAM
        holds its inputs, its output, its workspace and every tensor kept into stage
        ``t + 1``. In binaries only, these are knapsack rows that SCIP tightens and derives
        cover cuts from; the recurrence with continuous ``U`` and ``F`` gives it none, and its
        LP relaxation keeps fractions of large tensors for free."""
        m, graph = self.model, self.graph
        for t in range(self.n - 1):
            inputs = set(graph.predecessors(t))
            room = (self.budget_units - self.mem[t] - self.ws[t]
                    - sum(self.mem[u] for u in inputs))
            terms = [self.mem[i] * self.S[t + 1, i] for i in range(t)
                     if i not in inputs and (t + 1, i) in self.S and self.mem[i] > 0]
            if self.inplace[t]:  # op t runs in place unless its input is kept
                room += self.inplace[t]
                kept = self.S.get((t + 1, graph.overwrites(t)))
                if kept is not None:
                    terms.append(self.inplace[t] * kept)
            terms += [size * h for size, h in (*self.held_at[t], *self.loaded_at[t])]
            if terms:
                m.addCons(quicksum(terms) <= room, name=f"frontier_{t}")
        for t in range(1, self.n):
            # When stage t starts, everything kept or paged in is resident at once.
            start = [self.mem[i] * v for family in (self.S, self.Min)
                     for i in range(t) if (v := family.get((t, i))) is not None and self.mem[i]]
            start += [size * h for size, h in self.held_at[t]]
            if start:
                m.addCons(quicksum(start) <= self.budget_units, name=f"start_{t}")

    def _free_pairs(self, t: int, runnable: list[int]) -> list[tuple[int, int, list[int]]]:
        """(tensor i, op k, later readers of i in the stage) for every possible free."""
        graph = self.graph
        run = set(runnable)
        pairs = []
        for k in runnable:
            for i in (*graph.predecessors(k), k):
                later = [j for j in graph.successors(i) if j > k and j in run]
                pairs.append((i, k, later))
        return pairs

    def _add_memory(self, t: int, runnable: list[int]) -> None:
        m, S, Min = self.model, self.S, self.Min
        start_terms = [self.mem[i] * S[t, i] for i in range(t) if (t, i) in S]
        start_terms += [self.mem[i] * Min[t, i] for i in range(t) if (t, i) in Min]
        start_terms += [size * h for size, h in self.held_at[t]]
        loads = quicksum(size * h for size, h in self.loaded_at[t])
        frees_after: dict[int, list[tuple[int, Any]]] = {}
        frees_of: dict[int, list[Any]] = {}
        for i, k, later in self._free_pairs(t, runnable):
            if self.mem[i] == 0:
                continue
            f = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"F_{t}_{i}_{k}")
            self.F[t, i, k] = f
            if k != t:
                m.addCons(f <= self.R[t, k], name=f"fr_{t}_{i}_{k}")
            if (t + 1, i) in S:
                m.addCons(f <= 1 - S[t + 1, i], name=f"fs_{t}_{i}_{k}")
            for j in later:
                m.addCons(f <= 1 - self.r(t, j), name=f"fl_{t}_{i}_{k}_{j}")
            frees_after.setdefault(k, []).append((i, f))
            frees_of.setdefault(i, []).append(f)
        for i, fs in frees_of.items():
            if len(fs) > 1:
                # a tensor leaves RAM at most once per stage (redundant; tightens the LP)
                m.addCons(quicksum(fs) <= 1, name=f"fone_{t}_{i}")
        previous = None
        for k in runnable:
            u = m.addVar(vtype="C", lb=0.0, name=f"U_{t}_{k}")
            self.U[t, k] = u
            produced = self.mem[k] * self.r(t, k)
            if previous is None:
                m.addCons(u == quicksum(start_terms) + produced, name=f"u_{t}_{k}")
            else:
                freed = quicksum(self.mem[i] * f for i, f in frees_after.get(previous, ()))
                m.addCons(u == self.U[t, previous] - freed + produced, name=f"u_{t}_{k}")
            # in place: the output lands in the buffer of the input freed right after it
            f_in = self.F.get((t, self.graph.overwrites(k), k)) if self.inplace[k] else None
            saved = self.inplace[k] * f_in if f_in is not None else 0
            m.addCons(u + self.ws[k] * self.r(t, k) + (loads if k == t else 0) - saved
                      <= self.budget_units, name=f"mem_{t}_{k}")
            previous = k

    def _add_timeline(self) -> None:
        """Stage times, storage wake-ups and the deadline (the stage model of
        :func:`poetsim.optimizer.plan.stage_timeline`); the energy they cost is in the
        objective coefficients (:meth:`_compute_j` and its neighbours)."""
        m, c, n = self.model, self.costs, self.n
        wait = c.wait
        deadline = self.deadline_s is not None and math.isfinite(self.deadline_s)
        if not (deadline or self.priced):
            return
        scale = self.time_scale
        transfers: dict[int, list[tuple[float, Any]]] = {t: [] for t in range(n)}
        for (t, i), v in self.Min.items():
            transfers[t].append((float(c.pagein_time_s[i]), v))
        for (t, i), v in self.Mout.items():
            transfers[t].append((float(c.pageout_time_s[i]), v))
        if self.priced and (wait.wake_j or wait.wakeup_s):
            self._add_wakes(transfers)
        if c.cpu_moves:
            makespan = quicksum(self._compute_s(t) + quicksum(scale * seconds * v
                                                              for seconds, v in transfers[t])
                                + self._wake_s(t) for t in range(n))
        else:
            makespan = self._add_lane()
        if deadline:
            # A hair under 1, so that SCIP's feasibility tolerance cannot push a plan past it.
            m.addCons(makespan <= (1.0 - 1e-7) * self.deadline_s * scale, name="deadline")

    def _compute_s(self, t: int) -> Any:
        """Stage ``t``'s compute time (scaled)."""
        c = self.costs
        seconds = quicksum(self.time_scale * float(c.compute_time_s[k]) * self.r(t, k)
                           for k in self.runnable(t))
        if t in self.H:
            saved = float(c.compute_time_s[t] - c.held_compute_time_s[t])
            seconds = seconds - self.time_scale * saved * self.H[t]
        return seconds

    def _wake_s(self, t: int) -> Any:
        """The storage's wake-up latency in stage ``t`` (scaled), where it may wake."""
        if t not in self.wake:
            return 0.0
        return self.time_scale * self.costs.wait.wakeup_s * self.wake[t]

    def _lead_bound(self) -> float:
        """How far (scaled) the storage lane can ever be ahead of the CPU, to switch off
        the rows of :meth:`_add_lane` that hold only for some plans (each compares a time
        of the lane with one of the CPU). After stage ``t`` ends, the lane works without a
        break on what is left: page-ins of stage ``t`` (earlier ones have arrived before
        a compute of stage ``t``), the page-outs (each tensor is written at most once) and
        their wake-ups; a stage's page-ins then come on top, each tensor once. So twice
        every page-in, every page-out and a wake-up per tensor and two more bound it, and
        so does the deadline."""
        c = self.costs
        tensors = {i for (_, i) in self.Min} | {i for (_, i) in self.Mout}
        seconds = sum(2 * float(c.pagein_time_s[i]) + float(c.pageout_time_s[i])
                      for i in tensors)
        if self.moves:
            seconds += (len(tensors) + 2) * c.wait.wakeup_s
        lead = self.time_scale * seconds * (1 + 1e-9)
        if self.deadline_s is not None and math.isfinite(self.deadline_s):
            lead = min(lead, 1.0)
        return lead

    def _add_lane(self) -> Any:
        """The DMA timeline of :func:`~poetsim.optimizer.plan.stage_timeline`, per stage
        ``t``: page-ins arrived ``P``, compute done ``C``, lane done ``L``, stage end ``E``;
        ``y_t`` / ``v_t`` (continuous, integral at integral plans) mark a stage that reads
        one of its page-ins / pages in at all (the next stage's compute then waits for
        them), :meth:`_holds` one whose compute holds the storage (it waits for the lane);
        :meth:`_add_write_waits` adds the waits for writes. Rows that hold only under such
        a mark are switched off by :meth:`_lead_bound`. Returns the makespan
        variable, which carries the stage power in the objective."""
        m, c, n, scale = self.model, self.costs, self.n, self.time_scale
        big = self._lead_bound()
        ins_of: dict[int, list[tuple[int, Any]]] = {}
        outs_of: dict[int, list[tuple[int, Any]]] = {}
        for (t, i), v in self.Min.items():
            ins_of.setdefault(t, []).append((i, v))
        for (t, i), v in self.Mout.items():
            outs_of.setdefault(t, []).append((i, v))
        end_prev: Any = 0.0
        lane_prev: Any = 0.0
        prefetch: tuple[Any, Any] | None = None  # the previous stage's (P, v) if it pages in
        for t in range(n):
            compute = self._compute_s(t)
            ins = ins_of.get(t, [])
            pagein = quicksum(scale * float(c.pagein_time_s[i]) * v for i, v in ins)
            pageout = quicksum(scale * float(c.pageout_time_s[i]) * v
                               for i, v in outs_of.get(t, []))
            arrived = m.addVar(vtype="C", lb=0.0, name=f"P_{t}")
            done = m.addVar(vtype="C", lb=0.0, name=f"C_{t}")
            lane = m.addVar(vtype="C", lb=0.0, name=f"L_{t}")
            end = m.addVar(vtype="C", lb=0.0, name=f"E_{t}")
            self.P[t], self.C[t], self.L[t], self.E[t] = arrived, done, lane, end
            m.addCons(arrived >= lane_prev + self._wake_s(t) + pagein, name=f"pl_{t}")
            m.addCons(arrived >= end_prev + self._wake_s(t) + pagein, name=f"pe_{t}")
            m.addCons(done >= end_prev + compute, name=f"ce_{t}")
            m.addCons(lane >= arrived + pageout, name=f"lp_{t}")
            m.addCons(lane >= done + pageout, name=f"lc_{t}")
            m.addCons(end >= done, name=f"ec_{t}")
            if prefetch is not None:
                m.addCons(done >= prefetch[0] + compute - big * (1 - prefetch[1]),
                          name=f"cf_{t}")
            prefetch = None
            hold = self._holds(t)
            if hold is not None:
                # an op streaming weights holds the storage: the lane is done first
                m.addCons(done >= lane_prev + compute - big * (1 - hold), name=f"hl_{t}")
            if ins:
                reads = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"y_{t}")
                pages = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"v_{t}")
                self.y[t], self.v[t] = reads, pages
                run = set(self.runnable(t))
                # v_t is exactly whether the stage pages in (it lowers the row of a write-only
                # stage's wake-up below, so it is bounded from both sides)
                m.addCons(pages <= quicksum(v for _, v in ins), name=f"vu_{t}")
                for i, v in ins:
                    m.addCons(pages >= v, name=f"v_{t}_{i}")
                    for j in self.graph.successors(i):
                        if j in run:
                            m.addCons(reads >= v + self.r(t, j) - 1, name=f"y_{t}_{i}_{j}")
                m.addCons(done >= arrived + compute - big * (1 - reads), name=f"cp_{t}")
                if hold is not None:
                    m.addCons(done >= arrived + compute - big * (2 - hold - pages),
                              name=f"hp_{t}")
                prefetch = (arrived, pages)
            if t in self.wake:
                # a stage that only writes wakes the storage when its writes start
                pages_in = self.v.get(t, 0)
                m.addCons(lane >= done + pageout
                          + scale * c.wait.wakeup_s * (self.wake[t] - pages_in), name=f"lw_{t}")
            end_prev, lane_prev = end, lane
        self._add_write_waits(big)
        makespan = m.addVar(vtype="C", lb=0.0, name="makespan",
                            obj=self.energy_scale * self._stage_w / scale)
        self.makespan = makespan
        if n:
            m.addCons(makespan >= end_prev, name="makespan_cpu")
            m.addCons(makespan >= lane_prev, name="makespan_lane")
        return makespan

    def _holds(self, t: int) -> Any:
        """Whether stage ``t`` runs an op that streams weights (``OpCosts.streams``): 1 for
        its own op, a continuous variable (integral at integral plans) when only a
        recomputation may, None when none can."""
        streams = self.costs.streams
        quiet = t in self.H and not self.costs.writeback_bytes[t]  # held, reads nothing
        if streams[t] and not quiet:
            return 1
        recomputed = [self.R[t, k] for k in self.runnable(t) if k != t and streams[k]]
        if streams[t]:
            recomputed.append(1 - self.H[t])
        if not recomputed:
            return None
        hold = self.model.addVar(vtype="C", lb=0.0, ub=1.0, name=f"h_{t}")
        for k, r in enumerate(recomputed):
            self.model.addCons(hold >= r, name=f"h_{t}_{k}")
        self.hold[t] = hold
        return hold

    def _add_write_waits(self, big: float) -> None:
        """Every stage ``s`` by which tensor ``i`` is written and that does not keep it into
        ``s + 1`` ends after the write (the first such stage is where ``i`` leaves RAM; the
        later ones follow). ``D[s,i] >= 0`` is how far the write ends after stage ``s``:
        at least ``L[t] - E[t]`` in the stage ``t`` that writes it, and carried on, less
        the stages' lengths; where the stage stops keeping ``i`` it must be 0."""
        m = self.model
        pageable = sorted({i for (_, i) in self.Mout})
        for i in pageable:
            behind: Any = None
            for s in range(i, self._horizon(i) + 1):
                d = m.addVar(vtype="C", lb=0.0, name=f"D_{s}_{i}")
                self.behind[s, i] = d
                if behind is not None:
                    m.addCons(d >= behind + self.E[s - 1] - self.E[s], name=f"dc_{s}_{i}")
                if (s, i) in self.Mout:
                    m.addCons(d >= self.L[s] - self.E[s] - big * (1 - self.Mout[s, i]),
                              name=f"dw_{s}_{i}")
                written = self.stored.get((s + 1, i))
                if written is None:
                    written = self.stored.get((s, i), 0) + self.Mout.get((s, i), 0)
                kept = self.S.get((s + 1, i), 0)
                m.addCons(d <= big * (1 - written + kept), name=f"wait_{s}_{i}")
                behind = d

    # The wait energy (WaitPower.energy_j) spread over the variables that cause it: every
    # second of the makespan costs cpu_wait + rest; a second the CPU computes (or, without
    # DMA, moves bytes) saves cpu_wait of it, a second the storage is busy or waking saves
    # rest. With DMA the makespan is a variable; without, it is the compute, transfers and
    # wake-up latency of every stage, so their coefficients carry the stage's power.

    @property
    def _stage_w(self) -> float:
        wait = self.costs.wait
        return wait.cpu_wait_w + wait.rest_w if self.priced else 0.0

    def _compute_j(self, k: int, *, held: bool = False) -> float:
        c = self.costs
        energy, seconds = ((float(c.held_compute_energy_j[k]), float(c.held_compute_time_s[k]))
                           if held else (float(c.compute_energy_j[k]), float(c.compute_time_s[k])))
        if not self.priced:
            return energy
        if self.costs.cpu_moves:
            return energy + self.costs.wait.rest_w * seconds
        return energy - self.costs.wait.cpu_wait_w * seconds

    def _transfer_j(self, energy: float, seconds: float) -> float:
        if not self.priced or self.costs.cpu_moves:
            return energy
        return energy - self.costs.wait.rest_w * seconds

    def _wake_j(self) -> float:
        wait = self.costs.wait
        if self.costs.cpu_moves:
            return wait.wake_j + wait.cpu_wait_w * wait.wakeup_s
        return wait.wake_j - wait.rest_w * wait.wakeup_s

    def _add_wakes(self, transfers: dict[int, list[tuple[float, Any]]]) -> None:
        """``W_t``: stage ``t`` transfers anything; ``wake_t``: it wakes the storage, that
        is it transfers and no stage since ``near[t]`` did (a continuous variable, integral
        at integral ``W``)."""
        m = self.model
        for t, parts in transfers.items():
            if parts:
                w = m.addVar(vtype="B", name=f"W_{t}")
                self.moves[t] = w
                m.addCons(w <= quicksum(v for _, v in parts), name=f"wu_{t}")
                for k, (_, v) in enumerate(parts):
                    m.addCons(w >= v, name=f"wl_{t}_{k}")
        # Every write is read back: an unread page-out is pruned from any plan returned, so
        # it must not pose as a way to keep the storage awake either.
        writes: dict[int, list[Any]] = {}
        reads: dict[int, list[Any]] = {}
        for (_, i), v in self.Mout.items():
            writes.setdefault(i, []).append(v)
        for (_, i), v in self.Min.items():
            reads.setdefault(i, []).append(v)
        for i, written in writes.items():
            m.addCons(quicksum(written) <= quicksum(reads.get(i, [])), name=f"read_{i}")
        # moved_before[t] = sum_{s < t} W_s, so that the stages since near[t] that transfer
        # count as moved_before[t] - moved_before[near[t]]: four terms a row, not the window
        moved_before: list[Any] = [0]
        for t in range(self.n):
            if t in self.moves:
                total = m.addVar(vtype="C", lb=0.0, name=f"moved_{t + 1}")
                m.addCons(total == moved_before[t] + self.moves[t], name=f"moved_{t + 1}")
                self.moved_before[t + 1] = total
                moved_before.append(total)
            else:
                moved_before.append(moved_before[t])
        for t, w in self.moves.items():
            earlier = moved_before[t] - moved_before[self.near[t]]
            wake = m.addVar(vtype="C", lb=0.0, ub=1.0, name=f"wake_{t}",
                            obj=self.energy_scale * self._wake_j())
            m.addCons(wake >= w - earlier, name=f"wake_{t}")
            self.wake[t] = wake

    # ------------------------------------------------------------------ solutions

    def _families(self) -> tuple[tuple[str, dict[tuple[int, int], Any]], ...]:
        """Each binary family with the StagePlan matrix it fills."""
        return (("compute", self.R), ("keep", self.S), ("page_in", self.Min),
                ("page_out", self.Mout))

    @property
    def binaries(self) -> int:
        return len(self.R) + len(self.S) + len(self.Min) + len(self.Mout) + len(self.H)

    def plan_from_solution(self, sol: Any) -> StagePlan:
        n = self.n
        mats = StagePlan.empty(n)
        for t in range(n):
            mats["compute"][t, t] = True
        for name, family in self._families():
            for (t, i), var in family.items():
                if self.model.getSolVal(sol, var) > 0.5:
                    mats[name][t, i] = True
        for t in range(1, n):
            mats["stored"][t] = mats["stored"][t - 1] | mats["page_out"][t - 1]
        hold = np.zeros(n, dtype=bool)
        for b, var in self.H.items():
            hold[b] = self.model.getSolVal(sol, var) > 0.5
        return StagePlan(**mats, hold=hold)

    def _binaries(self, plan: StagePlan) -> Any:
        """Every binary, with the stage it belongs to and its value in ``plan``."""
        for name, family in self._families():
            matrix = getattr(plan, name)
            for (t, i), var in family.items():
                yield t, var, bool(matrix[t, i])
        for b, var in self.H.items():
            yield b, var, bool(plan.hold[b])

    def fits(self, plan: StagePlan) -> bool:
        """Whether every decision of ``plan`` has a variable (or constant) in this model."""
        if plan.n != self.n:
            return False
        for name, family in self._families():
            matrix = getattr(plan, name)
            for t, i in zip(*np.nonzero(matrix)):
                if name == "compute" and t == i:
                    continue
                if (int(t), int(i)) not in family:
                    return False
        return all(int(b) in self.H for b in np.flatnonzero(plan.hold))

    def add_warm_start(self, plan: StagePlan) -> bool:
        """Offer ``plan`` to SCIP as a complete solution; True if SCIP accepted it."""
        if not self.fits(plan):
            return False
        return bool(self.model.addSol(self._solution(plan), free=True))

    def try_plan(self, plan: StagePlan, heuristic: Any) -> bool:
        """During the search, from a primal heuristic: True if SCIP accepted ``plan``."""
        if not self.fits(plan):
            return False
        return bool(self.model.trySol(self._solution(plan, heuristic), printreason=False,
                                          free=True))

    def lp_values(self) -> dict[str, np.ndarray]:
        """The current LP solution as fractional plan matrices (``compute[t, t]`` is 1)."""
        m, n = self.model, self.n
        values = {name: np.zeros((n, n)) for name, _ in self._families()}
        np.fill_diagonal(values["compute"], 1.0)
        for name, family in self._families():
            matrix = values[name]
            for (t, i), var in family.items():
                matrix[t, i] = m.getSolVal(None, var)
        return values

    def _solution(self, plan: StagePlan, heuristic: Any = None) -> Any:
        """A complete SCIP solution (original space) for ``plan``."""
        m = self.model
        sol = m.createOrigSol(heuristic) if heuristic is not None else m.createSol()
        for _, var, value in self._binaries(plan):
            m.setSolVal(sol, var, float(value))
        # Continuous variables: frees as large as allowed, memory by the recurrence.
        freed: dict[tuple[int, int, int], float] = {}
        for (t, i, k) in self.F:
            keep_next = bool(plan.keep[t + 1, i]) if t + 1 < self.n else False
            later = any(plan.compute[t, j] for j in self.graph.successors(i) if j > k)
            freed[t, i, k] = 1.0 if (plan.compute[t, k] and not keep_next and not later) else 0.0
        for key, var in self.F.items():
            m.setSolVal(sol, var, freed[key])
        frees_after: dict[tuple[int, int], float] = {}
        for (t, i, k), value in freed.items():
            frees_after[t, k] = frees_after.get((t, k), 0.0) + self.mem[i] * value
        taken = {id(var) for b, var in self.H.items() if plan.hold[b]}
        for t in range(self.n):
            level = float(sum(self.mem[i] for i in range(t)
                              if plan.keep[t, i] or plan.page_in[t, i]))
            level += sum(size for size, h in self.held_at[t] if id(h) in taken)
            previous = None
            for k in self.runnable(t):
                if previous is not None:
                    level -= frees_after.get((t, previous), 0.0)
                level += self.mem[k] * (1 if plan.compute[t, k] else 0)
                m.setSolVal(sol, self.U[t, k], level)
                previous = k
        timeline = stage_timeline(self.graph, self.costs, plan)
        scale = self.time_scale
        for times, family in ((timeline.pagein_end_s, self.P), (timeline.compute_end_s, self.C),
                              (timeline.lane_end_s, self.L), (timeline.end_s, self.E)):
            for t, var in family.items():
                m.setSolVal(sol, var, scale * float(times[t]))
        streams = stage_streams(self.costs, plan)
        for t, var in self.hold.items():
            m.setSolVal(sol, var, 1.0 if streams[t] else 0.0)
        for t, var in self.y.items():
            m.setSolVal(sol, var, 1.0 if timeline.reads_page_in[t] else 0.0)
        for t, var in self.v.items():
            m.setSolVal(sol, var, 1.0 if plan.page_in[t].any() else 0.0)
        for (s, i), var in self.behind.items():
            # the write's end after the end of stage s, once it is written
            late = float(timeline.write_end_s[i] - timeline.end_s[s])
            written = plan.stored[s, i] or plan.page_out[s, i]
            m.setSolVal(sol, var, scale * max(0.0, late) if written else 0.0)
        if self.makespan is not None:
            m.setSolVal(sol, self.makespan, scale * timeline.makespan_s)
        for t, var in self.moves.items():
            m.setSolVal(sol, var, 1.0 if (plan.page_in[t].any() or plan.page_out[t].any())
                        else 0.0)
        for t, var in self.wake.items():
            m.setSolVal(sol, var, 1.0 if timeline.wakes[t] else 0.0)
        moves = np.cumsum(plan.page_in.any(axis=1) | plan.page_out.any(axis=1))
        for t, var in self.moved_before.items():
            m.setSolVal(sol, var, float(moves[t - 1]))
        return sol

    def fix_outside(self, plan: StagePlan, first: int, last: int) -> int:
        """Fix every decision outside stages ``first..last`` to ``plan``'s; returns how
        many binaries stay free. Call :meth:`unfix` to release them again."""
        m = self.model
        free = 0
        for t, var, value in self._binaries(plan):
            if first <= t <= last:
                low, high = 0.0, 1.0
                free += 1
            else:
                low = high = float(value)
            m.chgVarLb(var, low)
            m.chgVarUb(var, high)
        return free

    def unfix(self) -> None:
        m = self.model
        for var in (*(v for _, family in self._families() for v in family.values()),
                    *self.H.values()):
            m.chgVarLb(var, 0.0)
            m.chgVarUb(var, 1.0)


def build_milp(graph: TrainingGraph, costs: OpCosts, budget_bytes: int, deadline_s: float | None,
               formulation: Formulation, *, storage_capacity_bytes: int | None,
               energy_reference_j: float, build_deadline: float | None = None) -> MilpModel:
    """Build the SCIP model for one solve.

    ``build_deadline`` (a ``time.perf_counter()`` value) aborts the build with
    :class:`BuildTimeout` once passed, so a short time limit still returns promptly.
    """
    return MilpModel(graph, costs, budget_bytes, deadline_s, formulation,
                     storage_capacity_bytes=storage_capacity_bytes,
                     energy_reference_j=energy_reference_j, build_deadline=build_deadline)


def _last_descendants(graph: TrainingGraph) -> list[int]:
    """For every op, its last descendant in graph order (itself without one): one sweep
    from the end, since every successor comes after its op."""
    last = list(range(len(graph)))
    for i in range(len(graph) - 1, -1, -1):
        for s in graph.successors(i):
            if last[s] > last[i]:
                last[i] = last[s]
    return last
