"""MCUNet-in1 (MCUNet "5fps"), the MCUNet network Lin et al. train on microcontrollers.

Architecture, as pinned from the public model files (facts only):
mit-han-lab/tiny-training ``algorithm/assets/mcu_models/mcunet-5fps.pkl`` (the network of
Lin et al., "On-Device Training Under 256KB Memory", NeurIPS 2022, at 128x128) is the
ImageNet model ``mcunet-in1`` (``mcunet-5fps_imagenet``) of mit-han-lab/mcunet, whose
README gives 12.8 M MACs and 0.64 M parameters at its 96x96 resolution.

``stem`` 3x3/2 convolution to 16 channels, 14 MobileNetV2-style inverted residual blocks
(``block1`` ... ``block14``; the first without expansion), no 1x1 head convolution,
global ``avgpool`` and ``classifier`` 160 -> ``classes``. Convolutions are followed by
batch norm; ReLU6 after the expansion and depthwise convolutions. Lin et al. fold each
batch norm into its convolution's bias for int8 training; poetsim keeps the fp32
training graph (a norm's shift is the folded bias in the bias-only and sparse modes).
"""

from __future__ import annotations

from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L
from poetsim.zoo.mobilenet import _conv_bn, inverted_residual

__all__ = ["MCUNET_IN1_BLOCKS", "MCUNET_IN1_SPARSE_UPDATE", "mcunet_in1"]

#: Per block: hidden (expanded) channels, depthwise kernel, stride, output channels.
MCUNET_IN1_BLOCKS: tuple[tuple[int, int, int, int], ...] = (
    (16, 3, 1, 8),
    (32, 3, 2, 16), (48, 3, 1, 16),
    (48, 7, 2, 24), (120, 3, 1, 24),
    (120, 3, 2, 40), (160, 7, 1, 40),
    (160, 5, 1, 48), (144, 3, 1, 48), (192, 3, 1, 48),
    (240, 7, 2, 96), (384, 5, 1, 96), (384, 5, 1, 96),
    (576, 3, 1, 160),
)

#: Smallest input side accepted (the last feature map is then 1x1).
MIN_IMAGE_SIZE = 32


def _sparse_update() -> Training:
    """Lin et al.'s sparse-update scheme of this network (tiny-training
    ``algorithm/scripts/sparse_update.sh``, the "100KB scheme"): biases of the last 22
    convolutions (``n_bias_update 22``), weights of convolutions 21, 24, 27, 30, 36, 39
    (``manual_weight_idx``; counted from the stem, 0-based: the expansions of blocks 8,
    9, 10, 11, 13 and 14) with channel ratios 1, 1, 1, 1, 0.125, 0.25, and the classifier
    (weights and bias, always trained there). A poetsim layer is a convolution and its
    batch norm, so convolution ``i`` is layer ``i`` and the classifier is layer 42.
    """
    convolutions = 1 + 2 + 3 * (len(MCUNET_IN1_BLOCKS) - 1)  # the first block: dw + project
    weights = {21: 1.0, 24: 1.0, 27: 1.0, 30: 1.0, 36: 0.125, 39: 0.25, convolutions: 1.0}
    return Training("sparse", last=22 + 1, weights=weights)


#: The published sparse-update scheme (``--set sparse_update=1``).
MCUNET_IN1_SPARSE_UPDATE = _sparse_update()


def mcunet_in1(*, batch_size: int = 1, classes: int = 1000, image_size: int = 128,
               row_bands: int = 0, training: Training | None = None,
               precision: Precision | None = None) -> TrainingGraph:
    """MCUNet-in1 at 128x128 as Lin et al. train it (see the module docstring).

    At ``image_size=96`` it is the published ImageNet model: 12.8 M MACs, 0.64 M
    parameters (mit-han-lab/mcunet README).
    """
    L.check_option(image_size >= MIN_IMAGE_SIZE, "image_size", image_size,
                   f"must be at least {MIN_IMAGE_SIZE}")
    fg = L.new_graph("mcunet_in1", batch_size, training=training,
                     precision=precision, classes=classes,
                     image_size=image_size, row_bands=row_bands)
    x = L.Tensor(fg.input("input", 3 * image_size * image_size), (3, image_size, image_size))
    x = _conv_bn(fg, "stem", x, 16, 3, stride=2)
    for index, (hidden, kernel, stride, channels) in enumerate(MCUNET_IN1_BLOCKS, start=1):
        x = inverted_residual(fg, f"block{index}", x, channels, stride, 1, kernel=kernel,
                              hidden=hidden)
    return L.pooled_classifier(fg, x, classes, name="classifier")
