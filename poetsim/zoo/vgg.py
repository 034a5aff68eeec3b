"""VGG-16 without batch normalisation, for CIFAR-10 and for ImageNet.

Convolutions are 3x3, stride 1, padding 1, with bias, each followed by a ReLU; each of the
five blocks ends with a 2x2 max pooling. Op names: ``block{b}.conv{i}``,
``block{b}.relu{i}``, ``block{b}.pool``, then the classifier.
"""

from __future__ import annotations

from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L

__all__ = ["vgg16", "vgg16_cifar"]

#: Output channels of the convolutions of each block of VGG-16 (configuration "D").
VGG16_BLOCKS: tuple[tuple[int, ...], ...] = (
    (64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512),
)


def _features(fg: ForwardGraph, x: L.Tensor) -> L.Tensor:
    for b, channels in enumerate(VGG16_BLOCKS, start=1):
        for i, c in enumerate(channels, start=1):
            x = L.conv2d(fg, f"block{b}.conv{i}", x, c, 3, bias=True)
            x = L.relu(fg, f"block{b}.relu{i}", x)
        x = L.maxpool(fg, f"block{b}.pool", x, 2)
    return x


def vgg16_cifar(*, batch_size: int = 1, classes: int = 10,
                training: Training | None = None,
                precision: Precision | None = None) -> TrainingGraph:
    """VGG-16 for 32x32x3 images, as in POET and common CIFAR code (no batch norm).

    The features end at 1x1x512; the classifier is a single linear layer
    ``classifier`` 512 -> ``classes``. Defaults: 14.72 M parameters, 0.313 G MACs.
    """
    fg = L.new_graph("vgg16_cifar", batch_size, training=training,
                     precision=precision, classes=classes)
    x = L.Tensor(fg.input("input", 3 * 32 * 32), (3, 32, 32))
    x = _features(fg, x)
    logits = L.linear(fg, "classifier", L.flatten(x), classes)
    fg.loss("loss", logits.name)
    return fg.build()


def vgg16(*, batch_size: int = 1, classes: int = 1000,
          training: Training | None = None,
          precision: Precision | None = None) -> TrainingGraph:
    """Torchvision's VGG-16 for 224x224x3 images (no batch norm).

    The features end at 7x7x512; torchvision's ``AdaptiveAvgPool2d(7)`` is the identity at
    224x224 and is omitted, as are the dropout layers. Classifier: ``classifier.fc1``
    25088 -> 4096, ``classifier.relu1``, ``classifier.fc2`` 4096 -> 4096,
    ``classifier.relu2``, ``classifier.fc3`` 4096 -> ``classes``.
    Defaults: 138.36 M parameters, 15.47 G MACs.
    """
    fg = L.new_graph("vgg16", batch_size, training=training, precision=precision, classes=classes)
    x = L.Tensor(fg.input("input", 3 * 224 * 224), (3, 224, 224))
    x = L.flatten(_features(fg, x))
    x = L.relu(fg, "classifier.relu1", L.linear(fg, "classifier.fc1", x, 4096))
    x = L.relu(fg, "classifier.relu2", L.linear(fg, "classifier.fc2", x, 4096))
    logits = L.linear(fg, "classifier.fc3", x, classes)
    fg.loss("loss", logits.name)
    return fg.build()
