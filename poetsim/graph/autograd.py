"""Deriving the backward graph from a forward graph, the way reverse-mode autograd does.

A model is described by its forward ops (:class:`ForwardGraph`); :meth:`ForwardGraph.build`
adds one backward op per forward op whose output needs a gradient and returns the full
:class:`~poetsim.graph.graph.TrainingGraph`.

For a forward op ``v`` with backward op ``v/grad``:

* ``v/grad`` reads the gradient of ``v``'s output, which is the sum of what the backward
  ops of ``v``'s consumers send back. It therefore depends on ``c/grad`` for every consumer
  ``c`` of ``v``; the summation of ``k`` incoming gradients costs ``(k - 1)`` adds per
  element and is charged to ``v/grad``. The loss's backward op depends on the loss itself
  (the seed gradient). With ``Training.gradient_sums``, an op ``v`` with several consumers
  gets a gradient-sum op ``v/grad_sum`` instead (``Op.gradient_sum_of``): it reads every
  ``c/grad``, does the ``(k - 1)`` adds per element and outputs the sum, and ``v/grad``
  reads that one tensor, so no backward op holds ``k`` incoming gradients and its own
  output at once.
* ``v/grad`` also reads exactly the tensors ``v``'s backward saves (:data:`KINDS`): a ReLU
  its output, a convolution or linear layer its input (for the weight gradient), a matrix
  product both inputs, an addition nothing.
* ``v/grad`` outputs the gradients of ``v``'s inputs that need one (their sizes summed;
  an addition passes one shared gradient tensor on). Parameter gradients go to the fixed
  resident region, not into the activation graph.

An op needs a gradient if it owns trained parameters or reads an op that needs one; the
data input does not, so the first layer's backward computes only its weight gradient and
outputs nothing.

What is trained (:mod:`poetsim.graph.training`): by default every parameter. With a
training mode, a frozen weight costs no weight gradient (the MAC op's backward does only
the input-gradient half, and does not read its saved input for the weights), a layer
whose bias alone is trained computes the bias gradient (one add per output element), a
fraction of trained weights costs that fraction of the weight-gradient MACs, and layers
before the first trained one have no backward op at all. Frozen bytes are recorded in
``Op.frozen_param_bytes``. With ``Training.inplace_update``, the backward op of every
op with trained parameters applies their update itself (``Op.inplace_update``) and its
workspace grows by the buffer that replaces the resident gradient
(:func:`poetsim.graph.graph.resident_memory`): one output channel's gradient at the
gradient width for a convolution or linear layer, updated channel by channel as
TinyEngine does (:func:`poetsim.graph.graph.update_gradient_bytes`).

In an int8 graph (:attr:`~poetsim.graph.precision.Precision.int8_kernels`) a gradient-sum
op, the backward op of an addition, which passes its gradient on, and that of an op with an
in-place kernel (a depthwise convolution: channel by channel, each input channel's
gradient needs only that channel of the incoming one) may write their output into the
buffer of an incoming gradient at least as large (``Op.overwrites``; a stride-2 depthwise
convolution's input gradient is larger, so it gets its own).

This replaces POET's published derivation, which chains gradient ops in reverse list order
and so gets residual graphs wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from poetsim.clock import Ticker, stop_at
from poetsim.errors import GraphError
from poetsim.graph.graph import TrainingGraph, check_gradients, update_gradient_bytes
from poetsim.graph.ops import GRADIENT_SUM_KIND, Op, Phase
from poetsim.graph.precision import Precision, check_width
from poetsim.graph.tiling import Rows, tile_rows
from poetsim.graph.training import TrainedParams, Training, resolve_training

__all__ = ["KINDS", "MAC_KINDS", "ForwardGraph", "ForwardOp", "KindRule", "grad_name",
           "gradient_sum_name",
           "forward_macs"]


def grad_name(name: str) -> str:
    """Name of the backward op of forward op ``name``."""
    return f"{name}/grad"


def gradient_sum_name(name: str) -> str:
    """Name of the op that sums the gradient of forward op ``name``'s output."""
    return f"{name}/grad_sum"


