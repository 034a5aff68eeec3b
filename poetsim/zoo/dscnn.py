"""DS-CNN keyword spotting (Zhang et al., "Hello Edge: Keyword Spotting on
Microcontrollers", 2017), small and medium.

Architecture, as pinned from ARM-software/ML-KWS-for-MCU (facts only: ``models.py``,
``create_ds_cnn_model``, and the ``--model_size_info`` of ``train_commands.txt``): a 49x10
MFCC input (1 s of 16 kHz audio, 40 ms windows every 20 ms, 10 coefficients); ``conv1``
(a 10x4 convolution with bias, TensorFlow SAME padding, then batch norm and ReLU), then
depthwise-separable layers ``ds{i}``: a 3x3 depthwise convolution with bias, batch norm,
ReLU (``ds{i}.dw.*``) and a 1x1 convolution with bias, batch norm, ReLU (``ds{i}.pw.*``);
global ``avgpool`` and ``fc`` to 12 classes (10 words, silence, unknown). TF-slim's batch
norm has a shift and no scale (1 parameter per channel).

* small (``ds_cnn_s``): 64 channels, ``conv1`` stride 2x2, 4 DS layers of stride 1;
* medium (``ds_cnn_m``): 172 channels, ``conv1`` stride 2x1, 4 DS layers, the first of
  stride 2x2.

Published (Hello Edge, Table 7 and the repository README's table): 5.4 M operations
(small) and 19.8 M (medium) per inference, counting a multiply-accumulate as 2. Its
memory figures (38.6 KB, 189.2 KB) are 8-bit weights plus activations, not parameter
counts, so parameters are pinned to the architecture instead.
"""

from __future__ import annotations

from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L

__all__ = ["ds_cnn_m", "ds_cnn_s"]

#: Input: time frames x MFCC coefficients.
FRAMES, COEFFICIENTS = 49, 10


def _conv_bn_relu(fg: ForwardGraph, prefix: str, x: L.Tensor, channels: int,
                  kernel: tuple[int, int], stride: tuple[int, int], groups: int = 1) -> L.Tensor:
    return L.conv_bn_act(fg, prefix, x, channels, kernel, stride=stride, padding="same",
                         groups=groups, bias=True, bn_scale=False, activation="relu")


def _ds_cnn(name: str, batch_size: int, classes: int, channels: int,
            conv_stride: tuple[int, int], ds_strides: tuple[tuple[int, int], ...],
            training: Training | None,
            precision: Precision | None = None) -> TrainingGraph:
    fg = L.new_graph(name, batch_size, training=training, precision=precision, classes=classes)
    x = L.Tensor(fg.input("input", FRAMES * COEFFICIENTS), (1, FRAMES, COEFFICIENTS))
    x = _conv_bn_relu(fg, "conv1", x, channels, (10, 4), conv_stride)
    for i, stride in enumerate(ds_strides, start=1):
        x = _conv_bn_relu(fg, f"ds{i}.dw", x, channels, (3, 3), stride, groups=channels)
        x = _conv_bn_relu(fg, f"ds{i}.pw", x, channels, (1, 1), (1, 1))
    return L.pooled_classifier(fg, x, classes)


def ds_cnn_s(*, batch_size: int = 1, classes: int = 12,
             training: Training | None = None,
             precision: Precision | None = None) -> TrainingGraph:
    """DS-CNN small: 64 channels, 4 DS layers; 2.66 M MACs, 23,180 parameters."""
    return _ds_cnn("ds_cnn_s", batch_size, classes, 64, (2, 2), ((1, 1),) * 4, training, precision)


def ds_cnn_m(*, batch_size: int = 1, classes: int = 12,
             training: Training | None = None,
             precision: Precision | None = None) -> TrainingGraph:
    """DS-CNN medium: 172 channels, 4 DS layers; 9.82 M MACs, 136,580 parameters."""
    return _ds_cnn("ds_cnn_m", batch_size, classes, 172, (2, 1),
                   ((2, 2), (1, 1), (1, 1), (1, 1)), training, precision)
