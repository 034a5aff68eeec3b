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


#: A fragmented arena (#28 item 4): tensor ``t{i}`` of ``size`` units of 64 B lives over
#: the times ``[start, end)``. At most 4 units are live at once, yet no layout without a
#: move places them in fewer than 5 (found by brute force): whichever offsets they take,
#: some time's free bytes are split.
FRAGMENTED = ((0, 1, 2), (0, 2, 2), (1, 3, 1), (1, 5, 1), (2, 3, 1), (2, 4, 1), (3, 6, 2),
              (4, 5, 1), (5, 6, 2))
UNIT_BYTES = 64


def fragmented_graph() -> TrainingGraph:
    """Inputs ``t0`` ... ``t8`` of :data:`FRAGMENTED`'s sizes, summed one by one into 4 B
    accumulators ``acc{i}`` (``acc{i}`` reads ``acc{i-1}`` and ``t{i}``), then a trained
    linear head and the loss."""
    from poetsim.graph import ForwardGraph
    from poetsim.graph.training import Training

    fg = ForwardGraph("fragmented", training=Training("last", last=1))
    acc = None
    for i, (_, _, units) in enumerate(FRAGMENTED):
        t = fg.input(f"t{i}", units * UNIT_BYTES // 4)
        acc = fg.op(f"acc{i}", "add", [t] if acc is None else [acc, t], output_elements=1,
                    flops=units * UNIT_BYTES // 4)
    head = fg.op("head", "linear", [acc], output_elements=1, flops=2, param_count=2)
    fg.loss("loss", head)
    return fg.build()


def fragmented_schedule(graph: TrainingGraph) -> Schedule:
    """Each ``t{i}`` computed at its start (its accumulator right after it) and freed at
    its end, then the head, the loss and the backward: a byte peak of 264 B."""
    from poetsim.schedule import Action

    index = {op.name: k for k, op in enumerate(graph.ops)}
    steps: list[Step] = []
    previous = None
    for time in range(7):
        steps += [Step(Action.FREE, index[f"t{i}"], time)
                  for i, (_, end, _) in enumerate(FRAGMENTED) if end == time]
        for i, (start, _, _) in enumerate(FRAGMENTED):
            if start == time:
                steps += [Step(Action.COMPUTE, index[f"t{i}"], time),
                          Step(Action.COMPUTE, index[f"acc{i}"], time)]
                if previous is not None:
                    steps.append(Step(Action.FREE, index[previous], time))
                previous = f"acc{i}"
    steps += [Step(Action.COMPUTE, index[name], 7)
              for name in ("head", "loss", "loss/grad", "head/grad")]
    return Schedule.for_graph(graph, steps, {"method": "hand"})
