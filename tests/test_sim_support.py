"""Helpers shared by the simulator tests (this module holds no tests).

The `residual` graph (tests/conftest.py), op indices and output bytes::

    0 x 32 (input)   1 fc1 16   2 r 16   3 fc2 16   4 s 16 (reads r, fc2)   5 loss 4
    6 loss/grad 16   7 s/grad 16   8 fc2/grad 16 (r, s/grad)   9 r/grad 16 (r, s/grad, fc2/grad)
    10 fc1/grad 0 (x, r/grad)

On `make_board()` a 16 B tensor rounds up to one 512 B block: a page-in takes
1 ms + 512 B / 1 MB/s = 1.512 ms, a page-out 2 ms + 512 B / 0.5 MB/s = 3.024 ms.
"""

from __future__ import annotations

import attrs

from poetsim.boards import Board
from poetsim.graph import TrainingGraph
from poetsim.schedule import Schedule, Step

#: r is written after it is computed, freed after s, and read back for fc2/grad.
PAGE_R = (
    "compute x 0", "compute fc1 1", "compute r 2", "free fc1 2", "page_out r 2",
    "compute fc2 3", "compute s 4", "free fc2 4", "free r 4", "compute loss 5",
    "compute loss/grad 6", "free s 6", "free loss 6", "compute s/grad 7", "free loss/grad 7",
    "page_in r 8", "compute fc2/grad 8", "compute r/grad 9", "free r 9", "free s/grad 9",
    "free fc2/grad 9", "compute fc1/grad 10", "free x 10", "free r/grad 10", "free fc1/grad 10",
)

#: x is written and freed right after fc1, while its write is still in flight. The list-order
#: peak is 64 B (while r/grad runs). With x's 32 B still held, fc2 fits (64 B) but s would
#: take RAM to 80 B, so the CPU must wait for the write before s.
PAGE_X = (
    "compute x 0", "page_out x 0", "compute fc1 1", "free x 1", "compute r 2", "free fc1 2",
    "compute fc2 3", "compute s 4", "free fc2 4", "compute loss 5", "compute loss/grad 6",
    "free s 6", "free loss 6", "compute s/grad 7", "free loss/grad 7", "compute fc2/grad 8",
    "compute r/grad 9", "free r 9", "free s/grad 9", "free fc2/grad 9", "page_in x 10",
    "compute fc1/grad 10", "free x 10", "free r/grad 10", "free fc1/grad 10",
)

#: x and r are both paged out in the forward pass and read back for fc2/grad and fc1/grad.
PAGE_BOTH = (
    "compute x 0", "page_out x 0", "compute fc1 1", "free x 1", "compute r 2", "free fc1 2",
    "page_out r 2", "compute fc2 3", "compute s 4", "free fc2 4", "free r 4", "compute loss 5",
    "compute loss/grad 6", "free s 6", "free loss 6", "compute s/grad 7", "free loss/grad 7",
    "page_in r 8", "compute fc2/grad 8", "compute r/grad 9", "free r 9", "free s/grad 9",
    "free fc2/grad 9", "page_in x 10", "compute fc1/grad 10", "free x 10", "free r/grad 10",
    "free fc1/grad 10",
)


def hand(graph: TrainingGraph, *lines: str, **metadata) -> Schedule:
    """Steps written as "compute fc1 1" (action, op name, stage)."""
    steps = []
    for line in lines:
        action, name, stage = line.split()
        steps.append(Step(action, graph.index(name), int(stage)))
    return Schedule.for_graph(graph, steps, {"method": "hand", **metadata})


def evolve(board: Board, **sections) -> Board:
    """``board`` with fields of its sections replaced: ``evolve(b, cpu={"idle_power_w": 0})``."""
    changes = {name: attrs.evolve(getattr(board, name), **fields)
               for name, fields in sections.items()}
    return attrs.evolve(board, **changes)
