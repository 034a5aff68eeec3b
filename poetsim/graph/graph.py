"""The training graph: ops, data-dependency edges, and a deterministic topological order.

A :class:`TrainingGraph` is immutable and always valid: construction checks every rule and
raises :class:`~poetsim.errors.GraphError` naming the op and the rule it breaks.
:func:`check_gradients` adds autograd's rules on which ops have a backward op; graph files
and derived graphs must pass it (hand-built graphs, e.g. in tests, need not). Ops are
stored in topological order; an edge ``(i, j)`` means op ``j`` reads the output of op
``i``, so ``i < j`` always holds.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from poetsim.errors import GraphError
from poetsim.graph.ops import Op, Phase
from poetsim.graph.precision import Precision, precision_of, rescale_bytes

__all__ = ["CHANNEL_KINDS", "TrainingGraph", "ResidentMemory", "check_gradients",
           "inplace_gradient_bytes", "needs_gradient", "resident_memory", "topological_order",
           "update_gradient_bytes", "weights_per_output_channel"]


def topological_order(names: Sequence[str], edges: Iterable[tuple[int, int]]) -> list[int]:
    """Kahn's algorithm that always takes the lowest-index ready op.

    The result is deterministic, and an order that is already topological is kept as is.
    Raises :class:`GraphError` naming a cycle if there is one.
    """
    n = len(names)
    succs: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i, j in edges:
        succs[i].append(j)
        indegree[j] += 1
    ready = [i for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < n:
        raise GraphError(f"cycle through ops {_find_cycle(names, succs, indegree)}")
    return order


def _find_cycle(names: Sequence[str], succs: list[list[int]], indegree: list[int]) -> str:
    """A readable cycle among the ops Kahn's algorithm could not order."""
    remaining = {i for i, d in enumerate(indegree) if d > 0}
    start = min(remaining)
    path, seen = [start], {start: 0}
    node = start
    while True:
        node = next(j for j in succs[node] if j in remaining)
        if node in seen:
            cycle = path[seen[node]:] + [node]
            return " -> ".join(repr(names[i]) for i in cycle)
        seen[node] = len(path)
        path.append(node)