@attrs.frozen
class BackwardContext:
    """What a backward-FLOP formula may look at."""

    forward_flops: float
    output_elements: int
    input_elements: tuple[int, ...]
    inputs_needing_grad: tuple[bool, ...]
    has_params: bool
    #: Fraction of the op's weights (parameters other than biases) that is trained.
    weight_fraction: float = 1.0
    #: The op's bias is trained while none of its weights is (its bias gradient, one add
    #: per output element, is then the op's parameter work; beside a weight gradient it is
    #: left out, as bias additions are in the forward FLOPs).
    bias_gradient_only: bool = False


@attrs.frozen
class KindRule:
    """How an op kind behaves under autograd.

    ``saves_inputs`` / ``saves_output``: which forward tensors the backward reads.
    ``saves_inputs_only_with_params``: the inputs are needed only for the weight
    gradient (convolution, linear). ``passthrough``: the backward hands one gradient
    tensor, shared, to all inputs (addition). ``backward_flops``: FLOPs of the backward.
    """

    saves_inputs: bool
    saves_output: bool
    backward_flops: Callable[[BackwardContext], float]
    saves_inputs_only_with_params: bool = False
    passthrough: bool = False


def _mac_backward(c: BackwardContext) -> float:
    # grad wrt the data input costs one forward's MACs, grad wrt the (trained) weights
    # another (that fraction of it).
    weights = c.weight_fraction if c.has_params else 0
    flops = c.forward_flops * (weights + int(any(c.inputs_needing_grad)))
    return flops + (c.output_elements if c.bias_gradient_only else 0)


def _fused_backward(mask_flops: float) -> Callable[[BackwardContext], float]:
    # the activation's mask is applied to the output gradient first, then as a MAC op
    return lambda c: _mac_backward(c) + mask_flops * c.output_elements


def _matmul_backward(c: BackwardContext) -> float:
    return c.forward_flops * sum(c.inputs_needing_grad)


def _per_output_element(k: float) -> Callable[[BackwardContext], float]:
    return lambda c: k * c.output_elements


def _per_input_element(k: float) -> Callable[[BackwardContext], float]:
    return lambda c: k * sum(c.input_elements)


#: Autograd behaviour of every op kind poetsim knows. Per-element FLOP counts of the
#: backward of non-MAC ops are estimates (one multiply per element for a mask, a few for
#: normalisations); MAC ops are exact.
KINDS: dict[str, KindRule] = {
    "conv2d": KindRule(True, False, _mac_backward, saves_inputs_only_with_params=True),
    "linear": KindRule(True, False, _mac_backward, saves_inputs_only_with_params=True),
    "matmul": KindRule(True, False, _matmul_backward),
    # A convolution with its batch norm folded in and its activation fused (an int8 MCU
    # graph, :func:`poetsim.zoo.layers.conv_bn_act`): the backward also reads the output,
    # whose clamped values give the activation's mask.
    "conv2d_relu": KindRule(True, True, _fused_backward(1),
                            saves_inputs_only_with_params=True),
    "conv2d_relu6": KindRule(True, True, _fused_backward(2),
                             saves_inputs_only_with_params=True),
    # A depthwise convolution (one input channel per output channel; TFLite's
    # DEPTHWISE_CONV_2D): the same autograd as a convolution, its own kind because its
    # kernels run at their own rate (``cpu.efficiency``, :mod:`poetsim.costs`).
    "dwconv2d": KindRule(True, False, _mac_backward, saves_inputs_only_with_params=True),
    "dwconv2d_relu": KindRule(True, True, _fused_backward(1),
                              saves_inputs_only_with_params=True),
    "dwconv2d_relu6": KindRule(True, True, _fused_backward(2),
                               saves_inputs_only_with_params=True),
    "relu": KindRule(False, True, _per_output_element(1)),
    "relu6": KindRule(True, False, _per_output_element(2)),
    "gelu": KindRule(True, False, _per_output_element(8)),
    "batchnorm": KindRule(True, False, _per_output_element(10)),
    "layernorm": KindRule(True, False, _per_output_element(10)),
    "softmax": KindRule(False, True, _per_output_element(4)),
    "maxpool": KindRule(True, True, _per_output_element(1)),
    "avgpool": KindRule(False, False, _per_input_element(1)),
    "add": KindRule(False, False, lambda c: 0.0, passthrough=True),
    # Kinds the PyTorch importer (poetsim.torchio) needs: an embedding lookup keeps its
    # indices for the weight gradient, tanh its output; concatenation saves nothing.
    "embedding": KindRule(True, False, _per_output_element(1),
                          saves_inputs_only_with_params=True),
    "tanh": KindRule(False, True, _per_output_element(2)),
    "cat": KindRule(False, False, lambda c: 0.0),
    "cross_entropy": KindRule(True, False, _per_input_element(3)),
    "mse": KindRule(True, False, _per_input_element(2)),
}

