"""The ATen op tables of the PyTorch importer, and the class of each FX node.

:func:`tables` says which ATen ops are core ops (one op of the graph each, with a KINDS
rule), views, affine maps with a constant, casts and identities (folded transforms), and
which in-place overload has which out-of-place one; it is built on first use, so that
importing :mod:`poetsim.torchio` does not import torch (:func:`require_torch` does, or
raises a one-line :class:`TorchMissingError`). :class:`Cls` is the class the lowering
(:mod:`poetsim.torchio.lower`) gives each FX node.
"""

from __future__ import annotations

import enum
import operator
from typing import Any

import attrs

from poetsim.errors import TorchMissingError

__all__ = ["PER_OUTPUT", "STATE_ARGS", "TORCH_MISSING", "Cls", "require_torch", "tables"]

TORCH_MISSING = "poetsim import needs PyTorch: pip install 'poetsim[torch]'"


def require_torch() -> Any:
    """The ``torch`` module, or a one-line :class:`TorchMissingError`."""
    try:
        import torch
    except ImportError:
        raise TorchMissingError(TORCH_MISSING) from None
    return torch



class Cls(enum.Enum):
    """The class of an FX node on the way to the output (:mod:`poetsim.torchio.trace`)."""

    STATIC = "static"
    PARAM = "param"
    CORE = "core"
    TRANSFORM = "transform"


@attrs.frozen
class _Tables:
    core: dict[Any, str]
    views: frozenset[Any]
    affine: frozenset[Any]
    scaling: frozenset[Any]     # affine transforms that multiply by their constant
    functional: dict[Any, Any]  # in-place overload -> out-of-place one
    casts: frozenset[Any]
    identity: frozenset[Any]


_TABLES: _Tables | None = None


def tables() -> _Tables:
    """The ATen op tables (built on first use, so that torch is imported lazily)."""
    global _TABLES
    if _TABLES is None:
        torch = require_torch()
        a = torch.ops.aten
        core = {
            a.conv2d.default: "conv2d", a.linear.default: "linear",
            a.matmul.default: "matmul", a.mm.default: "matmul", a.bmm.default: "matmul",
            a.relu.default: "relu", a.relu_.default: "relu",
            a.hardtanh.default: "relu6", a.hardtanh_.default: "relu6",
            a.gelu.default: "gelu", a.batch_norm.default: "batchnorm",
            a.layer_norm.default: "layernorm", a.softmax.int: "softmax",
            a._softmax.default: "softmax", a.max_pool2d.default: "maxpool",
            a.avg_pool2d.default: "avgpool", a.adaptive_avg_pool2d.default: "avgpool",
            a.mean.dim: "avgpool", a.add.Tensor: "add", a.add_.Tensor: "add",
            a.embedding.default: "embedding", a.tanh.default: "tanh", a.cat.default: "cat",
        }
        casts = frozenset({a._to_copy.default, a.to.dtype, a.to.dtype_layout, a.type_as.default})
        identity = frozenset({a.dropout.default, a.alias.default, a.clone.default,
                              a.contiguous.default})
        views = frozenset({
            a.view.default, a._unsafe_view.default, a.reshape.default, a.flatten.using_ints,
            a.transpose.int, a.permute.default, a.t.default, a.unsqueeze.default,
            a.squeeze.dim, a.squeeze.dims, a.squeeze.default, a.expand.default,
            a.select.int, a.slice.Tensor, a.split.Tensor, a.split_with_sizes.default,
            a.chunk.default, a.unbind.int, a.repeat.default, operator.getitem,
        }) | identity | casts
        scaling = frozenset({a.mul.Tensor, a.mul.Scalar, a.div.Tensor, a.div.Scalar})
        affine = scaling | frozenset({a.add.Tensor, a.add_.Tensor, a.add.Scalar, a.sub.Tensor,
                                      a.sub.Scalar, a.rsub.Scalar, a.neg.default})
        functional = {a.relu_.default: a.relu.default, a.add_.Tensor: a.add.Tensor,
                      a.hardtanh_.default: a.hardtanh.default}
        _TABLES = _Tables(core, views, affine, scaling, functional, casts, identity)
    return _TABLES


#: Forward FLOPs per output element of the element-wise kinds (zoo conventions).
PER_OUTPUT = {"relu": 1, "relu6": 2, "gelu": 8, "softmax": 5, "batchnorm": 7,
               "layernorm": 8, "add": 1, "embedding": 1, "tanh": 5, "cat": 1}

#: Arguments of a core op that are module state, not data (batch norm's running stats).
STATE_ARGS = {"batchnorm": (3, 4)}