def _as_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen
class TrainingGraph:
    """A validated training graph (forward ops, one loss, backward ops).

    Build one with :meth:`from_ops` (names, any order) or from a forward description with
    :func:`poetsim.graph.autograd.derive_training_graph`.
    """

    name: str
    ops: tuple[Op, ...] = attrs.field(converter=_as_tuple)
    edges: tuple[tuple[int, int], ...] = attrs.field(
        converter=lambda e: tuple(sorted(map(tuple, e))))
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, eq=False)
    _index: dict[str, int] = attrs.field(init=False, repr=False, eq=False)
    _preds: tuple[tuple[int, ...], ...] = attrs.field(init=False, repr=False, eq=False)
    _succs: tuple[tuple[int, ...], ...] = attrs.field(init=False, repr=False, eq=False)
    _overwrites: tuple[int, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        index: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            if not isinstance(op, Op):
                raise GraphError(f"graph {self.name!r}: entry {i} is not an Op")
            if op.name in index:
                raise GraphError(f"op {op.name!r}: duplicate op name")
            index[op.name] = i
        n = len(self.ops)
        if n == 0:
            raise GraphError(f"graph {self.name!r}: has no ops")
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        previous = None
        for edge in self.edges:
            i, j = edge
            if not (0 <= i < n and 0 <= j < n):
                raise GraphError(f"graph {self.name!r}: edge {edge} refers to a missing op")
            if edge == previous:
                raise GraphError(
                    f"op {self.ops[j].name!r}: input {self.ops[i].name!r} listed twice "
                    "(a duplicate edge would free the tensor twice)"
                )
            if i >= j:
                raise GraphError(
                    f"op {self.ops[j].name!r}: input {self.ops[i].name!r} does not come before "
                    "it in the op order (use TrainingGraph.from_ops to sort)"
                )
            previous = edge
            preds[j].append(i)
            succs[i].append(j)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_preds", tuple(map(tuple, preds)))
        object.__setattr__(self, "_succs", tuple(map(tuple, succs)))
        self._check_phases()
        object.__setattr__(self, "_overwrites", self._check_overwrites())

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_ops(cls, name: str, ops: Sequence[Op], inputs: Mapping[str, Sequence[str]],
                 metadata: Mapping[str, Any] | None = None) -> TrainingGraph:
        """Build from ops in any order and each op's input names.

        The ops are put in a deterministic topological order (the given order wherever it
        is already valid).
        """
        position: dict[str, int] = {}
        for i, op in enumerate(ops):
            if op.name in position:
                raise GraphError(f"op {op.name!r}: duplicate op name")
            position[op.name] = i
        for consumer in inputs:
            if consumer not in position:
                raise GraphError(f"op {consumer!r}: has inputs but is not an op of the graph")
        edges: list[tuple[int, int]] = []
        for op in ops:
            seen: set[str] = set()
            for producer in inputs.get(op.name, ()):
                if producer not in position:
                    raise GraphError(f"op {op.name!r}: input {producer!r} does not exist")
                if producer in seen:
                    raise GraphError(f"op {op.name!r}: input {producer!r} listed twice "
                                     "(a duplicate edge would free the tensor twice)")
                if producer == op.name:
                    raise GraphError(f"op {op.name!r}: reads its own output (a cycle)")
                seen.add(producer)
                edges.append((position[producer], position[op.name]))
        order = topological_order([op.name for op in ops], edges)
        rank = {old: new for new, old in enumerate(order)}
        return cls(
            name=name,
            ops=[ops[i] for i in order],
            edges=[(rank[i], rank[j]) for i, j in edges],
            metadata=metadata or {},
        )

    def _check_phases(self) -> None:
        losses = [i for i, op in enumerate(self.ops) if op.phase is Phase.LOSS]
        if len(losses) != 1:
            names = [self.ops[i].name for i in losses]
            raise GraphError(f"graph {self.name!r}: needs exactly one loss op, found {names}")
        loss = losses[0]
        ancestors = self.ancestors(loss)
        descendants = self.descendants(loss)
        differentiated: dict[str, str] = {}
        summed: dict[str, str] = {}
        for i, op in enumerate(self.ops):
            if op.phase is Phase.FORWARD and i not in ancestors:
                raise GraphError(f"op {op.name!r}: forward op does not reach the loss")
            if op.phase is Phase.BACKWARD:
                if i not in descendants:
                    raise GraphError(f"op {op.name!r}: backward op does not depend on the loss")
                field, of = (("forward_of", op.forward_of) if op.gradient_sum_of is None
                             else ("gradient_sum_of", op.gradient_sum_of))
                target = self._index.get(of)  # type: ignore[arg-type]
                if target is None or self.ops[target].phase is Phase.BACKWARD:
                    raise GraphError(f"op {op.name!r}: {field} = {of!r} is not a forward or "
                                     "loss op of this graph")
                seen = differentiated if op.gradient_sum_of is None else summed
                if of in seen:
                    role = "backward" if seen is differentiated else "gradient-sum"
                    raise GraphError(f"op {op.name!r}: {of!r} already has {role} op "
                                     f"{seen[of]!r}")
                seen[of] = op.name  # type: ignore[index]

    def _check_overwrites(self) -> tuple[int, ...]:
        """Each op's in-place input (``Op.overwrites``) as an index, -1 for none."""
        out = [-1] * len(self.ops)
        for k, op in enumerate(self.ops):
            if op.overwrites is None:
                continue
            u = self._index.get(op.overwrites, -1)
            if u not in self._preds[k]:
                raise GraphError(f"op {op.name!r}: overwrites = {op.overwrites!r}: must be one "
                                 "of the op's inputs")
            if op.output_bytes > self.ops[u].output_bytes:
                raise GraphError(f"op {op.name!r}: overwrites = {op.overwrites!r}, but its "
                                 f"output ({op.output_bytes} B) is larger than that input "
                                 f"({self.ops[u].output_bytes} B): an in-place output must "
                                 "fit in the buffer it takes over")
            out[k] = u
        return tuple(out)

    def with_metadata(self, extra: Mapping[str, Any]) -> TrainingGraph:
        """This graph with ``extra`` added to its metadata. The ops and edges are this
        (valid) graph's, so they are not checked again: ``attrs.evolve`` would, which
        takes seconds on a graph of 20,000 ops."""
        graph = copy.copy(self)
        object.__setattr__(graph, "metadata", {**self.metadata, **extra})
        return graph

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self.ops)

    def __contains__(self, name: object) -> bool:
        """Whether the graph has an op named ``name``."""
        return name in self._index

    def index(self, name: str) -> int:
        """Position of the op called ``name``."""
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r}: no op named {name!r}") from None

    def op(self, name: str) -> Op:
        return self.ops[self.index(name)]

    def predecessors(self, i: int) -> tuple[int, ...]:
        """Ops whose outputs op ``i`` reads, ascending."""
        return self._preds[i]

    def successors(self, i: int) -> tuple[int, ...]:
        """Ops that read the output of op ``i``, ascending."""
        return self._succs[i]

    def ancestors(self, i: int) -> set[int]:
        seen: set[int] = set()
        stack = list(self._preds[i])
        while stack:
            k = stack.pop()
            if k not in seen:
                seen.add(k)
                stack.extend(self._preds[k])
        return seen

    def descendants(self, i: int) -> set[int]:
        seen: set[int] = set()
        stack = list(self._succs[i])
        while stack:
            k = stack.pop()
            if k not in seen:
                seen.add(k)
                stack.extend(self._succs[k])
        return seen

    def indices(self, phase: Phase) -> list[int]:
        return [i for i, op in enumerate(self.ops) if op.phase is phase]

    @property
    def loss_index(self) -> int:
        return self.indices(Phase.LOSS)[0]

    @property
    def param_bytes(self) -> int:
        """Bytes of all parameters, frozen ones included."""
        return sum(op.param_bytes for op in self.ops)

    @property
    def trained_param_bytes(self) -> int:
        """Bytes of the parameters that are trained (all of them unless some are frozen)."""
        return sum(op.trained_param_bytes for op in self.ops)

    @property
    def frozen_param_bytes(self) -> int:
        """Bytes of the parameters that are not trained."""
        return sum(op.frozen_param_bytes for op in self.ops)

    @property
    def flops(self) -> float:
        """FLOPs of one training iteration with every op computed once."""
        return sum(op.flops for op in self.ops)

    def overwrites(self, i: int) -> int:
        """The input whose buffer op ``i``'s output may take over (``Op.overwrites``), or
        -1: an in-place kernel saves the op's ``output_bytes`` while it runs, when that
        input leaves RAM right after it."""
        return self._overwrites[i]

    def inputs_of(self, i: int) -> list[str]:
        return [self.ops[p].name for p in self._preds[i]]