#: Kinds whose FLOPs are exactly 2 x multiply-accumulates (a fused activation is the
#: requantisation's clamp and adds none).
MAC_KINDS = frozenset({"conv2d", "conv2d_relu", "conv2d_relu6", "dwconv2d", "dwconv2d_relu",
                       "dwconv2d_relu6", "linear", "matmul"})

#: Kinds that may serve as the loss.
LOSS_KINDS = frozenset({"cross_entropy", "mse"})


@attrs.frozen
class ForwardOp:
    """A forward op as a model builder describes it (sizes in elements, not bytes)."""

    name: str
    kind: str
    inputs: tuple[str, ...] = attrs.field(converter=tuple)
    output_elements: int
    flops: float
    param_count: int = 0
    workspace_elements: int = 0
    #: Of ``param_count``, the biases (a convolution's or linear layer's bias, a norm's
    #: shift): what a bias-only training mode trains.
    bias_count: int = 0
    #: Row geometry of an op on ``(C, H, W)`` feature maps, for row tiling
    #: (:mod:`poetsim.graph.tiling`); None: the op cannot be tiled by rows.
    rows: Rows | None = None
    #: The input whose buffer an in-place kernel may write the output into
    #: (``Op.overwrites``); None: the op writes a buffer of its own.
    overwrites: str | None = None


