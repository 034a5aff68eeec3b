"""Activation memory of the plain schedule: every op once, in order, no remat, no paging.

This is the reference point of relative RAM budgets ("50%" means half of this peak) and
the accounting rule every part of poetsim shares:

* while op ``k`` runs, RAM holds every tensor that is still live (computed earlier and
  read by ``k`` or a later op), plus ``k``'s output and ``k``'s workspace;
* after op ``k``, the tensors whose last reader was ``k`` are freed, and ``k``'s own output
  too if nothing reads it;
* an op with an in-place kernel (:meth:`TrainingGraph.overwrites`) whose input is freed
  right after it writes its output into that input's buffer: ``k``'s output adds nothing
  while ``k`` runs (:func:`inplace_saving`).

Parameters, gradients and optimizer state are outside this figure (see
:func:`poetsim.graph.graph.resident_memory`).
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from poetsim.graph.graph import TrainingGraph

__all__ = ["PeakMemory", "inplace_saving", "minimum_ram_bytes", "plain_peak"]


@attrs.frozen
class PeakMemory:
    """A peak of activation memory and the op during which it occurs."""

    bytes: int
    op_index: int
    op_name: str


def inplace_saving(graph: TrainingGraph, k: int, freed_after: Collection[int]) -> int:
    """The bytes op ``k``'s in-place kernel saves while it runs, when the tensors in
    ``freed_after`` leave RAM right after it: its output, if its in-place input is one of
    them; else 0."""
    u = graph.overwrites(k)
    return graph.ops[k].output_bytes if u >= 0 and u in freed_after else 0


def plain_peak(graph: TrainingGraph) -> PeakMemory:
    """Peak activation bytes of the plain schedule, and where it occurs."""
    last_use = [max(graph.successors(i), default=i) for i in range(len(graph))]
    frees_after: list[list[int]] = [[] for _ in range(len(graph))]
    for i, k in enumerate(last_use):
        frees_after[k].append(i)
    live = 0
    best = PeakMemory(-1, 0, "")
    for k, op in enumerate(graph.ops):
        during = (live + op.output_bytes + op.workspace_bytes
                  - inplace_saving(graph, k, frees_after[k]))
        if during > best.bytes:
            best = PeakMemory(during, k, op.name)
        live += op.output_bytes
        live -= sum(graph.ops[i].output_bytes for i in frees_after[k])
    return best


def minimum_ram_bytes(graph: TrainingGraph) -> tuple[int, str]:
    """The largest working set of one op (its inputs, output and workspace), and the op.

    No schedule can run in less activation memory; with paging, every schedule that
    pages everything else out reaches it (an in-place op's input freed right after it).
    """
    best, where = -1, ""
    for k, op in enumerate(graph.ops):
        need = (sum(graph.ops[u].output_bytes for u in graph.predecessors(k))
                + op.output_bytes + op.workspace_bytes
                - inplace_saving(graph, k, graph.predecessors(k)))
        if need > best:
            best, where = need, op.name
    return best, where
