"""Lowering: an exported FX program to a poetsim training graph and its evaluation plan.

:func:`lower` classifies every FX node on the way to the chosen output (static, parameter
expression, core op or transform, as :mod:`poetsim.torchio.trace` describes), makes one
graph op per core op (named by its module path, its FLOPs, workspace, parameters and biases
counted by the zoo's conventions), an ``input`` op per static tensor a core op reads, and
the loss on the output, and returns the :class:`~poetsim.torchio.model.ImportedModel`.
Anything it has no rule for is an :class:`~poetsim.errors.UnsupportedOpError` naming the
ATen op and the module path.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from poetsim.errors import GraphError, InputError, UnsupportedOpError
from poetsim.graph.autograd import KINDS, ForwardGraph
from poetsim.graph.training import TrainedParams, Training
from poetsim.torchio.model import ImportedModel, LoweredOp
from poetsim.torchio.tables import PER_OUTPUT, STATE_ARGS, Cls, require_torch, tables

__all__ = ["gather_output", "lower"]


# ----------------------------------------------------------------------------- FX nodes


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


# ----------------------------------------------------------------------------- the program


@attrs.frozen(eq=False)
class _Program:
    """What the lowering reads of an exported program: its nodes, the names of its
    parameter, buffer and user-input placeholders, and the output the loss reads."""

    nodes: list[Any]
    by_name: dict[str, Any]
    param_names: dict[str, str]
    buffer_names: dict[str, str]
    user_names: list[str]
    target: Any


def _read_program(program: Any, output_index: int) -> _Program:
    torch = require_torch()
    from torch.export.graph_signature import InputKind, OutputKind

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
    return _Program(nodes, by_name, param_names, buffer_names, user_names,
                    outputs[output_index])


def _live(target: Any) -> set[Any]:
    """The FX nodes the output depends on."""
    live: set[Any] = set()
    stack = [target]
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(n.all_input_nodes)
    return live


def _classify(prog: _Program) -> dict[Any, Cls]:
    """The class of every node the output depends on, in program order."""
    t = tables()
    live = _live(prog.target)
    cls: dict[Any, Cls] = {}
    for n in prog.nodes:
        if n not in live:
            continue
        if n.op == "placeholder":
            cls[n] = Cls.PARAM if n.name in prog.param_names else Cls.STATIC
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
    return cls


def _forward_graph(name: str, inputs: tuple[Any, ...], *, loss: str, dtype_bytes: int,
                   output_index: int, metadata: dict[str, Any], training: Training
                   ) -> ForwardGraph:
    """The empty graph builder, its metadata recording the import."""
    batch = int(inputs[0].shape[0]) if inputs and getattr(inputs[0], "dim", lambda: 0)() else 1
    # Element counts below are exact per-batch counts, so the builder's batch size is 1;
    # the metadata records the real one.
    return ForwardGraph(name, batch_size=1, dtype_bytes=dtype_bytes,
                        metadata={"source": "torch.export", "loss": loss,
                                  "output_index": output_index, **metadata,
                                  "batch_size": batch,
                                  **({"inplace_update": 1} if training.inplace_update else {}),
                                  **({"gradient_sums": 1} if training.gradient_sums else {})},
                        training=None if training.is_default else training)


def lower(program: Any, module: Any, inputs: tuple[Any, ...], *, name: str, loss: str,
          dtype_bytes: int, output_index: int, metadata: dict[str, Any],
          frozen: frozenset[str] = frozenset(), training: Training = Training()
          ) -> ImportedModel:
    """The imported model of exported ``program`` (of ``module``, traced on ``inputs``):
    its training graph, named ``name``, with a ``loss`` op on output ``output_index``;
    ``frozen`` parameters are not trained."""
    require_torch()
    prog = _read_program(program, output_index)
    cls = _classify(prog)
    fg = _forward_graph(name, inputs, loss=loss, dtype_bytes=dtype_bytes,
                        output_index=output_index, metadata=metadata, training=training)
    lowering = _Lowering(prog, cls, fg, frozen)
    for n in prog.nodes:
        if cls.get(n) is Cls.CORE:
            lowering.core_op(n)
    lowering.loss(name, loss)
    graph = lowering.build()
    return ImportedModel(
        graph=graph, module=module, program=program, ops=lowering.lowered, classes=cls,
        param_nodes={n: prog.param_names[n.name] for n in cls if n.op == "placeholder"
                     and n.name in prog.param_names},
        buffer_nodes={n: prog.buffer_names[n.name] for n in cls if n.op == "placeholder"
                      and n.name in prog.buffer_names},
        user_input_nodes=tuple(prog.by_name[u] for u in prog.user_names),
        output_node=prog.target, example_inputs=inputs, loss=loss,
        frozen_params=frozen, inplace_update=training.inplace_update)


# ----------------------------------------------------------------------------- the ops


class _Lowering:
    """The graph being built: the ops made so far, by FX node and by name."""

    def __init__(self, prog: _Program, cls: dict[Any, Cls], fg: ForwardGraph,
                 frozen: frozenset[str]) -> None:
        self.prog = prog
        self.cls = cls
        self.fg = fg
        self.frozen = frozen
        self.trained: dict[str, TrainedParams] = {}
        self.op_of: dict[Any, str] = {}
        self.lowered: dict[str, LoweredOp] = {}
        self.used_names: set[str] = set()
        self.param_owner: dict[str, str] = {}

    def unique(self, base: str) -> str:
        candidate, k = base, 2
        while candidate in self.used_names:
            candidate, k = f"{base}_{k}", k + 1
        self.used_names.add(candidate)
        return candidate

    def input_op(self, n: Any) -> str:
        if n not in self.op_of:
            path = _module_path(n)
            base = n.name if n.op == "placeholder" or not path else f"{path}.{n.name}"
            op = self.unique(base)
            self.fg.input(op, _numel(n))  # exact element count (the graph's batch size is 1)
            self.op_of[n] = op
            self.lowered[op] = LoweredOp(op, "input", n, (), (), path)
        return self.op_of[n]

    def gather(self, n: Any, skip: tuple[int, ...] = ()
               ) -> tuple[list[Any], list[str], int, bool]:
        """Graph tensors, parameters, affine FLOPs and scaling-by-static of a core op."""
        torch = require_torch()
        t, cls = tables(), self.cls
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
                self.input_op(arg)
                tensors.append(arg)
            elif c is Cls.CORE:
                tensors.append(arg)
            elif c is Cls.PARAM:
                if arg.op == "placeholder":
                    params.append(self.prog.param_names[arg.name])
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

    def core_op(self, n: Any) -> None:
        """The graph op of core node ``n``, and the inputs ops of the statics it reads."""
        kind = tables().core[n.target]
        if kind == "conv2d" and _depthwise(n):
            kind = "dwconv2d"
        tensors, params, extra_flops, scaled = self.gather(n, STATE_ARGS.get(kind, ()))
        if not tensors:
            raise _unsupported(n, "it reads no data tensor (only parameters)")
        rule = KINDS[kind]
        if scaled and not rule.saves_inputs:
            raise _unsupported(n, f"a {kind} op reads a tensor multiplied by a constant "
                                  "tensor, whose backward would need that constant")
        path = _module_path(n)
        op = self.unique(_op_base(n, kind, path))
        biases = _biases(n, self.prog.param_names)
        counts = self.count_params(op, params, biases)
        self.trained[op] = TrainedParams(counts["trained_weights"], counts["trained_biases"])
        flops, workspace = _flops(n, kind, tensors, self.cls)
        in_names = [self.op_of[x] for x in tensors]
        self.fg.op(op, kind, in_names, output_elements=_numel(n), flops=flops + extra_flops,
                   param_count=counts["weights"] + counts["biases"],
                   workspace_elements=workspace, bias_count=counts["biases"],
                   overwrites=_in_place_input(n, tensors, self.op_of))
        self.op_of[n] = op
        self.lowered[op] = LoweredOp(op, kind, n, tuple(in_names), tuple(tensors), path,
                                     tuple(dict.fromkeys(params)), scaled,
                                     tuple(p for p in dict.fromkeys(params) if p in biases))

    def count_params(self, op: str, params: list[str], biases: set[str]) -> dict[str, int]:
        """Elements of op ``op``'s weights and biases, all and trained; each parameter is
        read by one op only (weight sharing is an UnsupportedOpError)."""
        counts = {"weights": 0, "biases": 0, "trained_weights": 0, "trained_biases": 0}
        for p in dict.fromkeys(params):
            if p in self.param_owner:
                raise UnsupportedOpError(
                    f"parameter {p!r} is read by ops {self.param_owner[p]!r} and {op!r} "
                    "(weight sharing), which poetsim's graph cannot express")
            self.param_owner[p] = op
            part = "biases" if p in biases else "weights"
            node = self.prog.by_name[_param_node(self.prog.param_names, p)]
            elements = int(math.prod(_val(node).shape))
            counts[part] += elements
            if p not in self.frozen:
                counts[f"trained_{part}"] += elements
        return counts

    def loss(self, name: str, loss: str) -> None:
        """The loss op on the output (one op's output, seen through views)."""
        target, cls = self.prog.target, self.cls
        if cls[target] is Cls.STATIC or cls[target] is Cls.PARAM:
            raise GraphError(f"graph {name!r}: the model's output does not depend on any "
                             "activation of a trained op, so there is nothing to train")
        tensors, params, _, _ = (([target], [], 0, False) if cls[target] is Cls.CORE
                                 else gather_output(target, cls))
        if len(tensors) != 1 or params:
            raise GraphError(f"graph {name!r}: the model's output must be one op's output "
                             f"(seen through views), not a mix of {len(tensors)} tensors")
        logits = self.op_of[tensors[0]]
        loss_name = self.unique("loss")
        self.fg.loss(loss_name, logits, kind=loss)
        self.lowered[loss_name] = LoweredOp(loss_name, loss, target, (logits,), (tensors[0],),
                                            "")

    def build(self) -> Any:
        """The training graph (trained parameters recorded only when some are frozen)."""
        if self.frozen & set(self.param_owner):  # else every one is trained: the default
            self.fg.trained = {op: t for op, t in self.trained.items()
                               if t.weights or t.biases}
        return self.fg.build()


def _op_base(n: Any, kind: str, path: str) -> str:
    """The name of core node ``n``'s op before de-duplication: its module's path for a leaf
    layer, else the path and the ATen op."""
    leaf_module = (n.meta.get("nn_module_stack") and
                   list(n.meta["nn_module_stack"].values())[-1][1])
    own = _owns_path(leaf_module, kind)
    return path if (own and path) else (f"{path}.{_target_name(n.target)}" if path
                                        else _target_name(n.target))


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
    return float(PER_OUTPUT[kind] * out), 0
