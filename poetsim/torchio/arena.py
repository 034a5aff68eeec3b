"""One preallocated region for every activation of an execution, laid out by a layout.

With ``execute_schedule(arena=...)``, every floating-point activation lives in one float64
region at its buffer's offset (:class:`~poetsim.schedule.layout.Layout`, in graph units,
``dtype_bytes`` per element), as a view, until the next write there: a layout that places
two live tensors on the same bytes corrupts one, and the gradient and weight checks catch
it. :class:`TensorArena` is that region and where each step's tensor goes in it. A MOVE
step (compaction) copies its tensor's elements to its destination offset, as a runtime's
``memmove``, and the tensor is a view there from then on: a MOVE whose destination
overlaps live data corrupts it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poetsim.graph.graph import TrainingGraph
from poetsim.schedule.layout import Layout
from poetsim.schedule.ops import Action, Step
from poetsim.torchio.report import step_error

__all__ = ["TensorArena"]


class TensorArena:
    """The region, and the element offset and size of the tensor buffer each COMPUTE or
    PAGE_IN position opens (up to its FREE, or its first MOVE)."""

    def __init__(self, torch: Any, graph: TrainingGraph, layout: Layout,
                 steps: Sequence[Step], dtype_bytes: int) -> None:
        self.torch = torch
        self.graph = graph
        width = dtype_bytes
        ends: dict[int, int] = {}  # opening position -> its FREE (or the end)
        opened: dict[int, int] = {}
        for p, step in enumerate(steps):
            if step.action in (Action.COMPUTE, Action.PAGE_IN):
                opened[step.op] = p
            elif step.action is Action.FREE and step.op in opened:
                ends[opened.pop(step.op)] = p
            elif step.action is Action.MOVE and step.op in opened:  # live through the copy
                ends[opened.pop(step.op)] = p + 1
        for p in opened.values():
            ends[p] = len(steps)
        where = {(b.op, b.end): b for b in layout.buffers if b.kind == "tensor"}
        self.at: dict[int, tuple[int, int]] = {}
        for p, end in ends.items():
            b = where.get((steps[p].op, end))
            if b is not None:
                self.at[p] = (b.offset_bytes // width, b.size_bytes // width)
        # the bytes the buffers reach: a file may declare a larger arena (the simulator
        # judges that), which the run never touches and need not allocate
        top_bytes = max((b.top_bytes for b in layout.buffers), default=0)
        self.region = torch.zeros(-(-top_bytes // width), dtype=torch.float64)
        self.width = width

    def move(self, position: int, step: Step, value: Any) -> Any:
        """MOVE: the tensor buffer's elements copied from the step's source offset to its
        destination (a ``memmove``: the ranges may overlap), and ``value``'s views in the
        region as views at the destination."""
        width, region = self.width, self.region
        source, target = step.from_offset_bytes // width, step.to_offset_bytes // width
        n = self.graph.ops[step.op].output_bytes // width
        if max(source, target) + n > len(region):
            raise step_error(position, step, self.graph,
                             f"moves {n} elements from {source} to {target}, outside the "
                             f"arena of {len(region)}")
        region[target:target + n] = region[source:source + n].clone()
        shift = target - source
        parts = value if isinstance(value, dict) else {None: value}
        moved: dict[Any, Any] = {}
        for key, x in parts.items():
            inside = (isinstance(x, self.torch.Tensor) and x.is_floating_point()
                      and x.untyped_storage().data_ptr() == region.untyped_storage().data_ptr())
            if inside:  # the same elements, read from where the copy put them
                start = x.storage_offset() + shift
                x = region[start:start + x.numel()].view(x.shape)
            moved[key] = x
        return moved if isinstance(value, dict) else moved[None]

    def place(self, position: int, step: Step, value: Any) -> Any:
        """``value`` written at its buffer in the arena; views of it from then on."""
        spot = self.at.get(position)
        if spot is None:
            return value
        start, room = spot
        parts = value if isinstance(value, dict) else {None: value}
        placed: dict[Any, Any] = {}
        views: dict[int, Any] = {}  # one tensor handed to several inputs is stored once
        for key, x in parts.items():
            if not (isinstance(x, self.torch.Tensor) and x.is_floating_point()):
                placed[key] = x  # indices and the like stay outside
                continue
            if id(x) in views:
                placed[key] = views[id(x)]
                continue
            n = int(x.numel())
            if n > room or start + n > len(self.region):
                raise step_error(position, step, self.graph,
                                 f"its output ({n} elements) does not fit its arena buffer "
                                 f"({room} at {start} of {len(self.region)})")
            view = self.region[start:start + n].view(x.shape)
            view.copy_(x)
            placed[key] = views[id(x)] = view
            start, room = start + n, room - n
        return placed if isinstance(value, dict) else placed[None]
