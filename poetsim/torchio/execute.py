"""Execute a schedule for real: the op list on PyTorch tensors, paging to files on disk.

:func:`execute_schedule` replays a :class:`~poetsim.schedule.Schedule` of an imported model
(:func:`poetsim.torchio.import_module`) step by step, in float64 on the CPU:

* ``COMPUTE`` of an ``input`` op copies the tensor from the batch (the data loader's copy,
  outside the activation memory); of a forward op or the loss, evaluates the op from its
  resident inputs; of a backward op ``v/grad``, computes the gradients of ``v``'s inputs
  from *only* the tensors the graph says it reads (its predecessors): the gradients its
  consumers sent back, summed, and the tensors ``v``'s KINDS rule saves. Per rule:

  - saves the inputs (convolution, linear, matmul, norms, GELU, max pooling, embedding,
    the loss): the op is re-evaluated locally from the saved inputs under autograd and
    differentiated (``torch.autograd.grad``);
  - saves the output (ReLU, softmax, tanh): the derivative is written in terms of the
    output; folded input transforms are linear, so their vector-Jacobian product is taken
    at zeros;
  - saves nothing (addition, average pooling, concatenation): the op is affine in its
    inputs, so it is differentiated at zeros, without any value.

  Parameter gradients accumulate in a dict outside the activation memory (the resident
  region), on the first computation of each backward op only (a recomputed gradient op
  regenerates its activation gradient, not the parameter update). Only trained parameters
  get one: those the module had with ``requires_grad=True`` at import; a frozen one never
  changes.
* The SGD step ``p -= lr * grad`` of a trained parameter is applied by its backward op
  when the graph says so (``Op.inplace_update``, as on the MCU): inside that op's first
  computation, after the op has used the old weights. Such an op runs once (a second run
  would read the updated weights): the contract's replay
  (:class:`~poetsim.schedule.replay.Replay`), which every step goes through before it is
  carried out, refuses a schedule that recomputes it [``recomputed_inplace_update``].
  Every other trained parameter takes its step after the whole schedule, the plain
  optimizer step.
* ``PAGE_OUT`` writes the tensor to a file (``torch.save``) in the page directory (the SD
  card's stand-in) and records its SHA-256; ``PAGE_IN`` reads it back and refuses a file
  whose digest changed; ``FREE`` drops it.

What is in RAM and what in files. In RAM (Python objects): the resident activations, the
parameter gradients (the checking harness's accumulator), the buffers (norm statistics),
the data loader's batch, and every parameter *except* the weights the executed graph puts
on storage. Those (:class:`~poetsim.graph.streaming.WeightsOnStorage`, recorded in the
graph's ``weights_on_storage`` metadata by :func:`poetsim.request.resolve_request`: the
frozen ones, the trained ones, or both) live in files, one per parameter, under
``weights/`` in the page directory, written before the first step (the card the board
boots with), each with its SHA-256. The schedule's READ_WEIGHTS step before a COMPUTE
loads the weights on storage that the cost model says the op reads (the parameters of the
op it owns or differentiates; trained ones only in a forward op or an in-place update),
refusing a file whose digest changed; the op reads parameters only from RAM or from what
was loaded for it (any other parameter is an :class:`ExecutionError`); the WRITE_WEIGHTS
step after an in-place update writes the updated tensor back to its file, and every
loaded weight is dropped when the op's run ends. A hold (``HOLD_WEIGHTS b`` right before
the READ_WEIGHTS of ``b``'s forward op) keeps the weights ``b`` reads out of those that
READ_WEIGHTS loads, until ``DROP_WEIGHTS b``; a COMPUTE of ``b`` without its READ_WEIGHTS
runs on them (and its update, if any, is written back from them). The executor loads and
writes back an op's *whole* parameter, not the board's output-channel slices
(:func:`~poetsim.graph.streaming.weight_slice_bytes`): the bytes moved per op are the
same, the weights held at once are not (``weights_held_peak_bytes`` reports them, holds
included; they are not counted in the activation peak). The bytes read and written back
are counted in the graph's units and must equal the cost model's
(:meth:`~poetsim.graph.streaming.WeightsOnStorage.bytes_read` / ``bytes_written`` summed
over the COMPUTE steps run, a held run reading none), else the execution fails. A
schedule solved for such a graph carries its fingerprint; :func:`schedule_graph` finds it
(with a board, the one the board's request makes).

Reading a tensor that is not resident, computing one that is, paging in one never paged
out: each is an :class:`ExecutionError` naming the step. Live activation bytes are
measured after every step from the tensors actually held (unique tensors), in the graph's
units (elements x the graph's ``dtype_bytes``, comparable to the checker and simulator)
and raw (``tensor.nbytes`` in float64 / int64); during a COMPUTE the output is counted on
top of the resident set, as in the contract (workspace is not modelled by the executor).
Finally the parameter gradients and the updated parameters (for a weight on storage: its
file's contents after the iteration, so a missing write-back is caught) are compared with plain
``loss.backward()`` and ``torch.optim.SGD(lr).step()`` on the trained parameters of a
float64 copy of the module (dropout modules in eval mode: the graph takes dropout as the
identity), same batch and targets. The gradient error of a parameter is its largest
absolute difference over its largest reference gradient; the weight error its largest
absolute difference from the reference's updated weights over the reference's largest
step on it (``lr`` x gradient: a missing or doubled update is an error of 1, at any
``lr``). Each scale is floored at 1e-3 of the model's largest (a gradient that is zero in
exact arithmetic is rounding noise). A frozen parameter must come out bit for bit as it
went in.
"""

from __future__ import annotations

import copy
import hashlib
import io
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim.errors import ExecutionError, InputError
from poetsim.graph.autograd import KINDS
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.ops import Phase
from poetsim.graph.precision import precision_of
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.schedule.layout import Layout
from poetsim.schedule.ops import Action, Schedule, Step
from poetsim.schedule.replay import ContractViolation, Replay
from poetsim.torchio.optim import STATE_SLOTS, reference_optimizer, zero_state
from poetsim.torchio.optim import apply_step as optim_step
from poetsim.torchio.trace import Cls, ImportedModel, require_torch, tables

