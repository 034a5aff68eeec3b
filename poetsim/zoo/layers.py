"""Shared helpers that add one layer to a :class:`~poetsim.graph.autograd.ForwardGraph`.

Every helper takes the graph, an op name and its input :class:`Tensor` (an op name plus the
per-sample shape of its output), adds one forward op and returns the output
:class:`Tensor`. Shapes, FLOPs, parameter counts and workspace are computed by hand from
the layer's hyper-parameters; nothing runs a framework.

Conventions
-----------
* Shapes are per sample: ``(C, H, W)`` for images, ``(S, D)`` for token sequences,
  ``(D,)`` for vectors. Element counts handed to the graph are per batch
  (per-sample elements x ``fg.batch_size``).
* FLOPs count a multiply-accumulate (MAC) as 2 FLOPs. Convolutions, linear layers and
  matrix products have exactly ``2 x MACs`` FLOPs, so
  :func:`~poetsim.graph.autograd.forward_macs` returns the MAC count; bias additions are
  left out of the FLOPs but biases are counted as parameters.
* Element-wise costs (forward, per element, estimates): ReLU 1 (per output element),
  ReLU6 2, BatchNorm 7 (training mode: mean, variance, normalise, scale and shift),
  LayerNorm 8, softmax 5, GELU 8, addition 1, max pooling ``k*k - 1`` per output element
  (comparisons), average pooling 1 per input element.
* Parameters: BatchNorm and LayerNorm have 2 per channel (scale and shift; a BatchNorm
  without scale, as TF-slim's default, has 1); BatchNorm's running mean and variance are
  buffers, not trainable parameters, and are not counted. Each op records which of its
  parameters are biases (a convolution's or linear layer's bias, a norm's shift): the
  ones a bias-only training mode trains (:mod:`poetsim.graph.training`).
* Workspace: a convolution needs an im2col buffer of two columns, ``2 * Cin/groups * k*k``
  elements, as CMSIS-NN's ``arm_convolve_s8`` processes two output pixels at a time. The
  buffer is reused sample after sample, so it does not scale with the batch size. All
  other ops are assumed to work without scratch memory (workspace 0).
* In-place kernels (int8 graphs, :attr:`~poetsim.graph.precision.Precision.int8_kernels`):
  a depthwise convolution may write its output over its input, channel by channel through
  one padded input channel of workspace (TinyEngine's ``depthwise_kernel*_inplace_CHW``),
  and a residual addition over its first operand, the branch. A schedule uses them where
  the input dies with the op (:attr:`poetsim.graph.ops.Op.overwrites`).
* Reshapes, flattening, head splitting and token selection are views and add no op.
* Fusion (:func:`conv_bn_act`): in an int8 graph a convolution, its batch norm and its
  activation are one op, as int8 MCU graphs run them (TFLite Micro, Lin et al.'s Tiny
  Training Engine): the norm folded into the convolution's weights and bias, the
  activation the clamp of the requantisation. So no fp32-only intermediate tensor exists.
"""

from __future__ import annotations

import math

import attrs

from poetsim.errors import InputError
from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.tiling import Rows
from poetsim.graph.training import Training

__all__ = [
    "Tensor", "add", "attention", "avgpool", "batchnorm", "check_option", "conv2d",
    "conv_bn_act", "conv_out",
    "flatten", "gelu", "layernorm", "linear", "matmul", "maxpool", "new_graph", "relu", "relu6",
    "softmax",
]


@attrs.frozen
class Tensor:
    """The output of an op: its name and per-sample shape."""

    name: str
    shape: tuple[int, ...] = attrs.field(converter=tuple)

    @property
    def elements(self) -> int:
        """Elements of one sample."""
        return math.prod(self.shape)


def new_graph(model: str, batch_size: int, *, training: Training | None = None,
              precision: Precision | None = None, **options: int) -> ForwardGraph:
    """An empty forward graph named ``model`` whose metadata records the options;
    ``training`` says what is trained (default: everything), ``precision`` the byte widths
    of weights, activations and gradients (default: all fp32); a ``row_bands`` option runs
    the frozen front in that many row bands (:mod:`poetsim.graph.tiling`)."""
    p = precision or Precision()
    return ForwardGraph(model, batch_size=batch_size, training=training,
                        weight_bytes=p.weight_bytes, activation_bytes=p.activation_bytes,
                        gradient_bytes=p.gradient_bytes, row_bands=options.get("row_bands", 0),
                        metadata={"model": model, "batch_size": batch_size, **options})