def needs_gradient(graph: TrainingGraph) -> list[bool]:
    """Per op: does a forward (or loss) op's output need a gradient?

    As in reverse-mode autograd (:mod:`poetsim.graph.autograd`): an op needs one if it owns
    trained parameters or reads an op that needs one; a data input does not, and neither
    does a frozen layer before the first trained one. Backward ops: False.
    """
    needs = [False] * len(graph)
    for i, op in enumerate(graph.ops):  # topological: inputs first
        if op.phase is not Phase.BACKWARD:
            needs[i] = (op.trained_param_bytes > 0
                        or any(needs[p] for p in graph.predecessors(i)))
    return needs


def check_gradients(graph: TrainingGraph) -> None:
    """Autograd's rules on backward ops, as :mod:`poetsim.graph.autograd` derives them.

    * a backward or gradient-sum op (``Op.gradient_sum_of``) only for an op that needs a
      gradient (:func:`needs_gradient`): not for the data input, nor for an op computed
      from inputs, constants and frozen layers alone;
    * a backward op for every op with trained parameters, or its weights would never be
      trained (a backward op may fuse the gradients of parameter-free ops, so those may
      lack one, and so may a frozen op, which only passes a gradient on);
    * at least one op with trained parameters, or there is nothing to train;
    * an in-place update (``Op.inplace_update``) only on the backward op of an op with
      trained parameters, whose ``workspace_bytes`` holds the gradient buffer of the
      update (:func:`update_gradient_bytes`): it is the only buffer the gradient has;
    * gradients flow as autograd sends them (:func:`_check_gradient_flow`).

    Raises :class:`GraphError` naming the op and the rule.
    """
    ops = graph.ops
    needs = needs_gradient(graph)
    differentiated: set[str] = set()
    for i, op in enumerate(ops):
        if op.phase is not Phase.BACKWARD:
            continue
        if op.gradient_sum_of is not None:
            if not needs[graph.index(op.gradient_sum_of)]:
                raise GraphError(f"op {op.name!r}: gradient-sum op of {op.gradient_sum_of!r}, "
                                 "which needs no gradient: there is nothing to sum")
            continue
        target = op.forward_of
        if op.inplace_update:
            if not graph.op(target).trained_param_bytes:  # type: ignore[arg-type]
                raise GraphError(
                    f"op {op.name!r}: inplace_update, but {target!r} has no trained "
                    "parameters to update: only the backward op of an op with trained "
                    "parameters applies an update")
            held = inplace_gradient_bytes(graph, i)
            if op.workspace_bytes < held:
                raise GraphError(
                    f"op {op.name!r}: inplace_update with workspace_bytes = "
                    f"{op.workspace_bytes}: must be at least {held}, the gradient buffer "
                    f"of {target!r}'s update (one output channel's for a convolution or "
                    "linear layer, else all of it), which lives only in the workspace")
        differentiated.add(target)  # type: ignore[arg-type]
        if not needs[graph.index(target)]:  # type: ignore[arg-type]
            raise GraphError(
                f"op {op.name!r}: backward op of {target!r}, which needs no gradient (it has "
                "no parameters and reads no op that does): only ops that need a gradient "
                "have a backward op")
    _check_gradient_flow(graph)
    for op in ops:
        if op.trained_param_bytes and op.name not in differentiated:
            raise GraphError(
                f"op {op.name!r}: has {op.trained_param_bytes} B of trained parameters but no "
                f"backward op (an op with forward_of = {op.name!r}): its weights would never "
                "be trained (set frozen_param_bytes to param_bytes to freeze them)")
    if not graph.trained_param_bytes:
        raise GraphError(f"graph {graph.name!r}: no op has trained parameters, so there is "
                         "nothing to train")


