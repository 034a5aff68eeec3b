"""A multi-layer perceptron: a chain of linear layers with ReLU in between."""

from __future__ import annotations

from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L

__all__ = ["mlp"]


def mlp(*, batch_size: int = 1, input_dim: int = 784, width: int = 256, layers: int = 10,
        classes: int = 10, training: Training | None = None,
        precision: Precision | None = None) -> TrainingGraph:
    """``layers`` linear layers (``layers - 1`` hidden ones of ``width`` units, each followed
    by a ReLU, then the classifier), on flat inputs of ``input_dim`` features.

    The defaults are a 10-layer MLP of width 256 for MNIST (784 inputs, 10 classes).
    Ops: ``fc1``, ``relu1``, ..., ``fc{layers}``, ``loss``.
    """
    fg = L.new_graph("mlp", batch_size, training=training,
                     precision=precision, input_dim=input_dim, width=width,
                     layers=layers, classes=classes)
    x = L.Tensor(fg.input("input", input_dim), (input_dim,))
    for i in range(1, layers):
        x = L.linear(fg, f"fc{i}", x, width)
        x = L.relu(fg, f"relu{i}", x)
    logits = L.linear(fg, f"fc{layers}", x, classes)
    fg.loss("loss", logits.name)
    return fg.build()
