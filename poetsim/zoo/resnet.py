"""ResNets: ResNet-18 for CIFAR-10, ResNet-18 and ResNet-50 for ImageNet.

Op names follow torchvision: ``conv1``, ``bn1``, ``relu``, ``maxpool`` (ImageNet only),
``layer{s}.{b}.conv1`` / ``.bn1`` / ``.relu1`` / ... inside block ``b`` (from 0) of stage
``s`` (from 1), ``layer{s}.{b}.shortcut.conv`` / ``.shortcut.bn`` for a projection
shortcut, ``layer{s}.{b}.add`` for the residual sum and the ReLU after it
(``relu2`` in a basic block, ``relu3`` in a bottleneck), then ``avgpool``, ``fc``, ``loss``.

Every convolution has no bias and is followed by a batch norm. The residual branch is
evaluated before the shortcut, as in torchvision and in Kuang Liu's pytorch-cifar.
"""

from __future__ import annotations

from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L

__all__ = ["resnet18", "resnet18_cifar", "resnet50"]

#: Smallest input side the ImageNet ResNets accept (the last stage is then 1x1).
MIN_IMAGE_SIZE = 32


def _shortcut(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int,
              stride: int) -> L.Tensor:
    """The identity, or a 1x1 convolution and batch norm when the shape changes."""
    if stride == 1 and x.shape[0] == channels:
        return x
    s = L.conv2d(fg, f"{prefix}.shortcut.conv", x, channels, 1, stride=stride, padding=0)
    return L.batchnorm(fg, f"{prefix}.shortcut.bn", s)


def basic_block(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int,
                stride: int) -> L.Tensor:
    """conv3x3-bn-relu-conv3x3-bn, plus the shortcut, then ReLU (expansion 1)."""
    h = L.conv2d(fg, f"{prefix}.conv1", x, channels, 3, stride=stride)
    h = L.relu(fg, f"{prefix}.relu1", L.batchnorm(fg, f"{prefix}.bn1", h))
    h = L.batchnorm(fg, f"{prefix}.bn2", L.conv2d(fg, f"{prefix}.conv2", h, channels, 3))
    h = L.add(fg, f"{prefix}.add", h, _shortcut(fg, prefix, x, channels, stride))
    return L.relu(fg, f"{prefix}.relu2", h)


def bottleneck(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int,
               stride: int) -> L.Tensor:
    """conv1x1-bn-relu-conv3x3(stride)-bn-relu-conv1x1(4x)-bn, plus the shortcut, then
    ReLU (torchvision's ResNet v1.5: the stride sits on the 3x3 convolution)."""
    h = L.conv2d(fg, f"{prefix}.conv1", x, channels, 1, padding=0)
    h = L.relu(fg, f"{prefix}.relu1", L.batchnorm(fg, f"{prefix}.bn1", h))
    h = L.conv2d(fg, f"{prefix}.conv2", h, channels, 3, stride=stride)
    h = L.relu(fg, f"{prefix}.relu2", L.batchnorm(fg, f"{prefix}.bn2", h))
    h = L.conv2d(fg, f"{prefix}.conv3", h, 4 * channels, 1, padding=0)
    h = L.batchnorm(fg, f"{prefix}.bn3", h)
    h = L.add(fg, f"{prefix}.add", h, _shortcut(fg, prefix, x, 4 * channels, stride))
    return L.relu(fg, f"{prefix}.relu3", h)


def _stages(fg: ForwardGraph, x: L.Tensor, block, depths: tuple[int, ...]) -> L.Tensor:
    for s, (channels, depth) in enumerate(zip((64, 128, 256, 512), depths), start=1):
        for b in range(depth):
            stride = 2 if s > 1 and b == 0 else 1
            x = block(fg, f"layer{s}.{b}", x, channels, stride)
    return x


def resnet18_cifar(*, batch_size: int = 1, classes: int = 10,
                   training: Training | None = None,
                   precision: Precision | None = None) -> TrainingGraph:
    """ResNet-18 for 32x32x3 images, as in Kuang Liu's pytorch-cifar.

    3x3 stem convolution with 64 channels (no max pooling), four stages of two basic blocks
    (64, 128, 256, 512 channels; 32, 16, 8, 4 pixels), 1x1 convolution + batch norm
    projection shortcuts, global average pooling (``avg_pool2d(4)`` at 4x4) and
    ``fc`` 512 -> ``classes``. Defaults: 11.17 M parameters, 0.557 G MACs.
    """
    fg = L.new_graph("resnet18_cifar", batch_size, training=training,
                     precision=precision, classes=classes)
    x = L.Tensor(fg.input("input", 3 * 32 * 32), (3, 32, 32))
    x = L.conv2d(fg, "conv1", x, 64, 3)
    x = L.relu(fg, "relu", L.batchnorm(fg, "bn1", x))
    return L.pooled_classifier(fg, _stages(fg, x, basic_block, (2, 2, 2, 2)), classes)


def _imagenet(name: str, block, depths: tuple[int, ...], batch_size: int, classes: int,
              image_size: int, training: Training | None,
              precision: Precision | None = None) -> TrainingGraph:
    L.check_option(image_size >= MIN_IMAGE_SIZE, "image_size", image_size,
                   f"must be at least {MIN_IMAGE_SIZE}")
    fg = L.new_graph(name, batch_size, training=training, precision=precision, classes=classes,
                     image_size=image_size)
    x = L.Tensor(fg.input("input", 3 * image_size * image_size), (3, image_size, image_size))
    x = L.conv2d(fg, "conv1", x, 64, 7, stride=2, padding=3)
    x = L.relu(fg, "relu", L.batchnorm(fg, "bn1", x))
    x = L.maxpool(fg, "maxpool", x, 3, stride=2, padding=1)
    return L.pooled_classifier(fg, _stages(fg, x, block, depths), classes)


def resnet18(*, batch_size: int = 1, classes: int = 1000, image_size: int = 224,
             training: Training | None = None,
             precision: Precision | None = None) -> TrainingGraph:
    """Torchvision's ResNet-18: 7x7/2 stem convolution, batch norm, ReLU, 3x3/2 max
    pooling, basic blocks [2, 2, 2, 2], global average pooling, ``fc`` 512 -> ``classes``.
    Defaults: 11.69 M parameters, 1.81 G MACs."""
    return _imagenet("resnet18", basic_block, (2, 2, 2, 2), batch_size, classes, image_size,
                     training, precision)


def resnet50(*, batch_size: int = 1, classes: int = 1000, image_size: int = 224,
             training: Training | None = None,
             precision: Precision | None = None) -> TrainingGraph:
    """Torchvision's ResNet-50 (v1.5): the ResNet-18 stem, bottleneck blocks [3, 4, 6, 3]
    with expansion 4, ``fc`` 2048 -> ``classes``. Defaults: 25.56 M parameters, 4.09 G MACs."""
    return _imagenet("resnet50", bottleneck, (3, 4, 6, 3), batch_size, classes, image_size,
                     training, precision)