def _gradient_parts(graph: TrainingGraph) -> tuple[list[set[int]], list[set[int]]]:
    """Per forward op ``v``: the backward ops whose outputs are the parts of the gradient
    of ``v``'s output (one per consumer; a consumer without a backward op of its own, a
    parameter-free op fused into its producer's, passes on what it receives), and what
    ``v``'s backward op reads as that gradient (its gradient-sum op, if it has one, else
    the parts). Computed consumers first, so a long fused chain needs no recursion."""
    ops = graph.ops
    backward_of: dict[str, int] = {}
    sum_of: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op.phase is Phase.BACKWARD:
            if op.gradient_sum_of is not None:
                sum_of[op.gradient_sum_of] = i
            else:
                backward_of[op.forward_of] = i  # type: ignore[index]
    parts: list[set[int]] = [set() for _ in ops]
    incoming: list[set[int]] = [set() for _ in ops]
    for v in reversed(range(len(ops))):
        if ops[v].phase is Phase.BACKWARD:
            continue
        for c in graph.successors(v):
            name = ops[c].name
            if ops[c].phase is Phase.BACKWARD:
                continue
            if name in backward_of:
                parts[v].add(backward_of[name])
            else:
                parts[v] |= incoming[c]
        s = sum_of.get(ops[v].name)
        incoming[v] = {s} if s is not None else parts[v]
    return parts, incoming


def _check_gradient_flow(graph: TrainingGraph) -> None:
    """Autograd's data flow of gradients: a backward op reads exactly the gradient of its
    forward op's output (what the backward ops of that op's consumers send back, or their
    one gradient-sum op; the loss's backward op reads none), and a gradient-sum op sums
    exactly those parts. Every backward output that carries a gradient is then read by
    the op that needs it. Raises :class:`GraphError` naming the op, the missing or extra
    input and the rule."""
    ops = graph.ops
    parts, incoming = _gradient_parts(graph)
    for i, op in enumerate(ops):
        if op.phase is not Phase.BACKWARD:
            continue
        if op.gradient_sum_of is not None:
            v = graph.index(op.gradient_sum_of)
            want, got = parts[v], set(graph.predecessors(i))
            rule = ("a gradient-sum op sums exactly the gradients that the backward ops of "
                    f"{ops[v].name!r}'s consumers send back")
        else:
            v = graph.index(op.forward_of)  # type: ignore[arg-type]
            want = incoming[v]
            got = {p for p in graph.predecessors(i) if ops[p].phase is Phase.BACKWARD}
            rule = ("a backward op reads exactly the gradient of its forward op's output: "
                    "what the backward ops of that op's consumers send back, or their one "
                    "gradient-sum op")
        if want - got:
            missing = ops[min(want - got)].name
            raise GraphError(f"op {op.name!r}: does not read {missing!r}, a part of the "
                             f"gradient of {ops[v].name!r}'s output ({rule})")
        if got - want:
            extra = ops[min(got - want)].name
            raise GraphError(f"op {op.name!r}: reads {extra!r}, which is not a part of the "
                             f"gradient of {ops[v].name!r}'s output ({rule})")