class ForwardGraph:
    """Collects forward ops and the loss, then derives the training graph.

    >>> fg = ForwardGraph("tiny", batch_size=1)
    >>> x = fg.input("x", 8)
    >>> h = fg.op("fc", "linear", [x], output_elements=4, flops=2 * 8 * 4, param_count=36)
    >>> fg.loss("loss", h)
    'loss'
    >>> [op.name for op in fg.build().ops]
    ['x', 'fc', 'loss', 'loss/grad', 'fc/grad']
    """

    def __init__(self, name: str, *, batch_size: int = 1, dtype_bytes: int = 4,
                 metadata: dict | None = None, training: Training | None = None,
                 weight_bytes: int | None = None, activation_bytes: int | None = None,
                 gradient_bytes: int | None = None,
                 trained: Mapping[str, TrainedParams] | None = None,
                 row_bands: int = 0) -> None:
        if batch_size < 1:
            raise GraphError(f"graph {name!r}: batch_size = {batch_size!r}: must be >= 1")
        widths = {"dtype_bytes": dtype_bytes, "weight_bytes": weight_bytes,
                  "activation_bytes": activation_bytes, "gradient_bytes": gradient_bytes}
        for field, value in widths.items():
            if value is not None:
                check_width(value, field, f"graph {name!r}")
        self.name = name
        self.batch_size = batch_size
        #: Bytes per element of weights, activations and gradients; each defaults to
        #: ``dtype_bytes`` (:mod:`poetsim.graph.precision`).
        self.precision = Precision(
            weight_bytes=dtype_bytes if weight_bytes is None else weight_bytes,
            activation_bytes=dtype_bytes if activation_bytes is None else activation_bytes,
            gradient_bytes=dtype_bytes if gradient_bytes is None else gradient_bytes)
        self.dtype_bytes = self.precision.activation_bytes
        self.metadata = dict(metadata or {})
        self.training = training
        #: Explicit trained parameters per op, instead of ``training``'s mode
        #: (:func:`derive_training_graph`).
        self.trained = trained
        #: Run the frozen front in this many row bands (:func:`~poetsim.graph.tiling.tile_rows`);
        #: 0: no tiling.
        self.row_bands = row_bands
        self._ops: list[ForwardOp] = []
        self._names: set[str] = set()
        self._loss: str | None = None

    def _add(self, op: ForwardOp) -> str:
        if op.name in self._names:
            raise GraphError(f"op {op.name!r}: duplicate op name")
        for name in op.inputs:
            if name not in self._names:
                raise GraphError(f"op {op.name!r}: input {name!r} does not exist")
        if self._loss is not None:
            raise GraphError(f"op {op.name!r}: added after the loss")
        self._ops.append(op)
        self._names.add(op.name)
        return op.name

    def input(self, name: str, elements_per_sample: int) -> str:
        """The data input (one batch); it needs no gradient."""
        return self._add(ForwardOp(name, "input", (), elements_per_sample * self.batch_size, 0.0))

    def op(self, name: str, kind: str, inputs: Sequence[str], *, output_elements: int,
           flops: float, param_count: int = 0, workspace_elements: int = 0,
           bias_count: int = 0, rows: Rows | None = None,
           overwrites: str | None = None) -> str:
        """Add a forward op. Sizes are per batch (the caller multiplies by batch size);
        ``bias_count`` is the part of ``param_count`` that is biases; ``rows`` its row
        geometry, if it can be tiled by rows; ``overwrites`` the input an in-place kernel
        may write its output into."""
        if kind not in KINDS or kind in LOSS_KINDS:
            known = ", ".join(sorted(set(KINDS) - LOSS_KINDS))
            raise GraphError(f"op {name!r}: kind = {kind!r}: must be one of {known}")
        if not inputs:
            raise GraphError(f"op {name!r}: a {kind} op needs at least one input")
        if not 0 <= bias_count <= param_count:
            raise GraphError(f"op {name!r}: bias_count = {bias_count!r}: must be between 0 "
                             f"and param_count = {param_count}")
        return self._add(ForwardOp(name, kind, tuple(inputs), output_elements, flops,
                                   param_count, workspace_elements, bias_count, rows,
                                   overwrites))

    def loss(self, name: str, logits: str, *, kind: str = "cross_entropy",
             flops: float | None = None) -> str:
        """Add the loss on ``logits``; its output is a scalar."""
        if kind not in LOSS_KINDS:
            raise GraphError(f"op {name!r}: loss kind = {kind!r}: must be one of "
                             f"{', '.join(sorted(LOSS_KINDS))}")
        logits_elements = self._op(logits).output_elements
        self._add(ForwardOp(name, kind, (logits,), 1,
                            4.0 * logits_elements if flops is None else flops))
        self._loss = name
        return name

    def _op(self, name: str) -> ForwardOp:
        for op in self._ops:
            if op.name == name:
                return op
        raise GraphError(f"op {name!r}: does not exist")

    @property
    def ops(self) -> tuple[ForwardOp, ...]:
        return tuple(self._ops)

    def build(self) -> TrainingGraph:
        """Derive the backward ops and return the validated training graph."""
        if self._loss is None:
            raise GraphError(f"graph {self.name!r}: has no loss op")
        forward: Sequence[ForwardOp] = self._ops
        if self.row_bands:
            trained = trained_params(forward, self.training, self.trained)
            forward = tile_rows(forward, self.row_bands, gradient_needed(forward, trained))
        return derive_training_graph(self.name, forward, self._loss,
                                     precision=self.precision, training=self.training,
                                     trained=self.trained,
                                     metadata={"batch_size": self.batch_size,
                                               **self.metadata})