__all__ = ["ExecutionError", "ExecutionReport", "execute_schedule", "schedule_graph"]


@attrs.frozen
class ExecutionReport:
    """What a real execution of a schedule measured, with units in the names.

    ``peak_live_bytes`` is in the graph's units (elements x ``dtype_bytes``), directly
    comparable to ``checker_peak_bytes`` (the contract's replay, workspace included) and
    ``simulated_peak_bytes`` (the board simulation; activations only, the resident region
    subtracted). ``peak_live_raw_bytes`` is what the float64 / int64 tensors really held.
    ``max_rel_weight_error`` compares the parameters after the ``optimizer``'s step
    (learning rate ``lr``; :mod:`poetsim.torchio.optim`) with the reference's
    (``torch.optim``), relative to the reference's step, and ``max_rel_state_error`` the
    optimizer's state after it; ``grad_rtol`` bounds both as it bounds the gradient error.
    ``params_updated_in_place`` were stepped by their backward op (``Op.inplace_update``),
    ``params_updated_after`` after the schedule; ``frozen_params`` (``requires_grad=False``)
    were checked unchanged.

    ``weights_on_storage`` is what the executed graph records (``none``, ``frozen``,
    ``trained``, ``all``; :class:`~poetsim.graph.streaming.WeightsOnStorage`) and
    ``params_on_storage`` how many parameters therefore lived in weight files.
    ``params_with_state_on_storage`` had their optimizer state in files beside them
    (``WeightsOnStorage.state_copies``), loaded and written back by their in-place update.
    ``weights_read_bytes`` / ``weights_written_bytes`` are the weight (and state) bytes the
    ops loaded from those files and wrote back (in-place updates), in the graph's units
    (elements x the weight width, or the gradient width for state, as the cost model
    counts them); ``cost_model_weights_read_bytes`` /
    ``cost_model_weights_written_bytes`` are
    :meth:`~poetsim.graph.streaming.WeightsOnStorage.bytes_read` / ``bytes_written``
    summed over the executed COMPUTE steps, and must be equal. ``weights_held_peak_bytes``
    is the most weight bytes one op held loaded at once (whole parameters, graph units; the
    board holds :data:`~poetsim.graph.streaming.STREAM_BUFFERS` output-channel slices).
    ``bytes_written`` counts the raw bytes of the activation page files.
    """

    graph_name: str
    steps: int
    computes: int
    recomputations: int
    page_outs: int
    page_ins: int
    frees: int
    max_rel_grad_error: float
    worst_param: str
    grad_rtol: float
    lr: float
    max_rel_weight_error: float
    worst_weight_param: str
    params_updated_in_place: int
    params_updated_after: int
    frozen_params: int
    peak_live_bytes: int
    peak_live_raw_bytes: int
    peak_step: int
    budget_bytes: int | None
    checker_peak_bytes: int | None
    simulated_peak_bytes: int | None
    simulated_energy_j: float | None
    bytes_written: int
    passed: bool
    weights_on_storage: str = "none"
    params_on_storage: int = 0
    weights_read_bytes: int = 0
    weights_written_bytes: int = 0
    cost_model_weights_read_bytes: int = 0
    cost_model_weights_written_bytes: int = 0
    weights_held_peak_bytes: int = 0
    optimizer: str = "sgd"
    max_rel_state_error: float = 0.0
    params_with_state_on_storage: int = 0
    reasons: tuple[str, ...] = ()
    #: the region every activation lived in (``arena``), None: tensors kept apart
    arena_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        doc = attrs.asdict(self)
        doc["reasons"] = list(self.reasons)
        return doc


def _err(position: int, step: Step, graph: Any, detail: str) -> ExecutionError:
    return ExecutionError(f"step {position} ({step.describe(graph)}): {detail}")


def _max_abs(x: Any) -> float:
    return float(x.abs().max()) if x.numel() else 0.0


def check_learning_rate(lr: Any, name: str = "lr =") -> float:
    """``lr`` as a float, or a one-line :class:`InputError` naming ``name`` (the CLI passes
    its flag): an SGD step needs a finite learning rate above 0."""
    return _positive(lr, name, "the learning rate")


def check_tolerance(rtol: Any, name: str = "grad_rtol =") -> float:
    """``rtol`` as a float, or a one-line :class:`InputError` naming ``name``: a relative
    tolerance of NaN or infinity would switch the gradient, weight and state checks off."""
    return _positive(rtol, name, "the relative tolerance")


def _positive(value: Any, name: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} {value!r}: {what} must be a finite number > 0")
    return float(value)


