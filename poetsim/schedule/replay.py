"""The one replay of the op-list contract: what each step does to RAM, storage and held weights.

:class:`Replay` walks a schedule's steps in list order, enforces every structural rule of
the contract (:mod:`poetsim.schedule.ops`) and yields one :class:`Effect` per step: the
activation bytes in RAM while it runs, whether a COMPUTE streams its weights or runs on
held ones, whether it writes them back, whether it recomputes. While a consumer looks at an
effect, the replay's sets (``resident``, ``stored``, ``held``, ``computed``) still show the
state *before* that step; the step takes effect when the next one is asked for. A broken
rule raises :class:`ContractViolation` at the step that breaks it, naming the rule.

Every reader of an op list goes through it: the checker (which adds the RAM budget), the
op-list energy model, the simulator's transfer planner and engine, the torch executor and
the plots. What the contract says about a step is decided here and nowhere else.

The RAM budget is not structural (the simulator runs a schedule over it and records the
overflow), so the replay only counts bytes; :func:`poetsim.schedule.check.check_schedule`
judges them. The storage capacity is checked when one is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import attrs

from poetsim.clock import Ticker, stop_at
from poetsim.errors import ContractViolation
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.streaming import held_bytes, hold_owners, weight_steps
from poetsim.memo import PerObject
from poetsim.schedule.ops import Action, Schedule, Step

__all__ = ["GROWS", "ContractViolation", "Effect", "Replay", "Violation", "held_weight_bytes",
           "move_extra_bytes", "replay"]

_COMPUTE, _PAGE_OUT, _PAGE_IN, _FREE = Action.COMPUTE, Action.PAGE_OUT, Action.PAGE_IN, Action.FREE
_READ, _WRITE = Action.READ_WEIGHTS, Action.WRITE_WEIGHTS
_HOLD, _DROP = Action.HOLD_WEIGHTS, Action.DROP_WEIGHTS
_MOVE = Action.MOVE
#: The steps after which (or while which) RAM can be higher than before them (where peaks
#: and budgets are met).
GROWS = frozenset({_COMPUTE, _PAGE_IN, _HOLD, _MOVE})


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


class Effect(NamedTuple):
    """What step ``position`` does, by the contract.

    ``ram_bytes``: activation bytes in RAM while the step runs (a COMPUTE's output and
    workspace included, a MOVE's destination bytes beyond its source) or, for the other
    steps, right after it; no resident region.
    ``reads_weights``: a COMPUTE right after its READ_WEIGHTS, which streams its weights
    from storage (priced at ``compute_*``; any other COMPUTE at ``held_compute_*``).
    ``writes_weights``: a COMPUTE right before its WRITE_WEIGHTS. A COMPUTE with either
    holds the storage device while it runs (:meth:`Replay.streams`). ``recompute``: a
    COMPUTE of an op computed before. ``overwrites``: the input whose buffer an in-place
    COMPUTE writes its output into (-1: a buffer of its own), see :meth:`Replay.in_place`.
    """

    position: int
    action: Action
    op: int
    stage: int
    ram_bytes: int
    reads_weights: bool = False
    writes_weights: bool = False
    recompute: bool = False
    overwrites: int = -1


@attrs.frozen
class _Facts:
    """What the contract needs of a graph, as lists (computed once per graph)."""

    output_bytes: list[int]
    workspace_bytes: list[int]
    reads: list[bool]
    writes: list[bool]
    recomputable: list[bool]
    preds: list[tuple[int, ...]]
    names: list[str]
    overwrites: list[int]


_FACTS: PerObject[_Facts] = PerObject()
_HOLDS: PerObject[tuple[list[int], list[int]]] = PerObject()


def _make_facts(graph: TrainingGraph) -> _Facts:
    ops = graph.ops
    reads, writes = weight_steps(graph)
    return _Facts([op.output_bytes for op in ops], [op.workspace_bytes for op in ops],
                  list(reads), list(writes), [op.recomputable for op in ops],
                  [graph.predecessors(k) for k in range(len(ops))], [op.name for op in ops],
                  [graph.overwrites(k) for k in range(len(ops))])


def _facts(graph: TrainingGraph) -> _Facts:
    return _FACTS(graph, _make_facts)


def _make_holds(graph: TrainingGraph) -> tuple[list[int], list[int]]:
    owners = list(hold_owners(graph))
    return owners, [int(b) for b in held_bytes(graph, owners)]


def _holds(graph: TrainingGraph) -> tuple[list[int], list[int]]:
    """Each op's hold owner (-1: none) and the bytes a hold of its weights keeps."""
    return _HOLDS(graph, _make_holds)


def held_weight_bytes(graph: TrainingGraph) -> list[int]:
    """The bytes a hold of each op's weights keeps in RAM (0: none can be held)."""
    return _holds(graph)[1]


def _is(step: Step | None, action: Action, op: int) -> bool:
    return step is not None and step.action is action and step.op == op


class Replay:
    """One replay of ``steps`` (a :class:`Schedule`, whose fingerprint is checked first,
    or a list of steps) on ``graph``; iterate it for the :class:`Effect` of each step.

    ``storage_capacity_bytes`` (None: unbounded) bounds the bytes on storage
    [``storage_full``]. When the iteration ends the columns below hold every step's
    figures, and :attr:`peak_bytes`, :attr:`counts` and the byte totals the whole list's;
    :meth:`run` replays to the end and returns the replay. After a violation they cover
    the steps before it.
    """

    def __init__(self, graph: TrainingGraph, steps: Schedule | Sequence[Step], *,
                 storage_capacity_bytes: int | None = None) -> None:
        self.graph = graph
        self.schedule = steps if isinstance(steps, Schedule) else None
        self.steps: Sequence[Step] = steps.steps if isinstance(steps, Schedule) else steps
        self.capacity = storage_capacity_bytes
        n = len(graph.ops)
        self.resident = [False] * n
        self.stored = [False] * n
        self.held = [False] * n
        self.computed = [False] * n
        #: per step: activation bytes (see :class:`Effect`), and the COMPUTE flags
        self.ram_bytes: list[int] = []
        self.reads_weights: list[bool] = []
        self.writes_weights: list[bool] = []
        #: PAGE_IN position -> the COMPUTE that first reads the tensor it brings back
        #: before the tensor is freed (-1: none), and the step before it that last touched
        #: the tensor (COMPUTE, PAGE_OUT, PAGE_IN or FREE of it; -1: none)
        self.page_in_consumer: dict[int, int] = {}
        self.page_in_after: dict[int, int] = {}
        #: in-place COMPUTE position -> the input whose buffer takes its output
        self.overwrites: dict[int, int] = {}
        #: MOVE positions, in list order
        self.move_positions: list[int] = []
        #: the positions of the PAGE_OUT and PAGE_IN steps, and of the WRITE_WEIGHTS steps
        self.transfer_positions: list[int] = []
        self.write_back_positions: list[int] = []
        self.counts = dict.fromkeys(Action, 0)
        self.recomputes = 0
        self.live_bytes = 0
        self.storage_bytes = 0
        self.peak_bytes = 0
        self.peak_step = -1
        self.peak_storage_bytes = 0
        self.bytes_paged_out = 0
        self.bytes_paged_in = 0
        self.finished = False

    # ------------------------------------------------------------------ violations
    def _fail(self, position: int, step: Step | None, rule: str, detail: str,
              op: int | None = None) -> ContractViolation:
        if step is not None:
            where = f"step {position} ({step.describe(self.graph)})"
        elif rule == "never_computed":
            where = f"after the last step ({position} steps)"
        else:
            where = "schedule"
        return ContractViolation(Violation(position, step, rule, f"{where}: {detail}", op))

    def _check_fingerprint(self) -> None:
        from poetsim.graph.io import graph_fingerprint

        schedule, graph = self.schedule, self.graph
        if schedule is None:
            return
        expected = graph_fingerprint(graph)
        if schedule.graph_fingerprint != expected:
            raise self._fail(-1, None, "fingerprint_mismatch",
                             f"made for graph {schedule.graph_name!r} with fingerprint "
                             f"{schedule.graph_fingerprint[:12]!r}, not for graph "
                             f"{graph.name!r} (fingerprint {expected[:12]!r})")

    def _check_compute(self, position: int, step: Step, before: Step | None,
                       after: Step | None, facts: _Facts) -> None:
        k, name = step.op, facts.names[step.op]
        if facts.reads[k] and not self.held[k] and not _is(before, _READ, k):
            raise self._fail(position, step, "weights_not_read",
                             f"op {name!r} reads weights that live on storage: its COMPUTE "
                             "must follow its READ_WEIGHTS (or its weights be held)", k)
        if facts.writes[k] and not _is(after, _WRITE, k):
            raise self._fail(position, step, "weights_not_written",
                             f"op {name!r} updates weights that live on storage in place: "
                             "its COMPUTE must be followed by its WRITE_WEIGHTS", k)
        resident = self.resident
        missing = next((p for p in facts.preds[k] if not resident[p]), None)
        if missing is not None:
            raise self._fail(position, step, "input_not_resident",
                             f"input {facts.names[missing]!r} of op {name!r} is not resident "
                             "in RAM", k)
        if resident[k]:
            raise self._fail(position, step, "already_resident",
                             f"output of op {name!r} is already resident in RAM", k)
        if self.computed[k] and not facts.recomputable[k]:
            raise self._fail(position, step, "recomputed_inplace_update",
                             f"op {name!r} applies its SGD step in place, so it cannot run "
                             "again: it would read the weights it updated", k)

    def _check_other(self, position: int, step: Step, before: Step | None,
                     after: Step | None, facts: _Facts) -> None:
        """The rules of every step but COMPUTE."""
        _OTHER_RULES[step.action](self, position, step, before, after, facts)

    def _check_page_out(self, position: int, step: Step, _before: Step | None,
                        _after: Step | None, facts: _Facts) -> None:
        k, name = step.op, facts.names[step.op]
        size = facts.output_bytes[k]
        if not self.resident[k]:
            raise self._fail(position, step, "not_resident",
                             f"tensor {name!r} is not resident in RAM, nothing to page "
                             "out", k)
        if self.stored[k]:
            raise self._fail(position, step, "redundant_page_out",
                             f"tensor {name!r} already has a copy on storage", k)
        if self.capacity is not None and self.storage_bytes + size > self.capacity:
            raise self._fail(position, step, "storage_full",
                             f"paging out tensor {name!r} ({size} B) needs "
                             f"{self.storage_bytes + size} B of storage, over the "
                             f"capacity of {self.capacity} B", k)

    def _check_page_in(self, position: int, step: Step, _before: Step | None,
                       _after: Step | None, facts: _Facts) -> None:
        k, name = step.op, facts.names[step.op]
        if not self.stored[k]:
            raise self._fail(position, step, "not_on_storage",
                             f"tensor {name!r} has no copy on storage to page in", k)
        if self.resident[k]:
            raise self._fail(position, step, "already_resident",
                             f"tensor {name!r} is already resident in RAM", k)

    def _check_free(self, position: int, step: Step, _before: Step | None,
                    _after: Step | None, facts: _Facts) -> None:
        k = step.op
        if not self.resident[k]:
            raise self._fail(position, step, "not_resident",
                             f"tensor {facts.names[k]!r} is not resident in RAM, nothing to "
                             "free", k)

    def _check_move(self, position: int, step: Step, _before: Step | None,
                    _after: Step | None, facts: _Facts) -> None:
        k = step.op
        if not self.resident[k]:
            raise self._fail(position, step, "not_resident",
                             f"tensor {facts.names[k]!r} is not resident in RAM, nothing to "
                             "move", k)
        was = self._moved_to.get(k, step.from_offset_bytes)
        if was != step.from_offset_bytes:
            raise self._fail(position, step, "move_mismatch",
                             f"tensor {facts.names[k]!r} was moved to {was}, not to "
                             f"{step.from_offset_bytes}, by its last MOVE", k)

    def _check_hold(self, position: int, step: Step, _before: Step | None,
                    after: Step | None, facts: _Facts) -> None:
        k, name = step.op, facts.names[step.op]
        f = _holds(self.graph)[0][k]
        if f < 0:
            raise self._fail(position, step, "stray_weight_step",
                             f"op {name!r} has no forward op whose run can load the "
                             "weights it reads: its weights cannot be held", k)
        if self.held[k]:
            raise self._fail(position, step, "already_held",
                             f"the weights of op {name!r} are already held in RAM", k)
        steps = self.steps
        later = steps[position + 2] if position + 2 < len(steps) else None
        if not (_is(after, _READ, f) and _is(later, _COMPUTE, f)):
            owner = facts.names[f]
            raise self._fail(position, step, "hold_not_loaded",
                             f"holding the weights of op {name!r} needs the run of "
                             f"{owner!r} that loads them: READ_WEIGHTS and COMPUTE of "
                             f"{owner!r} must follow right away", k)

    def _check_drop(self, position: int, step: Step, _before: Step | None,
                    _after: Step | None, facts: _Facts) -> None:
        k = step.op
        if not self.held[k]:
            raise self._fail(position, step, "not_held",
                             f"the weights of op {facts.names[k]!r} are not held in RAM, "
                             "nothing to drop", k)

    def _check_weight_step(self, position: int, step: Step, before: Step | None,
                           after: Step | None, facts: _Facts) -> None:
        """READ_WEIGHTS right before its op's COMPUTE, WRITE_WEIGHTS right after."""
        k, action, name = step.op, step.action, facts.names[step.op]
        reading = action is _READ
        if not (facts.reads if reading else facts.writes)[k]:
            raise self._fail(position, step, "stray_weight_step",
                             f"op {name!r} {'reads' if reading else 'writes'} no weights "
                             f"{'from' if reading else 'to'} storage", k)
        if not _is(after if reading else before, _COMPUTE, k):
            raise self._fail(position, step, "stray_weight_step",
                             f"{action.value} must come right "
                             f"{'before' if reading else 'after'} a COMPUTE of op "
                             f"{name!r}", k)

    # ------------------------------------------------------------------ the walk
    def in_place(self, position: int, k: int) -> int:
        """The input whose buffer the COMPUTE of op ``k`` at ``position`` writes its output
        into, or -1. An op with an in-place kernel (``Op.overwrites``, input ``u``) runs in
        place when ``u`` is freed after it before RAM can grow again (before the next
        COMPUTE, PAGE_IN, HOLD_WEIGHTS or MOVE), and neither ``u`` is paged out nor ``k``'s own
        output freed first: ``u`` is then dead once ``k`` has read it, and its buffer holds
        ``k``'s output from then on."""
        u = _facts(self.graph).overwrites[k]
        if u < 0:
            return -1
        steps = self.steps
        for p in range(position + 1, len(steps)):
            step = steps[p]
            action = step.action
            if action in GROWS:
                return -1
            if step.op == u and action is _FREE:
                return u
            if (step.op == u and action is _PAGE_OUT) or (step.op == k and action is _FREE):
                return -1
        return -1

    def __iter__(self) -> Iterator[Effect]:
        self._check_fingerprint()
        graph, facts = self.graph, _facts(self.graph)
        n = len(graph.ops)
        steps = self.steps
        self._hold_bytes: list[int] | None = None
        self._touched: dict[int, int] = {}  # tensor -> the last step that touched it
        self._unread: dict[int, int] = {}   # tensor -> its PAGE_IN still waiting for a reader
        self._shared: dict[int, int] = {}   # tensor -> bytes of its buffer an in-place output took
        self._moved_to: dict[int, int] = {}  # resident tensor -> where its last MOVE put it
        ram_col, read_col, write_col = self.ram_bytes, self.reads_weights, self.writes_weights
        last = len(steps) - 1
        before: Step | None = None
        ticker = Ticker(stop_at())  # a command's limit: a long schedule replays in seconds
        for position, step in enumerate(steps):
            ticker.tick()
            k = step.op
            if k >= n:
                raise self._fail(position, step, "unknown_op",
                                 f"op index {k} is not an op of graph {graph.name!r} "
                                 f"({n} ops)", k)
            after = steps[position + 1] if position < last else None
            if step.action is _COMPUTE:
                self._check_compute(position, step, before, after, facts)
                effect = self._compute_effect(position, step, before, after, facts)
            else:
                self._check_other(position, step, before, after, facts)
                effect = Effect(position, step.action, k, step.stage,
                                self._ram_after(step, facts))
            ram_col.append(effect.ram_bytes)
            read_col.append(effect.reads_weights)
            write_col.append(effect.writes_weights)
            yield effect
            self._take(effect, facts)
            before = step
        missing = next((i for i in range(n) if not self.computed[i]), None)
        if missing is not None:
            raise self._fail(len(steps), None, "never_computed",
                             f"op {facts.names[missing]!r} is never computed", missing)
        self.finished = True

    def _compute_effect(self, position: int, step: Step, before: Step | None,
                        after: Step | None, facts: _Facts) -> Effect:
        """What the COMPUTE at ``position`` does: its RAM, weight streams, in-place input."""
        k = step.op
        size, workspace = facts.output_bytes, facts.workspace_bytes
        reads = before is not None and before.action is _READ
        writes = after is not None and after.action is _WRITE
        into = self.in_place(position, k) if facts.overwrites[k] >= 0 else -1
        if into >= 0:
            self.overwrites[position] = into
            self._shared[into] = size[k]
            ram = self.live_bytes + workspace[k]  # the output lands in the input's buffer
        else:
            ram = self.live_bytes + size[k] + workspace[k]
        return Effect(position, _COMPUTE, k, step.stage, ram, reads, writes, self.computed[k],
                      into)

    def _ram_after(self, step: Step, facts: _Facts) -> int:
        """The activation bytes once a step other than COMPUTE has run."""
        action, k, live = step.action, step.op, self.live_bytes
        if action is _PAGE_IN:
            return live + facts.output_bytes[k]
        if action is _FREE:  # less what an in-place output kept of its buffer
            return live - facts.output_bytes[k] + self._shared.pop(k, 0)
        if action is _MOVE:  # while it copies: the destination beyond the source
            return live + move_extra_bytes(step, facts.output_bytes[k])
        if action is _HOLD or action is _DROP:
            if self._hold_bytes is None:
                self._hold_bytes = _holds(self.graph)[1]
            held = self._hold_bytes[k]
            return live + held if action is _HOLD else live - held
        return live

    def _take(self, effect: Effect, facts: _Facts) -> None:
        """The step takes effect: residency, storage, counts and the peak move on."""
        action, k, ram, position = effect.action, effect.op, effect.ram_bytes, effect.position
        self.counts[action] += 1
        if action in GROWS and (ram > self.peak_bytes or self.peak_step < 0):
            self.peak_bytes, self.peak_step = ram, position
        if action is _COMPUTE:
            for u in facts.preds[k]:
                reader = self._unread.pop(u, None)
                if reader is not None:
                    self.page_in_consumer[reader] = position
            if self.computed[k]:
                self.recomputes += 1
            self.resident[k] = self.computed[k] = True
            self.live_bytes = ram - facts.workspace_bytes[k]
            self._touched[k] = position
        elif action is _PAGE_OUT:
            self._take_page_out(position, k, facts.output_bytes[k])
        elif action is _PAGE_IN:
            self.transfer_positions.append(position)
            self.resident[k] = True
            self.live_bytes = ram
            self.bytes_paged_in += facts.output_bytes[k]
            self.page_in_after[position] = self._touched.get(k, -1)
            self.page_in_consumer[position] = -1
            self._unread[k] = position
            self._touched[k] = position
        elif action is _FREE:
            self.resident[k] = False
            self.live_bytes = ram
            self._unread.pop(k, None)
            self._moved_to.pop(k, None)
            self._touched[k] = position
        elif action is _HOLD or action is _DROP:
            self.held[k] = action is _HOLD
            self.live_bytes = ram
        elif action is _WRITE:
            self.write_back_positions.append(position)
        elif action is _MOVE:  # the copy's extra bytes are gone once it ends
            self.move_positions.append(position)
            self._moved_to[k] = self.steps[position].to_offset_bytes

    def _take_page_out(self, position: int, k: int, size: int) -> None:
        self.transfer_positions.append(position)
        self.stored[k] = True
        self.storage_bytes += size
        self.bytes_paged_out += size
        if self.storage_bytes > self.peak_storage_bytes:
            self.peak_storage_bytes = self.storage_bytes
        self._touched[k] = position

    def streams(self, position: int) -> bool:
        """Step ``position`` runs an op that streams its weights through the storage device
        (reads or writes them back), holding the device while it computes."""
        return self.reads_weights[position] or self.writes_weights[position]

    def run(self) -> Replay:
        """Replay every step (raising :class:`ContractViolation` at a broken rule); self."""
        for _ in self:
            pass
        return self


#: The rules of each step kind but COMPUTE.
_OTHER_RULES = {_PAGE_OUT: Replay._check_page_out, _PAGE_IN: Replay._check_page_in,
                _FREE: Replay._check_free, _HOLD: Replay._check_hold, _DROP: Replay._check_drop,
                _MOVE: Replay._check_move,
                _READ: Replay._check_weight_step, _WRITE: Replay._check_weight_step}


def move_extra_bytes(step: Step, size_bytes: int) -> int:
    """The bytes a MOVE of a ``size_bytes`` buffer takes beyond its source while it copies:
    the destination's, less what overlaps the source (a ``memmove``)."""
    return min(size_bytes, abs(step.to_offset_bytes - step.from_offset_bytes))


def replay(graph: TrainingGraph, steps: Schedule | Iterable[Step], *,
           storage_capacity_bytes: int | None = None) -> Replay:
    """The finished :class:`Replay` of ``steps`` on ``graph`` (see :meth:`Replay.run`)."""
    if not isinstance(steps, Schedule):
        steps = list(steps)
    return Replay(graph, steps, storage_capacity_bytes=storage_capacity_bytes).run()
