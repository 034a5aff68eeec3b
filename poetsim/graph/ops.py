"""One operation of a training graph and its optional measured costs.

Each op produces exactly one tensor (its output, the "activation"), as in Checkmate and
POET: rematerializing an op recomputes that tensor; paging moves that tensor. Forward ops,
the loss and the backward (gradient) ops are all ops of this kind; ``phase`` says which.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

from poetsim.errors import GraphError

__all__ = ["GRADIENT_SUM_KIND", "MAX_BYTES", "MAX_FLOPS", "MAX_MEASURED_ENERGY_J",
           "MAX_MEASURED_TIME_S", "MeasuredCosts", "Op", "Phase"]

#: Plausibility bounds on every cost of an op: generous (far beyond any edge board, and
#: beyond the largest RAM a board file may declare, 1e13 B) but finite, so that a unit slip
#: or a corrupt file is rejected by name instead of overflowing later. Sizes: 2**44 B
#: (16 TiB) per tensor, so sums of up to 2**19 of them still fit a 64-bit integer.
MAX_BYTES = 2**44
#: FLOPs of one op (a large model's whole training step is around 1e12 to 1e15).
MAX_FLOPS = 1e18
#: A measured time of one op or transfer: a million seconds, about 11.6 days.
MAX_MEASURED_TIME_S = 1e6
#: A measured energy of one op or transfer: a gigajoule.
MAX_MEASURED_ENERGY_J = 1e9


#: The kind of a gradient-sum op (``Op.gradient_sum_of``).
GRADIENT_SUM_KIND = "grad_sum"


class Phase(enum.Enum):
    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"


def _shown(value: Any) -> str:
    """``repr(value)``, shortened for integers with hundreds of digits."""
    text = repr(value)
    if isinstance(value, int) and len(text) > 40:
        return f"{text[:8]}...({len(text)} digits)"
    return text


def _cost(op_name: str, field: str, value: Any, allow_none: bool, limit: float,
          unit: str) -> None:
    # the common case first, at a few hundred thousand calls for a 20,000-op graph
    if (type(value) is int or type(value) is float) and 0 <= value <= limit:
        return
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GraphError(f"op {op_name!r}: {field} = {value!r}: must be a number")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise GraphError(f"op {op_name!r}: {field} = {value!r}: must be finite (no NaN or inf)")
    if value < 0:
        raise GraphError(f"op {op_name!r}: {field} = {_shown(value)}: must not be negative")
    if value > limit:
        bound = (f"2**{int(limit).bit_length() - 1} = {int(limit)}" if unit == "B"
                 else f"{limit:g}")
        raise GraphError(f"op {op_name!r}: {field} = {_shown(value)}: outside the allowed "
                         f"range [0, {bound}] {unit}")


def _measured_limit(field: str) -> tuple[float, str]:
    return (MAX_MEASURED_TIME_S, "s") if field.endswith("_s") else (MAX_MEASURED_ENERGY_J, "J")


@attrs.frozen
class MeasuredCosts:
    """Costs profiled on the device; each one present replaces the analytic estimate.

    Page-in and page-out refer to the op's output tensor. Times are at most
    :data:`MAX_MEASURED_TIME_S`, energies at most :data:`MAX_MEASURED_ENERGY_J`.
    """

    compute_time_s: float | None = None
    compute_energy_j: float | None = None
    pagein_time_s: float | None = None
    pagein_energy_j: float | None = None
    pageout_time_s: float | None = None
    pageout_energy_j: float | None = None

    def check(self, op_name: str) -> None:
        if self.empty:
            return
        for field in attrs.fields(MeasuredCosts):
            _cost(op_name, f"measured.{field.name}", getattr(self, field.name),
                  True, *_measured_limit(field.name))

    def as_dict(self) -> dict[str, float]:
        """The measured values that are present."""
        if self.empty:
            return {}
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}

    @property
    def empty(self) -> bool:
        return (self.compute_time_s is None and self.compute_energy_j is None
                and self.pagein_time_s is None and self.pagein_energy_j is None
                and self.pageout_time_s is None and self.pageout_energy_j is None)


@attrs.frozen
class Op:
    """A node of the training graph.

    Parameters
    ----------
    name:
        Unique name. Backward ops are named ``"<forward name>/grad"`` by the derivation.
    kind:
        What the op computes (``conv2d``, ``relu``, ``cross_entropy``, ...). Backward ops
        have the kind of the forward op they differentiate.
    phase:
        Forward, loss or backward.
    flops:
        Floating-point operations (a multiply-accumulate counts as 2), at most
        :data:`MAX_FLOPS`.
    output_bytes:
        Size of the op's output tensor, the one rematerialization and paging act on. This
        and the other sizes are whole numbers of at most :data:`MAX_BYTES`.
    workspace_bytes:
        Scratch memory needed only while the op runs (im2col buffers and the like).
    param_bytes:
        Parameters this op owns (forward ops only); they live in the fixed resident
        region, not in the activation budget.
    frozen_param_bytes:
        The part of ``param_bytes`` that is not trained (a frozen layer, or the weights of
        a layer whose bias alone is trained): no gradient, no optimizer state, no
        write-back. 0 (the default) trains every parameter; see
        :attr:`trained_param_bytes`.
    forward_of:
        For a backward op, the name of the forward (or loss) op it differentiates.
    gradient_sum_of:
        For a gradient-sum op (the other kind of backward op, :data:`GRADIENT_SUM_KIND`),
        the forward op read by several ops whose output's gradient it sums: it reads what
        those ops' backward ops send back and outputs the sum, which the forward op's own
        backward op then reads (so that op never holds several incoming gradients at
        once). A backward op has exactly one of ``forward_of`` and ``gradient_sum_of``.
    inplace_update:
        Backward ops of an op with trained parameters only: the op applies the SGD step
        to those parameters as soon as it computes their gradient (the update fused into
        the weight-gradient op; Lin et al.'s in-place update). Their gradient is then no
        resident buffer (:func:`poetsim.graph.graph.resident_memory` counts none for
        them); the op's ``workspace_bytes`` holds the part it works on, one output
        channel's for a convolution or linear layer, the whole for any other kind
        (:func:`poetsim.graph.graph.update_gradient_bytes`, checked by
        :func:`poetsim.graph.graph.check_gradients`). Optimizer state stays
        resident. False (the default): the gradient is resident until the step.
    overwrites:
        The input (an op name) whose buffer this op's output may take over: an in-place
        kernel, such as a depthwise convolution run channel by channel through a
        one-channel buffer (TinyEngine), an element-wise op, a residual addition or a
        gradient sum. The output is at most that input's size (the graph checks it). A
        schedule uses it only where the input leaves RAM right after this op
        (:class:`~poetsim.schedule.replay.Replay`); otherwise the op writes a buffer of
        its own. ``workspace_bytes`` must already hold what the in-place kernel needs.
    measured:
        Optional profiled costs that replace the analytic ones.
    """

    name: str
    kind: str
    phase: Phase = attrs.field(converter=Phase)
    flops: float = 0.0
    output_bytes: int = 0
    workspace_bytes: int = 0
    param_bytes: int = 0
    forward_of: str | None = None
    measured: MeasuredCosts = attrs.field(factory=MeasuredCosts)
    frozen_param_bytes: int = 0
    inplace_update: bool = False
    gradient_sum_of: str | None = None
    overwrites: str | None = None

    @property
    def recomputable(self) -> bool:
        """Whether a schedule may compute this op again: not an in-place update, whose
        second run would read the weights its first run updated (wrong gradients for
        the ops before it) and apply the step twice."""
        return not self.inplace_update

    @property
    def trained_param_bytes(self) -> int:
        """Bytes of this op's parameters that are trained (gradient, optimizer state)."""
        return self.param_bytes - self.frozen_param_bytes

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise GraphError(f"op {self.name!r}: name must be a non-empty string")
        if not isinstance(self.kind, str) or not self.kind:
            raise GraphError(f"op {self.name!r}: kind = {self.kind!r}: must be a non-empty string")
        _cost(self.name, "flops", self.flops, False, MAX_FLOPS, "FLOP")
        for field in ("output_bytes", "workspace_bytes", "param_bytes", "frozen_param_bytes"):
            value = getattr(self, field)
            _cost(self.name, field, value, False, MAX_BYTES, "B")
            if type(value) is not int and not float(value).is_integer():
                raise GraphError(f"op {self.name!r}: {field} = {value!r}: must be a whole number")
        for field in ("forward_of", "gradient_sum_of", "overwrites"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise GraphError(f"op {self.name!r}: {field} = {value!r}: must be an op name")
            if self.phase is not Phase.BACKWARD and value is not None and field != "overwrites":
                raise GraphError(f"op {self.name!r}: {field} is only for backward ops")
        if self.phase is Phase.BACKWARD and (self.forward_of is None) == (
                self.gradient_sum_of is None):
            raise GraphError(f"op {self.name!r}: a backward op needs exactly one of forward_of "
                             "(the op it differentiates) and gradient_sum_of (the op whose "
                             "gradient it sums)")
        if self.gradient_sum_of is not None and self.kind != GRADIENT_SUM_KIND:
            raise GraphError(f"op {self.name!r}: kind = {self.kind!r}: an op with "
                             f"gradient_sum_of has kind {GRADIENT_SUM_KIND!r}")
        if not isinstance(self.inplace_update, bool):
            raise GraphError(f"op {self.name!r}: inplace_update = {self.inplace_update!r}: "
                             "must be true or false")
        if self.inplace_update and self.forward_of is None:
            raise GraphError(f"op {self.name!r}: inplace_update is only for backward ops with "
                             "forward_of (the op that computes the weight gradient applies it)")
        if self.phase is Phase.BACKWARD and self.param_bytes:
            raise GraphError(f"op {self.name!r}: param_bytes belongs to the forward op")
        if self.frozen_param_bytes > self.param_bytes:
            raise GraphError(f"op {self.name!r}: frozen_param_bytes = "
                             f"{_shown(self.frozen_param_bytes)}: must be at most param_bytes "
                             f"= {_shown(self.param_bytes)}")
        self.measured.check(self.name)