class _Runner:
    """State of one execution."""

    def __init__(self, imported: ImportedModel, inputs: tuple[Any, ...], seed: int,
                 page_dir: Path, lr: float, graph: TrainingGraph | None = None,
                 optimizer: str = "sgd") -> None:
        torch = require_torch()
        self.torch = torch
        self.im = imported
        self.graph = imported.graph if graph is None else graph
        self.dtype_bytes = int(self.graph.metadata.get("dtype_bytes", 4))
        self.page_dir = page_dir
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
        # Statics (data inputs, masks, position ids): what the data loader delivers.
        self.loader: dict[str, Any] = {}
        for name, op in imported.ops.items():
            if op.kind == "input":
                with torch.no_grad():
                    self.loader[name] = self.value(op.node, dict(self.user), {}, zeros=False)
        logits_meta = imported.output_node.meta["val"]
        gen = torch.Generator().manual_seed(seed)
        if imported.loss == "cross_entropy":
            classes = int(logits_meta.shape[-1])
            rows = int(logits_meta.numel()) // classes
            self.target = torch.randint(0, classes, (rows,), generator=gen)
        else:
            self.target = torch.randn(tuple(logits_meta.shape), generator=gen,
                                      dtype=torch.float64)
        self.resident: dict[str, Any] = {}
        #: with a layout (:meth:`use_arena`): one float64 region, and the element offset
        #: and size of the tensor buffer each COMPUTE or PAGE_IN position opens
        self.arena: Any = None
        self.arena_at: dict[int, tuple[int, int]] = {}
        #: RAM (graph units, raw bytes) while the last COMPUTE ran; None after other steps
        self.during: tuple[int, int] | None = None
        self.stored: dict[str, tuple[Path, str]] = {}
        self.grads: dict[str, Any] = {}
        self.done_backward: set[str] = set()
        self.bytes_written = 0
        self.grad_ops = {o.name for o in self.graph.ops if o.phase is Phase.BACKWARD}
        # Weights on storage: one file each, written before the iteration (the card as
        # the board boots with it); they leave ``params`` and are only ever in ``loaded``,
        # for the op that reads them.
        self.on_storage = WeightsOnStorage.of(self.graph)
        self.weight_width = precision_of(self.graph).weight_bytes
        self.state_width = precision_of(self.graph).gradient_bytes
        self.weight_files: dict[str, tuple[Path, str]] = {}
        #: Optimizer-state files per parameter, one per slot.
        self.state_files: dict[str, dict[str, tuple[Path, str]]] = {}
        self.loaded: dict[str, Any] = {}
        #: Optimizer state loaded from storage for the running in-place update.
        self.loaded_state: dict[str, dict[str, Any]] = {}
        self.updated_loaded: list[str] = []
        #: Held weights: op -> the weights it reads, kept from its forward op's load.
        self.holds: dict[int, dict[str, Any]] = {}
        self.pending_holds: list[int] = []  # held by the next READ_WEIGHTS
        self.current: str | None = None
        self.weights_read_bytes = 0
        self.weights_written_bytes = 0
        self.weights_held_peak_bytes = 0
        if self.on_storage:
            (page_dir / "weights").mkdir(parents=True, exist_ok=True)
            for name in [n for n in self.params if self.lives_on_storage(n)]:
                self.save_weight(name, self.params.pop(name).detach().clone())
                if name in self.trained and self.on_storage.state_copies:
                    self.save_state(name, self.state.pop(name))

    # ------------------------------------------------------------------ weights on storage

    def lives_on_storage(self, name: str) -> bool:
        """Whether parameter ``name`` lives in a weight file (the graph's
        ``weights_on_storage``: the frozen ones, the trained ones, or both)."""
        return self.on_storage.trained if name in self.trained else self.on_storage.frozen

    def weights_of(self, k: int) -> list[str]:
        """The parameters on storage op ``k`` loads when it runs, as the cost model has it
        (:meth:`~poetsim.graph.streaming.WeightsOnStorage.bytes_read`): those of the op it
        owns, or differentiates; trained ones only for a forward op or an in-place update."""
        op = self.graph.ops[k]
        backward = op.phase is Phase.BACKWARD
        owner = self.im.ops.get(op.forward_of if backward else op.name)  # type: ignore[arg-type]
        if owner is None:
            return []
        return [p for p in owner.params if p in self.weight_files
                and (p not in self.trained or not backward or op.inplace_update)]

    def _store(self, key: str, value: Any) -> tuple[Path, str]:
        """Write ``value`` to the storage file ``key``; its path and digest."""
        path = self.page_dir / "weights" / f"{key}.pt"
        buffer = io.BytesIO()
        self.torch.save(value.detach().clone(), buffer)
        data = buffer.getvalue()
        path.write_bytes(data)
        return path, hashlib.sha256(data).hexdigest()

    def save_weight(self, name: str, value: Any) -> int:
        """Write parameter ``name``'s weight file; its bytes in the graph's units."""
        self.weight_files[name] = self._store(name, value)
        return int(value.numel()) * self.weight_width

    def state_on_storage(self, name: str) -> bool:
        """Whether parameter ``name``'s optimizer state lives in files beside its weights
        (``WeightsOnStorage.state_copies``)."""
        return name in self.state_files

    def save_state(self, name: str, state: Mapping[str, Any]) -> int:
        """Write parameter ``name``'s optimizer state, one file per slot; its bytes in the
        graph's units (elements x the gradient width)."""
        self.state_files[name] = {slot: self._store(f"{name}.{slot}", value)
                                  for slot, value in state.items()}
        return sum(int(v.numel()) for v in state.values()) * self.state_width

    def _state_from_files(self, name: str) -> dict[str, Any]:
        return {slot: self._load(file, f"optimizer state {slot!r} of {name!r}")
                for slot, file in self.state_files[name].items()}

    def load_state(self, name: str) -> None:
        """Load parameter ``name``'s optimizer state for the running in-place update
        (counted as read)."""
        state = self.loaded_state[name] = self._state_from_files(name)
        self.weights_read_bytes += sum(int(v.numel()) for v in state.values()) * self.state_width

    def final_state(self, name: str) -> dict[str, Any]:
        """Parameter ``name``'s optimizer state after the iteration: its files' contents,
        or the tensors in RAM."""
        return self._state_from_files(name) if self.state_on_storage(name) \
            else self.state[name]

    def read_weight_file(self, name: str) -> Any:
        """Parameter ``name`` as its weight file holds it (the digest checked)."""
        return self._load(self.weight_files[name], repr(name))

    def _load(self, file: tuple[Path, str], what: str) -> Any:
        """The tensor a storage file holds, its digest checked; ``what`` names it."""
        path, digest = file
        where = f" (op {self.current!r})" if self.current else ""
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ExecutionError(f"cannot read weight file {path}{where}: "
                                 f"{err.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ExecutionError(f"weight file {path} of {what} is corrupted (checksum "
                                 f"mismatch){where}")
        return self.torch.load(io.BytesIO(data), weights_only=True)

    def load_weight(self, name: str) -> int:
        """Load parameter ``name`` from its weight file for the running op; its bytes in
        the graph's units (counted as read)."""
        value = self.read_weight_file(name)
        value.requires_grad_(name in self.trained)
        self.loaded[name] = value
        nbytes = int(value.numel()) * self.weight_width
        self.weights_read_bytes += nbytes
        return nbytes

    def load_weights(self, k: int) -> None:
        """Load the weights on storage op ``k`` reads, whole, for this op only (its
        READ_WEIGHTS step), and keep those of the ops whose HOLD_WEIGHTS came before."""
        for name in self.weights_of(k):
            self.load_weight(name)
            if self.graph.ops[k].inplace_update and self.state_on_storage(name):
                self.load_state(name)
        for b in self.pending_holds:
            missing = [name for name in self.weights_of(b) if name not in self.loaded]
            if missing:
                raise ExecutionError(f"op {self.graph.ops[b].name!r} holds weight "
                                     f"{missing[0]!r}, which op {self.graph.ops[k].name!r} "
                                     "does not load")
            self.holds[b] = {name: self.loaded[name] for name in self.weights_of(b)}
        self.pending_holds.clear()
        tensors = {id(v): v for v in self.loaded.values()}
        for kept in self.holds.values():
            tensors.update((id(v), v) for v in kept.values())
        in_ram = sum(int(v.numel()) for v in tensors.values()) * self.weight_width
        self.weights_held_peak_bytes = max(self.weights_held_peak_bytes, in_ram)

    def hold_weights(self, b: int) -> None:
        """HOLD_WEIGHTS ``b``: the next READ_WEIGHTS keeps the weights ``b`` reads."""
        if b in self.holds or b in self.pending_holds:
            raise ExecutionError(f"the weights of op {self.graph.ops[b].name!r} are "
                                 "already held")
        self.pending_holds.append(b)

    def use_held(self, k: int) -> None:
        """Op ``k`` runs without its READ_WEIGHTS: on its held weights, if any."""
        if k in self.holds:
            self.loaded = dict(self.holds[k])

    def drop_held(self, b: int) -> None:
        """DROP_WEIGHTS ``b``: release the weights held for ``b``."""
        if self.holds.pop(b, None) is None:
            raise ExecutionError(f"the weights of op {self.graph.ops[b].name!r} are not "
                                 "held")

    def write_back(self, name: str) -> None:
        """Write the loaded, updated parameter ``name`` back to its weight file."""
        self.weights_written_bytes += self.save_weight(name, self.loaded[name])

    def drop_weights(self) -> None:
        """After the op (its WRITE_WEIGHTS step): write back what it updated in place,
        then drop every loaded weight (nothing of them stays in RAM)."""
        for name in self.updated_loaded:
            self.write_back(name)
            if name in self.loaded_state:
                self.weights_written_bytes += self.save_state(name, self.loaded_state[name])
        self.updated_loaded.clear()
        self.loaded.clear()
        self.loaded_state.clear()

    def param(self, name: str) -> Any:
        """Parameter ``name`` for the running op: in RAM, or loaded from storage for it."""
        if name in self.params:
            return self.params[name]
        if name in self.loaded:
            return self.loaded[name]
        raise ExecutionError(f"op {self.current!r} reads parameter {name!r}, which lives on "
                             "storage and which the graph does not say the op reads")

    def final_weight(self, name: str) -> Any:
        """Parameter ``name`` after the iteration: its weight file's contents for a
        weight on storage, else the tensor in RAM."""
        if name in self.weight_files:
            return self.read_weight_file(name)
        return self.params[name].detach()

    # ------------------------------------------------------------------ evaluation

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

    # ------------------------------------------------------------------ steps

    def read(self, position: int, step: Step, name: str) -> Any:
        if name not in self.resident:
            raise _err(position, step, self.graph, f"reads tensor {name!r}, which is not "
                                                   "resident in RAM")
        return self.resident[name]

    def compute(self, position: int, step: Step) -> Any:
        torch, graph = self.torch, self.graph
        k = step.op
        op = graph.ops[k]
        preds = {graph.ops[p].name: self.read(position, step, graph.ops[p].name)
                 for p in graph.predecessors(k)}
        self.current = op.name
        try:
            if op.gradient_sum_of is not None:
                return {op.gradient_sum_of: self.incoming_gradient(position, step,
                                                                   op.gradient_sum_of, preds)}
            if op.phase is Phase.BACKWARD:
                return self.backward(position, step, op.forward_of, preds)
            if op.kind == "input":
                return self.loader[op.name].clone()
            with torch.no_grad():
                out = self.evaluate(op.name, preds)
        finally:
            if not self.updated_loaded:  # else its WRITE_WEIGHTS writes them back
                self.loaded.clear()
            self.current = None
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
            raise _err(position, step, graph, f"no gradient of {v!r} among its inputs")
        g = parts[0]
        for extra in parts[1:]:
            g = g + extra
        return g

    def backward(self, position: int, step: Step, v: str, preds: dict[str, Any]) -> Any:
        torch, graph = self.torch, self.graph
        op = self.im.ops[v]
        fop = graph.op(v)
        rule = KINDS[op.kind]
        g = (torch.ones_like(self.read(position, step, v)) if fop.phase is Phase.LOSS
             else self.incoming_gradient(position, step, v, preds))
        wants = {u: f"{u}/grad" in self.grad_ops for u in op.inputs}
        trained = [p for p in op.params if p in self.trained]
        # as the graph derives it: only a trained weight's gradient needs the saved inputs
        trained_weight = any(p not in op.biases for p in trained)
        saves_inputs = rule.saves_inputs and (trained_weight
                                              or not rule.saves_inputs_only_with_params)
        params = [self.param(p) for p in trained]

        def leaves(values: Mapping[str, Any]) -> dict[str, Any]:
            out = {}
            for u in op.inputs:
                x = values[u].detach()
                if wants[u]:
                    x = x.clone().requires_grad_(True)
                out[u] = x
            return out

        def zero_inputs() -> dict[str, Any]:
            found = {}
            for u, node in zip(op.inputs, op.input_nodes):
                meta = node.meta["val"]
                dtype = torch.float64 if meta.is_floating_point() else meta.dtype
                found[u] = torch.zeros(tuple(meta.shape), dtype=dtype)
            return leaves(found)

        if saves_inputs:
            for u in op.inputs:
                if u not in preds:
                    raise _err(position, step, graph, f"needs saved input {u!r} of {v!r}, "
                                                      "which the graph does not let it read")
            env = leaves(preds)
            with torch.enable_grad():
                out = self.evaluate(v, env)
            seed, targets = g, [env[u] for u in op.inputs if wants[u]] + params
        elif rule.saves_output:
            if v not in preds:
                raise _err(position, step, graph, f"needs the output of {v!r}, which the "
                                                  "graph does not let it read")
            y = preds[v]
            seed = self._output_backward(op, y, g)
            env = zero_inputs()
            with torch.enable_grad():
                out = self.evaluate(v, env, zeros=True, operand_only=True)
            targets = [env[u] for u in op.inputs if wants[u]] + params
        else:
            env = zero_inputs()
            with torch.enable_grad():
                out = self.evaluate(v, env, zeros=True)
            seed, targets = g, [env[u] for u in op.inputs if wants[u]] + params
        grads = torch.autograd.grad(out, targets, grad_outputs=seed, allow_unused=True) \
            if targets else ()
        names = [u for u in op.inputs if wants[u]]
        result = {u: (torch.zeros_like(env[u]) if gr is None else gr.detach())
                  for u, gr in zip(names, grads)}
        if rule.passthrough and result and all(
                r.shape == g.shape and torch.equal(r, g) for r in result.values()):
            result = dict.fromkeys(result, g)  # one shared tensor, as the graph counts it
        op_grad = graph.ops[step.op]
        if op_grad.name not in self.done_backward:
            self.done_backward.add(op_grad.name)
            for p_name, gr in zip(trained, grads[len(names):]):
                if gr is not None:
                    self.grads[p_name] = self.grads.get(p_name, 0) + gr.detach()
                    if op_grad.inplace_update:  # fused into the op: the gradient dies here
                        self.apply_step(p_name, gr.detach())
                        self.updated_in_place.add(p_name)
        return result

    def step_the_rest(self) -> int:
        """The plain optimizer step, after the schedule, of every trained parameter its
        backward op did not update in place; how many parameters it stepped."""
        rest = [name for name in self.grads if name not in self.updated_in_place]
        for name in rest:
            if name in self.weight_files:  # never planned (trained weights on storage are
                # updated in place): read, step, write back, counted against the cost model
                self.load_weight(name)
                if self.state_on_storage(name):
                    self.load_state(name)
            self.apply_step(name, self.grads[name])
            self.drop_weights()
        return len(rest)

    def apply_step(self, name: str, grad: Any) -> None:
        """The optimizer's step on parameter ``name`` and its state, in place
        (:func:`poetsim.torchio.optim.apply_step`); a weight loaded from storage is written
        back after the op, with its state when that was loaded (:meth:`drop_weights`)."""
        if self.state_on_storage(name):
            if name not in self.loaded_state:
                raise ExecutionError(f"op {self.current!r} updates parameter {name!r}, whose "
                                     "optimizer state lives on storage and was not loaded")
            state = self.loaded_state[name]
        else:
            state = self.state[name]
        with self.torch.no_grad():
            optim_step(self.param(name), grad, state, self.optimizer, self.lr)
        if name in self.loaded and name not in self.updated_loaded:
            self.updated_loaded.append(name)

    def _output_backward(self, op: Any, y: Any, g: Any) -> Any:
        if op.kind == "relu":
            return g * (y > 0)
        if op.kind == "tanh":
            return g * (1 - y * y)
        if op.kind == "softmax":
            dim = op.node.args[1]
            return y * (g - (g * y).sum(dim=dim, keepdim=True))
        raise ExecutionError(f"op {op.name!r}: no output-based backward for kind {op.kind!r}")

    def page_out(self, position: int, step: Step, name: str) -> None:
        value = self.read(position, step, name)
        if name in self.stored:
            raise _err(position, step, self.graph, f"tensor {name!r} is already on storage")
        path = self.page_dir / f"{step.op}.pt"
        if self.arena is not None:  # a view would save the whole arena
            value = ({k: v.clone() for k, v in value.items()} if isinstance(value, dict)
                     else value.clone())
        self.torch.save(value, path)
        data = path.read_bytes()
        self.bytes_written += len(data)
        self.stored[name] = (path, hashlib.sha256(data).hexdigest())

    def page_in(self, position: int, step: Step, name: str) -> Any:
        if name not in self.stored:
            raise _err(position, step, self.graph, f"tensor {name!r} was never paged out")
        if name in self.resident:
            raise _err(position, step, self.graph, f"tensor {name!r} is already resident")
        path, digest = self.stored[name]
        try:
            data = path.read_bytes()
        except OSError as err:
            raise _err(position, step, self.graph, f"cannot read page file {path}: "
                                                   f"{err.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise _err(position, step, self.graph, f"page file {path} of {name!r} is "
                                                   "corrupted (checksum mismatch)")
        return self.torch.load(path, weights_only=True)

    # ------------------------------------------------------------------ the arena

    def use_arena(self, layout: Layout, steps: Sequence[Step]) -> None:
        """Keep every floating-point activation in one region laid out by ``layout``: the
        tensor a COMPUTE or PAGE_IN makes resident lives at its buffer's offset (in graph
        units, ``dtype_bytes`` per element), as a view, until the next write there."""
        width = self.dtype_bytes
        ends: dict[int, int] = {}  # opening position -> its FREE (or the end)
        opened: dict[int, int] = {}
        for p, step in enumerate(steps):
            if step.action in (Action.COMPUTE, Action.PAGE_IN):
                opened[step.op] = p
            elif step.action is Action.FREE and step.op in opened:
                ends[opened.pop(step.op)] = p
        for p in opened.values():
            ends[p] = len(steps)
        where = {(b.op, b.end): b for b in layout.buffers if b.kind == "tensor"}
        for p, end in ends.items():
            b = where.get((steps[p].op, end))
            if b is not None:
                self.arena_at[p] = (b.offset_bytes // width, b.size_bytes // width)
        self.arena = self.torch.zeros(-(-layout.arena_bytes // width), dtype=self.torch.float64)

    def place(self, position: int, step: Step, value: Any) -> Any:
        """``value`` written at its buffer in the arena; views of it from then on."""
        spot = self.arena_at.get(position)
        if self.arena is None or spot is None:
            return value
        start, room = spot
        parts = value if isinstance(value, dict) else {None: value}
        placed: dict[Any, Any] = {}
        views: dict[int, Any] = {}  # one tensor handed to several inputs is stored once
        for key, x in parts.items():
            if not (isinstance(x, self.torch.Tensor) and x.is_floating_point()):
                placed[key] = x  # indices and the like stay outside
                continue
            if id(x) in views:
                placed[key] = views[id(x)]
                continue
            n = int(x.numel())
            if n > room or start + n > len(self.arena):
                raise _err(position, step, self.graph, f"its output ({n} elements) does not "
                                                       f"fit its arena buffer ({room} at "
                                                       f"{start} of {len(self.arena)})")
            view = self.arena[start:start + n].view(x.shape)
            view.copy_(x)
            placed[key] = views[id(x)] = view
            start, room = start + n, room - n
        return placed if isinstance(value, dict) else placed[None]

    # ------------------------------------------------------------------ accounting

    def _tensors(self, value: Any) -> list[Any]:
        if isinstance(value, dict):
            return list(value.values())
        return [value]

    def live_bytes(self, extra: Any = None) -> tuple[int, int]:
        """Bytes of the resident tensors and ``extra`` (graph units, raw), but those whose
        buffer an in-place output took over (``taken``: dead until their FREE)."""
        seen: dict[int, Any] = {}
        values = [v for name, v in self.resident.items() if name not in self.taken]
        for value in values + ([extra] if extra is not None else []):
            for x in self._tensors(value):
                seen[id(x)] = x
        graph_units = sum(int(x.numel()) for x in seen.values()) * self.dtype_bytes
        raw = sum(int(x.nbytes) for x in seen.values())
        return graph_units, raw


def execute_schedule(imported: ImportedModel, schedule: Schedule, *,
                     inputs: tuple[Any, ...] | None = None, seed: int = 0,
                     board: Any = None, budget_bytes: int | None = None,
                     resident_bytes: int | None = None, page_dir: str | Path | None = None,
                     grad_rtol: float = 1e-6, lr: float = 0.01,
                     after_step: Callable[[int, Step, Path], None] | None = None,
                     arena: bool | Layout = False) -> ExecutionReport:
    """Run ``schedule`` on real tensors, take the optimizer's step (the schedule's
    ``optimizer``, default SGD; :mod:`poetsim.torchio.optim`), and check both against plain
    autograd and ``torch.optim``.

    ``inputs`` default to the example inputs the model was imported with (the shapes must
    be those). ``budget_bytes`` is the activation budget (default: with a ``board``, that
    of the request the schedule file records,
    :func:`~poetsim.request.request_for_schedule`; without one, none); ``resident_bytes``
    the fixed region (default:
    with a ``board``, the physical request's :attr:`~poetsim.request.Request.resident_bytes`,
    so that frozen weights read in place from the board's flash are left out as everywhere
    else; without one, graph-only: the graph's parameters and gradients, all in RAM). With a
    ``board``, the simulator's predicted peak and energy are reported too. Page files go to
    ``page_dir`` (default: a temporary directory, removed afterwards). ``lr`` is the SGD
    learning rate; ``grad_rtol`` the relative tolerance of the gradient and weight checks.
    ``after_step(position, step, page_dir)`` is called after every step (tests use it to
    tamper with page files). With ``arena``, every floating-point activation lives in one
    preallocated region at its buffer's offset, so a layout that places two live tensors on
    the same bytes corrupts one and the checks catch it: True runs in the schedule's own
    layout, checked against the steps first
    (:func:`~poetsim.schedule.arena.adopt_layout`), or in one planned now; a
    :class:`~poetsim.schedule.layout.Layout` is taken as it is.

    The schedule may be for the imported graph or, when its request put weights on storage,
    for the streamed graph (:func:`schedule_graph`; with a ``board``, the one its request
    makes): the weights on storage then live in files under ``page_dir/weights`` and are
    loaded, written back and counted as the module docstring says.
    """
    lr = check_learning_rate(lr)
    grad_rtol = check_tolerance(grad_rtol)
    torch = require_torch()
    meta = schedule.metadata
    optimizer = str(meta.get("optimizer") or "sgd")
    if optimizer not in STATE_SLOTS:
        raise InputError(f"schedule optimizer = {optimizer!r}: must be one of "
                         f"{', '.join(STATE_SLOTS)}")
    request = None
    if board is not None:
        # the request the file records, on the imported graph and this board: its budget,
        # and its placement (frozen weights in flash, weights on storage), never the
        # file's figures
        from poetsim.request import request_for_schedule

        request = request_for_schedule(schedule, board, graph=imported.graph)
    try:
        graph = schedule_graph(imported, schedule, request=request, optimizer=optimizer)
    except ExecutionError as err:
        made_on = meta.get("board")
        if board is None or not made_on or made_on == board.name:
            raise
        raise ExecutionError(f"{err}; it was solved on board {made_on!r}: give that board "
                             "with --board") from None
    on_storage = WeightsOnStorage.of(graph)
    inputs = imported.example_inputs if inputs is None else tuple(inputs)
    for x, example in zip(inputs, imported.example_inputs):
        if tuple(x.shape) != tuple(example.shape):
            raise InputError(f"input shape {tuple(x.shape)} differs from the traced shape "
                             f"{tuple(example.shape)}")
    if budget_bytes is None and request is not None:
        budget_bytes = request.activation_budget_bytes
    if resident_bytes is None and request is not None:
        # a schedule for the un-streamed graph keeps the weights the request streams in RAM
        resident_bytes = request.resident_bytes + (
            0 if graph is request.graph else request.streamed_weight_bytes)
    elif resident_bytes is None:
        # graph-only (no board, so no flash): every parameter and gradient in RAM, but for
        # the weights the graph puts on storage
        from poetsim.graph.graph import resident_memory

        resident_bytes = (resident_memory(graph, optimizer=optimizer).total_bytes
                          - on_storage.total_bytes(graph))

    with tempfile.TemporaryDirectory(prefix="poetsim-pages-") as tmp:
        directory = Path(page_dir) if page_dir is not None else Path(tmp)
        try:
            if directory.exists() and not directory.is_dir():
                raise NotADirectoryError(0, "it is a file, not a directory")
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"page directory {str(directory)!r}: cannot use it: "
                             f"{err.strerror}") from None
        runner = _Runner(imported, inputs, seed, directory, lr, graph, optimizer)
        if arena is True:
            arena = _layout_of(graph, schedule)
        if isinstance(arena, Layout):
            runner.use_arena(arena, schedule.steps)
        arena_bytes = arena.arena_bytes if isinstance(arena, Layout) else None
        peak, peak_raw, peak_step = 0, 0, -1
        model_read = model_written = 0  # the cost model's weight traffic of the steps run
        walk = Replay(graph, schedule)  # the contract's replay: a broken rule stops it
        steps = schedule.steps
        try:
            for effect in walk:
                position = effect.position
                step = steps[position]
                _run_step(runner, position, step, effect.reads_weights, effect.overwrites)
                if step.action is Action.COMPUTE:
                    if effect.reads_weights:  # a run on held weights reads none
                        model_read += on_storage.bytes_read(graph, step.op)
                    model_written += on_storage.bytes_written(graph, step.op)
                now = runner.during or runner.live_bytes()
                if now[0] > peak:
                    peak, peak_step = now[0], position
                peak_raw = max(peak_raw, now[1])
                if after_step is not None:
                    after_step(position, step, directory)
        except ContractViolation as err:
            raise ExecutionError(str(err)) from None

        after = runner.step_the_rest()
        reference = _reference(imported, runner, lr)
        worst, worst_name, reasons = _compare_grads(runner.grads, reference.grads, grad_rtol)
        worst_weight, worst_weight_name, weight_reasons = _compare_weights(
            runner, reference, grad_rtol)
        worst_state, state_reasons = _compare_states(runner, reference, grad_rtol)
        reasons += weight_reasons + state_reasons
        if budget_bytes is not None and peak > budget_bytes:
            reasons.append(f"measured peak {peak} B over the activation budget "
                           f"{budget_bytes} B")
        measured = (runner.weights_read_bytes, runner.weights_written_bytes)
        if measured != (model_read, model_written):
            reasons.append(f"weights on storage: read {measured[0]} B and wrote back "
                           f"{measured[1]} B, but the cost model prices {model_read} B read "
                           f"and {model_written} B written for the steps run")

    sim_peak = sim_energy = None
    if board is not None:
        from poetsim.sim import simulate

        report = simulate(graph, board, schedule,
                          budget_bytes=None if budget_bytes is None
                          else budget_bytes + resident_bytes,
                          resident_bytes=resident_bytes)
        sim_peak = int(report.peak_ram_bytes) - resident_bytes
        sim_energy = float(report.energy_j)
    del torch
    return ExecutionReport(
        graph_name=graph.name, steps=len(schedule.steps), computes=schedule.computes,
        recomputations=schedule.recomputations(), page_outs=schedule.page_outs,
        page_ins=schedule.page_ins, frees=schedule.frees, max_rel_grad_error=worst,
        worst_param=worst_name, grad_rtol=grad_rtol, lr=lr,
        max_rel_weight_error=worst_weight, worst_weight_param=worst_weight_name,
        params_updated_in_place=len(runner.updated_in_place), params_updated_after=after,
        frozen_params=len(runner.initial) - len(runner.trained), peak_live_bytes=peak,
        peak_live_raw_bytes=peak_raw, peak_step=peak_step, budget_bytes=budget_bytes,
        checker_peak_bytes=walk.peak_bytes,
        simulated_peak_bytes=sim_peak, simulated_energy_j=sim_energy,
        bytes_written=runner.bytes_written, passed=not reasons,
        weights_on_storage=on_storage.label, params_on_storage=len(runner.weight_files),
        weights_read_bytes=runner.weights_read_bytes,
        weights_written_bytes=runner.weights_written_bytes,
        cost_model_weights_read_bytes=model_read,
        cost_model_weights_written_bytes=model_written,
        weights_held_peak_bytes=runner.weights_held_peak_bytes, optimizer=optimizer,
        max_rel_state_error=worst_state, params_with_state_on_storage=len(runner.state_files),
        reasons=tuple(reasons), arena_bytes=arena_bytes)


def _layout_of(graph: TrainingGraph, schedule: Schedule) -> Layout:
    """The schedule's layout checked against its steps, or one planned for them."""
    from poetsim.schedule.arena import adopt_layout, plan_arena

    try:
        walk = Replay(graph, schedule).run()
        if schedule.layout is not None:
            return adopt_layout(walk, schedule.layout, resident_bytes=None).layout
    except ContractViolation as err:
        raise ExecutionError(str(err)) from None
    return plan_arena(walk).layout


def _run_step(runner: _Runner, position: int, step: Step, reads_weights: bool,
              overwrites: int = -1) -> None:
    """Carry out one step on real tensors (``reads_weights``: a COMPUTE that streams its
    weights, ``overwrites``: the input an in-place COMPUTE writes its output over, both by
    the contract's replay); ``runner.during`` is RAM while a COMPUTE ran, an in-place
    output counted in its input's place."""
    k = step.op
    name = runner.graph.ops[k].name
    action = step.action
    runner.during = None
    if action is Action.COMPUTE:
        if not reads_weights:
            runner.use_held(k)
        value = runner.place(position, step, runner.compute(position, step))
        if overwrites >= 0:
            runner.taken.add(runner.graph.ops[overwrites].name)
        runner.during = runner.live_bytes(value)
        runner.resident[name] = value
    elif action is Action.PAGE_OUT:
        runner.page_out(position, step, name)
    elif action is Action.PAGE_IN:
        runner.resident[name] = runner.place(position, step,
                                             runner.page_in(position, step, name))
    elif action is Action.READ_WEIGHTS:
        runner.load_weights(k)
    elif action is Action.WRITE_WEIGHTS:
        runner.drop_weights()
    elif action is Action.HOLD_WEIGHTS:
        runner.hold_weights(k)
    elif action is Action.DROP_WEIGHTS:
        runner.drop_held(k)
    else:  # FREE
        runner.read(position, step, name)
        del runner.resident[name]
        runner.taken.discard(name)


def schedule_graph(imported: ImportedModel, schedule: Schedule, *, request: Any = None,
                   optimizer: str = "sgd") -> TrainingGraph:
    """The graph ``schedule`` was made for: the imported graph, or its streamed form
    (:meth:`~poetsim.graph.streaming.WeightsOnStorage.graph`) when the request it was
    solved for put weights on storage, recognised by the graph fingerprint.

    With ``request`` (a :class:`~poetsim.request.Request` resolved on the imported graph and
    the board), only the request's graph is accepted besides the imported one: the board
    decides which weights live on storage (:func:`~poetsim.request.resolve_request`),
    not the executor. Without one, any placement whose graph the fingerprint names (with
    ``optimizer``'s state beside trained weights on storage, or not). Neither: an
    :class:`ExecutionError`.
    """
    from poetsim.request import weight_placements

    base = imported.graph
    if request is not None:
        candidates = [base, request.graph]
    else:
        candidates = [p.graph(base) if p else base for p in weight_placements(optimizer)]
    for graph in candidates:
        if schedule.graph_fingerprint == graph_fingerprint(graph):
            return graph
    placed = ""
    if request is not None and WeightsOnStorage.of(request.graph):
        placed = (f"; on {request.board.name} its {WeightsOnStorage.of(request.graph).what} "
                  "live on storage")
    raise ExecutionError(f"the schedule was made for graph {schedule.graph_name!r} "
                         f"(fingerprint {schedule.graph_fingerprint[:12]}), not for the "
                         f"imported graph {base.name!r}{placed} (nor for it with weights "
                         "on storage" + (" as this board places them" if request is not None
                                         else "") + ")")


def _floor(values: Mapping[str, Any]) -> float:
    """1e-3 of the largest magnitude over all parameters: below it, a value that is zero in
    exact arithmetic (a key bias's gradient under softmax) is rounding noise on both sides."""
    return 1e-3 * max((_max_abs(v) for v in values.values()), default=0.0)


def _compare_grads(grads: Mapping[str, Any], reference: Mapping[str, Any], rtol: float
                   ) -> tuple[float, str, list[str]]:
    """Largest relative gradient error, its parameter, and the reasons to fail."""
    worst, worst_name = 0.0, ""
    reasons: list[str] = []
    floor = _floor(reference)
    for p_name, ref in reference.items():
        got = grads.get(p_name)
        if got is None:
            worst, worst_name = float("inf"), p_name
            reasons.append(f"no gradient computed for parameter {p_name!r}")
            continue
        err = _max_abs(got - ref) / max(_max_abs(ref), floor, 1e-300)
        if err > worst or not worst_name:
            worst, worst_name = err, p_name
    if worst > rtol and not reasons:
        reasons.append(f"gradient of {worst_name!r} differs from plain autograd by "
                       f"{worst:.3g} (relative), over {rtol:g}")
    return worst, worst_name, reasons


def _compare_weights(runner: _Runner, reference: _Reference, rtol: float
                     ) -> tuple[float, str, list[str]]:
    """Largest error of the updated weights relative to the reference's step, its parameter,
    and the reasons to fail (a frozen parameter that changed at all is one)."""
    steps = {name: reference.weights[name] - runner.initial[name] for name in reference.weights}
    floor = _floor(steps)
    worst, worst_name = 0.0, ""
    reasons: list[str] = []
    for name, ref in reference.weights.items():
        got = runner.final_weight(name)  # a weight on storage: its file's contents
        if name not in runner.trained and not runner.torch.equal(got, runner.initial[name]):
            reasons.append(f"frozen parameter {name!r} changed")
        err = _max_abs(got - ref) / max(_max_abs(steps[name]), floor, 1e-300)
        if err > worst or not worst_name:
            worst, worst_name = err, name
    if worst > rtol:
        reasons.append(f"updated weights of {worst_name!r} differ from plain autograd + "
                       f"{runner.optimizer} by {worst:.3g} (relative to the step), over "
                       f"{rtol:g}")
    return worst, worst_name, reasons


def _compare_states(runner: _Runner, reference: _Reference, rtol: float
                    ) -> tuple[float, list[str]]:
    """Largest relative error of the optimizer state after the step (in RAM or written
    back to storage) against ``torch.optim``'s, and the reasons to fail."""
    worst, worst_slot = 0.0, ""
    for name, slots in reference.states.items():
        got = runner.final_state(name)
        for slot, ref in slots.items():
            err = _max_abs(got[slot] - ref) / max(_max_abs(ref), 1e-300)
            if err > worst or not worst_slot:
                worst, worst_slot = err, f"{slot} of {name!r}"
    reasons = ([f"optimizer state {worst_slot} differs from torch.optim's by {worst:.3g} "
                f"(relative), over {rtol:g}"] if worst > rtol else [])
    return worst, reasons


@attrs.frozen
class _Reference:
    """Plain training on a float64 copy: gradients of the trained parameters, every
    parameter after ``torch.optim``'s step (:func:`~poetsim.torchio.optim.reference_optimizer`)
    and the optimizer's state of each trained one."""

    grads: dict[str, Any]
    weights: dict[str, Any]
    states: dict[str, dict[str, Any]]


def _reference(imported: ImportedModel, runner: _Runner, lr: float) -> _Reference:
    """``loss.backward()`` then the optimizer's step on the trained parameters, float64."""
    torch = runner.torch
    model = copy.deepcopy(imported.module).double().train()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.eval()  # the graph takes dropout as the identity
    for name, p in model.named_parameters():
        p.requires_grad_(name in runner.trained)
    out = model(*runner.batch)
    outputs = [x for x in _flatten(out) if isinstance(x, torch.Tensor)]
    logits = outputs[int(imported.graph.metadata.get("output_index", 0))]
    if imported.loss == "mse":
        loss = torch.nn.functional.mse_loss(logits, runner.target)
    else:
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 runner.target)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()
             if p.grad is not None}
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    optimizer = reference_optimizer(torch, list(trained.values()), runner.optimizer, lr)
    optimizer.step()
    states = {name: {slot: optimizer.state[p][slot] for slot in STATE_SLOTS[runner.optimizer]}
              for name, p in trained.items() if p.grad is not None}
    return _Reference(grads, {name: p.detach() for name, p in model.named_parameters()},
                      states)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [y for v in value.values() for y in _flatten(v)]
    if isinstance(value, (list, tuple)):
        return [y for v in value for y in _flatten(v)]
    if hasattr(value, "to_tuple"):
        return _flatten(value.to_tuple())
    return [value]
