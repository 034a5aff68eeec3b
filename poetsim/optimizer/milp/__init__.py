"""The POET MILP in PySCIPOpt: build, warm-start, and read back a stage plan.

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
  ``sum_t compute_t + transfers_t``; with DMA continuous stage times on a storage lane beside
  the CPU (:func:`~poetsim.optimizer.milp.timeline.add_lane`): per stage page-ins arrived
  ``P_t``, compute done ``C_t``, lane done ``L_t``, stage end ``E_t``, each at least the
  bounds of the timeline's rules; a rule that holds only for some plans (the stage reads its
  page-in, the previous stage paged in, the tensor written is no longer kept) is switched by
  its decision and a bound on how far the lane can be ahead of the CPU (all transfers, or
  the deadline); the makespan is at least the last ``E`` and ``L`` and at most the deadline.
  Transfers include the storage's wake-up latency where it wakes: ``W_t`` (binary) marks a
  stage that transfers, ``wake_t >= W_t - sum_{s in near(t)} W_s`` one that wakes the
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

Scaling: see :mod:`poetsim.optimizer.milp.model`.

The modules: :mod:`~poetsim.optimizer.milp.model` (:class:`MilpModel`, :func:`build_milp`,
:class:`Formulation`), :mod:`~poetsim.optimizer.milp.variables` (the binaries),
:mod:`~poetsim.optimizer.milp.objective` (their energy),
:mod:`~poetsim.optimizer.milp.constraints` (dependencies, retention, one way in, page-in
and page-out, write once, capacity), :mod:`~poetsim.optimizer.milp.memory` (the memory
recurrence and the frontier knapsacks), :mod:`~poetsim.optimizer.milp.timeline` (time,
wake-ups, deadline) and :mod:`~poetsim.optimizer.milp.solution` (plans in and out).
The search that drives SCIP over this model is :mod:`poetsim.optimizer.search`.
"""

from poetsim.errors import BuildTimeout
from poetsim.optimizer.milp.model import Formulation, MilpModel, build_milp

__all__ = ["BuildTimeout", "Formulation", "MilpModel", "build_milp"]
