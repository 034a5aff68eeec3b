"""PyTorch in and out: import an ``nn.Module`` as a training graph, execute schedules for real.

* :func:`import_module` (:mod:`poetsim.torchio.trace`) traces a module with
  ``torch.export`` and builds its :class:`~poetsim.graph.graph.TrainingGraph`.
* :func:`execute_schedule` (:mod:`poetsim.torchio.execute`) runs a schedule's op list on
  real tensors (recomputing, paging to files, freeing), takes the SGD step (in place, in
  the backward ops, for an ``inplace_update`` import) and checks the parameter gradients
  and the updated weights against plain autograd and ``torch.optim.SGD``; weights the
  request put on storage (:mod:`poetsim.graph.streaming`) live in files, loaded by the ops
  that read them and written back by in-place updates. :func:`schedule_graph` names the
  graph (imported, or streamed) a schedule was made for.

PyTorch is an optional extra (``pip install 'poetsim[torch]'``): importing this package
does not import torch; the functions raise a one-line
:class:`~poetsim.torchio.trace.TorchMissingError` without it.
"""

from __future__ import annotations

from poetsim.torchio.execute import (
    ExecutionError,
    ExecutionReport,
    execute_schedule,
    schedule_graph,
)
from poetsim.torchio.trace import (
    ImportedModel,
    InputSpec,
    TorchMissingError,
    UnsupportedOpError,
    import_module,
    load_factory,
    make_inputs,
    parse_input_spec,
    require_torch,
)

__all__ = ["ExecutionError", "ExecutionReport", "ImportedModel", "InputSpec",
           "TorchMissingError", "UnsupportedOpError", "execute_schedule", "import_module",
           "load_factory", "make_inputs", "parse_input_spec", "require_torch",
           "schedule_graph"]
