"""Weights on storage: read slice by slice by every op that uses them, written back when
updated in place.

A board whose RAM cannot hold a model's weights, and whose memory-mapped flash (if any)
cannot either, can still train if every op that reads weights streams them from the
storage device (SD card, NOR flash) as it runs: ResNet-18 (CIFAR) in int8 has 10.7 MiB of
weights against the nRF52840's 256 KiB of RAM and 1 MiB of flash. A convolution or
linear layer computes one output channel at a time, so it holds one output channel's
weights (``Cin/groups x k x k``, :func:`weight_slice_bytes`) while the next slice is read
into a second buffer: its workspace grows by two slices. :class:`WeightsOnStorage` says
which weights live there:

* ``frozen``: the frozen weights. A forward op reads its own each time it runs, a
  backward op those of the op it differentiates (the input gradient needs them).
* ``trained``: the trained weights too, possible only when every update is applied in
  place (``Op.inplace_update``): a forward op reads its trained weights, and the backward
  op that updates them reads them, computes one output channel's gradient at a time
  (its gradient buffer, :func:`poetsim.graph.graph.update_gradient_bytes`), applies it,
  and writes the slice back: every iteration writes the trained weights once (wear).
* ``state_copies``: with ``trained``, the optimizer state of the trained weights (one copy
  for momentum, two for Adam, at the gradient width) lives beside them on storage. Only
  the op that updates a weight touches its state, so that op reads the state's slices
  with the weights' and writes them back with them; no other op reads it.

The cost model (:func:`poetsim.costs.op_costs`) prices the reads like the data input's
and the write-backs like a page-out, inside the op's time; the simulator counts the
write-backs' wear and keeps page transfers off the device while such an op runs.
:func:`poetsim.request.resolve_request` decides what lives on storage; nothing else does.
"""

from __future__ import annotations

import math

import attrs

from poetsim.graph.graph import TrainingGraph, weights_per_output_channel
from poetsim.graph.ops import Op, Phase
from poetsim.graph.precision import precision_of, rescale_bytes
from poetsim.graph.tiling import first_band

__all__ = ["STREAM_BUFFERS", "WeightsOnStorage", "frozen_weights_read", "held_bytes",
           "hold_owners",
           "stream_commands", "weight_slice_bytes", "weight_steps"]

#: Slices held at once while streaming: the one in use and the one being read.
STREAM_BUFFERS = 2

def _owner(graph: TrainingGraph, k: int) -> Op:
    """The op whose parameters op ``k`` reads: itself, the op it differentiates, or for a
    later row band the band that owns the layer's weights (:mod:`poetsim.graph.tiling`)."""
    op = graph.ops[k]
    if op.forward_of is not None:
        return graph.op(op.forward_of)
    owner = first_band(op.name)
    return op if owner is None or owner not in graph else graph.op(owner)


def frozen_weights_read(graph: TrainingGraph, k: int) -> int:
    """Bytes of frozen weights op ``k`` reads each time it runs: a forward op its own, a
    backward op those of the op it differentiates."""
    return _owner(graph, k).frozen_param_bytes


def _per_channel(graph: TrainingGraph, k: int) -> float | None:
    """Weights per output channel of op ``k``'s parameters, or None when they do not
    split by output channel."""
    return weights_per_output_channel(_owner(graph, k), precision_of(graph).activation_bytes)


def weight_slice_bytes(graph: TrainingGraph, k: int, nbytes: int | None = None, *,
                       on_storage: WeightsOnStorage | None = None) -> int:
    """Bytes of the streamed weights (``nbytes``; default: the frozen ones) op ``k`` needs
    at once: one output channel's for a convolution or linear layer (with that channel's
    optimizer state when its update streams it), all of them for any other op (a norm's
    few per-channel parameters). ``on_storage``: what lives on storage (default: what
    ``graph`` records)."""
    nbytes = frozen_weights_read(graph, k) if nbytes is None else nbytes
    per_channel = _per_channel(graph, k)
    if not nbytes or per_channel is None:
        return nbytes
    width = precision_of(graph)
    on_storage = WeightsOnStorage.of(graph) if on_storage is None else on_storage
    per_element = width.weight_bytes + (on_storage.state_copies * width.gradient_bytes
                                        if on_storage.state_of_update(graph, k) else 0)
    return min(nbytes, math.ceil(per_channel) * per_element)


def stream_commands(graph: TrainingGraph, k: int, nbytes: int) -> list[tuple[int, int]]:
    """The storage commands that move ``nbytes`` of op ``k``'s weights slice by slice, as
    (bytes, count) pairs: whole slices (:func:`weight_slice_bytes`) and the remainder."""
    if not nbytes:
        return []
    size = weight_slice_bytes(graph, k, nbytes)
    whole, rest = divmod(nbytes, size)
    return ([(size, whole)] if whole else []) + ([(rest, 1)] if rest else [])


def weight_steps(graph: TrainingGraph) -> tuple[list[bool], list[bool]]:
    """For each op of ``graph``, whether its runs read weights from storage and whether
    they write weights back: where a schedule puts its ``READ_WEIGHTS`` and
    ``WRITE_WEIGHTS`` steps (:func:`poetsim.schedule.ops.with_weight_steps`)."""
    on_storage = WeightsOnStorage.of(graph)
    if not on_storage:
        return [False] * len(graph), [False] * len(graph)
    return ([on_storage.bytes_read(graph, k) > 0 for k in range(len(graph))],
            [on_storage.bytes_written(graph, k) > 0 for k in range(len(graph))])


