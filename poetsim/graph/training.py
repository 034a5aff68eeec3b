"""What is trained: the training mode of a graph, resolved to the parameters of each op.

A model's parameterised forward ops are grouped into *layers*: a convolution, linear or
embedding op together with the batch or layer norm that reads it directly (its scale and
shift, folded into the layer's bias on an int8 MCU graph), and any other op with
parameters (a layer norm after a residual sum) as a layer of its own. Layers are counted
in forward order; the last one is the classifier.

:class:`Training` says which parameters of which layers are trained:

* ``full`` (the default): every parameter;
* ``last``: weights and biases of the last ``last`` layers, every other layer frozen;
* ``bias``: only biases (a convolution's or linear layer's bias, a norm's shift) of the
  last ``last`` layers (every layer when ``last`` is 0), every weight frozen;
* ``sparse``: sparse update as Lin et al. (NeurIPS 2022) define it: biases of the last
  ``last`` layers, and the weights of the layers listed in ``weights`` (index from the
  first layer, 0-based; a negative index counts from the last, -1 the classifier), each
  with the fraction of its weights that is trained (Lin et al.'s channel ratio; the
  weight gradient costs that fraction of the MACs).

``inplace_update`` (any mode) says how the trained parameters are updated: by the
backward op that computes their gradient, the SGD step fused into it (Lin et al.'s
in-place update), so that no gradient is a resident buffer (``Op.inplace_update``).
``gradient_sums`` (any mode) says how the gradient of an op read by several others is
summed: by an op of its own (``Op.gradient_sum_of``) instead of by that op's backward op,
which then reads one gradient instead of one per reader (a smaller working set, for a
board whose RAM the largest backward op would not fit otherwise).

:func:`resolve_training` turns a mode into :class:`TrainedParams` per op, which
:func:`poetsim.graph.autograd.derive_training_graph` uses: a frozen weight has no weight
gradient (no backward work, no saved input for it), no gradient bytes, no optimizer state
and no write-back (``Op.frozen_param_bytes``); backward ops of layers before the first
trained one are not derived at all, and a frozen layer after it only passes the input
gradient on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from poetsim.errors import InputError

if TYPE_CHECKING:
    from poetsim.graph.autograd import ForwardOp

__all__ = ["LAYER_KINDS", "MODES", "NORM_KINDS", "TrainedParams", "Training", "layers",
           "resolve_training"]

#: Training modes.
MODES = ("full", "last", "bias", "sparse")

#: Kinds whose parameters are a layer's weights (and bias).
LAYER_KINDS = frozenset({"conv2d", "conv2d_relu", "conv2d_relu6", "dwconv2d", "dwconv2d_relu",
                         "dwconv2d_relu6", "linear", "embedding"})

#: Norms that join the layer they read directly.
NORM_KINDS = frozenset({"batchnorm", "layernorm"})


@attrs.frozen
class TrainedParams:
    """Parameter counts (elements) of one op that are trained."""

    weights: int = 0
    biases: int = 0


def _weights(value: Mapping[int, float] | Sequence[tuple[int, float]],
             ) -> tuple[tuple[int, float], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((int(k), float(v)) for k, v in items))


@attrs.frozen
class Training:
    """A training mode (see the module docstring)."""

    mode: str = "full"
    last: int = 0
    weights: tuple[tuple[int, float], ...] = attrs.field(default=(), converter=_weights)
    #: Each trained parameter's gradient is applied by the backward op that computes it.
    inplace_update: bool = False
    #: The gradient of each op read by several others is summed by an op of its own.
    gradient_sums: bool = False

    def __attrs_post_init__(self) -> None:
        for option in ("inplace_update", "gradient_sums"):
            if not isinstance(getattr(self, option), bool):
                raise InputError(f"option {option} = {getattr(self, option)!r}: must be 0 or 1")
        if self.mode not in MODES:
            raise InputError(f"training mode = {self.mode!r}: must be one of {', '.join(MODES)}")
        if isinstance(self.last, bool) or not isinstance(self.last, int) or self.last < 0:
            raise InputError(f"option train_last = {self.last!r}: must be a whole number >= 0")
        if self.mode == "last" and self.last < 1:
            raise InputError(f"option train_last = {self.last}: the last-k mode trains at "
                             "least one layer")
        if self.mode == "sparse":
            if not self.weights and self.last < 1:
                raise InputError("sparse update: trains no weight and no bias")
        elif self.weights:
            raise InputError(f"training weights: only for the sparse mode, not {self.mode!r}")
        for index, fraction in self.weights:
            if not 0.0 < fraction <= 1.0:
                raise InputError(f"sparse update: layer {index} weight fraction {fraction!r}: "
                                 "must be in (0, 1]")

    @property
    def is_full(self) -> bool:
        """Every parameter is trained (however it is updated)."""
        return self.mode == "full"

    @property
    def is_default(self) -> bool:
        """Every parameter trained, with a resident gradient, no gradient-sum ops: a
        graph's default."""
        return self.is_full and not self.inplace_update and not self.gradient_sums


