"""Precision of a training graph: the byte width of its weights, activations and gradients.

A graph's tensors come in three classes, each with one width (bytes per element):

* ``weight_bytes``: the parameters (``Op.param_bytes``, ``Op.frozen_param_bytes``);
* ``activation_bytes``: forward outputs, the loss, forward workspaces;
* ``gradient_bytes``: backward outputs (gradients of activations), the weight gradients
  and the optimizer state (momentum, Adam's moments), which
  :func:`poetsim.graph.graph.resident_memory` sizes by this width. A backward op's
  workspace holds activations and gradients, so it takes the wider of the two.

The widths are recorded in the graph's metadata (``weight_bytes``, ``activation_bytes``,
``gradient_bytes``; ``dtype_bytes``, the single width of older graphs, is kept and equals
``activation_bytes``). A graph without them (an older graph file) has every width equal
to its ``dtype_bytes``, or 4 (fp32). The defaults, all 4, give the same bytes as before
the widths were separated.

Compute width (:func:`compute_widths`): an op computes at the widest width among the
tensors it reads: a forward op its activations and, if it has parameters, its weights; a
backward op also the gradients. The cost model (:mod:`poetsim.costs`) prices an op of
width 1 at the board's int8 throughput and of width 2 at its fp16 throughput, where the
board gives one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from poetsim.errors import GraphError

if TYPE_CHECKING:
    from poetsim.graph.graph import TrainingGraph

__all__ = ["DTYPE_NAMES", "GRAPH_WIDTHS", "WIDTH_KEYS", "Precision", "check_metadata",
           "check_width", "compute_widths", "precision_of", "rescale_bytes"]

#: Metadata keys of the three widths.
WIDTH_KEYS = ("weight_bytes", "activation_bytes", "gradient_bytes")

#: Widths a graph file may declare (int8, fp16, fp32, fp64).
GRAPH_WIDTHS = (1, 2, 4, 8)

#: The number format each width stands for in reports.
DTYPE_NAMES = {1: "int8", 2: "fp16", 4: "fp32", 8: "fp64"}


@attrs.frozen
class Precision:
    """Bytes per element of weights, activations and gradients."""

    weight_bytes: int = 4
    activation_bytes: int = 4
    gradient_bytes: int = 4

    def metadata(self) -> dict[str, int]:
        """The widths as graph metadata (``dtype_bytes``: the activation width)."""
        return {"dtype_bytes": self.activation_bytes, **attrs.asdict(self)}

    @property
    def int8_kernels(self) -> bool:
        """Int8 weights and activations: the graph runs as int8 MCU runtimes run it
        (TFLite Micro, TinyEngine), with a convolution, its norm and activation fused into
        one op (:func:`poetsim.zoo.layers.conv_bn_act`) and in-place kernels where they
        exist (:attr:`poetsim.graph.ops.Op.overwrites`)."""
        return self.weight_bytes == self.activation_bytes == 1


def check_width(value: Any, field: str, where: str = "") -> int:
    """``value`` if it is a width a graph may declare, else a one-line GraphError."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in GRAPH_WIDTHS:
        prefix = f"{where}: " if where else ""
        raise GraphError(f"{prefix}{field} = {value!r}: must be one of "
                         f"{', '.join(map(str, GRAPH_WIDTHS))} (bytes per element)")
    return value


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Validate the width keys a graph file's metadata has (absent keys are fine)."""
    for key in ("dtype_bytes", *WIDTH_KEYS):
        if key in metadata:
            check_width(metadata[key], f"metadata.{key}")


def precision_of(graph: TrainingGraph) -> Precision:
    """The widths recorded in ``graph``'s metadata (older graphs: ``dtype_bytes`` or 4)."""
    meta = graph.metadata
    base = meta.get("dtype_bytes", 4)
    base = base if isinstance(base, int) and not isinstance(base, bool) and base > 0 else 4
    widths = {}
    for key in WIDTH_KEYS:
        value = meta.get(key, base)
        widths[key] = (value if isinstance(value, int) and not isinstance(value, bool)
                       and value > 0 else base)
    return Precision(**widths)


def rescale_bytes(nbytes: int, from_width: int, to_width: int) -> int:
    """``nbytes`` of elements ``from_width`` wide, as elements ``to_width`` wide (rounded
    up; exact for sizes that are whole elements)."""
    if from_width == to_width:
        return int(nbytes)
    return -(-int(nbytes) * to_width // from_width)


def compute_widths(graph: TrainingGraph) -> list[int]:
    """Per op, the width it computes at (see the module docstring); 0 for the data input,
    which computes nothing."""
    from poetsim.graph.ops import Phase

    p = precision_of(graph)
    widths: list[int] = []
    for op in graph.ops:
        if op.kind == "input" and op.phase is Phase.FORWARD:
            widths.append(0)
            continue
        width = p.activation_bytes
        if op.phase is Phase.BACKWARD:
            width = max(width, p.gradient_bytes)
            if op.forward_of is not None and graph.op(op.forward_of).param_bytes:
                width = max(width, p.weight_bytes)
        elif op.param_bytes:
            width = max(width, p.weight_bytes)
        widths.append(width)
    return widths
