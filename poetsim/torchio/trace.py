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
"""

from __future__ import annotations

import copy
import enum
import importlib
import importlib.util
import math
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim.errors import GraphError, InputError, TorchMissingError, UnsupportedOpError
from poetsim.graph.autograd import KINDS, ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.training import TrainedParams, Training

__all__ = ["ImportedModel", "InputSpec", "LoweredOp", "TorchMissingError", "UnsupportedOpError",
           "import_module", "load_factory", "make_inputs", "parse_input_spec", "require_torch"]

TORCH_MISSING = "poetsim import needs PyTorch: pip install 'poetsim[torch]'"
LOSSES = ("cross_entropy", "mse")


def require_torch() -> Any:
    """The ``torch`` module, or a one-line :class:`TorchMissingError`."""
    try:
        import torch
    except ImportError:
        raise TorchMissingError(TORCH_MISSING) from None
    return torch


# ----------------------------------------------------------------------------- inputs


@attrs.frozen
class InputSpec:
    """One example input: a shape, and for integer inputs the exclusive upper bound."""

    shape: tuple[int, ...] = attrs.field(converter=tuple)
    int_high: int | None = None


def parse_input_spec(text: str) -> InputSpec:
    """``2,3,32,32`` (float, normal) or ``2,16:int:100`` (integers in [0, 100))."""
    shape_text, _, rest = text.partition(":")
    try:
        shape = tuple(int(s) for s in shape_text.split(",") if s.strip())
    except ValueError:
        raise InputError(f"--input-shape {text!r}: expected sizes like 2,3,32,32") from None
    if not shape or min(shape) < 1:
        raise InputError(f"--input-shape {text!r}: sizes must be positive integers")
    if not rest:
        return InputSpec(shape)
    kind, _, high = rest.partition(":")
    if kind != "int" or not high.strip().isdigit() or int(high) < 1:
        raise InputError(f"--input-shape {text!r}: expected SHAPE or SHAPE:int:HIGH, "
                         "e.g. 2,16:int:100")
    return InputSpec(shape, int(high))


#: The most elements one example input may have (2**31: 8 GiB of float32), far beyond any
#: model a board trains; a bigger shape is almost always a typo.
MAX_INPUT_ELEMENTS = 2**31


def make_inputs(specs: Sequence[InputSpec], seed: int = 0) -> tuple[Any, ...]:
    """Random example tensors for ``specs`` (deterministic for a seed)."""
    for s in specs:
        if math.prod(s.shape) > MAX_INPUT_ELEMENTS:
            shape = ",".join(map(str, s.shape))
            raise InputError(f"--input-shape {shape}: {math.prod(s.shape):.3g} elements, over "
                             f"the {MAX_INPUT_ELEMENTS} an example input may have")
    torch = require_torch()
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, s.int_high, s.shape, generator=gen) if s.int_high
                 else torch.randn(s.shape, generator=gen) for s in specs)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"


def call_factory(spec: str, factory: Callable[[], Any]) -> Any:
    """``factory()``, its exception a one-line :class:`InputError` naming ``spec``."""
    try:
        return factory()
    except Exception as err:  # noqa: BLE001 - the user's factory raised
        raise InputError(f"model factory {spec!r} raised {type(err).__name__}: "
                         f"{_first_line(err)}") from None


def load_factory(spec: str) -> Callable[[], Any]:
    """``package.module:factory`` or ``path/to/file.py:factory`` to the callable."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"model factory {spec!r}: expected MODULE:FACTORY, e.g. "
                         "mymodels:resnet18 or models.py:resnet18")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise InputError(f"model factory {spec!r}: file {module_name!r} not found")
            unique = f"_poetsim_factory_{abs(hash(str(path.resolve())))}"
            module = sys.modules.get(unique)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(unique, path)
                module = importlib.util.module_from_spec(loader_spec)  # type: ignore[arg-type]
                sys.modules[unique] = module
                loader_spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))  # as `python -m` does
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise InputError(f"model factory {spec!r}: cannot import {module_name!r}: "
                         f"{err}") from None
    except SyntaxError as err:
        raise InputError(f"model factory {spec!r}: cannot import {module_name!r}: "
                         f"{err.msg} ({Path(err.filename or module_name).name}, line "
                         f"{err.lineno})") from None
    except Exception as err:  # noqa: BLE001 - the user's module raised while loading
        raise InputError(f"model factory {spec!r}: importing {module_name!r} raised "
                         f"{type(err).__name__}: {_first_line(err)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"model factory {spec!r}: {module_name!r} has no callable {attr!r}")
    return factory


# ----------------------------------------------------------------------------- op tables


class Cls(enum.Enum):
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
_PER_OUTPUT = {"relu": 1, "relu6": 2, "gelu": 8, "softmax": 5, "batchnorm": 7,
               "layernorm": 8, "add": 1, "embedding": 1, "tanh": 5, "cat": 1}

#: Arguments of a core op that are module state, not data (batch norm's running stats).
_STATE_ARGS = {"batchnorm": (3, 4)}


# ----------------------------------------------------------------------------- results


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


# ----------------------------------------------------------------------------- tracing


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    return list(stack.values())[-1][0]


def _target_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _where(node: Any) -> str:
    path = _module_path(node)
    return f"module {path!r}" if path else "the top-level module"


def _unsupported(node: Any, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"unsupported op {node.target} at {_where(node)} "
                              f"(node {node.name!r}): {why}")


def _val(node: Any) -> Any:
    return node.meta.get("val")


def _in_place_input(node: Any, tensors: Sequence[Any], op_of: Mapping[Any, str]) -> str | None:
    """The input an op the model runs in place (``relu_``, ``hardtanh_``, ``add_``: an
    ``nn.ReLU(inplace=True)``, ``x += y``) writes its output over (``Op.overwrites``): the
    tensor it mutates, its first argument; None for any other op. Whether a schedule keeps
    it in place is the replay's to say (the input must die right after)."""
    if node.target not in tables().functional or not node.args:
        return None
    first = node.args[0]
    return op_of.get(first) if first in tensors and _numel(first) == _numel(node) else None


def _depthwise(node: Any) -> bool:
    """Whether an ``aten.conv2d`` node is depthwise: one input channel per output channel,
    as many outputs as inputs (weight ``(C, 1, kh, kw)`` on a ``(N, C, H, W)`` input)."""
    weight, data = _val(node.args[1]), _val(node.args[0])
    return (len(weight.shape) == 4 and int(weight.shape[1]) == 1 and len(data.shape) == 4
            and int(weight.shape[0]) == int(data.shape[1]) > 1)


def _numel(node: Any) -> int:
    torch = require_torch()
    val = _val(node)
    if not isinstance(val, torch.Tensor):
        raise _unsupported(node, "its result is not a single tensor")
    return int(val.numel())


def _tensor_args(node: Any) -> list[Any]:
    """The FX nodes among the node's arguments (flattened, in order)."""
    from torch.fx.node import map_arg

    found: list[Any] = []
    map_arg((node.args, node.kwargs), lambda n: found.append(n) or n)
    return found


def _export(module: Any, inputs: tuple[Any, ...]) -> Any:
    torch = require_torch()
    try:
        return torch.export.export(module, inputs, strict=False)
    except Exception as err:  # noqa: BLE001 - torch raises many types; report one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GraphError(f"torch.export could not trace the model: {first}") from None


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
    return _lower(program, module, inputs, name=name or type(module).__name__.lower(),
                  loss=loss, dtype_bytes=dtype_bytes, output_index=output_index,
                  metadata=dict(metadata or {}), frozen=frozen,
                  training=Training(inplace_update=inplace_update, gradient_sums=gradient_sums))


def _biases(node: Any, param_names: Mapping[str, str]) -> set[str]:
    """Parameters bound directly to the core op's ``bias`` argument (by its schema)."""
    schema = getattr(node.target, "_schema", None)
    found: set[str] = set()
    for i, argument in enumerate(schema.arguments if schema is not None else ()):
        value = node.kwargs.get(argument.name, node.args[i] if i < len(node.args) else None)
        if argument.name == "bias" and getattr(value, "op", None) == "placeholder" \
                and value.name in param_names:
            found.add(param_names[value.name])
    return found


def _lower(program: Any, module: Any, inputs: tuple[Any, ...], *, name: str, loss: str,
           dtype_bytes: int, output_index: int, metadata: dict[str, Any],
           frozen: frozenset[str] = frozenset(), training: Training = Training()
           ) -> ImportedModel:
    torch = require_torch()
    from torch.export.graph_signature import InputKind, OutputKind

    t = tables()
    sig = program.graph_signature
    param_names = {s.arg.name: s.target for s in sig.input_specs if s.kind is InputKind.PARAMETER}
    buffer_names = {s.arg.name: s.target for s in sig.input_specs
                    if s.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)}
    user_names = [s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
    nodes = list(program.graph.nodes)
    by_name = {n.name: n for n in nodes}
    out_node = nodes[-1]
    outputs = [a for a, s in zip(out_node.args[0], sig.output_specs)
               if s.kind is OutputKind.USER_OUTPUT and isinstance(a, torch.fx.Node)]
    if not 0 <= output_index < len(outputs):
        raise InputError(f"output_index = {output_index}: the model has {len(outputs)} "
                         "tensor output(s)")
    target = outputs[output_index]

    live: set[Any] = set()
    stack = [target]
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(n.all_input_nodes)

    cls: dict[Any, Cls] = {}
    for n in nodes:
        if n not in live:
            continue
        if n.op == "placeholder":
            cls[n] = Cls.PARAM if n.name in param_names else Cls.STATIC
            continue
        if n.op != "call_function":
            raise _unsupported(n, f"FX node kind {n.op!r}")
        trained = [d for d in n.all_input_nodes if cls[d] is not Cls.STATIC]
        if not trained:
            cls[n] = Cls.STATIC
            continue
        activations = [d for d in trained if cls[d] is not Cls.PARAM]
        kind = t.core.get(n.target)
        if kind == "add" and len(trained) < 2:
            kind = None  # x + constant: an affine transform
        if kind is not None:
            cls[n] = Cls.CORE
        elif n.target in t.views or n.target in t.affine:
            if len(trained) > 1:
                raise _unsupported(n, "it combines two trained tensors and poetsim's graph "
                                      "has no rule for that")
            cls[n] = Cls.TRANSFORM if activations else Cls.PARAM
        else:
            raise _unsupported(n, "poetsim has no cost and backward rule for it")

    batch = int(inputs[0].shape[0]) if inputs and getattr(inputs[0], "dim", lambda: 0)() else 1
    # Element counts below are exact per-batch counts, so the builder's batch size is 1;
    # the metadata records the real one.
    fg = ForwardGraph(name, batch_size=1, dtype_bytes=dtype_bytes,
                      metadata={"source": "torch.export", "loss": loss,
                                "output_index": output_index, **metadata,
                                "batch_size": batch,
                                **({"inplace_update": 1} if training.inplace_update else {}),
                                **({"gradient_sums": 1} if training.gradient_sums else {})},
                      training=None if training.is_default else training)
    trained: dict[str, TrainedParams] = {}
    op_of: dict[Any, str] = {}
    lowered: dict[str, LoweredOp] = {}
    used_names: set[str] = set()
    param_owner: dict[str, str] = {}

    def unique(base: str) -> str:
        candidate, k = base, 2
        while candidate in used_names:
            candidate, k = f"{base}_{k}", k + 1
        used_names.add(candidate)
        return candidate

    def input_op(n: Any) -> str:
        if n not in op_of:
            path = _module_path(n)
            base = n.name if n.op == "placeholder" or not path else f"{path}.{n.name}"
            op = unique(base)
            fg.input(op, _numel(n))  # exact element count (the graph's batch size is 1)
            op_of[n] = op
            lowered[op] = LoweredOp(op, "input", n, (), (), path)
        return op_of[n]

    def gather(n: Any, skip: tuple[int, ...] = ()) -> tuple[list[Any], list[str], int, bool]:
        """Graph tensors, parameters, affine FLOPs and scaling-by-static of a core op."""
        tensors: list[Any] = []
        params: list[str] = []
        flops = 0
        scaled = False
        seen: set[Any] = set()

        def visit(arg: Any) -> None:
            nonlocal flops, scaled
            if arg in seen:
                return
            seen.add(arg)
            c = cls[arg]
            if c is Cls.STATIC:
                input_op(arg)
                tensors.append(arg)
            elif c is Cls.CORE:
                tensors.append(arg)
            elif c is Cls.PARAM:
                if arg.op == "placeholder":
                    params.append(param_names[arg.name])
                else:
                    for d in arg.all_input_nodes:
                        visit(d)
            else:  # transform: folded in
                if arg.target in t.affine:
                    flops += _numel(arg)
                    if arg.target in t.scaling and any(
                            isinstance(d, torch.fx.Node) and cls[d] is Cls.STATIC
                            for d in arg.args[1:2]):
                        scaled = True
                for d in arg.all_input_nodes:
                    visit(d)

        args = _tensor_args(n)
        state = set()
        for i in skip:
            if i < len(n.args) and isinstance(n.args[i], torch.fx.Node):
                state.add(n.args[i])
        for arg in args:
            if arg not in state:
                visit(arg)
        return tensors, params, flops, scaled

    for n in nodes:
        if cls.get(n) is not Cls.CORE:
            continue
        kind = t.core[n.target]
        if kind == "conv2d" and _depthwise(n):
            kind = "dwconv2d"
        tensors, params, extra_flops, scaled = gather(n, _STATE_ARGS.get(kind, ()))
        if not tensors:
            raise _unsupported(n, "it reads no data tensor (only parameters)")
        rule = KINDS[kind]
        if scaled and not rule.saves_inputs:
            raise _unsupported(n, f"a {kind} op reads a tensor multiplied by a constant "
                                  "tensor, whose backward would need that constant")
        path = _module_path(n)
        leaf_module = (n.meta.get("nn_module_stack") and
                       list(n.meta["nn_module_stack"].values())[-1][1])
        own = _owns_path(leaf_module, kind)
        base = path if (own and path) else (f"{path}.{_target_name(n.target)}" if path
                                             else _target_name(n.target))
        op = unique(base)
        biases = _biases(n, param_names)
        counts = {"weights": 0, "biases": 0, "trained_weights": 0, "trained_biases": 0}
        for p in dict.fromkeys(params):
            if p in param_owner:
                raise UnsupportedOpError(
                    f"parameter {p!r} is read by ops {param_owner[p]!r} and {op!r} (weight "
                    "sharing), which poetsim's graph cannot express")
            param_owner[p] = op
            part = "biases" if p in biases else "weights"
            elements = int(math.prod(_val(by_name[_param_node(param_names, p)]).shape))
            counts[part] += elements
            if p not in frozen:
                counts[f"trained_{part}"] += elements
        trained[op] = TrainedParams(counts["trained_weights"], counts["trained_biases"])
        flops, workspace = _flops(n, kind, tensors, cls)
        in_names = [op_of[x] for x in tensors]
        fg.op(op, kind, in_names, output_elements=_numel(n), flops=flops + extra_flops,
              param_count=counts["weights"] + counts["biases"], workspace_elements=workspace,
              bias_count=counts["biases"], overwrites=_in_place_input(n, tensors, op_of))
        op_of[n] = op
        lowered[op] = LoweredOp(op, kind, n, tuple(in_names), tuple(tensors), path,
                                tuple(dict.fromkeys(params)), scaled,
                                tuple(p for p in dict.fromkeys(params) if p in biases))

    if cls[target] is Cls.STATIC or cls[target] is Cls.PARAM:
        raise GraphError(f"graph {name!r}: the model's output does not depend on any "
                         "activation of a trained op, so there is nothing to train")
    tensors, params, _, _ = (([target], [], 0, False) if cls[target] is Cls.CORE
                             else gather_output(target, cls))
    if len(tensors) != 1 or params:
        raise GraphError(f"graph {name!r}: the model's output must be one op's output "
                         f"(seen through views), not a mix of {len(tensors)} tensors")
    logits = op_of[tensors[0]]
    loss_name = unique("loss")
    fg.loss(loss_name, logits, kind=loss)
    lowered[loss_name] = LoweredOp(loss_name, loss, target, (logits,), (tensors[0],), "")
    if frozen & set(param_owner):  # else every parameter is trained: the default graph
        fg.trained = {op: t for op, t in trained.items() if t.weights or t.biases}
    graph = fg.build()
    return ImportedModel(
        graph=graph, module=module, program=program, ops=lowered, classes=cls,
        param_nodes={n: param_names[n.name] for n in cls if n.op == "placeholder"
                     and n.name in param_names},
        buffer_nodes={n: buffer_names[n.name] for n in cls if n.op == "placeholder"
                      and n.name in buffer_names},
        user_input_nodes=tuple(by_name[u] for u in user_names),
        output_node=target, example_inputs=inputs, loss=loss,
        frozen_params=frozen, inplace_update=training.inplace_update)


def gather_output(target: Any, cls: Mapping[Any, Cls]) -> tuple[list[Any], list[str], int, bool]:
    """The core tensors the output transform chain reads."""
    found: list[Any] = []
    stack, seen = [target], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if cls[n] is Cls.CORE:
            found.append(n)
        elif cls[n] is Cls.TRANSFORM:
            stack.extend(d for d in n.all_input_nodes if cls[d] is not Cls.STATIC)
    return found, [], 0, False


def _param_node(param_names: Mapping[str, str], fqn: str) -> str:
    return next(k for k, v in param_names.items() if v == fqn)


def _owns_path(module_type: Any, kind: str) -> bool:
    """Whether an op of ``kind`` takes its module's path as its name (a leaf layer)."""
    if not isinstance(module_type, str):
        module_type = getattr(module_type, "__module__", "") + "." + getattr(
            module_type, "__qualname__", "")
    return module_type.startswith("torch.nn.modules.") or (
        kind in ("gelu", "relu", "tanh", "softmax") and "activation" in module_type.lower())


def _flops(n: Any, kind: str, tensors: list[Any], cls: Mapping[Any, Cls]) -> tuple[float, int]:
    """Analytic FLOPs and workspace elements of core node ``n`` (zoo conventions)."""
    out = _numel(n)
    if kind in ("conv2d", "dwconv2d"):
        weight = _val(n.args[1])  # (Cout, Cin / groups, kh, kw)
        per_output = int(math.prod(weight.shape[1:]))
        return 2.0 * out * per_output, 2 * per_output
    if kind == "linear":
        return 2.0 * out * int(_val(n.args[1]).shape[-1]), 0
    if kind == "matmul":
        a = _val(n.args[0])
        return 2.0 * out * int(a.shape[-1]), 0
    if kind == "maxpool":
        k = n.args[1]
        k = list(k) if isinstance(k, (list, tuple)) else [k, k]
        if len(k) == 1:
            k = k * 2
        return float((k[0] * k[1] - 1) * out), 0
    if kind == "avgpool":
        return float(_numel(n.args[0])), 0
    return float(_PER_OUTPUT[kind] * out), 0
