"""MobileNetV2 in torchvision's layout, with a width multiplier and any input size."""

from __future__ import annotations

from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L

__all__ = ["MOBILENET_V2_W035_SPARSE_UPDATE", "make_divisible", "mobilenet_v2",
           "mobilenet_v2_w035"]

#: Inverted-residual settings: expansion t, output channels c, repeats n, first stride s.
MOBILENET_V2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)

#: Smallest input side accepted (the last feature map is then 1x1).
MIN_IMAGE_SIZE = 32


def _w035_sparse_update() -> Training:
    """Lin et al.'s sparse-update scheme of MobileNetV2 w0.35 at 128x128 (tiny-training
    ``compilation/mcu_ir_gen.py``, ``mbv2`` scheme ``"99kb"``, the size of MCUNet's
    "100KB scheme"): biases of the last 25 convolutions (``n_bias_update 25``) and the
    weights of convolutions 27, 30, 33, 36, 39, 42, 45, 48 (``manual_weight_idx``, counted
    from the stem, 0-based: the expansions of blocks 10 to 17) with channel ratios 1, 1,
    1, 1, 1, 0.125, 0.5, 1, and the classifier (layer -1, trained there as in MCUNet's
    scheme). Their network has no head convolution (``head=0``); with it, the head takes
    one of the 25 bias slots.
    """
    weights = {27: 1.0, 30: 1.0, 33: 1.0, 36: 1.0, 39: 1.0, 42: 0.125, 45: 0.5, 48: 1.0,
               -1: 1.0}
    return Training("sparse", last=25 + 1, weights=weights)


#: The published sparse-update scheme of ``mobilenet_v2_w035`` (``--set sparse_update=1``).
MOBILENET_V2_W035_SPARSE_UPDATE = _w035_sparse_update()


def make_divisible(value: float, divisor: int = 8) -> int:
    """Channels rounded to a multiple of ``divisor`` (at least ``divisor``), never more
    than 10% below ``value``: the rounding of MobileNetV2's reference implementations
    (TF-slim, torchvision)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int, kernel: int, *,
             stride: int = 1, groups: int = 1, activation: bool = True) -> L.Tensor:
    return L.conv_bn_act(fg, prefix, x, channels, kernel, stride=stride, groups=groups,
                         activation="relu6" if activation else None)


def inverted_residual(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int,
                      stride: int, expand: int, *, kernel: int = 3,
                      hidden: int | None = None) -> L.Tensor:
    """``{prefix}.expand`` (1x1 to ``hidden`` channels, default ``expand`` x the input's;
    skipped when that is the input's), ``{prefix}.dw`` (``kernel`` x ``kernel``
    depthwise), ``{prefix}.project`` (1x1, linear: no ReLU6), and ``{prefix}.add`` when
    the stride is 1 and the shape is kept."""
    hidden = x.shape[0] * expand if hidden is None else hidden
    h = x
    if hidden != x.shape[0]:
        h = _conv_bn(fg, f"{prefix}.expand", h, hidden, 1)
    h = _conv_bn(fg, f"{prefix}.dw", h, hidden, kernel, stride=stride, groups=hidden)
    h = _conv_bn(fg, f"{prefix}.project", h, channels, 1, activation=False)
    if stride == 1 and x.shape[0] == channels:
        h = L.add(fg, f"{prefix}.add", h, x)
    return h


def _mobilenet_v2(name: str, batch_size: int, classes: int, image_size: int,
                  width_percent: int, training: Training | None,
                  precision: Precision | None = None, head: int | None = None,
                  row_bands: int = 0) -> TrainingGraph:
    # ``head`` is an option of the w0.35 model only: None keeps the head and records no
    # option, so mobilenet_v2's graphs (and the goldens pinning them) stay unchanged.
    L.check_option(image_size >= MIN_IMAGE_SIZE, "image_size", image_size,
                   f"must be at least {MIN_IMAGE_SIZE}")
    L.check_option(width_percent <= 400, "width_percent", width_percent,
                   "must be at most 400 (a width multiplier of 4)")
    width = width_percent / 100
    L.check_option(head in (None, 0, 1), "head", head, "must be 0 or 1")
    extra = {} if head is None else {"head": head}
    fg = L.new_graph(name, batch_size, training=training, precision=precision, classes=classes,
                     image_size=image_size, width_percent=width_percent,
                     row_bands=row_bands, **extra)
    x = L.Tensor(fg.input("input", 3 * image_size * image_size), (3, image_size, image_size))
    x = _conv_bn(fg, "stem", x, make_divisible(32 * width), 3, stride=2)
    index = 0
    for expand, channels, repeats, first_stride in MOBILENET_V2_SETTINGS:
        for r in range(repeats):
            index += 1
            x = inverted_residual(fg, f"block{index}", x, make_divisible(channels * width),
                                  first_stride if r == 0 else 1, expand)
    if head is None or head:
        x = _conv_bn(fg, "head", x, make_divisible(1280 * max(1.0, width)), 1)
    return L.pooled_classifier(fg, x, classes, name="classifier")


def mobilenet_v2(*, batch_size: int = 1, classes: int = 1000, image_size: int = 224,
                 width_percent: int = 100, row_bands: int = 0,
                 training: Training | None = None,
                 precision: Precision | None = None) -> TrainingGraph:
    """MobileNetV2 with width multiplier ``width_percent / 100``.

    ``stem`` (3x3/2 convolution to 32 x width channels, batch norm, ReLU6), 17 inverted
    residual blocks ``block1`` ... ``block17`` (channels x width, rounded by
    :func:`make_divisible`), ``head`` (1x1 convolution to 1280 channels, 1280 x width
    above width 1, batch norm, ReLU6), global ``avgpool`` and ``classifier`` ->
    ``classes`` (dropout omitted). Defaults: 3.50 M parameters, 0.30 G MACs.
    """
    return _mobilenet_v2("mobilenet_v2", batch_size, classes, image_size, width_percent,
                         training, precision, row_bands=row_bands)


def mobilenet_v2_w035(*, batch_size: int = 1, classes: int = 1000, image_size: int = 128,
                      width_percent: int = 35, head: int = 1, row_bands: int = 0,
                      training: Training | None = None,
                      precision: Precision | None = None,
                      ) -> TrainingGraph:
    """MobileNetV2 0.35 at 128x128, the smallest of the reference family.

    :func:`mobilenet_v2` with other defaults. Published (TF-slim MobileNet README,
    tensorflow/models ``research/slim/nets/mobilenet/README.md``, row
    ``mobilenet_v2_0.35_128``): 20 M MACs, 1.66 M parameters. Lin et al. (NeurIPS 2022)
    train it on microcontrollers without the 1280-channel head convolution (``head=0``;
    tiny-training ``algorithm/assets/mcu_models/mbv2-w0.35.pkl``: no ``feature_mix``
    layer, the classifier reads 112 channels).
    """
    return _mobilenet_v2("mobilenet_v2_w035", batch_size, classes, image_size, width_percent,
                         training, precision, head, row_bands)