def trained_params(forward: Sequence[ForwardOp], training: Training | None,
                   explicit: Mapping[str, TrainedParams] | None = None,
                   ) -> dict[str, TrainedParams]:
    """The trained parameters of every forward op: ``explicit`` per op name when given
    (ops not listed are frozen), else those of ``training``'s mode (None: all)."""
    chosen = resolve_training(forward, training) if explicit is None else dict(explicit)
    if chosen is None:
        return {op.name: TrainedParams(op.param_count - op.bias_count, op.bias_count)
                for op in forward}
    return {op.name: chosen.get(op.name, TrainedParams()) for op in forward}


def gradient_needed(forward: Sequence[ForwardOp],
                    trained: Mapping[str, TrainedParams]) -> dict[str, bool]:
    """Which forward ops need a gradient: those with trained parameters, and those that
    read an op that needs one."""
    needs: dict[str, bool] = {}
    for op in forward:
        t = trained[op.name]
        needs[op.name] = t.weights + t.biases > 0 or any(needs[u] for u in op.inputs)
    return needs


def derive_training_graph(name: str, forward: Sequence[ForwardOp], loss: str, *,
                          dtype_bytes: int = 4, metadata: dict | None = None,
                          training: Training | None = None,
                          precision: Precision | None = None,
                          trained: Mapping[str, TrainedParams] | None = None
                          ) -> TrainingGraph:
    """Forward ops (in a valid order, ending with ``loss``) to a full training graph.

    ``training`` chooses what is trained (:mod:`poetsim.graph.training`); ``None`` or the
    full mode trains every parameter. ``precision`` gives the byte widths of weights,
    activations and gradients (:mod:`poetsim.graph.precision`); without it every tensor
    is ``dtype_bytes`` wide. The widths are recorded in the metadata. ``trained``, when
    given, says per op name what is trained instead of ``training``'s mode (ops not listed
    are frozen): a traced model's ``requires_grad`` flags, which no layer-wise mode
    expresses; ``training.inplace_update`` still applies.
    """
    if precision is None:
        precision = Precision(dtype_bytes, dtype_bytes, dtype_bytes)
    params = trained_params(forward, training, trained)
    needs_grad = gradient_needed(forward, params)
    if not needs_grad[loss]:
        raise GraphError(f"graph {name!r}: no op before the loss has trained parameters, "
                         "so there is nothing to train")
    builder = _Builder(forward, loss, precision, training, params)
    ticker = Ticker(stop_at(), every=256)  # a command's limit: seconds for 20,000 ops
    for op in forward:
        ticker.tick()
        builder.add_forward(op)
    for op in reversed(forward):
        ticker.tick()
        if needs_grad[op.name]:
            builder.add_backward(op, tuple(needs_grad[u] for u in dict.fromkeys(op.inputs)))
    graph = TrainingGraph.from_ops(name, builder.ops, builder.inputs,
                                   metadata={**(metadata or {}), **precision.metadata()})
    check_gradients(graph)  # holds by construction; graph files are held to the same rules
    return graph


