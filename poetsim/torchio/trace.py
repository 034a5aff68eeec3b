"""Import a PyTorch ``nn.Module`` as a poetsim training graph.

The module is traced with ``torch.export`` (non-strict, training mode) into an ATen-level
FX graph whose nodes carry shapes (``node.meta["val"]``) and the path of the module that
issued them (``node.meta["nn_module_stack"]``). Each FX node on the way to the chosen
output falls into one class:

* **static**: depends on no trained parameter (the data inputs, buffers, attention masks,
  position ids, ``arange`` arithmetic). A static tensor read by a trained op becomes an
  ``input`` op of the graph (the data loader delivers it; it is counted in RAM while
  resident), except batch norm's running statistics, which are module state.
* **parameter expression**: depends on parameters only (``weight.t()``); evaluated inline
  by the op that reads it. Each parameter is counted once, by the first op that reads it.
* **core op**: a trained computation with an autograd rule in
  :data:`poetsim.graph.autograd.KINDS` (``conv2d``, ``linear``, ``matmul``, ``relu``, ...).
  Every core op is one op of the graph and produces one tensor.
* **transform**: views and copies that only rearrange elements (``view``, ``reshape``,
  ``flatten``, ``transpose``, ``permute``, ``select``, ``slice``, ``contiguous``, dtype
  casts, ``dropout``, which is taken as the identity), and affine maps with a constant
  (multiplying by a scalar, adding a static tensor such as an attention mask). A transform
  adds no tensor to the graph: it is folded into every op that reads it, which evaluates
  it on the fly from the tensor it aliases (a transient, not counted). Affine transforms
  add one FLOP per element to that op; views add none.

Anything else on the path from a parameter to the output is an error
(:class:`UnsupportedOpError`) naming the ATen op and the module path, never a silent zero
cost. FLOPs follow the zoo's conventions (:mod:`poetsim.zoo.layers`): a MAC is 2 FLOPs;
ReLU 1, ReLU6 2, GELU 8, softmax 5, batch norm 7, layer norm 8, addition 1 per output
element; max pooling ``k*k - 1`` per output element; average pooling 1 per input element;
embedding lookups, concatenation 1 and tanh 5 per output element. Convolutions get the
zoo's im2col workspace. A loss op (cross-entropy or MSE) is added on the model's output.

An op the model runs in place (``relu_``, ``hardtanh_``, ``add_``: ``nn.ReLU(inplace=True)``,
``out += h``) may write its output over the tensor it mutates (``Op.overwrites``); the
schedule's replay keeps it in place only where that tensor dies right after.

Op names are module paths (``layer1.0.conv1``); ops issued by a module's ``forward``
itself are named ``<path>.<aten op>`` (``layer1.0.add``), with ``_2``, ``_3``, ... on
repeats.

What is trained follows the module: a parameter with ``requires_grad=False`` is frozen
(counted in ``Op.frozen_param_bytes``; no gradient, and no backward work for it, as the
zoo's training modes derive it). Parameters bound to a ``bias`` argument (a convolution's
or linear layer's bias, a norm's shift) are the op's biases, so that a layer whose bias
alone is trained costs what it does in the zoo. With ``inplace_update=True`` each backward
op of an op with trained parameters applies their SGD step itself (``Op.inplace_update``,
Lin et al.'s in-place update), exactly as :func:`poetsim.graph.autograd.derive_training_graph`
sets it for a zoo model's ``inplace_update=1``.

The work is split by concept: :mod:`poetsim.torchio.inputs` (example inputs, model
factories), :mod:`poetsim.torchio.tables` (the ATen op tables, the node classes),
:mod:`poetsim.torchio.lower` (the FX program to the graph), :mod:`poetsim.torchio.model`
(:class:`ImportedModel`, :class:`LoweredOp`); this module traces and re-exports them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from poetsim.errors import GraphError, InputError, TorchMissingError, UnsupportedOpError
from poetsim.graph.training import Training

# Split out of this module: the ``name as name`` imports are re-exported for importers.
from poetsim.torchio.inputs import MAX_INPUT_ELEMENTS as MAX_INPUT_ELEMENTS
from poetsim.torchio.inputs import InputSpec, load_factory, make_inputs, parse_input_spec
from poetsim.torchio.inputs import call_factory as call_factory
from poetsim.torchio.lower import gather_output as gather_output
from poetsim.torchio.lower import lower
from poetsim.torchio.model import ImportedModel, LoweredOp
from poetsim.torchio.tables import TORCH_MISSING as TORCH_MISSING
from poetsim.torchio.tables import Cls as Cls
from poetsim.torchio.tables import require_torch
from poetsim.torchio.tables import tables as tables

__all__ = ["ImportedModel", "InputSpec", "LoweredOp", "TorchMissingError", "UnsupportedOpError",
           "import_module", "load_factory", "make_inputs", "parse_input_spec", "require_torch"]

LOSSES = ("cross_entropy", "mse")


def _export(module: Any, inputs: tuple[Any, ...]) -> Any:
    torch = require_torch()
    # torch logs the traceback of a failed op (a shape that does not fit the model) before
    # it raises; the raised error is reported in one line, so the log stays quiet
    noisy = logging.getLogger("torch._subclasses.fake_tensor")
    level = noisy.level
    noisy.setLevel(logging.CRITICAL)
    try:
        return torch.export.export(module, inputs, strict=False)
    except Exception as err:  # noqa: BLE001 - torch raises many types; report one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GraphError(f"torch.export could not trace the model: {first}") from None
    finally:
        noisy.setLevel(level)


def import_module(module: Any, inputs: Sequence[Any], *, name: str | None = None,
                  loss: str = "cross_entropy", dtype_bytes: int = 4, output_index: int = 0,
                  metadata: Mapping[str, Any] | None = None,
                  inplace_update: bool = False, gradient_sums: bool = False) -> ImportedModel:
    """Trace ``module`` on example ``inputs`` and build its poetsim training graph.

    The module is traced in training mode (batch norm uses batch statistics) on a copy,
    so the caller's module is not changed. ``output_index`` picks which of the model's
    tensor outputs the loss reads (``logits`` for a Hugging Face classifier, the first).
    Parameters with ``requires_grad=False`` are frozen; ``inplace_update`` fuses each
    trained parameter's SGD step into the backward op that computes its gradient;
    ``gradient_sums`` sums the gradient of each op read by several in an op of its own
    (``Op.gradient_sum_of``).
    """
    torch = require_torch()
    if loss not in LOSSES:
        raise InputError(f"loss = {loss!r}: must be one of {', '.join(LOSSES)}")
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"model is a {type(module).__name__}, not a torch.nn.Module")
    for flag, value in (("inplace_update", inplace_update), ("gradient_sums", gradient_sums)):
        if not isinstance(value, bool):
            raise InputError(f"{flag} = {value!r}: must be True or False")
    inputs = tuple(inputs)
    frozen = frozenset(n for n, p in module.named_parameters() if not p.requires_grad)
    traced = copy.deepcopy(module).train()
    program = _export(traced, inputs)
    return lower(program, module, inputs, name=name or type(module).__name__.lower(),
                 loss=loss, dtype_bytes=dtype_bytes, output_index=output_index,
                 metadata=dict(metadata or {}), frozen=frozen,
                 training=Training(inplace_update=inplace_update, gradient_sums=gradient_sums))
