"""Frozen weights streamed from storage: read slice by slice by every op that uses them.

A board whose RAM cannot hold a model's frozen weights, and whose memory-mapped flash (if
any) cannot either, can still train the rest if every op that reads frozen weights
streams them from the storage device (SD card, NOR flash) as it runs: ResNet-18 (CIFAR)
in int8 has 10.7 MiB of weights against the nRF52840's 256 KiB of RAM and 1 MiB of
flash. A convolution or linear layer computes one output channel at a time, so it holds
one output channel's weights (``Cin/groups x k x k``, :func:`weight_slice_bytes`) while
the next slice is read into a second buffer: its workspace grows by two slices
(:func:`stream_frozen_weights`). Each computation reads the op's frozen weights again: a
forward op its own, a backward op those of the forward op it differentiates (the input
gradient needs them; :func:`frozen_weights_read`). The cost model
(:func:`poetsim.costs.op_costs` with ``streamed_weights``) prices those reads like the
data input's: a storage read inside the op's time.

:func:`poetsim.request.resolve_request` decides when weights are streamed; nothing else
does.
"""

from __future__ import annotations

import math

import attrs

from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.graph.precision import precision_of

__all__ = ["STREAM_BUFFERS", "frozen_weights_read", "stream_frozen_weights",
           "weight_slice_bytes"]

#: Slices held at once while streaming: the one in use and the one being read.
STREAM_BUFFERS = 2

#: Kinds whose FLOPs are exactly 2 x MACs and whose weights split by output channel
#: (:data:`poetsim.graph.autograd.MAC_KINDS` without the weightless matmul).
_CHANNEL_KINDS = frozenset({"conv2d", "conv2d_relu", "conv2d_relu6", "linear"})


def frozen_weights_read(graph: TrainingGraph, k: int) -> int:
    """Bytes of frozen weights op ``k`` reads each time it runs: a forward op its own, a
    backward op those of the op it differentiates."""
    op = graph.ops[k]
    if op.phase is Phase.BACKWARD:
        op = graph.op(op.forward_of)  # type: ignore[arg-type]
    return op.frozen_param_bytes


def weight_slice_bytes(graph: TrainingGraph, k: int) -> int:
    """Bytes of the frozen weights op ``k`` needs at once while streaming them: one output
    channel's for a convolution or linear layer (``MACs / output elements`` weights), all
    of them for any other op (a norm's few per-channel parameters)."""
    frozen = frozen_weights_read(graph, k)
    if not frozen:
        return 0
    op = graph.ops[k]
    forward = graph.op(op.forward_of) if op.phase is Phase.BACKWARD else op  # type: ignore[arg-type]
    if forward.kind not in _CHANNEL_KINDS or not forward.output_bytes:
        return frozen
    precision = precision_of(graph)
    out_elements = forward.output_bytes // precision.activation_bytes
    per_channel = forward.flops / 2 / out_elements
    return min(frozen, math.ceil(per_channel) * precision.weight_bytes)


def stream_frozen_weights(graph: TrainingGraph) -> TrainingGraph:
    """``graph`` with the workspace of every op that reads frozen weights grown by
    :data:`STREAM_BUFFERS` slices (:func:`weight_slice_bytes`); the metadata records
    ``streamed_weights``. Costs are the cost model's to add."""
    ops = [attrs.evolve(op, workspace_bytes=op.workspace_bytes
                        + STREAM_BUFFERS * weight_slice_bytes(graph, k))
           if frozen_weights_read(graph, k) else op for k, op in enumerate(graph.ops)]
    return attrs.evolve(graph, ops=tuple(ops),
                        metadata={**graph.metadata, "streamed_weights": 1})