@attrs.frozen
class ResidentMemory:
    """Memory that stays resident for the whole iteration, outside the activation budget."""

    param_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.gradient_bytes + self.optimizer_state_bytes


#: Optimizer-state copies of the parameters kept by common optimizers.
OPTIMIZER_STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2}


#: Kinds whose FLOPs are exactly 2 x MACs and whose weights split by output channel
#: (:data:`poetsim.graph.autograd.MAC_KINDS` without the weightless matmul).
CHANNEL_KINDS = frozenset({"conv2d", "conv2d_relu", "conv2d_relu6", "dwconv2d", "dwconv2d_relu",
                           "dwconv2d_relu6", "linear"})


def weights_per_output_channel(op: Op, activation_bytes: int) -> float | None:
    """Weights per output channel of ``op`` (``MACs / output elements``: ``Cin/groups x
    k x k`` for a convolution, ``in_features`` for a linear layer), or None when its
    parameters do not split by output channel."""
    if op.kind not in CHANNEL_KINDS or not op.output_bytes:
        return None
    return op.flops / 2 / (op.output_bytes // activation_bytes)


def update_gradient_bytes(owner: Op, precision: Precision) -> int:
    """The gradient buffer of an in-place update of ``owner``'s trained parameters
    (``Op.inplace_update``), at the gradient width: for a convolution or linear layer one
    output channel's (its weights and bias), since the fused kernel computes a channel's
    gradient, applies it and moves on (TinyEngine's fp32 weight-gradient kernels update
    the int8 weights tile by tile, 16 output x 4 input channels, so no whole-layer
    gradient ever exists: mit-han-lab/tinyengine, ``INPLACE_SGD``); the whole gradient
    for any other kind (a norm's few per-channel parameters)."""
    whole = rescale_bytes(owner.trained_param_bytes, precision.weight_bytes,
                          precision.gradient_bytes)
    per_channel = weights_per_output_channel(owner, precision.activation_bytes)
    if per_channel is None:
        return whole
    return min(whole, (math.ceil(per_channel) + 1) * precision.gradient_bytes)


def inplace_gradient_bytes(graph: TrainingGraph, i: int) -> int:
    """Bytes of the gradient buffer backward op ``i`` applies in place
    (``Op.inplace_update``; :func:`update_gradient_bytes`); 0 for any other op."""
    op = graph.ops[i]
    if not op.inplace_update:
        return 0
    return update_gradient_bytes(graph.op(op.forward_of),  # type: ignore[arg-type]
                                 precision_of(graph))


def resident_memory(graph: TrainingGraph, *, gradients: bool = True,
                    optimizer: str = "sgd") -> ResidentMemory:
    """Parameters, and optionally their gradients and optimizer state.

    Every parameter, frozen or trained, is counted at the weight width; gradients and
    optimizer state only for the trained ones (:attr:`TrainingGraph.trained_param_bytes`;
    a frozen weight has neither), at the gradient width (:mod:`poetsim.graph.precision`:
    int8 weights with fp32 gradients have 4 gradient bytes per trained byte). A gradient
    applied in place by the backward op that computes it (``Op.inplace_update``) is not
    resident: it lives in that op's workspace while the op runs; its optimizer state
    stays resident. ``optimizer`` is ``sgd`` (no state), ``momentum`` (one copy of the
    trained parameters) or ``adam`` (two copies).
    """
    if optimizer not in OPTIMIZER_STATE_COPIES:
        raise GraphError(f"optimizer = {optimizer!r}: must be one of "
                         f"{', '.join(OPTIMIZER_STATE_COPIES)}")
    precision = precision_of(graph)
    trained = rescale_bytes(graph.trained_param_bytes, precision.weight_bytes,
                            precision.gradient_bytes)
    fused = sum(graph.op(op.forward_of).trained_param_bytes  # type: ignore[arg-type]
                for op in graph.ops if op.inplace_update)
    held = rescale_bytes(graph.trained_param_bytes - fused, precision.weight_bytes,
                         precision.gradient_bytes)
    return ResidentMemory(
        param_bytes=graph.param_bytes,
        gradient_bytes=held if gradients else 0,
        optimizer_state_bytes=trained * OPTIMIZER_STATE_COPIES[optimizer],
    )
