"""The independent schedule checker, and the plain schedule every other one is measured against.

:func:`check_schedule` replays a :class:`~poetsim.schedule.ops.Schedule` step by step,
tracking the resident set, the storage set and the held set, and enforces the rules of
:mod:`poetsim.schedule.ops` (the contract). It shares no code with the optimizer or the
simulator, so it can judge both. It stops at the first violation.

Rule codes (see :mod:`poetsim.schedule.ops` for their meaning):

==========================  =====================================================
``fingerprint_mismatch``    the schedule was made for another graph (position -1)
``unknown_op``              a step names an op index outside the graph
``input_not_resident``      COMPUTE while an input is not in RAM
``already_resident``        COMPUTE or PAGE_IN of a tensor already in RAM
``not_resident``            PAGE_OUT or FREE of a tensor not in RAM
``not_on_storage``          PAGE_IN of a tensor without a storage copy
``redundant_page_out``      PAGE_OUT of a tensor that already has a storage copy
``storage_full``            PAGE_OUT beyond ``storage_capacity_bytes``
``budget_exceeded``         activation bytes + ``resident_bytes`` over ``budget_bytes``
``never_computed``          an op is never computed (position ``len(steps)``)
``weights_not_read``        COMPUTE of an op reading weights on storage, no READ_WEIGHTS
                            and its weights not held
``weights_not_written``     COMPUTE of an op writing weights back, no WRITE_WEIGHTS
``stray_weight_step``       READ_WEIGHTS / WRITE_WEIGHTS not bracketing its op's COMPUTE,
                            or HOLD_WEIGHTS of an op without a hold owner
``already_held``            HOLD_WEIGHTS of an op whose weights are already held
``hold_not_loaded``         HOLD_WEIGHTS not followed by its owner's READ_WEIGHTS, COMPUTE
``not_held``                DROP_WEIGHTS of an op whose weights are not held
==========================  =====================================================

Within a COMPUTE the structural rules are checked first (inputs, then the output), then
the budget.
"""

from __future__ import annotations

import attrs

from poetsim.errors import ScheduleError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.streaming import held_bytes, hold_owners, weight_steps
from poetsim.schedule.ops import Action, Schedule, Step, with_weight_steps

__all__ = ["RULES", "CheckResult", "ScheduleError", "Violation", "check_schedule",
           "check_schedule_or_raise", "plain_schedule"]

#: Every rule code the checker can report.
RULES = (
    "fingerprint_mismatch", "unknown_op", "input_not_resident", "already_resident",
    "not_resident", "not_on_storage", "redundant_page_out", "storage_full",
    "budget_exceeded", "never_computed", "recomputed_inplace_update", "weights_not_read",
    "weights_not_written", "stray_weight_step", "already_held", "hold_not_loaded", "not_held",
)


@attrs.frozen
class Violation:
    """The first rule a schedule breaks.

    ``position`` is the index of the offending step; -1 for ``fingerprint_mismatch``
    (checked before any step) and ``len(schedule.steps)`` for ``never_computed`` (checked
    after the last step), where ``step`` is ``None``. ``op`` is the step's op (the first op
    never computed for ``never_computed``, ``None`` for a fingerprint mismatch).
    ``message`` is one line naming the op by name.
    """

    position: int
    step: Step | None
    rule: str
    message: str
    op: int | None = None


@attrs.frozen
class CheckResult:
    """The verdict of :func:`check_schedule` and the figures of the replay.

    All figures cover the steps replayed: the whole schedule when it is valid, the steps
    before the violation otherwise. ``peak_ram_bytes`` is activation bytes plus the
    ``resident_bytes`` given to the checker, at its highest (during a COMPUTE, or right
    after a PAGE_IN or a HOLD_WEIGHTS); ``peak_step`` is the position of the first step
    reaching it (-1 if no step was replayed). ``peak_storage_bytes`` is the largest size of
    the storage set.
    """

    valid: bool
    violation: Violation | None
    peak_ram_bytes: int
    peak_step: int
    computes: int
    recomputes: int
    page_outs: int
    page_ins: int
    frees: int
    bytes_paged_out: int
    bytes_paged_in: int
    peak_storage_bytes: int
    resident_bytes: int = 0

    @property
    def peak_activation_bytes(self) -> int:
        """The peak without the fixed resident region."""
        return self.peak_ram_bytes - self.resident_bytes


