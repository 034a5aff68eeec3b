"""The independent schedule checker, and the plain schedule every other one is measured against.

:func:`check_schedule` replays a :class:`~poetsim.schedule.ops.Schedule` with the
contract's one replay (:class:`~poetsim.schedule.replay.Replay`, which enforces the
structural rules of :mod:`poetsim.schedule.ops`) and adds the RAM budget. It shares no
code with the optimizer or the simulator, so it can judge both. It stops at the first
violation.

Rule codes (see :mod:`poetsim.schedule.ops` for their meaning):

==========================  =====================================================
``fingerprint_mismatch``    the schedule was made for another graph (position -1)
``unknown_op``              a step names an op index outside the graph
``input_not_resident``      COMPUTE while an input is not in RAM
``already_resident``        COMPUTE or PAGE_IN of a tensor already in RAM
``not_resident``            PAGE_OUT, FREE or MOVE of a tensor not in RAM
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
``layout_mismatch``         the schedule's layout (:mod:`poetsim.schedule.layout`) does not
                            hold exactly the buffers its steps keep (position -1)
``layout_outside``          a buffer of the layout lies outside its arena
``layout_overlap``          two buffers of the layout live at once share a byte (a MOVE's
                            destination and its own source may: a ``memmove``)
``move_mismatch``           a MOVE's offsets are not where the layout keeps its tensor
                            before and after it
==========================  =====================================================

Within a COMPUTE the structural rules are checked first (inputs, then the output), then
the budget. A schedule that carries a layout has it checked after its last step
(:func:`~poetsim.schedule.arena.adopt_layout`).
"""

from __future__ import annotations

import attrs

from poetsim.clock import Ticker, stop_at
from poetsim.errors import ScheduleError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.streaming import weight_steps
from poetsim.memo import PerObject
from poetsim.schedule.arena import adopt_layout
from poetsim.schedule.ops import Action, Schedule, Step, with_weight_steps
from poetsim.schedule.replay import GROWS, ContractViolation, Effect, Replay, Violation

__all__ = ["RULES", "CheckResult", "ScheduleError", "Violation", "check_schedule",
           "check_schedule_or_raise", "checked_replay", "plain_schedule"]

#: Every rule code the checker can report.
RULES = (
    "fingerprint_mismatch", "unknown_op", "input_not_resident", "already_resident",
    "not_resident", "not_on_storage", "redundant_page_out", "storage_full",
    "budget_exceeded", "never_computed", "recomputed_inplace_update", "weights_not_read",
    "weights_not_written", "stray_weight_step", "already_held", "hold_not_loaded", "not_held",
    "layout_mismatch", "layout_outside", "layout_overlap", "move_mismatch",
)


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


def _budget_violation(replay: Replay, effect: Effect, base: int, budget: int
                      ) -> Violation:
    k = effect.op
    name = replay.graph.ops[k].name
    what = {Action.COMPUTE: f"while {name!r} runs", Action.PAGE_IN: f"after paging in {name!r}",
            Action.HOLD_WEIGHTS: f"after holding the weights of {name!r}",
            Action.MOVE: f"while {name!r} is moved"}[effect.action]
    step = replay.steps[effect.position]
    total = effect.ram_bytes + base
    return Violation(effect.position, step, "budget_exceeded",
                     f"step {effect.position} ({step.describe(replay.graph)}): RAM would reach "
                     f"{total} B ({effect.ram_bytes} B activations {what} + {base} B "
                     f"resident), over the budget of {budget} B", k)


def _result(replay: Replay, violation: Violation | None, base: int) -> CheckResult:
    counts = replay.counts
    peak, peak_step = replay.peak_bytes + base, replay.peak_step
    if peak_step < 0:
        peak = base
    return CheckResult(
        valid=violation is None, violation=violation, peak_ram_bytes=peak,
        peak_step=peak_step, computes=counts[Action.COMPUTE], recomputes=replay.recomputes,
        page_outs=counts[Action.PAGE_OUT], page_ins=counts[Action.PAGE_IN],
        frees=counts[Action.FREE], bytes_paged_out=replay.bytes_paged_out,
        bytes_paged_in=replay.bytes_paged_in, peak_storage_bytes=replay.peak_storage_bytes,
        resident_bytes=base)


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
    return checked_replay(graph, schedule, budget_bytes=budget_bytes,
                          resident_bytes=resident_bytes,
                          storage_capacity_bytes=storage_capacity_bytes)[0]


def checked_replay(graph: TrainingGraph, schedule: Schedule, *, budget_bytes: int | None = None,
                   resident_bytes: int = 0, storage_capacity_bytes: int | None = None
                   ) -> tuple[CheckResult, Replay]:
    """:func:`check_schedule`, and its replay (finished when the schedule is valid: what
    :func:`~poetsim.schedule.model.predict` takes, so that a long schedule is replayed
    once to be checked and priced)."""
    _non_negative("budget_bytes", budget_bytes)
    _non_negative("resident_bytes", resident_bytes)
    _non_negative("storage_capacity_bytes", storage_capacity_bytes)
    replay = Replay(graph, schedule, storage_capacity_bytes=storage_capacity_bytes)
    violation = None
    room = None if budget_bytes is None else budget_bytes - resident_bytes
    try:
        for effect in replay:
            if room is not None and effect.ram_bytes > room and effect.action in GROWS:
                violation = _budget_violation(replay, effect, resident_bytes, budget_bytes)
                break
        if violation is None and schedule.layout is not None:
            adopt_layout(replay, schedule.layout,
                         resident_bytes=resident_bytes if resident_bytes else None)
    except ContractViolation as err:
        violation = err.violation
    return _result(replay, violation, resident_bytes), replay


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
    Made once per live graph (both are immutable): a comparison asks for it for
    checkpoint-all, each MILP method's op-list search and the reference energy, and its
    simulation's arena layout is then laid out once too.
    """
    return _PLAIN(graph, _plain_schedule)


#: The plain schedule of each live graph.
_PLAIN: PerObject[Schedule] = PerObject()


def _plain_schedule(graph: TrainingGraph) -> Schedule:
    n = len(graph.ops)
    frees_after: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        frees_after[max(graph.successors(i), default=i)].append(i)
    steps: list[Step] = []
    ticker = Ticker(stop_at())  # a command's limit
    for k in range(n):
        ticker.tick()
        steps.append(Step(Action.COMPUTE, k, k))
        steps.extend(Step(Action.FREE, i, k) for i in frees_after[k])
    return Schedule.for_graph(graph, with_weight_steps(steps, *weight_steps(graph)),
                              {"method": "plain"})
