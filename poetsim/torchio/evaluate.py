"""Evaluate one op of an imported model on real tensors, forward or backward.

:class:`Evaluator` evaluates an op's FX nodes from the graph tensors it reads (folding the
transforms and parameter expressions, refusing to reach any other op's tensor) and takes
a backward op's vector-Jacobian product from only what its KINDS rule saves:

- saves the inputs (convolution, linear, matmul, norms, GELU, max pooling, embedding, the
  loss): the op is re-evaluated locally from the saved inputs under autograd and
  differentiated (``torch.autograd.grad``);
- saves the output (ReLU, softmax, tanh): the derivative is written in terms of the
  output (:func:`output_backward`); folded input transforms are linear, so their
  vector-Jacobian product is taken at zeros;
- saves nothing (addition, average pooling, concatenation): the op is affine in its
  inputs, so it is differentiated at zeros, without any value.

Parameters come from a callable (the runner's: in RAM, or loaded from storage for the op),
so that reading one the op may not read is the runner's error to raise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from poetsim.errors import ExecutionError
from poetsim.torchio.model import ImportedModel, LoweredOp
from poetsim.torchio.tables import Cls, tables

__all__ = ["Evaluator", "make_target", "output_backward"]


def make_target(torch: Any, imported: ImportedModel, seed: int) -> Any:
    """The loss's target for ``seed``: class indices for cross-entropy, normal values
    shaped as the logits for MSE."""
    logits_meta = imported.output_node.meta["val"]
    gen = torch.Generator().manual_seed(seed)
    if imported.loss == "cross_entropy":
        classes = int(logits_meta.shape[-1])
        rows = int(logits_meta.numel()) // classes
        return torch.randint(0, classes, (rows,), generator=gen)
    return torch.randn(tuple(logits_meta.shape), generator=gen, dtype=torch.float64)


def output_backward(op: LoweredOp, y: Any, g: Any) -> Any:
    """The gradient of the input of output-saving op ``op`` from its output ``y`` and the
    gradient ``g`` of it."""
    if op.kind == "relu":
        return g * (y > 0)
    if op.kind == "tanh":
        return g * (1 - y * y)
    if op.kind == "softmax":
        dim = op.node.args[1]
        return y * (g - (g * y).sum(dim=dim, keepdim=True))
    raise ExecutionError(f"op {op.name!r}: no output-based backward for kind {op.kind!r}")


class Evaluator:
    """The ops of ``imported`` on real tensors: parameters from ``param``, buffers (norm
    statistics) from ``buffers``, the loss against ``target``."""

    def __init__(self, torch: Any, imported: ImportedModel, param: Callable[[str], Any],
                 buffers: Mapping[str, Any], target: Any) -> None:
        self.torch = torch
        self.im = imported
        self.param = param
        self.buffers = buffers
        self.target = target

    def value(self, node: Any, env: dict[Any, Any], cache: dict[Any, Any], *,
              zeros: bool, root: Any = None) -> Any:
        """Value of FX ``node`` given the graph tensors in ``env``; folds transforms and
        parameter expressions, refuses to reach any other op's tensor."""
        torch = self.torch
        if node in env:
            return env[node]
        if node in cache:
            return cache[node]
        if node.op == "placeholder":
            if node in self.im.param_nodes:
                result = self.param(self.im.param_nodes[node])
            elif node in self.im.buffer_nodes:
                result = self.buffers[self.im.buffer_nodes[node]]
            else:
                raise ExecutionError(f"data input {node.name!r} is read without being an "
                                     "input of the op")
            cache[node] = result
            return result
        cls = self.im.classes.get(node)
        if cls is Cls.CORE and node is not root:
            raise ExecutionError(f"op output {node.name!r} is read without being an input "
                                 "of the op (the graph is missing an edge)")
        from torch.fx.node import map_arg

        args, kwargs = map_arg((node.args, node.kwargs),
                               lambda n: self.value(n, env, cache, zeros=zeros))
        t = tables()
        target = t.functional.get(node.target, node.target)
        if target in t.identity:
            result = args[0]
        elif target in t.casts and isinstance(args[0], torch.Tensor) \
                and args[0].is_floating_point():
            result = args[0]  # float casts are identities in the float64 execution
        else:
            result = target(*args, **kwargs)
        cache[node] = result
        return result

    def evaluate(self, name: str, inputs: Mapping[str, Any], *, zeros: bool = False,
                 operand_only: bool = False) -> Any:
        """Forward op (or loss) ``name`` on the graph tensors ``inputs`` (by tensor name);
        ``operand_only``: the value its core node applies to (its folded input)."""
        op = self.im.ops[name]
        env = {node: inputs[n] for n, node in zip(op.inputs, op.input_nodes)}
        if op.kind in ("cross_entropy", "mse"):
            logits = self.value(op.node, env, {}, zeros=zeros)
            if op.kind == "mse":
                return self.torch.nn.functional.mse_loss(logits, self.target)
            return self.torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), self.target)
        if operand_only:
            return self.value(op.node.args[0], env, {}, zeros=zeros)
        return self.value(op.node, env, {}, zeros=zeros, root=op.node)

    # ------------------------------------------------------------------ backward

    def _leaves(self, op: LoweredOp, values: Mapping[str, Any],
                wants: Mapping[str, bool]) -> dict[str, Any]:
        out = {}
        for u in op.inputs:
            x = values[u].detach()
            if wants[u]:
                x = x.clone().requires_grad_(True)
            out[u] = x
        return out

    def _zero_inputs(self, op: LoweredOp, wants: Mapping[str, bool]) -> dict[str, Any]:
        torch = self.torch
        found = {}
        for u, node in zip(op.inputs, op.input_nodes):
            meta = node.meta["val"]
            dtype = torch.float64 if meta.is_floating_point() else meta.dtype
            found[u] = torch.zeros(tuple(meta.shape), dtype=dtype)
        return self._leaves(op, found, wants)

    def gradients(self, op: LoweredOp, g: Any, preds: Mapping[str, Any],
                  wants: Mapping[str, bool], params: Sequence[Any], *, saves_inputs: bool,
                  saves_output: bool, passthrough: bool
                  ) -> tuple[dict[str, Any], tuple[Any, ...]]:
        """The vector-Jacobian product of ``op`` with its output gradient ``g``: the
        gradients of the inputs that ``wants`` asks for (zeros where the op does not reach
        them), and those of ``params`` (None where unused). ``preds`` must hold what the
        rule saves (the inputs, with ``saves_inputs``; else the output, with
        ``saves_output``)."""
        torch = self.torch
        if saves_inputs:
            env = self._leaves(op, preds, wants)
            with torch.enable_grad():
                out = self.evaluate(op.name, env)
            seed = g
        elif saves_output:
            seed = output_backward(op, preds[op.name], g)
            env = self._zero_inputs(op, wants)
            with torch.enable_grad():
                out = self.evaluate(op.name, env, zeros=True, operand_only=True)
        else:
            env = self._zero_inputs(op, wants)
            with torch.enable_grad():
                out = self.evaluate(op.name, env, zeros=True)
            seed = g
        targets = [env[u] for u in op.inputs if wants[u]] + list(params)
        grads = torch.autograd.grad(out, targets, grad_outputs=seed, allow_unused=True) \
            if targets else ()
        names = [u for u in op.inputs if wants[u]]
        result = {u: (torch.zeros_like(env[u]) if gr is None else gr.detach())
                  for u, gr in zip(names, grads)}
        if passthrough and result and all(
                r.shape == g.shape and torch.equal(r, g) for r in result.values()):
            result = dict.fromkeys(result, g)  # one shared tensor, as the graph counts it
        return result, tuple(grads[len(names):])
