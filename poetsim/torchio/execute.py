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

The work is split by concept: :mod:`poetsim.torchio.runner` carries out the steps (with
:mod:`~poetsim.torchio.evaluate` for the ops on tensors, :mod:`~poetsim.torchio.pages` for
the page files, :mod:`~poetsim.torchio.weights` for the weights on storage and
:mod:`~poetsim.torchio.arena` for the arena), :mod:`poetsim.torchio.reference` checks the
result, :mod:`poetsim.torchio.report` words it; this module drives them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from poetsim.errors import ExecutionError, InputError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.schedule.layout import Layout
from poetsim.schedule.ops import Action, Schedule, Step
from poetsim.schedule.replay import ContractViolation, Replay
from poetsim.torchio.model import ImportedModel
from poetsim.torchio.optim import STATE_SLOTS
from poetsim.torchio.reference import compare_grads, compare_states, compare_weights, reference
from poetsim.torchio.report import ExecutionReport, check_learning_rate, check_tolerance
from poetsim.torchio.runner import Runner
from poetsim.torchio.tables import require_torch

__all__ = ["ExecutionError", "ExecutionReport", "execute_schedule", "schedule_graph"]


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
    require_torch()
    optimizer = _optimizer_of(schedule)
    request, graph = _graph_for(imported, schedule, board, optimizer)
    on_storage = WeightsOnStorage.of(graph)
    inputs = _inputs_for(imported, inputs)
    budget_bytes, resident_bytes = _budgets(graph, request, optimizer, budget_bytes,
                                            resident_bytes)
    with tempfile.TemporaryDirectory(prefix="poetsim-pages-") as tmp:
        directory = _page_directory(page_dir, tmp)
        runner = Runner(imported, inputs, seed, directory, lr, graph, optimizer)
        layout = _layout_of(graph, schedule) if arena is True else arena
        if isinstance(layout, Layout):
            runner.use_arena(layout, schedule.steps)
        walked = _walk(runner, schedule, on_storage, after_step, directory)
        after = runner.step_the_rest()
        checked = _check(imported, runner, walked, lr, grad_rtol, budget_bytes)
    sim_peak, sim_energy, ram_reasons = _simulate(graph, request, schedule, budget_bytes,
                                                  resident_bytes)
    files = runner.files
    return ExecutionReport(
        graph_name=graph.name, steps=len(schedule.steps), computes=schedule.computes,
        recomputations=schedule.recomputations(), page_outs=schedule.page_outs,
        page_ins=schedule.page_ins, frees=schedule.frees, max_rel_grad_error=checked.grad,
        worst_param=checked.grad_param, grad_rtol=grad_rtol, lr=lr,
        max_rel_weight_error=checked.weight, worst_weight_param=checked.weight_param,
        params_updated_in_place=len(runner.updated_in_place), params_updated_after=after,
        frozen_params=len(runner.initial) - len(runner.trained),
        peak_live_bytes=walked.peak, peak_live_raw_bytes=walked.peak_raw,
        peak_step=walked.peak_step, budget_bytes=budget_bytes,
        checker_peak_bytes=walked.checker_peak,
        simulated_peak_bytes=sim_peak, simulated_energy_j=sim_energy,
        bytes_written=runner.pages.bytes_written,
        passed=not (checked.reasons or ram_reasons),
        weights_on_storage=on_storage.label, params_on_storage=len(files.weight_files),
        weights_read_bytes=files.weights_read_bytes,
        weights_written_bytes=files.weights_written_bytes,
        cost_model_weights_read_bytes=walked.model_read,
        cost_model_weights_written_bytes=walked.model_written,
        weights_held_peak_bytes=files.weights_held_peak_bytes, optimizer=optimizer,
        max_rel_state_error=checked.state, params_with_state_on_storage=len(files.state_files),
        reasons=checked.reasons + ram_reasons, arena_bytes=layout.arena_bytes
        if isinstance(layout, Layout) else None)


# ----------------------------------------------------------------------------- before the run


def _optimizer_of(schedule: Schedule) -> str:
    """The optimizer the schedule was made for (default SGD), or a one-line InputError."""
    optimizer = str(schedule.metadata.get("optimizer") or "sgd")
    if optimizer not in STATE_SLOTS:
        raise InputError(f"schedule optimizer = {optimizer!r}: must be one of "
                         f"{', '.join(STATE_SLOTS)}")
    return optimizer


def _graph_for(imported: ImportedModel, schedule: Schedule, board: Any, optimizer: str
               ) -> tuple[Any, TrainingGraph]:
    """The request the schedule file records (with a ``board``; else None) and the graph
    the schedule was made for (:func:`schedule_graph`)."""
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
        made_on = schedule.metadata.get("board")
        if board is None or not made_on or made_on == board.name:
            raise
        raise ExecutionError(f"{err}; it was solved on board {made_on!r}: give that board "
                             "with --board") from None
    return request, graph


