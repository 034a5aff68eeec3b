"""The schedule: the executable op list that the optimizer, the baselines and the simulator share.

A :class:`Schedule` is a sequence of :class:`Step` s for one
:class:`~poetsim.graph.graph.TrainingGraph`. Every step applies one :class:`Action` to one
*tensor*; as in the graph, op ``k`` produces exactly one tensor (its output), so "tensor
``k``" means the output of ``graph.ops[k]``. This module docstring is the contract; the
one replay (:class:`poetsim.schedule.replay.Replay`) and the checker
(:func:`poetsim.schedule.check.check_schedule`) implement it rule by
rule and name each rule by the code given in brackets.

State
-----
Replaying a schedule tracks two sets of tensors, both empty at the start:

* the **resident set**: tensors held in RAM (the activation memory);
* the **storage set**: tensors of which a copy is on secondary storage (SD card, flash).

Tensors in neither set are just not available; a tensor may be in both. On a graph whose
weights live on storage a third set, empty at the start too, is the **held set**: the
ops whose weights are held in RAM (see ``HOLD_WEIGHTS``).

Steps, in list order (each one finishes before the next starts)
---------------------------------------------------------------
``COMPUTE k``
    Runs op ``k``. Every input of op ``k`` (``graph.predecessors(k)``) must be resident
    [``input_not_resident``], and tensor ``k`` itself must not be resident
    [``already_resident``]. While the op runs, RAM holds every resident tensor plus
    ``output_bytes[k]`` plus ``workspace_bytes[k]`` (the workspace is released when the op
    ends). Afterwards tensor ``k`` is resident. The storage set does not change: a copy of
    ``k`` on storage stays valid, because recomputing gives the same values. A COMPUTE of an
    op that was computed before is a *recomputation* (rematerialization); an op that
    applies its SGD step in place (``Op.inplace_update``) runs once
    [``recomputed_inplace_update``]: a second run would read the weights it updated.
    *In place*: an op with an in-place kernel (``Op.overwrites``, input ``u``) writes its
    output into ``u``'s buffer when the list frees ``u`` after the COMPUTE before RAM can
    grow again (before the next COMPUTE, PAGE_IN, HOLD_WEIGHTS or MOVE), with no PAGE_OUT of
    ``u`` and no FREE of ``k`` in between (:meth:`~poetsim.schedule.replay.Replay.in_place`).
    Then RAM while it runs holds no ``output_bytes[k]`` beyond the resident tensors and the
    workspace; ``u``'s buffer holds tensor ``k`` from then on, and the ``FREE u`` releases
    only ``output_bytes[u] - output_bytes[k]`` of it. A write of ``u`` to storage still in
    flight must end before the op runs.
``PAGE_OUT k``
    Copies tensor ``k`` to storage. It must be resident [``not_resident``] and must not
    already have a copy on storage [``redundant_page_out``]: every tensor is written at most
    once per iteration. Tensor ``k`` stays resident; only a later ``FREE k`` releases its
    RAM. With a storage capacity, the storage set's bytes must fit [``storage_full``].
``PAGE_IN k``
    Reads tensor ``k`` back. It must be on storage [``not_on_storage``] and not resident
    [``already_resident``]. It becomes resident, and its page-in buffer counts in RAM from
    this step on. The storage copy stays.
``FREE k``
    Releases tensor ``k`` from RAM. It must be resident [``not_resident``]. Its storage
    copy, if any, stays (storage is never released within an iteration).
``READ_WEIGHTS k`` and ``WRITE_WEIGHTS k``
    On a graph whose weights live on the storage device (its ``weights_on_storage``
    metadata, :mod:`poetsim.graph.streaming`), an op that reads weights from there runs as
    ``READ_WEIGHTS k`` right before its ``COMPUTE k`` [``weights_not_read``], and one that
    writes its in-place update back runs ``WRITE_WEIGHTS k`` right after it
    [``weights_not_written``], every time it runs. Both steps belong to the op's run:
    ``READ_WEIGHTS`` streams the op's weights slice by slice into the two slice buffers of
    its workspace as it computes, ``WRITE_WEIGHTS`` writes the updated slices back, and
    the op holds the storage device from the first to the last (no page transfer runs
    beside it). They change neither set, and RAM is that of the ``COMPUTE``. Such a step
    anywhere else, or for an op with no weights to read or write there, breaks
    [``stray_weight_step``]. The one exception: a ``COMPUTE k`` while op ``k``'s weights
    are held (below) needs no ``READ_WEIGHTS`` (one there is allowed: it streams them
    again); ``WRITE_WEIGHTS`` is required after each run of an op writing back, held or
    not.
``HOLD_WEIGHTS k`` and ``DROP_WEIGHTS k``
    A backward op's weights may be *held* instead of streamed: the run of its forward op
    ``f`` (its hold owner, :func:`poetsim.graph.streaming.hold_owners`) reads them whole
    into RAM, and they stay there until dropped. ``HOLD_WEIGHTS k`` needs an op ``k`` with
    a hold owner [``stray_weight_step``] whose weights are not held already
    [``already_held``], and must be followed right away by ``READ_WEIGHTS f`` and that by
    ``COMPUTE f`` [``hold_not_loaded``]: that run loads them. Op ``k`` joins the held set,
    and RAM grows by ``held_bytes[k]`` (:func:`poetsim.graph.streaming.held_bytes`, the
    bytes op ``k`` reads from storage) from this step on, so they count during
    ``COMPUTE f`` already.
    ``DROP_WEIGHTS k`` needs op ``k`` in the held set [``not_held``]; it leaves it and
    RAM shrinks by ``held_bytes[k]``. Held weights may remain at the end of the list.
``MOVE k from a to b``
    Compaction: copies tensor ``k``'s buffer from arena offset ``a`` to arena offset ``b``
    (``Step.from_offset_bytes``, ``Step.to_offset_bytes``: bytes from the arena's start,
    the resident state included, as the layout's offsets; whole numbers, ``a != b``), a
    memory copy of ``output_bytes[k]`` priced on the DMA engine when the board has one,
    else on the CPU (:func:`poetsim.costs.move_cost`). Tensor ``k`` must be resident
    [``not_resident``]. It stays resident with the same values, in neither set's change,
    and its buffer is at ``b`` from this step on. While the copy runs RAM holds the
    resident tensors plus the destination bytes the source does not already cover,
    ``min(output_bytes[k], |b - a|)``: the two ranges may overlap, and the copy then has
    ``memmove`` semantics (it runs in the direction that reads every byte before it is
    overwritten), so a buffer may slide by less than its own size. A schedule's layout
    must agree: the tensor's buffer live before the MOVE lies at ``a``, the one after it
    at ``b`` [``move_mismatch``], and the destination lies within the arena
    [``layout_outside``] and shares no byte with any other buffer live at the MOVE
    [``layout_overlap``]. A later MOVE of the tensor, while it stays resident, starts where
    this one put it [``move_mismatch``]. A write of ``k`` to storage or a read of it still
    in flight ends before the copy starts. A MOVE is a step at which RAM can grow (for
    the in-place rule above and the budget).

Pricing: a ``COMPUTE k`` right after its ``READ_WEIGHTS k`` costs ``compute_time_s[k]`` /
``compute_energy_j[k]`` (:class:`poetsim.costs.OpCosts`), one without it
``held_compute_time_s[k]`` / ``held_compute_energy_j[k]`` (no read from storage; the same
numbers for an op reading no weights). An op holds the storage device while it runs when
its COMPUTE has ``READ_WEIGHTS`` right before it or ``WRITE_WEIGHTS`` right after it.

Every step's op must be an op of the graph [``unknown_op``], and the schedule must be made
for this graph: its ``graph_fingerprint`` equals
:func:`poetsim.graph.io.graph_fingerprint` of the graph [``fingerprint_mismatch``]. When the
list ends, every op of the graph must have been computed at least once
[``never_computed``]; tensors may stay resident at the end (the next iteration starts from
scratch).

Memory
------
The accounting is exactly that of :mod:`poetsim.graph.memory`: the activation RAM in use
is the sum of ``output_bytes`` over the resident set, plus ``held_bytes`` over the held
set, plus, during a COMPUTE, the op's output and workspace. Its peak over the schedule is
reached either during a COMPUTE or a MOVE, or right after a PAGE_IN or a HOLD_WEIGHTS. A RAM budget
bounds this activation figure plus the fixed resident region (parameters, gradients,
optimizer state) at every point [``budget_exceeded``].
Paging, freeing, holding and dropping take effect at their step, in list order.

Stages
------
Each step carries ``stage``, the MILP stage (timestep ``t``) it belongs to, ``>= 0``.
Stages are informational: they tie a step to the optimizer's ``R``/``S``/``M`` matrices
and let traces and plots be laid out per stage. Producers should emit them in non-decreasing
order; the checker does not require it and the list order alone defines execution.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from poetsim.errors import InputError
from poetsim.schedule.layout import Layout

if TYPE_CHECKING:
    from poetsim.graph.graph import TrainingGraph

__all__ = ["HOLD_ACTIONS", "WEIGHT_ACTIONS", "Action", "Schedule", "Step",
           "with_weight_steps"]


class Action(enum.Enum):
    """What a step does to its tensor (see the module docstring for the exact rules)."""

    COMPUTE = "compute"
    PAGE_OUT = "page_out"
    PAGE_IN = "page_in"
    FREE = "free"
    READ_WEIGHTS = "read_weights"
    WRITE_WEIGHTS = "write_weights"
    HOLD_WEIGHTS = "hold_weights"
    DROP_WEIGHTS = "drop_weights"
    MOVE = "move"


#: The steps that move weights on storage (they bracket a COMPUTE, see the module docstring).
WEIGHT_ACTIONS = frozenset({Action.READ_WEIGHTS, Action.WRITE_WEIGHTS})
#: The steps that keep a backward op's weights in RAM and release them (a hold).
HOLD_ACTIONS = frozenset({Action.HOLD_WEIGHTS, Action.DROP_WEIGHTS})


def _to_action(value: Any) -> Action:
    if isinstance(value, Action):
        return value
    try:
        return Action(value)
    except ValueError:
        allowed = ", ".join(a.value for a in Action)
        raise InputError(f"action = {value!r}: must be one of {allowed}") from None


def _whole(field: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if type(value) is int and value >= 0:  # the common case, millions of steps
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"step {field} = {value!r}: must be an integer")
        if value < 0:
            raise InputError(f"step {field} = {value!r}: must not be negative")
    return check


def _offset(instance: Step, attribute: Any, value: Any) -> None:
    """A MOVE's offsets are whole non-negative bytes; every other step has none (-1)."""
    if value == -1 and type(value) is int and instance.action is not Action.MOVE:
        return  # the common case: no offsets
    field = attribute.name
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"step {field} = {value!r}: must be an integer")
    if instance.action is not Action.MOVE:
        if value != -1:
            raise InputError(f"step {field} = {value!r}: only a move step has offsets")
    elif value < 0:
        raise InputError(f"step {field} = {value!r}: a move's offset must not be negative")