def hold_owners(graph: TrainingGraph) -> list[int]:
    """For each op, the forward op whose run can load the weights it reads into RAM and
    keep them there until it runs (a *hold*, ``HOLD_WEIGHTS`` in
    :mod:`poetsim.schedule.ops`), or -1. Only a backward op that reads weights from
    storage has one: the op it differentiates, which reads at least the same weights."""
    on_storage = WeightsOnStorage.of(graph)
    owners = [-1] * len(graph)
    if not on_storage:
        return owners
    for k, op in enumerate(graph.ops):
        if op.forward_of is None or not op.measured.empty:
            continue
        f = graph.index(op.forward_of)
        read = on_storage.bytes_read(graph, k)
        if read and f < k and graph.ops[f].measured.empty \
                and on_storage.bytes_read(graph, f) >= read:
            owners[k] = f
    return owners


def held_bytes(graph: TrainingGraph, owners: list[int] | None = None) -> list[int]:
    """For each op, the bytes a hold of its weights keeps in RAM (the weights it reads
    from storage; 0 for an op without a hold owner). ``owners``: :func:`hold_owners`,
    when already at hand."""
    owners = hold_owners(graph) if owners is None else owners
    on_storage = WeightsOnStorage.of(graph)
    return [on_storage.bytes_read(graph, k) if owner >= 0 else 0
            for k, owner in enumerate(owners)]


@attrs.frozen
class WeightsOnStorage:
    """Which weights live on the storage device (see the module docstring)."""

    frozen: bool = False
    trained: bool = False
    #: Optimizer-state copies of the trained weights on storage with them (0: none, or
    #: the state, if any, stays in RAM).
    state_copies: int = 0

    def __attrs_post_init__(self) -> None:
        if self.state_copies not in (0, 1, 2):
            raise ValueError(f"WeightsOnStorage.state_copies = {self.state_copies!r}: must be "
                             "0, 1 (momentum) or 2 (Adam)")
        if self.state_copies and not self.trained:
            raise ValueError(f"WeightsOnStorage.state_copies = {self.state_copies!r}: the "
                             "optimizer state lives on storage only with the trained weights")

    def __bool__(self) -> bool:
        return self.frozen or self.trained

    def state_bytes(self, graph: TrainingGraph, trained_param_bytes: int) -> int:
        """Bytes of optimizer state on storage for ``trained_param_bytes`` of weights."""
        if not self.state_copies:
            return 0
        width = precision_of(graph)
        return self.state_copies * rescale_bytes(trained_param_bytes, width.weight_bytes,
                                                 width.gradient_bytes)

    def total_bytes(self, graph: TrainingGraph) -> int:
        """Bytes of ``graph``'s weights (and optimizer state) that live on storage."""
        return (graph.frozen_param_bytes * self.frozen
                + graph.trained_param_bytes * self.trained
                + self.state_bytes(graph, graph.trained_param_bytes))

    @property
    def what(self) -> str:
        """Which weights, in words."""
        return {"all": "weights", "frozen": "frozen weights", "trained": "trained weights",
                "none": "no weights"}[self.label]

    def bytes_read(self, graph: TrainingGraph, k: int) -> int:
        """Bytes of weights (and optimizer state) op ``k`` reads from storage each time it
        runs."""
        owner = _owner(graph, k)
        read = owner.frozen_param_bytes if self.frozen else 0
        if self.trained and (graph.ops[k].phase is not Phase.BACKWARD
                             or graph.ops[k].inplace_update):
            read += owner.trained_param_bytes
        return read + self.state_of_update(graph, k)

    def bytes_written(self, graph: TrainingGraph, k: int) -> int:
        """Bytes of weights (and optimizer state) op ``k`` writes back to storage (its
        in-place update)."""
        if not (self.trained and graph.ops[k].inplace_update):
            return 0
        return _owner(graph, k).trained_param_bytes + self.state_of_update(graph, k)

    def state_of_update(self, graph: TrainingGraph, k: int) -> int:
        """The optimizer state on storage that op ``k``'s in-place update reads and
        writes back."""
        if not (self.trained and graph.ops[k].inplace_update):
            return 0
        return self.state_bytes(graph, _owner(graph, k).trained_param_bytes)

    def graph(self, graph: TrainingGraph) -> TrainingGraph:
        """``graph`` with the workspace of every op that streams weights grown by
        :data:`STREAM_BUFFERS` slices; the metadata records ``weights_on_storage``."""
        ops = []
        for k, op in enumerate(graph.ops):
            read = self.bytes_read(graph, k)
            if not read:
                ops.append(op)
                continue
            workspace = op.workspace_bytes + STREAM_BUFFERS * weight_slice_bytes(
                graph, k, read, on_storage=self)
            ops.append(attrs.evolve(op, workspace_bytes=workspace))
        state = {"optimizer_state_on_storage": self.state_copies} if self.state_copies else {}
        return attrs.evolve(graph, ops=tuple(ops),
                            metadata={**graph.metadata, "weights_on_storage": self.label,
                                      **state})

    @property
    def label(self) -> str:
        """``frozen``, ``trained``, ``all`` or ``none``."""
        return {(True, True): "all", (True, False): "frozen",
                (False, True): "trained"}.get((self.frozen, self.trained), "none")

    @classmethod
    def of(cls, graph: TrainingGraph) -> WeightsOnStorage:
        """What a streamed graph (:meth:`graph`) records; none for any other graph."""
        label = graph.metadata.get("weights_on_storage")
        trained = label in ("trained", "all")
        copies = graph.metadata.get("optimizer_state_on_storage", 0) if trained else 0
        return cls(frozen=label in ("frozen", "all"), trained=trained,
                   state_copies=copies if isinstance(copies, int) else 0)
