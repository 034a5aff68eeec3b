"""PyTorch in and out: import an ``nn.Module`` as a training graph, execute schedules for real.

* :func:`import_module` (:mod:`poetsim.torchio.trace`) traces a module with
  ``torch.export`` and builds its :class:`~poetsim.graph.graph.TrainingGraph`.
* :func:`execute_schedule` (:mod:`poetsim.torchio.execute`) runs a schedule's op list on
  real tensors (recomputing, paging to files, freeing) and checks the parameter gradients
  against plain autograd.

PyTorch is an optional extra (``pip install 'poetsim[torch]'``): importing this package
does not import torch; the functions raise a one-line
:class:`~poetsim.torchio.trace.TorchMissingError` without it.
"""

from __future__ import annotations

from poetsim.torchio.execute import ExecutionError, ExecutionReport, execute_schedule
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
           "load_factory", "make_inputs", "parse_input_spec", "require_torch"]