@attrs.frozen
class Step:
    """One entry of a schedule: apply ``action`` to the output tensor of ``graph.ops[op]``.

    ``stage`` is the MILP stage (timestep) the step belongs to. A MOVE copies the tensor's
    buffer from arena offset ``from_offset_bytes`` to ``to_offset_bytes`` (every other
    step: -1 for both).
    """

    action: Action = attrs.field(converter=_to_action)
    op: int = attrs.field(validator=_whole("op"))
    stage: int = attrs.field(default=0, validator=_whole("stage"))
    from_offset_bytes: int = attrs.field(default=-1, validator=_offset, kw_only=True)
    to_offset_bytes: int = attrs.field(default=-1, validator=_offset, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.action is Action.MOVE and self.from_offset_bytes == self.to_offset_bytes:
            raise InputError(f"move step to_offset_bytes = {self.to_offset_bytes}: must "
                             "differ from its from_offset_bytes (a move must move)")

    @classmethod
    def move(cls, op: int, stage: int, from_offset_bytes: int, to_offset_bytes: int) -> Step:
        """``MOVE op`` from one arena offset to another."""
        return cls(Action.MOVE, op, stage, from_offset_bytes=from_offset_bytes,
                   to_offset_bytes=to_offset_bytes)

    def describe(self, graph: TrainingGraph | None = None) -> str:
        """``compute 'conv1', stage 3``; the op index instead of its name without a graph."""
        if graph is not None and self.op < len(graph.ops):
            what = repr(graph.ops[self.op].name)
        else:
            what = f"#{self.op}"
        if self.action is Action.MOVE:
            what += f" from {self.from_offset_bytes} to {self.to_offset_bytes}"
        return f"{self.action.value} {what}, stage {self.stage}"


def _steps(value: Iterable[Any]) -> tuple[Step, ...]:
    steps = tuple(value)
    for i, step in enumerate(steps):
        if not isinstance(step, Step):
            raise InputError(f"steps[{i}] = {step!r}: must be a Step")
    return steps


def _string(field: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, str):
            raise InputError(f"schedule {field} = {value!r}: must be a string")
    return check


@attrs.frozen
class Schedule:
    """An executable op list for one training graph.

    Parameters
    ----------
    graph_name:
        Name of the graph the schedule was made for (informational).
    graph_fingerprint:
        :func:`poetsim.graph.io.graph_fingerprint` of that graph; the checker and the
        readers refuse a schedule whose fingerprint differs from the graph's.
    steps:
        The steps, in execution order.
    metadata:
        Free JSON-ready facts about the schedule: ``method``, ``board``, budget semantics,
        predicted energy / time / peak, solver status, ... Compared by ``==`` but not
        hashed.
    layout:
        Where a runtime keeps every buffer the steps make resident
        (:class:`~poetsim.schedule.layout.Layout`), or None: a simulation plans one. The
        checker and the simulator check a layout against the steps.
    """

    graph_name: str = attrs.field(validator=_string("graph_name"))
    graph_fingerprint: str = attrs.field(validator=_string("graph_fingerprint"))
    steps: tuple[Step, ...] = attrs.field(converter=_steps)
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, hash=False)
    layout: Layout | None = attrs.field(default=None, hash=False)

    @classmethod
    def for_graph(cls, graph: TrainingGraph, steps: Iterable[Step],
                  metadata: Mapping[str, Any] | None = None) -> Schedule:
        """A schedule of ``steps`` labelled with ``graph``'s name and fingerprint."""
        from poetsim.graph.io import graph_fingerprint

        return cls(graph.name, graph_fingerprint(graph), steps, metadata or {})

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def counts(self) -> dict[Action, int]:
        """Number of steps per action (every action present, zeros included)."""
        found = Counter(step.action for step in self.steps)
        return {action: found[action] for action in Action}

    def count(self, action: Action | str) -> int:
        action = _to_action(action)
        return sum(1 for step in self.steps if step.action is action)

    @property
    def computes(self) -> int:
        return self.count(Action.COMPUTE)

    @property
    def page_outs(self) -> int:
        return self.count(Action.PAGE_OUT)

    @property
    def page_ins(self) -> int:
        return self.count(Action.PAGE_IN)

    @property
    def frees(self) -> int:
        return self.count(Action.FREE)

    def recomputations(self) -> int:
        """COMPUTE steps beyond the first of each op."""
        computed = [step.op for step in self.steps if step.action is Action.COMPUTE]
        return len(computed) - len(set(computed))

    def recomputed_ops(self) -> dict[int, int]:
        """Op index -> number of its recomputations, for the ops computed more than once."""
        found = Counter(step.op for step in self.steps if step.action is Action.COMPUTE)
        return {op: n - 1 for op, n in sorted(found.items()) if n > 1}

    @property
    def stages(self) -> int:
        """Number of stages spanned (highest stage + 1; 0 for an empty schedule)."""
        return max((step.stage for step in self.steps), default=-1) + 1

    def with_metadata(self, **updates: Any) -> Schedule:
        """A copy with ``updates`` merged into the metadata."""
        return attrs.evolve(self, metadata={**self.metadata, **updates})


