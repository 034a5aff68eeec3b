"""MobileNetV2 (width 1.0), in torchvision's layout."""

from __future__ import annotations

from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.zoo import layers as L

__all__ = ["mobilenet_v2"]

#: Inverted-residual settings: expansion t, output channels c, repeats n, first stride s.
MOBILENET_V2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)

#: Smallest input side accepted (the last feature map is then 1x1).
MIN_IMAGE_SIZE = 32


def _conv_bn(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int, kernel: int, *,
             stride: int = 1, groups: int = 1, activation: bool = True) -> L.Tensor:
    x = L.conv2d(fg, f"{prefix}.conv", x, channels, kernel, stride=stride, groups=groups)
    x = L.batchnorm(fg, f"{prefix}.bn", x)
    return L.relu6(fg, f"{prefix}.relu6", x) if activation else x


def inverted_residual(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int,
                      stride: int, expand: int) -> L.Tensor:
    """``{prefix}.expand`` (1x1, skipped when ``expand == 1``), ``{prefix}.dw`` (3x3
    depthwise), ``{prefix}.project`` (1x1, linear: no ReLU6), and ``{prefix}.add`` when
    the stride is 1 and the shape is kept."""
    hidden = x.shape[0] * expand
    h = x
    if expand != 1:
        h = _conv_bn(fg, f"{prefix}.expand", h, hidden, 1)
    h = _conv_bn(fg, f"{prefix}.dw", h, hidden, 3, stride=stride, groups=hidden)
    h = _conv_bn(fg, f"{prefix}.project", h, channels, 1, activation=False)
    if stride == 1 and x.shape[0] == channels:
        h = L.add(fg, f"{prefix}.add", h, x)
    return h


def mobilenet_v2(*, batch_size: int = 1, classes: int = 1000,
                 image_size: int = 224) -> TrainingGraph:
    """MobileNetV2 with width multiplier 1.0.

    ``stem`` (3x3/2 convolution to 32 channels, batch norm, ReLU6), 17 inverted residual
    blocks ``block1`` ... ``block17``, ``head`` (1x1 convolution to 1280 channels, batch
    norm, ReLU6), global ``avgpool`` and ``classifier`` 1280 -> ``classes`` (dropout
    omitted). Defaults: 3.50 M parameters, 0.30 G MACs.
    """
    L.check_option(image_size >= MIN_IMAGE_SIZE, "image_size", image_size,
                   f"must be at least {MIN_IMAGE_SIZE}")
    fg = L.new_graph("mobilenet_v2", batch_size, classes=classes, image_size=image_size)
    x = L.Tensor(fg.input("input", 3 * image_size * image_size), (3, image_size, image_size))
    x = _conv_bn(fg, "stem", x, 32, 3, stride=2)
    index = 0
    for expand, channels, repeats, first_stride in MOBILENET_V2_SETTINGS:
        for r in range(repeats):
            index += 1
            x = inverted_residual(fg, f"block{index}", x, channels,
                                  first_stride if r == 0 else 1, expand)
    x = _conv_bn(fg, "head", x, 1280, 1)
    logits = L.linear(fg, "classifier", L.avgpool(fg, "avgpool", x), classes)
    fg.loss("loss", logits.name)
    return fg.build()
