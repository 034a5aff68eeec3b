"""What an import produces: the training graph and how to evaluate each of its ops.

:class:`ImportedModel` is a traced module with its
:class:`~poetsim.graph.graph.TrainingGraph` and what the executor
(:mod:`poetsim.torchio.execute`) needs to run it on real tensors; :class:`LoweredOp` is
how to evaluate one forward op (or the loss) from the FX graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from poetsim.graph.graph import TrainingGraph
from poetsim.torchio.tables import Cls

__all__ = ["ImportedModel", "LoweredOp"]


@attrs.frozen(eq=False)
class LoweredOp:
    """How to evaluate one forward op (or the loss) of the imported graph.

    ``node`` is the core FX node (the static node for an ``input`` op, the model's output
    node for the loss); ``input_nodes[i]`` is the FX node whose value is the graph tensor
    ``inputs[i]``. ``params`` are the fully qualified names of the parameters it reads,
    ``biases`` those of them bound to its ``bias`` argument.
    """

    name: str
    kind: str
    node: Any
    inputs: tuple[str, ...]
    input_nodes: tuple[Any, ...]
    module_path: str
    params: tuple[str, ...] = ()
    scaled_by_static: bool = False
    biases: tuple[str, ...] = ()


@attrs.frozen(eq=False)
class ImportedModel:
    """A traced module: its training graph and what the executor needs to run it.

    ``frozen_params`` are the parameters that had ``requires_grad=False`` at import (the
    graph trains none of them); ``inplace_update`` says whether the graph's backward ops
    apply the update themselves.
    """

    graph: TrainingGraph
    module: Any
    program: Any
    ops: Mapping[str, LoweredOp]
    classes: Mapping[Any, Cls]
    param_nodes: Mapping[Any, str]
    buffer_nodes: Mapping[Any, str]
    user_input_nodes: tuple[Any, ...]
    output_node: Any
    example_inputs: tuple[Any, ...]
    loss: str
    frozen_params: frozenset[str] = frozenset()
    inplace_update: bool = False

    @property
    def param_count(self) -> int:
        return self.graph.param_bytes // int(self.graph.metadata.get("dtype_bytes", 4))
