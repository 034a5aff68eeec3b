"""Row tiling: running the frozen front of a convolutional network in horizontal bands.

A large early feature map can exceed a microcontroller's RAM on its own (MobileNetV2 w0.35
at 128x128: one int8 expansion output is 192 KiB). Patch-based inference (Lin et al.,
MCUNetV2, NeurIPS 2021) runs the first layers band by band instead: each band of the last
layer of that stage needs a band of rows of every layer before it, a little taller
where a kernel reaches over the band's edge (the halo), and those halo rows are
*recomputed* by each band rather than kept. Only one band's intermediate tensors and the
stage's input and output are then held at once.

:func:`tile_rows` applies this to forward ops (:class:`~poetsim.graph.autograd.ForwardOp`)
before the backward is derived. It tiles the longest run of ops from the start of the
network that

* carry row geometry (:class:`Rows`: convolutions, element-wise ops and additions on
  ``(C, H, W)`` feature maps, as the zoo's layer helpers record it),
* need no gradient (the frozen front under a sparse or last-k update: their backward is
  not derived, so the weight gradient never has to be summed over bands), and
* have at least ``bands`` output rows,

cut where one op alone is read by the rest of the network, at the cut that gives the
smallest working set of any forward op (the earliest of equals). Every op ``v`` of the
stage becomes ``v.band0`` ... ``v.band{n-1}``; ``vbandj`` computes the rows band ``j`` of
the stage's last op needs, at ``v``'s FLOPs per output row, and reads band ``j`` of its
producers (the stage's input whole). The stage's last op is split into an exact partition
of its rows, and the ops after the stage read all of its bands, the whole tensor. Band 0
of a layer owns its parameters; the other bands read the same weights (the memory-traffic
bound of their cost does not charge those reads again; these convolutions are compute
bound by orders of magnitude).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from poetsim.errors import InputError

if TYPE_CHECKING:
    from poetsim.graph.autograd import ForwardOp

__all__ = ["Rows", "band_name", "first_band", "forward_working_set", "tile_rows"]


@attrs.frozen
class Rows:
    """How an op's output rows depend on the rows of its inputs (one spatial axis).

    Output row ``r`` reads input rows ``r * stride - padding`` to
    ``r * stride - padding + kernel - 1`` (clipped to the input). An element-wise op or
    an addition is ``kernel = stride = 1, padding = 0``.
    """

    out_rows: int
    in_rows: int
    kernel: int = 1
    stride: int = 1
    padding: int = 0

    def __attrs_post_init__(self) -> None:
        for field in ("out_rows", "in_rows", "kernel", "stride"):
            if getattr(self, field) < 1:
                raise ValueError(f"Rows.{field} = {getattr(self, field)!r}: must be >= 1")
        if self.padding < 0:
            raise ValueError(f"Rows.padding = {self.padding!r}: must be >= 0")

    def input_rows(self, first: int, stop: int) -> tuple[int, int]:
        """Input rows ``[a, b)`` that output rows ``[first, stop)`` read."""
        a = first * self.stride - self.padding
        b = (stop - 1) * self.stride - self.padding + self.kernel
        return max(0, a), min(self.in_rows, b)


def band_name(name: str, band: int) -> str:
    """Name of band ``band`` of op ``name``."""
    return f"{name}.band{band}"


def first_band(name: str) -> str | None:
    """For a later band of an op (``v.band3``), the name of its band 0, which owns the
    weights every band reads; None for any other op."""
    base, dot, band = name.rpartition(".band")
    return band_name(base, 0) if dot and band.isdigit() and band != "0" else None


def forward_working_set(forward: Sequence[ForwardOp]) -> tuple[int, str]:
    """The largest working set of one forward op in elements (its distinct inputs, output
    and workspace), and that op: what one op alone needs in RAM."""
    size = {op.name: op.output_elements for op in forward}
    best, where = -1, ""
    for op in forward:
        need = (sum(size[u] for u in dict.fromkeys(op.inputs)) + op.output_elements
                + op.workspace_elements)
        if need > best:
            best, where = need, op.name
    return best, where


def _partition(rows: int, bands: int) -> list[tuple[int, int]]:
    return [(rows * j // bands, rows * (j + 1) // bands) for j in range(bands)]


def _hull(ranges: list[tuple[int, int]]) -> tuple[int, int]:
    return min(a for a, _ in ranges), max(b for _, b in ranges)


def _band_stage(forward: Sequence[ForwardOp], stage: list[int], bands: int,
                ) -> list[ForwardOp]:
    """``forward`` with the ops at indices ``stage`` (a prefix run whose last op alone is
    read after it) replaced by their bands."""
    names = {forward[i].name for i in stage}
    last = forward[stage[-1]]
    assert last.rows is not None
    need: dict[str, list[tuple[int, int]]] = {last.name: _partition(last.rows.out_rows, bands)}
    for i in reversed(stage):
        op = forward[i]
        rows = op.rows
        assert rows is not None
        own = need.get(op.name)
        if own is None:  # read by nothing after it in the stage: cannot happen in a cut
            raise AssertionError(f"op {op.name!r} is not read inside its stage")
        for u in op.inputs:
            if u in names:
                wanted = [rows.input_rows(a, b) for a, b in own]
                old = need.get(u)
                need[u] = wanted if old is None else [_hull([x, y]) for x, y in zip(old, wanted)]
    banded = {i: _bands(forward[i], need[forward[i].name], names) for i in stage}
    tiled: list[ForwardOp] = []
    for i, op in enumerate(forward):
        if i == stage[0]:  # band by band, so one band's intermediates are freed before the next
            tiled.extend(banded[k][j] for j in range(bands) for k in stage)
        elif i in banded:
            continue
        elif last.name in op.inputs:  # after the stage: the whole tensor, all bands
            whole = tuple(band_name(last.name, j) for j in range(bands))
            tiled.append(attrs.evolve(op, inputs=tuple(
                v for u in op.inputs for v in (whole if u == last.name else (u,)))))
        else:
            tiled.append(op)
    return tiled


def _bands(op: ForwardOp, ranges: list[tuple[int, int]], stage: set[str]) -> list[ForwardOp]:
    """The bands of ``op`` computing output rows ``ranges``; inputs in ``stage`` are read
    band by band."""
    rows = op.rows
    assert rows is not None
    per_row = op.output_elements // rows.out_rows
    return [attrs.evolve(
        op, name=band_name(op.name, j),
        inputs=tuple(band_name(u, j) if u in stage else u for u in op.inputs),
        overwrites=(band_name(op.overwrites, j) if op.overwrites in stage
                    else op.overwrites),
        output_elements=per_row * (b - a),
        flops=op.flops * (b - a) / rows.out_rows,
        param_count=op.param_count if j == 0 else 0,
        bias_count=op.bias_count if j == 0 else 0,
        rows=Rows(b - a, rows.in_rows, rows.kernel, rows.stride, rows.padding))
        for j, (a, b) in enumerate(ranges)]


def _cuts(forward: Sequence[ForwardOp], needs_grad: Mapping[str, bool],
          bands: int) -> list[list[int]]:
    """Candidate stages: runs from the first op after the inputs, ending where one op
    alone is read by the ops after it."""
    start = next((i for i, op in enumerate(forward) if op.kind != "input"), len(forward))
    readers: dict[str, list[int]] = {op.name: [] for op in forward}
    for i, op in enumerate(forward):
        for u in dict.fromkeys(op.inputs):
            readers[u].append(i)
    stages: list[list[int]] = []
    for end in range(start, len(forward)):
        op = forward[end]
        if op.rows is None or needs_grad[op.name] or op.rows.out_rows < bands:
            break
        read_after = {forward[i].name for i in range(start, end + 1)
                      if any(r > end for r in readers[forward[i].name])}
        if read_after == {op.name}:
            stages.append(list(range(start, end + 1)))
    return stages


def tile_rows(forward: Sequence[ForwardOp], bands: int,
              needs_grad: Mapping[str, bool]) -> list[ForwardOp]:
    """``forward`` with its frozen front run in ``bands`` row bands (see the module
    docstring); ``needs_grad`` says which ops need a gradient.

    Raises a one-line :class:`InputError` when ``bands`` is below 2 or no op at the front
    can be tiled (naming the first op and why).
    """
    if isinstance(bands, bool) or not isinstance(bands, int) or bands < 2:
        raise InputError(f"option row_bands = {bands!r}: must be 0 (no tiling) or at least 2")
    stages = _cuts(forward, needs_grad, bands)
    if not stages:
        first = next((op for op in forward if op.kind != "input"), None)
        why = ("has no row geometry" if first is None or first.rows is None
               else "needs a gradient (row bands are for a frozen front)"
               if needs_grad[first.name] else f"has fewer than {bands} output rows")
        name = "(none)" if first is None else repr(first.name)
        raise InputError(f"option row_bands = {bands}: nothing to tile: the first op {name} "
                         f"{why}")
    best: list[ForwardOp] | None = None
    best_need = -1
    for stage in stages:
        tiled = _band_stage(forward, stage, bands)
        need, _ = forward_working_set(tiled)
        if best is None or need < best_need:
            best, best_need = tiled, need
    assert best is not None
    return best