def _is(step: Step | None, action: Action, op: int) -> bool:
    return step is not None and step.action is action and step.op == op


def _bytes(n: int) -> str:
    return f"{n} B"


class _Replay:
    """State of one replay; ``fail`` records the first violation."""

    def __init__(self, graph: TrainingGraph, schedule: Schedule, budget: int | None,
                 resident_bytes: int, storage_capacity: int | None) -> None:
        self.graph = graph
        self.schedule = schedule
        self.budget = budget
        self.base = resident_bytes
        self.capacity = storage_capacity
        n = len(graph.ops)
        self.resident = [False] * n
        self.stored = [False] * n
        self.computed = [False] * n
        self.held = [False] * n
        self.live = 0
        self.storage = 0
        self.peak = -1
        self.peak_step = -1
        self.peak_storage = 0
        self.counts = dict.fromkeys(Action, 0)
        self.recomputes = 0
        self.bytes_out = 0
        self.bytes_in = 0
        self.violation: Violation | None = None

    def fail(self, position: int, step: Step | None, rule: str, detail: str,
             op: int | None = None) -> None:
        if step is not None:
            where = f"step {position} ({step.describe(self.graph)})"
        elif rule == "never_computed":
            where = f"after the last step ({position} steps)"
        else:
            where = "schedule"
        self.violation = Violation(position, step, rule, f"{where}: {detail}", op)

    def ram(self, position: int, step: Step, amount: int, what: str) -> bool:
        """Record ``amount`` activation bytes in RAM now; False if over the budget."""
        total = amount + self.base
        if self.budget is not None and total > self.budget:
            self.fail(position, step, "budget_exceeded",
                      f"RAM would reach {_bytes(total)} ({_bytes(amount)} activations {what}"
                      f" + {_bytes(self.base)} resident), over the budget of "
                      f"{_bytes(self.budget)}", step.op)
            return False
        if total > self.peak:
            self.peak, self.peak_step = total, position
        return True

    def run(self) -> None:
        graph, ops = self.graph, self.graph.ops
        expected = graph_fingerprint(graph)
        if self.schedule.graph_fingerprint != expected:
            self.fail(-1, None, "fingerprint_mismatch",
                      f"made for graph {self.schedule.graph_name!r} with fingerprint "
                      f"{self.schedule.graph_fingerprint[:12]!r}, not for graph "
                      f"{graph.name!r} (fingerprint {expected[:12]!r})")
            return
        n = len(ops)
        steps = self.schedule.steps
        reads, writes = weight_steps(graph)
        holds = any(step.action is Action.HOLD_WEIGHTS for step in steps)
        owners = hold_owners(graph) if holds else [-1] * n
        hold_bytes = held_bytes(graph, owners) if holds else [0] * n
        held = self.held
        for position, step in enumerate(steps):
            k = step.op
            if k >= n:
                self.fail(position, step, "unknown_op",
                          f"op index {k} is not an op of graph {graph.name!r} "
                          f"({n} ops)", k)
                return
            name = ops[k].name
            size = ops[k].output_bytes
            action = step.action
            before = steps[position - 1] if position else None
            after = steps[position + 1] if position + 1 < len(steps) else None
            if action is Action.COMPUTE:
                if reads[k] and not held[k] and not _is(before, Action.READ_WEIGHTS, k):
                    self.fail(position, step, "weights_not_read",
                              f"op {name!r} reads weights that live on storage: its "
                              "COMPUTE must follow its READ_WEIGHTS (or its weights be "
                              "held)", k)
                    return
                if writes[k] and not _is(after, Action.WRITE_WEIGHTS, k):
                    self.fail(position, step, "weights_not_written",
                              f"op {name!r} updates weights that live on storage in place: "
                              "its COMPUTE must be followed by its WRITE_WEIGHTS", k)
                    return
                missing = next((p for p in graph.predecessors(k) if not self.resident[p]), None)
                if missing is not None:
                    self.fail(position, step, "input_not_resident",
                              f"input {ops[missing].name!r} of op {name!r} is not resident "
                              "in RAM", k)
                    return
                if self.resident[k]:
                    self.fail(position, step, "already_resident",
                              f"output of op {name!r} is already resident in RAM", k)
                    return
                if self.computed[k] and not ops[k].recomputable:
                    self.fail(position, step, "recomputed_inplace_update",
                              f"op {name!r} applies its SGD step in place, so it cannot run "
                              "again: it would read the weights it updated", k)
                    return
                if not self.ram(position, step, self.live + size + ops[k].workspace_bytes,
                                f"while {name!r} runs"):
                    return
                self.resident[k] = True
                self.live += size
                if self.computed[k]:
                    self.recomputes += 1
                self.computed[k] = True
            elif action is Action.PAGE_OUT:
                if not self.resident[k]:
                    self.fail(position, step, "not_resident",
                              f"tensor {name!r} is not resident in RAM, nothing to page out", k)
                    return
                if self.stored[k]:
                    self.fail(position, step, "redundant_page_out",
                              f"tensor {name!r} already has a copy on storage", k)
                    return
                if self.capacity is not None and self.storage + size > self.capacity:
                    self.fail(position, step, "storage_full",
                              f"paging out tensor {name!r} ({_bytes(size)}) needs "
                              f"{_bytes(self.storage + size)} of storage, over the capacity "
                              f"of {_bytes(self.capacity)}", k)
                    return
                self.stored[k] = True
                self.storage += size
                self.bytes_out += size
                self.peak_storage = max(self.peak_storage, self.storage)
            elif action is Action.PAGE_IN:
                if not self.stored[k]:
                    self.fail(position, step, "not_on_storage",
                              f"tensor {name!r} has no copy on storage to page in", k)
                    return
                if self.resident[k]:
                    self.fail(position, step, "already_resident",
                              f"tensor {name!r} is already resident in RAM", k)
                    return
                if not self.ram(position, step, self.live + size,
                                f"after paging in {name!r}"):
                    return
                self.resident[k] = True
                self.live += size
                self.bytes_in += size
            elif action is Action.HOLD_WEIGHTS:
                f = owners[k]
                if f < 0:
                    self.fail(position, step, "stray_weight_step",
                              f"op {name!r} has no forward op whose run can load the "
                              "weights it reads: its weights cannot be held", k)
                    return
                if held[k]:
                    self.fail(position, step, "already_held",
                              f"the weights of op {name!r} are already held in RAM", k)
                    return
                later = steps[position + 2] if position + 2 < len(steps) else None
                if not (_is(after, Action.READ_WEIGHTS, f) and _is(later, Action.COMPUTE, f)):
                    self.fail(position, step, "hold_not_loaded",
                              f"holding the weights of op {name!r} needs the run of "
                              f"{ops[f].name!r} that loads them: READ_WEIGHTS and COMPUTE "
                              f"of {ops[f].name!r} must follow right away", k)
                    return
                extra = hold_bytes[k]
                if not self.ram(position, step, self.live + extra,
                                f"after holding the weights of {name!r}"):
                    return
                held[k] = True
                self.live += extra
            elif action is Action.DROP_WEIGHTS:
                if not held[k]:
                    self.fail(position, step, "not_held",
                              f"the weights of op {name!r} are not held in RAM, nothing to "
                              "drop", k)
                    return
                held[k] = False
                self.live -= hold_bytes[k]
            elif action in (Action.READ_WEIGHTS, Action.WRITE_WEIGHTS):
                reading = action is Action.READ_WEIGHTS
                if not (reads if reading else writes)[k]:
                    self.fail(position, step, "stray_weight_step",
                              f"op {name!r} {'reads' if reading else 'writes'} no weights "
                              f"{'from' if reading else 'to'} storage", k)
                    return
                if not _is(after if reading else before, Action.COMPUTE, k):
                    self.fail(position, step, "stray_weight_step",
                              f"{action.value} must come right "
                              f"{'before' if reading else 'after'} a COMPUTE of op {name!r}",
                              k)
                    return
            else:  # FREE
                if not self.resident[k]:
                    self.fail(position, step, "not_resident",
                              f"tensor {name!r} is not resident in RAM, nothing to free", k)
                    return
                self.resident[k] = False
                self.live -= size
            self.counts[action] += 1
        missing = next((i for i in range(n) if not self.computed[i]), None)
        if missing is not None:
            self.fail(len(self.schedule.steps), None, "never_computed",
                      f"op {ops[missing].name!r} is never computed", missing)

    def result(self) -> CheckResult:
        peak, peak_step = self.peak, self.peak_step
        if peak < 0:
            peak, peak_step = self.base, -1
        return CheckResult(
            valid=self.violation is None, violation=self.violation, peak_ram_bytes=peak,
            peak_step=peak_step, computes=self.counts[Action.COMPUTE],
            recomputes=self.recomputes, page_outs=self.counts[Action.PAGE_OUT],
            page_ins=self.counts[Action.PAGE_IN], frees=self.counts[Action.FREE],
            bytes_paged_out=self.bytes_out, bytes_paged_in=self.bytes_in,
            peak_storage_bytes=self.peak_storage, resident_bytes=self.base,
        )