def _inputs_for(imported: ImportedModel, inputs: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """``inputs``, or the example inputs by default; an InputError for another shape."""
    inputs = imported.example_inputs if inputs is None else tuple(inputs)
    for x, example in zip(inputs, imported.example_inputs):
        if tuple(x.shape) != tuple(example.shape):
            raise InputError(f"input shape {tuple(x.shape)} differs from the traced shape "
                             f"{tuple(example.shape)}")
    return inputs


def _budgets(graph: TrainingGraph, request: Any, optimizer: str, budget_bytes: int | None,
             resident_bytes: int | None) -> tuple[int | None, int]:
    """The activation budget (the request's by default, else None) and the resident region
    (the request's, else graph-only: every parameter and gradient but those on storage)."""
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
                          - WeightsOnStorage.of(graph).total_bytes(graph))
    return budget_bytes, resident_bytes


def _page_directory(page_dir: str | Path | None, tmp: str) -> Path:
    """``page_dir`` (made if missing), else the temporary ``tmp``; a one-line InputError
    for a path that cannot be a directory."""
    directory = Path(page_dir) if page_dir is not None else Path(tmp)
    try:
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(0, "it is a file, not a directory")
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"page directory {str(directory)!r}: cannot use it: "
                         f"{err.strerror}") from None
    return directory


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


# ----------------------------------------------------------------------------- the run


@attrs.frozen
class _Walked:
    """What the walk through the steps measured: the live-bytes peak (graph units), raw
    peak and the step of the peak, the contract's peak, and the cost model's weight traffic
    of the COMPUTE steps run."""

    peak: int
    peak_raw: int
    peak_step: int
    checker_peak: int | None
    model_read: int
    model_written: int


def _walk(runner: Runner, schedule: Schedule, on_storage: WeightsOnStorage,
          after_step: Callable[[int, Step, Path], None] | None, directory: Path) -> _Walked:
    """Every step through the contract's replay (a broken rule stops it, an
    :class:`ExecutionError`), carried out by ``runner``, live bytes measured after each."""
    graph = runner.graph
    peak, peak_raw, peak_step = 0, 0, -1
    model_read = model_written = 0  # the cost model's weight traffic of the steps run
    walk = Replay(graph, schedule)  # the contract's replay: a broken rule stops it
    steps = schedule.steps
    try:
        for effect in walk:
            position = effect.position
            step = steps[position]
            runner.run(position, step, effect.reads_weights, effect.overwrites)
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
    return _Walked(peak, peak_raw, peak_step, walk.peak_bytes, model_read, model_written)


# ----------------------------------------------------------------------------- after the run


@attrs.frozen
class _Checked:
    """The largest gradient, weight and optimizer-state errors (and their parameters), and
    every reason the execution fails."""

    grad: float
    grad_param: str
    weight: float
    weight_param: str
    state: float
    reasons: tuple[str, ...]


def _check(imported: ImportedModel, runner: Runner, walked: _Walked, lr: float,
           grad_rtol: float, budget_bytes: int | None) -> _Checked:
    """The run against the reference (gradients, weights, optimizer state), its peak
    against the budget, and its weight traffic against the cost model's."""
    ref = reference(imported, runner, lr)
    worst, worst_name, reasons = compare_grads(runner.grads, ref.grads, grad_rtol)
    worst_weight, worst_weight_name, weight_reasons = compare_weights(runner, ref, grad_rtol)
    worst_state, state_reasons = compare_states(runner, ref, grad_rtol)
    reasons += weight_reasons + state_reasons
    if budget_bytes is not None and walked.peak > budget_bytes:
        reasons.append(f"measured peak {walked.peak} B over the activation budget "
                       f"{budget_bytes} B")
    measured = (runner.files.weights_read_bytes, runner.files.weights_written_bytes)
    model = (walked.model_read, walked.model_written)
    if measured != model:
        reasons.append(f"weights on storage: read {measured[0]} B and wrote back "
                       f"{measured[1]} B, but the cost model prices {model[0]} B read "
                       f"and {model[1]} B written for the steps run")
    return _Checked(worst, worst_name, worst_weight, worst_weight_name, worst_state,
                    tuple(reasons))


def _simulate(graph: TrainingGraph, request: Any, schedule: Schedule, budget_bytes: int | None,
              resident_bytes: int) -> tuple[int | None, float | None, tuple[str, ...]]:
    """With a request (a ``board``): the simulator's activation peak (the resident region
    subtracted), energy, and why its RAM (the arena the schedule's layout declares) breaks
    the request, by the verdict's rule (:func:`~poetsim.verdict.ram_violations`); without
    one, None, None and none."""
    if request is None:
        return None, None, ()
    from poetsim.sim import simulate
    from poetsim.verdict import ram_violations

    report = simulate(graph, request.board, schedule,
                      budget_bytes=None if budget_bytes is None
                      else budget_bytes + resident_bytes,
                      resident_bytes=resident_bytes)
    # a schedule for the un-streamed graph holds the streamed weights resident too
    judged = attrs.evolve(request, resident_bytes=resident_bytes)
    return (int(report.peak_ram_bytes) - resident_bytes, float(report.energy_j),
            tuple(ram_violations(judged, report)))


# ----------------------------------------------------------------------------- the graph


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