def layers(forward: Sequence[ForwardOp]) -> list[tuple[str, ...]]:
    """The layers of a forward graph, in forward order: names of their parameterised ops."""
    groups: list[list[str]] = []
    group_of: dict[str, int] = {}
    has_norm: set[int] = set()
    for op in forward:
        if op.param_count <= 0:
            continue
        if op.kind in NORM_KINDS and len(op.inputs) == 1 and op.inputs[0] in group_of:
            g = group_of[op.inputs[0]]
            if g not in has_norm:
                groups[g].append(op.name)
                group_of[op.name] = g
                has_norm.add(g)
                continue
        group_of[op.name] = len(groups)
        if op.kind not in LAYER_KINDS:
            has_norm.add(len(groups))  # a norm of its own takes no further norm
        groups.append([op.name])
    return [tuple(g) for g in groups]


def resolve_training(forward: Sequence[ForwardOp],
                     training: Training | None) -> dict[str, TrainedParams] | None:
    """Trained parameters per op name (ops not listed are frozen); ``None`` for full.

    Raises :class:`InputError` when the mode names more layers than the model has, or
    trains nothing (e.g. bias-only on a model whose chosen layers have no bias).
    """
    if training is None or training.is_full:
        return None
    by_name = {op.name: op for op in forward}
    groups = layers(forward)
    n = len(groups)
    if training.last > n:
        raise InputError(f"option train_last = {training.last}: must be at most {n}, the "
                         "number of layers with parameters")
    for index, _ in training.weights:
        if not -n <= index < n:
            raise InputError(f"sparse update: layer index {index}: must be in [-{n}, {n}), "
                             f"the model's {n} layers with parameters (negative: from the "
                             "last)")
    bias_layers = range(n - training.last if training.last else 0, n)
    trained: dict[str, TrainedParams] = {}

    def add(index: int, weight_fraction: float, biases: bool) -> None:
        for name in groups[index]:
            op = by_name[name]
            weight_count = op.param_count - op.bias_count
            old = trained.get(name, TrainedParams())
            weights = max(old.weights, round(weight_fraction * weight_count))
            trained[name] = TrainedParams(weights, op.bias_count if biases else old.biases)

    if training.mode == "last":
        for index in bias_layers:
            add(index, 1.0, True)
    elif training.mode == "bias":
        for index in bias_layers:
            add(index, 0.0, True)
    else:  # sparse
        if training.last:
            for index in bias_layers:
                add(index, 0.0, True)
        for index, fraction in training.weights:
            add(index % n, fraction, False)
    trained = {k: v for k, v in trained.items() if v.weights or v.biases}
    if not trained:
        raise InputError(f"training mode {training.mode!r}: the chosen layers have no "
                         "parameter of that kind, so nothing would be trained")
    return trained