class _Builder:
    """The ops of a training graph and their inputs, made one forward op at a time."""

    def __init__(self, forward: Sequence[ForwardOp], loss: str, precision: Precision,
                 training: Training | None, params: Mapping[str, TrainedParams]) -> None:
        self.by_name = {op.name: op for op in forward}
        self.consumers: dict[str, list[str]] = {op.name: [] for op in forward}
        for op in forward:
            for u in dict.fromkeys(op.inputs):
                self.consumers[u].append(op.name)
        self.loss, self.precision, self.params = loss, precision, params
        self.inplace = training is not None and training.inplace_update
        self.sums = training is not None and training.gradient_sums
        self.ops: list[Op] = []
        self.inputs: dict[str, list[str]] = {}
        self.made: dict[str, Op] = {}

    def _add(self, op: Op, inputs: list[str]) -> None:
        self.ops.append(op)
        self.made[op.name] = op
        self.inputs[op.name] = inputs

    def _into(self, incoming: Sequence[str], nbytes_out: int) -> str | None:
        # an int8 runtime sums or passes a gradient on in the buffer of one that comes in
        if not self.precision.int8_kernels:
            return None
        return next((c for c in incoming if self.made[c].output_bytes >= nbytes_out), None)

    def add_forward(self, op: ForwardOp) -> None:
        """The forward (or loss) op itself, at the precision's widths."""
        weight_b, activation_b = self.precision.weight_bytes, self.precision.activation_bytes
        phase = Phase.LOSS if op.name == self.loss else Phase.FORWARD
        t = self.params[op.name]
        self._add(Op(op.name, op.kind, phase, flops=op.flops,
                     output_bytes=(activation_b if phase is Phase.LOSS
                                   else int(op.output_elements) * activation_b),
                     workspace_bytes=int(op.workspace_elements) * activation_b,
                     param_bytes=int(op.param_count) * weight_b,
                     frozen_param_bytes=int(op.param_count - t.weights - t.biases) * weight_b,
                     overwrites=op.overwrites), list(dict.fromkeys(op.inputs)))

    def _gradient_sum(self, op: ForwardOp, incoming: list[str], sum_flops: float) -> str:
        """An op of its own that sums the gradients ``op``'s consumers send back."""
        s = gradient_sum_name(op.name)
        size = int(op.output_elements) * self.precision.gradient_bytes
        self._add(Op(s, GRADIENT_SUM_KIND, Phase.BACKWARD, flops=sum_flops,
                     output_bytes=size, gradient_sum_of=op.name,
                     overwrites=self._into(incoming, size)), incoming)
        return s

    def add_backward(self, op: ForwardOp, wants: tuple[bool, ...]) -> None:
        """The backward op of ``op`` (and its gradient sum, if asked for); ``wants`` says
        which of its distinct inputs need a gradient."""
        rule, t, precision = KINDS[op.kind], self.params[op.name], self.precision
        unique_inputs = list(dict.fromkeys(op.inputs))
        weight_count = op.param_count - op.bias_count
        ctx = BackwardContext(
            forward_flops=op.flops,
            output_elements=op.output_elements,
            input_elements=tuple(self.by_name[u].output_elements for u in unique_inputs),
            inputs_needing_grad=wants,
            has_params=op.param_count > 0,
            weight_fraction=t.weights / weight_count if weight_count else 0.0,
            bias_gradient_only=t.biases > 0 and t.weights == 0,
        )
        fan_out = len(self.consumers[op.name])
        incoming = [grad_name(c) for c in self.consumers[op.name]]
        sum_flops = max(fan_out - 1, 0) * op.output_elements
        if self.sums and fan_out > 1:
            incoming, sum_flops = [self._gradient_sum(op, incoming, sum_flops)], 0
        flops = rule.backward_flops(ctx) + sum_flops
        if rule.passthrough:
            out_elements = op.output_elements if any(wants) else 0
        else:
            out_elements = sum(e for e, w in zip(ctx.input_elements, wants) if w)
        deps: list[str] = list(incoming)
        if op.name == self.loss:
            deps.append(op.name)
        if rule.saves_inputs and (t.weights > 0 or not rule.saves_inputs_only_with_params):
            deps.extend(unique_inputs)
        if rule.saves_output:
            deps.append(op.name)
        fused = self.inplace and t.weights + t.biases > 0
        update_b = update_gradient_bytes(self.made[op.name], precision) if fused else 0
        size = int(out_elements) * precision.gradient_bytes
        workspace_b = max(precision.activation_bytes, precision.gradient_bytes)
        self._add(Op(grad_name(op.name), op.kind, Phase.BACKWARD, flops=flops,
                     output_bytes=size,
                     workspace_bytes=int(op.workspace_elements) * workspace_b + update_b,
                     forward_of=op.name, inplace_update=fused,
                     overwrites=(self._into(incoming, size)
                                 if rule.passthrough or op.overwrites is not None else None)),
                  list(dict.fromkeys(deps)))


def forward_macs(graph: TrainingGraph) -> float:
    """Multiply-accumulates of one forward pass (convolutions, linear layers, matmuls)."""
    return sum(op.flops / 2 for op in graph.ops
               if op.phase is Phase.FORWARD and op.kind in MAC_KINDS)