def _non_negative(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScheduleError(f"{name} = {value!r}: must be a non-negative whole number of bytes")


def check_schedule(graph: TrainingGraph, schedule: Schedule, *, budget_bytes: int | None = None,
                   resident_bytes: int = 0,
                   storage_capacity_bytes: int | None = None) -> CheckResult:
    """Replay ``schedule`` on ``graph`` and report its validity and figures.

    ``budget_bytes`` bounds activation bytes + ``resident_bytes`` (parameters, gradients,
    optimizer state) at every point; ``storage_capacity_bytes`` bounds the bytes on
    storage. ``None`` means unbounded. Never raises for an invalid schedule: the verdict
    is in the result (see :func:`check_schedule_or_raise`).
    """
    _non_negative("budget_bytes", budget_bytes)
    _non_negative("resident_bytes", resident_bytes)
    _non_negative("storage_capacity_bytes", storage_capacity_bytes)
    replay = _Replay(graph, schedule, budget_bytes, resident_bytes, storage_capacity_bytes)
    replay.run()
    return replay.result()


def check_schedule_or_raise(graph: TrainingGraph, schedule: Schedule, *,
                            budget_bytes: int | None = None, resident_bytes: int = 0,
                            storage_capacity_bytes: int | None = None) -> CheckResult:
    """:func:`check_schedule`, raising :class:`ScheduleError` with the violation's message."""
    result = check_schedule(graph, schedule, budget_bytes=budget_bytes,
                            resident_bytes=resident_bytes,
                            storage_capacity_bytes=storage_capacity_bytes)
    if result.violation is not None:
        raise ScheduleError(f"{result.violation.message} [{result.violation.rule}]")
    return result


def plain_schedule(graph: TrainingGraph) -> Schedule:
    """Every op computed once in graph order, each tensor freed right after its last reader.

    A tensor nobody reads is freed right after it is computed. Step ``COMPUTE k`` and the
    frees that follow it have stage ``k``. This is the accounting of
    :func:`poetsim.graph.memory.plain_peak`, so the checker's peak equals that peak.
    """
    n = len(graph.ops)
    frees_after: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        frees_after[max(graph.successors(i), default=i)].append(i)
    steps: list[Step] = []
    for k in range(n):
        steps.append(Step(Action.COMPUTE, k, k))
        steps.extend(Step(Action.FREE, i, k) for i in frees_after[k])
    return Schedule.for_graph(graph, with_weight_steps(steps, *weight_steps(graph)),
                              {"method": "plain"})
