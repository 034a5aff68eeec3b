"""What a real execution reports, and the checks of its numeric arguments.

:class:`ExecutionReport` is what :func:`~poetsim.torchio.execute.execute_schedule`
measured (peaks, weight traffic, gradient, weight and optimizer-state errors, and the
reasons it failed); :func:`step_error` words an :class:`ExecutionError` that names the step
it happened at; :func:`check_learning_rate` and :func:`check_tolerance` refuse a learning
rate or tolerance that is not a finite number above 0 (the CLI checks its flags with them).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from poetsim.errors import ExecutionError, InputError
from poetsim.schedule.ops import Step

__all__ = ["ExecutionReport", "check_learning_rate", "check_tolerance", "step_error"]


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


def step_error(position: int, step: Step, graph: Any, detail: str) -> ExecutionError:
    """An :class:`ExecutionError` naming the step at ``position`` and what went wrong."""
    return ExecutionError(f"step {position} ({step.describe(graph)}): {detail}")


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
