"""The step runner: one execution's tensors in RAM, and each schedule step carried out.

:class:`Runner` holds what an execution keeps in RAM (Python objects): the resident
activations, the parameter gradients (the checking harness's accumulator), the optimizer
state, the buffers (norm statistics), the data loader's batch, and every parameter
*except* the weights the executed graph puts on storage, which live in its
:class:`~poetsim.torchio.weights.WeightFiles`. It carries out one step at a time
(:meth:`Runner.run`):

* ``COMPUTE`` of an ``input`` op copies the tensor from the batch (the data loader's copy,
  outside the activation memory); of a forward op or the loss, evaluates the op from its
  resident inputs; of a backward op ``v/grad``, computes the gradients of ``v``'s inputs
  from *only* the tensors the graph says it reads (:class:`~poetsim.torchio.evaluate.
  Evaluator`). Parameter gradients accumulate on the first computation of each backward
  op only; an ``Op.inplace_update`` op applies the optimizer's step there, the others'
  parameters take it after the schedule (:meth:`Runner.step_the_rest`).
* ``PAGE_OUT`` / ``PAGE_IN`` go through the page files
  (:class:`~poetsim.torchio.pages.PageFiles`), ``FREE`` drops the tensor; the weight steps
  (READ, WRITE, HOLD and DROP_WEIGHTS) through the weight files.
* With an arena (:meth:`Runner.use_arena`), each tensor made resident is placed in it
  (:class:`~poetsim.torchio.arena.TensorArena`).

Live activation bytes (:meth:`Runner.live_bytes`) are measured from the tensors actually
held (unique tensors), in the graph's units and raw; ``Runner.during`` is RAM while the
last COMPUTE ran, its output counted on top of the resident set.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poetsim.errors import ExecutionError
from poetsim.graph.autograd import KINDS
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.schedule.layout import Layout
from poetsim.schedule.ops import Action, Step
from poetsim.torchio.arena import TensorArena
from poetsim.torchio.evaluate import Evaluator, make_target
from poetsim.torchio.model import ImportedModel
from poetsim.torchio.optim import apply_step as optim_step
from poetsim.torchio.optim import zero_state
from poetsim.torchio.pages import PageFiles
from poetsim.torchio.report import step_error
from poetsim.torchio.tables import require_torch
from poetsim.torchio.weights import WeightFiles

__all__ = ["Runner"]


class Runner:
    """State of one execution."""

    def __init__(self, imported: ImportedModel, inputs: tuple[Any, ...], seed: int,
                 page_dir: Path, lr: float, graph: TrainingGraph | None = None,
                 optimizer: str = "sgd") -> None:
        torch = require_torch()
        self.torch = torch
        self.im = imported
        self.graph = imported.graph if graph is None else graph
        self.dtype_bytes = int(self.graph.metadata.get("dtype_bytes", 4))
        model = copy.deepcopy(imported.module).double().train()
        self.params = {name: p for name, p in model.named_parameters()}
        self.initial = {name: p.detach().clone() for name, p in self.params.items()}
        self.trained = {name for name in self.params if name not in imported.frozen_params}
        for name, p in self.params.items():
            p.requires_grad_(name in self.trained)
        self.lr = lr
        self.optimizer = optimizer
        #: Optimizer state in RAM, per trained parameter whose state is not on storage.
        self.state = {name: zero_state(self.params[name], optimizer) for name in self.trained}
        self.updated_in_place: set[str] = set()
        #: tensors whose buffer an in-place output took over, until their FREE
        self.taken: set[str] = set()
        self.buffers = {name: b for name, b in model.named_buffers()}
        self.batch = tuple(x.double() if x.is_floating_point() else x for x in inputs)
        self.user = dict(zip(imported.user_input_nodes, self.batch))
        # Weights on storage: one file each, written before the iteration (the card as
        # the board boots with it); they leave ``params`` and are only ever loaded by the
        # files, for the op that reads them.
        self.files = WeightFiles(torch, imported, self.graph, self.trained, page_dir)
        self.target = make_target(torch, imported, seed)
        self.evaluator = Evaluator(torch, imported, self.param, self.buffers, self.target)
        # Statics (data inputs, masks, position ids): what the data loader delivers.
        self.loader: dict[str, Any] = {}
        for name, op in imported.ops.items():
            if op.kind == "input":
                with torch.no_grad():
                    self.loader[name] = self.evaluator.value(op.node, dict(self.user), {},
                                                             zeros=False)
        self.resident: dict[str, Any] = {}
        #: with a layout (:meth:`use_arena`): the one float64 region of the activations
        self.arena: TensorArena | None = None
        #: RAM (graph units, raw bytes) while the last COMPUTE ran; None after other steps
        self.during: tuple[int, int] | None = None
        self.pages = PageFiles(torch, self.graph, page_dir)
        self.grads: dict[str, Any] = {}
        self.done_backward: set[str] = set()
        self.grad_ops = {o.name for o in self.graph.ops if o.phase is Phase.BACKWARD}
        self.files.move_out(self.params, self.state)

    # ------------------------------------------------------------------ parameters

    def param(self, name: str) -> Any:
        """Parameter ``name`` for the running op: in RAM, or loaded from storage for it."""
        if name in self.params:
            return self.params[name]
        if name in self.files.loaded:
            return self.files.loaded[name]
        raise ExecutionError(f"op {self.files.current!r} reads parameter {name!r}, which "
                             "lives on storage and which the graph does not say the op reads")

    def final_weight(self, name: str) -> Any:
        """Parameter ``name`` after the iteration: its weight file's contents for a
        weight on storage, else the tensor in RAM."""
        if name in self.files.weight_files:
            return self.files.read_weight_file(name)
        return self.params[name].detach()

    def final_state(self, name: str) -> dict[str, Any]:
        """Parameter ``name``'s optimizer state after the iteration: its files' contents,
        or the tensors in RAM."""
        return self.files.state_from_files(name) if self.files.state_on_storage(name) \
            else self.state[name]

    # ------------------------------------------------------------------ steps

    def run(self, position: int, step: Step, reads_weights: bool, overwrites: int = -1) -> None:
        """Carry out one step on real tensors (``reads_weights``: a COMPUTE that streams its
        weights, ``overwrites``: the input an in-place COMPUTE writes its output over, both
        by the contract's replay); ``during`` is RAM while a COMPUTE ran, an in-place
        output counted in its input's place."""
        k = step.op
        name = self.graph.ops[k].name
        action = step.action
        self.during = None
        if action is Action.COMPUTE:
            if not reads_weights:
                self.files.use_held(k)
            value = self.place(position, step, self.compute(position, step))
            if overwrites >= 0:
                self.taken.add(self.graph.ops[overwrites].name)
            self.during = self.live_bytes(value)
            self.resident[name] = value
        elif action is Action.PAGE_OUT:
            self.pages.page_out(position, step, name, self.read(position, step, name),
                                copy=self.arena is not None)  # a view would save the arena
        elif action is Action.PAGE_IN:
            self.resident[name] = self.place(
                position, step, self.pages.page_in(position, step, name, self.resident))
        elif action is Action.READ_WEIGHTS:
            self.files.load_weights(k)
        elif action is Action.WRITE_WEIGHTS:
            self.files.drop_weights()
        elif action is Action.HOLD_WEIGHTS:
            self.files.hold_weights(k)
        elif action is Action.DROP_WEIGHTS:
            self.files.drop_held(k)
        elif action is Action.MOVE:  # compaction: the copy within the arena
            value = self.read(position, step, name)
            if self.arena is not None:
                self.resident[name] = self.arena.move(position, step, value)
        else:  # FREE
            self.read(position, step, name)
            del self.resident[name]
            self.taken.discard(name)

    def read(self, position: int, step: Step, name: str) -> Any:
        if name not in self.resident:
            raise step_error(position, step, self.graph, f"reads tensor {name!r}, which is "
                                                         "not resident in RAM")
        return self.resident[name]

    def compute(self, position: int, step: Step) -> Any:
        torch, graph = self.torch, self.graph
        k = step.op
        op = graph.ops[k]
        preds = {graph.ops[p].name: self.read(position, step, graph.ops[p].name)
                 for p in graph.predecessors(k)}
        self.files.current = op.name
        try:
            if op.gradient_sum_of is not None:
                return {op.gradient_sum_of: self.incoming_gradient(position, step,
                                                                   op.gradient_sum_of, preds)}
            if op.phase is Phase.BACKWARD:
                return self.backward(position, step, op.forward_of, preds)
            if op.kind == "input":
                return self.loader[op.name].clone()
            with torch.no_grad():
                out = self.evaluator.evaluate(op.name, preds)
        finally:
            self.files.release()  # but what it updated: its WRITE_WEIGHTS writes them back
            self.files.current = None
        if any(isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr()
               == out.untyped_storage().data_ptr() for v in preds.values()):
            out = out.clone()  # an op's output is its own tensor, never an alias
        return out.detach()

    def incoming_gradient(self, position: int, step: Step, v: str,
                          preds: dict[str, Any]) -> Any:
        """The gradient of ``v``'s output: the sum of what the backward ops among
        ``preds`` sent back for it (its consumers', or its gradient-sum op's)."""
        graph = self.graph
        parts = [value[v] for name, value in preds.items()
                 if graph.op(name).phase is Phase.BACKWARD and v in value]
        if not parts:
            raise step_error(position, step, graph, f"no gradient of {v!r} among its inputs")
        g = parts[0]
        for extra in parts[1:]:
            g = g + extra
        return g

    def backward(self, position: int, step: Step, v: str, preds: dict[str, Any]) -> Any:
        """Backward op ``step.op`` of ``v``: the gradients of ``v``'s inputs from what it
        reads (``preds``); on its first run, its parameters' gradients accumulated and,
        for an in-place update, the optimizer's step taken."""
        graph = self.graph
        op = self.im.ops[v]
        rule = KINDS[op.kind]
        g = (self.torch.ones_like(self.read(position, step, v))
             if graph.op(v).phase is Phase.LOSS
             else self.incoming_gradient(position, step, v, preds))
        wants = {u: f"{u}/grad" in self.grad_ops for u in op.inputs}
        trained = [p for p in op.params if p in self.trained]
        # as the graph derives it: only a trained weight's gradient needs the saved inputs
        trained_weight = any(p not in op.biases for p in trained)
        saves_inputs = rule.saves_inputs and (trained_weight
                                              or not rule.saves_inputs_only_with_params)
        params = [self.param(p) for p in trained]
        if saves_inputs:
            for u in op.inputs:
                if u not in preds:
                    raise step_error(position, step, graph,
                                     f"needs saved input {u!r} of {v!r}, which the graph "
                                     "does not let it read")
        elif rule.saves_output and v not in preds:
            raise step_error(position, step, graph, f"needs the output of {v!r}, which the "
                                                    "graph does not let it read")
        result, param_grads = self.evaluator.gradients(
            op, g, preds, wants, params, saves_inputs=saves_inputs,
            saves_output=rule.saves_output, passthrough=rule.passthrough)
        op_grad = graph.ops[step.op]
        if op_grad.name not in self.done_backward:
            self.done_backward.add(op_grad.name)
            for p_name, gr in zip(trained, param_grads):
                if gr is not None:
                    self.grads[p_name] = self.grads.get(p_name, 0) + gr.detach()
                    if op_grad.inplace_update:  # fused into the op: the gradient dies here
                        self.apply_step(p_name, gr.detach())
                        self.updated_in_place.add(p_name)
        return result

    # ------------------------------------------------------------------ the optimizer step

    def step_the_rest(self) -> int:
        """The plain optimizer step, after the schedule, of every trained parameter its
        backward op did not update in place; how many parameters it stepped."""
        rest = [name for name in self.grads if name not in self.updated_in_place]
        for name in rest:
            if name in self.files.weight_files:  # never planned (trained weights on storage
                # are updated in place): read, step, write back, counted against the cost model
                self.files.load_weight(name)
                if self.files.state_on_storage(name):
                    self.files.load_state(name)
            self.apply_step(name, self.grads[name])
            self.files.drop_weights()
        return len(rest)

    def apply_step(self, name: str, grad: Any) -> None:
        """The optimizer's step on parameter ``name`` and its state, in place
        (:func:`poetsim.torchio.optim.apply_step`); a weight loaded from storage is written
        back after the op, with its state when that was loaded
        (:meth:`~poetsim.torchio.weights.WeightFiles.drop_weights`)."""
        if self.files.state_on_storage(name):
            if name not in self.files.loaded_state:
                raise ExecutionError(f"op {self.files.current!r} updates parameter {name!r}, "
                                     "whose optimizer state lives on storage and was not "
                                     "loaded")
            state = self.files.loaded_state[name]
        else:
            state = self.state[name]
        with self.torch.no_grad():
            optim_step(self.param(name), grad, state, self.optimizer, self.lr)
        self.files.mark_updated(name)

    # ------------------------------------------------------------------ memory

    def use_arena(self, layout: Layout, steps: Sequence[Step]) -> None:
        """Keep every floating-point activation in one region laid out by ``layout``: the
        tensor a COMPUTE or PAGE_IN makes resident lives at its buffer's offset (in graph
        units, ``dtype_bytes`` per element), as a view, until the next write there."""
        self.arena = TensorArena(self.torch, self.graph, layout, steps, self.dtype_bytes)

    def place(self, position: int, step: Step, value: Any) -> Any:
        """``value`` written at its buffer in the arena, if any; views of it from then on."""
        if self.arena is None:
            return value
        return self.arena.place(position, step, value)

    def live_bytes(self, extra: Any = None) -> tuple[int, int]:
        """Bytes of the resident tensors and ``extra`` (graph units, raw), but those whose
        buffer an in-place output took over (``taken``: dead until their FREE)."""
        seen: dict[int, Any] = {}
        values = [v for name, v in self.resident.items() if name not in self.taken]
        for value in values + ([extra] if extra is not None else []):
            for x in (list(value.values()) if isinstance(value, dict) else [value]):
                seen[id(x)] = x
        graph_units = sum(int(x.numel()) for x in seen.values()) * self.dtype_bytes
        raw = sum(int(x.nbytes) for x in seen.values())
        return graph_units, raw