def check_option(ok: bool, option: str, value: int, rule: str) -> None:
    """Raise a one-line :class:`InputError` naming the option unless ``ok``."""
    if not ok:
        raise InputError(f"option {option} = {value!r}: {rule}")


def conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution or pooling window along one axis."""
    return (size + 2 * padding - kernel) // stride + 1


def _batch(fg: ForwardGraph, elements: int) -> int:
    return elements * fg.batch_size


def flatten(x: Tensor) -> Tensor:
    """View ``x`` as a vector (no op: flattening is free)."""
    return Tensor(x.name, (x.elements,))


# ----------------------------------------------------------------------- MAC layers


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def conv2d(fg: ForwardGraph, name: str, x: Tensor, out_channels: int,
           kernel: int | tuple[int, int], *, stride: int | tuple[int, int] = 1,
           padding: int | str | None = None, groups: int = 1, bias: bool = False,
           kind: str = "conv2d") -> Tensor:
    """2-D convolution on ``(C, H, W)``; ``padding`` defaults to ``kernel // 2``.

    ``kernel`` and ``stride`` are one number or (height, width); ``padding="same"`` is
    TensorFlow's SAME: the output is ``ceil(input / stride)`` along each axis.
    MACs = ``Hout * Wout * Cout * (Cin / groups) * kh * kw`` per sample. Workspace is an
    im2col buffer of 2 columns (``2 * Cin/groups * kh * kw`` elements, CMSIS-NN style),
    independent of the batch size.
    """
    cin, h, w = x.shape
    if cin % groups or out_channels % groups:
        raise InputError(f"{name}: channels {cin}->{out_channels} not divisible by {groups}")
    (kh, kw), (sh, sw) = _pair(kernel), _pair(stride)
    if padding == "same":
        ho, wo = -(-h // sh), -(-w // sw)
        ph = max((ho - 1) * sh + kh - h, 0) // 2  # TensorFlow pads the extra row below
    else:
        ph, pw = (kh // 2, kw // 2) if padding is None else _pair(padding)  # type: ignore[arg-type]
        ho, wo = conv_out(h, kh, sh, ph), conv_out(w, kw, sw, pw)
    if ho < 1 or wo < 1:
        raise InputError(f"{name}: input {h}x{w} is too small for a {kh}x{kw} "
                         f"stride-{stride} convolution")
    per_group = cin // groups * kh * kw
    macs = ho * wo * out_channels * per_group
    params = out_channels * per_group + (out_channels if bias else 0)
    out = Tensor(name, (out_channels, ho, wo))
    workspace, overwrites = 2 * per_group, None
    if fg.precision.int8_kernels and groups == cin == out_channels:
        # TinyEngine's depthwise kernel, channel by channel: one padded input channel is
        # copied out, and the output channel written over the input's
        padded = max((ho - 1) * sh + kh, h) * max((wo - 1) * sw + kw, w)
        workspace, overwrites = max(workspace, padded), x.name
    if groups == cin == out_channels > 1:
        kind = "dw" + kind  # a depthwise convolution: its own kind, as TFLite has it
    fg.op(name, kind, [x.name], output_elements=_batch(fg, out.elements),
          flops=2.0 * _batch(fg, macs), param_count=params,
          workspace_elements=workspace, bias_count=out_channels if bias else 0,
          rows=Rows(ho, h, kh, sh, ph), overwrites=overwrites)
    return out


def conv_bn_act(fg: ForwardGraph, prefix: str, x: Tensor, out_channels: int,
                kernel: int | tuple[int, int], *, activation: str | None,
                stride: int | tuple[int, int] = 1, padding: int | str | None = None,
                groups: int = 1, bias: bool = False, bn_scale: bool = True) -> Tensor:
    """``{prefix}.conv``, ``{prefix}.bn`` and ``{prefix}.{activation}`` (``"relu"``,
    ``"relu6"`` or ``None``), or in an int8 graph one fused op ``{prefix}.conv``.

    The fused op (kind ``conv2d``, ``conv2d_relu`` or ``conv2d_relu6``; ``dwconv2d...``
    for a depthwise one) has the
    convolution's MACs and weights and one bias per output channel (the norm's shift
    folded in, with the convolution's own bias: the norm's scale folds into the weights);
    the clamp is part of the requantisation and costs no FLOPs. Its backward reads the
    output for the activation's mask (:data:`poetsim.graph.autograd.KINDS`).
    """
    if fg.precision.int8_kernels:
        y = conv2d(fg, f"{prefix}.conv", x, out_channels, kernel, stride=stride,
                   padding=padding, groups=groups, bias=True,
                   kind="conv2d" if activation is None else f"conv2d_{activation}")
        return y
    y = conv2d(fg, f"{prefix}.conv", x, out_channels, kernel, stride=stride, padding=padding,
               groups=groups, bias=bias)
    y = batchnorm(fg, f"{prefix}.bn", y, scale=bn_scale)
    if activation is None:
        return y
    return {"relu": relu, "relu6": relu6}[activation](fg, f"{prefix}.{activation}", y)


def linear(fg: ForwardGraph, name: str, x: Tensor, out_features: int, *,
           bias: bool = True, tokens: int | None = None) -> Tensor:
    """Fully connected layer on the last axis of ``x``.

    MACs = ``tokens * in_features * out_features`` per sample, where ``tokens`` is the
    product of the leading axes (1 for a vector). Passing ``tokens`` explicitly applies
    the layer to only that many rows of ``x`` (e.g. the [CLS] token of a sequence); the
    op still reads the whole tensor ``x``, as the selection is a view.
    """
    in_features = x.shape[-1]
    rows = math.prod(x.shape[:-1]) if tokens is None else tokens
    shape = ((*x.shape[:-1], out_features) if tokens is None
             else ((tokens, out_features) if tokens > 1 else (out_features,)))
    out = Tensor(name, shape)
    params = in_features * out_features + (out_features if bias else 0)
    fg.op(name, "linear", [x.name], output_elements=_batch(fg, out.elements),
          flops=2.0 * _batch(fg, rows * in_features * out_features), param_count=params,
          bias_count=out_features if bias else 0)
    return out


def matmul(fg: ForwardGraph, name: str, a: Tensor, b: Tensor, out_shape: tuple[int, ...],
           macs_per_sample: int) -> Tensor:
    """Product of two activations (no parameters); the caller gives shape and MACs."""
    out = Tensor(name, out_shape)
    fg.op(name, "matmul", [a.name, b.name], output_elements=_batch(fg, out.elements),
          flops=2.0 * _batch(fg, macs_per_sample))
    return out


# ----------------------------------------------------------------------- element-wise


def _elementwise(fg: ForwardGraph, name: str, kind: str, x: Tensor, flops_per_element: float,
                 params: int = 0, biases: int = 0) -> Tensor:
    out = Tensor(name, x.shape)
    fg.op(name, kind, [x.name], output_elements=_batch(fg, out.elements),
          flops=flops_per_element * _batch(fg, out.elements), param_count=params,
          bias_count=biases, rows=_same_rows(x))
    return out


def _same_rows(x: Tensor) -> Rows | None:
    """Row geometry of an op whose output row ``r`` reads input row ``r`` (on a feature
    map; None on other shapes)."""
    return Rows(x.shape[1], x.shape[1]) if len(x.shape) == 3 else None


def relu(fg: ForwardGraph, name: str, x: Tensor) -> Tensor:
    """ReLU: 1 FLOP per element."""
    return _elementwise(fg, name, "relu", x, 1)


def relu6(fg: ForwardGraph, name: str, x: Tensor) -> Tensor:
    """ReLU6 (clamp to [0, 6]): 2 FLOPs per element."""
    return _elementwise(fg, name, "relu6", x, 2)


def gelu(fg: ForwardGraph, name: str, x: Tensor) -> Tensor:
    """GELU: about 8 FLOPs per element (tanh approximation)."""
    return _elementwise(fg, name, "gelu", x, 8)


def softmax(fg: ForwardGraph, name: str, x: Tensor) -> Tensor:
    """Softmax over the last axis: about 5 FLOPs per element (max, sub, exp, sum, div)."""
    return _elementwise(fg, name, "softmax", x, 5)


def batchnorm(fg: ForwardGraph, name: str, x: Tensor, *, scale: bool = True) -> Tensor:
    """BatchNorm over the channel axis (axis 0) in training mode: ~7 FLOPs per element.

    2 parameters per channel (scale and shift), 1 without ``scale`` (TF-slim's default);
    the shift is the bias; running statistics are buffers.
    """
    channels = x.shape[0]
    return _elementwise(fg, name, "batchnorm", x, 7, params=(2 if scale else 1) * channels,
                        biases=channels)


def layernorm(fg: ForwardGraph, name: str, x: Tensor) -> Tensor:
    """LayerNorm over the last axis: ~8 FLOPs per element, 2 parameters per feature."""
    return _elementwise(fg, name, "layernorm", x, 8, params=2 * x.shape[-1],
                        biases=x.shape[-1])


def add(fg: ForwardGraph, name: str, a: Tensor, b: Tensor) -> Tensor:
    """Element-wise sum of two tensors of the same shape (a residual connection)."""
    if a.shape != b.shape:
        raise InputError(f"{name}: cannot add shapes {a.shape} and {b.shape}")
    out = Tensor(name, a.shape)
    fg.op(name, "add", [a.name, b.name], output_elements=_batch(fg, out.elements),
          flops=1.0 * _batch(fg, out.elements), rows=_same_rows(a),
          overwrites=a.name if fg.precision.int8_kernels else None)
    return out


# ----------------------------------------------------------------------- pooling


def maxpool(fg: ForwardGraph, name: str, x: Tensor, kernel: int, *, stride: int | None = None,
            padding: int = 0) -> Tensor:
    """Max pooling on ``(C, H, W)``: ``k*k - 1`` comparisons per output element."""
    c, h, w = x.shape
    s = kernel if stride is None else stride
    out = Tensor(name, (c, conv_out(h, kernel, s, padding), conv_out(w, kernel, s, padding)))
    if min(out.shape) < 1:
        raise InputError(f"{name}: input {h}x{w} is too small for {kernel}x{kernel} pooling")
    fg.op(name, "maxpool", [x.name], output_elements=_batch(fg, out.elements),
          flops=(kernel * kernel - 1) * _batch(fg, out.elements))
    return out


def avgpool(fg: ForwardGraph, name: str, x: Tensor) -> Tensor:
    """Global average pooling ``(C, H, W) -> (C,)``: 1 FLOP per input element."""
    out = Tensor(name, (x.shape[0],))
    fg.op(name, "avgpool", [x.name], output_elements=_batch(fg, out.elements),
          flops=1.0 * _batch(fg, x.elements))
    return out


def pooled_classifier(fg: ForwardGraph, x: Tensor, classes: int, *,
                      name: str = "fc") -> TrainingGraph:
    """The usual CNN head: global average pooling, a linear classifier ``name`` and the
    cross-entropy loss; returns the built training graph."""
    logits = linear(fg, name, avgpool(fg, "avgpool", x), classes)
    fg.loss("loss", logits.name)
    return fg.build()


# ----------------------------------------------------------------------- attention


def attention(fg: ForwardGraph, prefix: str, x: Tensor, heads: int) -> Tensor:
    """Multi-head self-attention on ``(S, D)``; returns the output projection.

    Adds ``{prefix}.query``, ``.key``, ``.value`` (linear D->D each), ``.scores``
    (matmul Q K^T per head: ``heads * S * S * D/heads`` MACs, the 1/sqrt(d) scale folded
    in), ``.softmax``, ``.context`` (matmul softmax x V: same MACs) and ``.output``
    (linear D->D). Splitting and merging heads are views.
    """
    seq, hidden = x.shape
    if hidden % heads:
        raise InputError(f"{prefix}: hidden {hidden} not divisible by heads {heads}")
    head_dim = hidden // heads
    q = linear(fg, f"{prefix}.query", x, hidden)
    k = linear(fg, f"{prefix}.key", x, hidden)
    v = linear(fg, f"{prefix}.value", x, hidden)
    scores = matmul(fg, f"{prefix}.scores", q, k, (heads, seq, seq),
                    heads * seq * seq * head_dim)
    probs = softmax(fg, f"{prefix}.softmax", scores)
    context = matmul(fg, f"{prefix}.context", probs, v, (seq, hidden),
                     heads * seq * seq * head_dim)
    return linear(fg, f"{prefix}.output", context, hidden)
