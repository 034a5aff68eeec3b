"""Lowering a stage plan to the executable op list (paper Algorithm 2), and lifting an op
list that fits stage form back into a plan (:mod:`poetsim.optimizer.plan` holds the plans
and their accounting)."""

from __future__ import annotations

import numpy as np

from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.streaming import hold_owners, weight_steps
from poetsim.optimizer.plan import StagePlan, _frees, plan_violations
from poetsim.schedule import Action, Schedule, Step
from poetsim.schedule.ops import with_weight_steps
from poetsim.schedule.replay import ContractViolation, Replay

__all__ = ["lower_plan", "plan_from_schedule"]


def lower_plan(graph: TrainingGraph, plan: StagePlan, *, metadata: dict | None = None) -> Schedule:
    """Turn a plan into the executable op list (paper Algorithm 2), deterministically.

    Per stage: page-ins; page-outs of tensors kept from before; then each op in index order,
    its page-out right after it if planned, and the frees its completion allows; finally the
    frees of tensors the stage neither read nor keeps. A weight hold is taken right before
    its owner's run (``HOLD_WEIGHTS``) and dropped right after the held op's
    (``DROP_WEIGHTS``).
    """
    steps: list[Step] = []
    owners = hold_owners(graph)
    held_by = {owners[b]: int(b) for b in np.flatnonzero(plan.hold)}
    for t in range(plan.n):
        after, at_end = _frees(graph, plan, t)
        for i in np.flatnonzero(plan.page_in[t]):
            steps.append(Step(Action.PAGE_IN, int(i), t))
        for i in np.flatnonzero(plan.page_out[t] & plan.keep[t]):
            steps.append(Step(Action.PAGE_OUT, int(i), t))
        for k in np.flatnonzero(plan.compute[t]):
            k = int(k)
            if k == t and t in held_by:
                steps.append(Step(Action.HOLD_WEIGHTS, held_by[t], t))
            steps.append(Step(Action.COMPUTE, k, t))
            if k == t and plan.hold[t]:
                steps.append(Step(Action.DROP_WEIGHTS, t, t))
            if plan.page_out[t, k] and not plan.keep[t, k]:
                steps.append(Step(Action.PAGE_OUT, k, t))
            steps.extend(Step(Action.FREE, i, t) for i in after.get(k, ()))
        steps.extend(Step(Action.FREE, i, t) for i in at_end)
    return Schedule(graph_name=graph.name, graph_fingerprint=graph_fingerprint(graph),
                    steps=tuple(with_weight_steps(steps, *weight_steps(graph))),
                    metadata=metadata or {})


def plan_from_schedule(graph: TrainingGraph, schedule: Schedule) -> StagePlan | None:
    """Lift an op list (a baseline's, say) into stage form, or None if it has no stage form.

    Stage ``t`` is the stretch of steps that ends with the first computation of op ``t``,
    together with the page-outs and frees that follow it before the next page-in or
    computation. The lifted plan makes the same decisions but with the stage semantics
    (page-ins at the start of the stage, ops in index order, frees after the last reader),
    so its memory must be evaluated again (:func:`evaluate_plan`). A tensor that leaves RAM
    and comes back within one stage is made resident once in the stage (so the plan never
    costs more energy than the list). A list whose first computations are not in index
    order has no stage form. A page-out of an older tensor that follows op ``t``'s first
    computation is written while the next stage runs, so it belongs to stage ``t + 1``
    (where :func:`lower_plan` puts such page-outs), unless the tensor is freed before that
    stage starts.
    """
    try:
        return _lift(graph, schedule)
    except ContractViolation:  # not a valid op list: no stage form either
        return None


def _lift(graph: TrainingGraph, schedule: Schedule) -> StagePlan | None:
    n = len(graph)
    lift = _Lift(n)
    walk = Replay(graph, schedule)  # its sets: the list's state before each step
    resident, computed = walk.resident, walk.computed
    for effect in walk:
        k, action = effect.op, effect.action
        active = action in (Action.COMPUTE, Action.PAGE_IN)
        if active and lift.started and computed[lift.t]:
            # the first active step after op t's first computation opens stage t + 1
            if not lift.open_stage(resident, walk.stored):
                return None
        lift.started = True
        if not lift.take(action, k, computed):
            return None
    for i in lift.pending:
        lift.write(lift.t, i)
    if lift.t != n - 1:
        return None
    plan = StagePlan(**lift.m)
    return plan if not plan_violations(graph, plan) else None


class _Lift:
    """The stage plan an op list lifts to, while :func:`_lift` walks its steps: the
    matrices, the stage being filled (``t``), the page-outs of older tensors after op
    ``t``'s first computation (``pending``) and the ops whose weights the list holds before
    their first run (``held``)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.m = StagePlan.empty(n)
        self.m["hold"] = np.zeros(n, dtype=bool)
        self.t = 0
        self.started = False
        self.pending: list[int] = []
        self.held: list[int] = []

    def write(self, stage: int, i: int) -> None:
        """Tensor ``i`` is written in stage ``stage``."""
        self.m["page_out"][stage, i] = True

    def open_stage(self, resident: list[bool], stored: list[bool]) -> bool:
        """Start stage ``t + 1`` with the list's RAM and storage; False past the last."""
        self.t += 1
        t, m = self.t, self.m
        if t >= self.n:
            return False
        m["keep"][t] = resident
        # written by the list, less the page-outs this stage writes in stage form
        m["stored"][t] = stored
        m["stored"][t, self.pending] = False
        for i in self.pending:
            self.write(t, i)
        self.pending.clear()
        return True

    def take(self, action: Action, k: int, computed: list[bool]) -> bool:
        """One step of the list in the stage being filled; False when the list has no
        stage form (a first computation out of index order)."""
        m, t = self.m, self.t
        if action is Action.COMPUTE:
            return self.compute(k, computed)
        if action is Action.PAGE_IN:
            if not (m["compute"][t, k] or m["keep"][t, k]):
                m["page_in"][t, k] = True
        elif action is Action.PAGE_OUT:
            if computed[t] and not m["compute"][t, k]:
                self.pending.append(k)
            else:
                self.write(t, k)
        elif action is Action.HOLD_WEIGHTS:
            self.held.append(k)
        elif action is Action.FREE and k in self.pending:
            self.pending.remove(k)
            self.write(t, k)
        return True

    def compute(self, k: int, computed: list[bool]) -> bool:
        """A computation of op ``k``; False when it is a first one out of index order."""
        m, t = self.m, self.t
        if not computed[k] and k != t:
            return False
        if not computed[k] and k in self.held:
            m["hold"][k] = True
        # A tensor dropped and brought back within one stage is, in stage form,
        # computed once in the stage (before all its readers) instead.
        m["keep"][t, k] = m["page_in"][t, k] = False
        m["compute"][t, k] = True
        return True