def with_weight_steps(steps: Iterable[Step], reads: Sequence[bool],
                      writes: Sequence[bool]) -> list[Step]:
    """``steps`` with each COMPUTE of an op that reads weights from storage
    (``reads[k]``) preceded by its ``READ_WEIGHTS``, unless the op's weights are held then,
    and each of one that writes them back (``writes[k]``) followed by its
    ``WRITE_WEIGHTS`` (the contract's rule); any weight steps already there are replaced.
    HOLD_WEIGHTS and DROP_WEIGHTS steps stay where they are: a hold placed right before its
    owner's COMPUTE gets that COMPUTE's READ_WEIGHTS between them, and a DROP_WEIGHTS right
    after a COMPUTE stays after its WRITE_WEIGHTS.
    :func:`poetsim.graph.streaming.weight_steps` gives the flags of a graph."""
    out: list[Step] = []
    held: set[int] = set()
    for step in steps:
        action = step.action
        if action in WEIGHT_ACTIONS:
            continue
        if action is Action.HOLD_WEIGHTS:
            held.add(step.op)
        elif action is Action.DROP_WEIGHTS:
            held.discard(step.op)
        elif action is Action.COMPUTE:
            k = step.op
            if reads[k] and k not in held:
                out.append(Step(Action.READ_WEIGHTS, k, step.stage))
            out.append(step)
            if writes[k]:
                out.append(Step(Action.WRITE_WEIGHTS, k, step.stage))
            continue
        out.append(step)
    return out
