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

__all__ = ["MeasuredCosts", "Op", "Phase"]


class Phase(enum.Enum):
    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"


def _cost(op_name: str, field: str, value: Any, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GraphError(f"op {op_name!r}: {field} = {value!r}: must be a number")
    if math.isnan(value) or math.isinf(value):
        raise GraphError(f"op {op_name!r}: {field} = {value!r}: must be finite (no NaN or inf)")
    if value < 0:
        raise GraphError(f"op {op_name!r}: {field} = {value!r}: must not be negative")


@attrs.frozen
class MeasuredCosts:
    """Costs profiled on the device; each one present replaces the analytic estimate.

    Page-in and page-out refer to the op's output tensor.
    """

    compute_time_s: float | None = None
    compute_energy_j: float | None = None
    pagein_time_s: float | None = None
    pagein_energy_j: float | None = None
    pageout_time_s: float | None = None
    pageout_energy_j: float | None = None

    def check(self, op_name: str) -> None:
        for field in attrs.fields(MeasuredCosts):
            _cost(op_name, f"measured.{field.name}", getattr(self, field.name), allow_none=True)

    def as_dict(self) -> dict[str, float]:
        """The measured values that are present."""
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}

    @property
    def empty(self) -> bool:
        return not self.as_dict()


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
        Floating-point operations (a multiply-accumulate counts as 2).
    output_bytes:
        Size of the op's output tensor, the one rematerialization and paging act on.
    workspace_bytes:
        Scratch memory needed only while the op runs (im2col buffers and the like).
    param_bytes:
        Trainable parameters this op owns (forward ops only); they live in the fixed
        resident region, not in the activation budget.
    forward_of:
        For a backward op, the name of the forward (or loss) op it differentiates.
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

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise GraphError(f"op {self.name!r}: name must be a non-empty string")
        if not isinstance(self.kind, str) or not self.kind:
            raise GraphError(f"op {self.name!r}: kind = {self.kind!r}: must be a non-empty string")
        _cost(self.name, "flops", self.flops, allow_none=False)
        for field in ("output_bytes", "workspace_bytes", "param_bytes"):
            value = getattr(self, field)
            _cost(self.name, field, value, allow_none=False)
            if not float(value).is_integer():
                raise GraphError(f"op {self.name!r}: {field} = {value!r}: must be a whole number")
        if self.phase is Phase.BACKWARD and self.forward_of is None:
            raise GraphError(f"op {self.name!r}: a backward op needs forward_of")
        if self.phase is not Phase.BACKWARD and self.forward_of is not None:
            raise GraphError(f"op {self.name!r}: forward_of is only for backward ops")
        if self.phase is Phase.BACKWARD and self.param_bytes:
            raise GraphError(f"op {self.name!r}: param_bytes belongs to the forward op")
        self.measured.check(self.name)
