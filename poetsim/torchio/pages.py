"""The activation page files of an execution: PAGE_OUT writes, PAGE_IN reads back.

``PAGE_OUT`` writes a resident tensor to a file (``torch.save``) in the page directory (the
SD card's stand-in) and records its SHA-256; ``PAGE_IN`` reads it back and refuses a file
whose digest changed. :class:`PageFiles` keeps those files and counts the raw bytes
written (``ExecutionReport.bytes_written``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Container
from pathlib import Path
from typing import Any

from poetsim.graph.graph import TrainingGraph
from poetsim.schedule.ops import Step
from poetsim.torchio.report import step_error

__all__ = ["PageFiles"]


class PageFiles:
    """The tensors paged out to files in ``page_dir``: path and digest per tensor name."""

    def __init__(self, torch: Any, graph: TrainingGraph, page_dir: Path) -> None:
        self.torch = torch
        self.graph = graph
        self.page_dir = page_dir
        self.stored: dict[str, tuple[Path, str]] = {}
        self.bytes_written = 0

    def page_out(self, position: int, step: Step, name: str, value: Any, *,
                 copy: bool = False) -> None:
        """Write tensor ``name`` (``value``; ``copy``: its own copy, not a view of a larger
        buffer, which ``torch.save`` would save whole) to its page file."""
        if name in self.stored:
            raise step_error(position, step, self.graph,
                             f"tensor {name!r} is already on storage")
        path = self.page_dir / f"{step.op}.pt"
        if copy:
            value = ({k: v.clone() for k, v in value.items()} if isinstance(value, dict)
                     else value.clone())
        self.torch.save(value, path)
        data = path.read_bytes()
        self.bytes_written += len(data)
        self.stored[name] = (path, hashlib.sha256(data).hexdigest())

    def page_in(self, position: int, step: Step, name: str, resident: Container[str]) -> Any:
        """Tensor ``name`` read back from its page file, the digest checked; an error if it
        was never paged out or is still among the ``resident`` ones."""
        if name not in self.stored:
            raise step_error(position, step, self.graph, f"tensor {name!r} was never paged out")
        if name in resident:
            raise step_error(position, step, self.graph, f"tensor {name!r} is already resident")
        path, digest = self.stored[name]
        try:
            data = path.read_bytes()
        except OSError as err:
            raise step_error(position, step, self.graph, f"cannot read page file {path}: "
                                                         f"{err.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise step_error(position, step, self.graph, f"page file {path} of {name!r} is "
                                                         "corrupted (checksum mismatch)")
        return self.torch.load(path, weights_only=True)
