"""The MILP's binary decisions: ``R`` (compute), ``S`` (keep), ``Min`` (page in), ``Mout``
(page out) and ``H`` (hold weights), each with its objective coefficient.

A variable exists only where it can be nonzero: the lower triangle, tensor ``i`` only up
to the stage of its horizon (:meth:`MilpModel.horizon`), ``R`` only for what may be
recomputed (:meth:`MilpModel.recomputable`), ``Min``/``Mout`` only for non-empty tensors
when paging is allowed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from poetsim.errors import BuildTimeout
from poetsim.optimizer.milp.objective import compute_j, transfer_j

if TYPE_CHECKING:
    from poetsim.optimizer.milp.model import MilpModel

__all__ = ["create_variables"]


def create_variables(milp: MilpModel) -> None:
    """Every binary of the model, in the order of tensors, then the weight holds."""
    for i in range(milp.n):
        if milp.build_deadline is not None and time.perf_counter() > milp.build_deadline:
            raise BuildTimeout(f"creating the variables passed the time limit at tensor "
                               f"{i} of {milp.n}")
        _tensor_variables(milp, i)
    _hold_variables(milp)


def _tensor_variables(milp: MilpModel, i: int) -> None:
    """``S``, ``R`` and ``Min`` of tensor ``i`` in every stage after its own up to its
    horizon, then its ``Mout`` from its own stage."""
    m, c, e = milp.model, milp.costs, milp.energy_scale
    horizon = milp.horizon(i)
    pageable = milp.formulation.paging and milp.mem[i] > 0
    for t in range(i + 1, horizon + 1):
        milp.S[t, i] = m.addVar(vtype="B", name=f"S_{t}_{i}")
        if milp.recomputable(i):
            milp.R[t, i] = m.addVar(vtype="B", name=f"R_{t}_{i}", obj=e * compute_j(c, i))
        if pageable:
            milp.Min[t, i] = m.addVar(vtype="B", name=f"Min_{t}_{i}",
                                      obj=e * transfer_j(c, float(c.pagein_energy_j[i]),
                                                         float(c.pagein_time_s[i])))
    if pageable:
        for t in range(i, horizon):
            milp.Mout[t, i] = m.addVar(vtype="B", name=f"Mout_{t}_{i}",
                                       obj=e * transfer_j(c, float(c.pageout_energy_j[i]),
                                                          float(c.pageout_time_s[i])))


def _hold_variables(milp: MilpModel) -> None:
    """``H[b]`` for every op that can hold its weights, and per stage the (units, ``H[b]``)
    of the holds in RAM when it starts (``held_at``) and of those its own op's run loads
    (``loaded_at``)."""
    m, c, e, n = milp.model, milp.costs, milp.energy_scale, milp.n
    milp.held_at = [[] for _ in range(n)]
    milp.loaded_at = [[] for _ in range(n)]
    for b in np.flatnonzero(c.hold_owner >= 0):
        b, f = int(b), int(c.hold_owner[b])
        h = milp.H[b] = m.addVar(vtype="B", name=f"H_{b}", obj=e * (
            compute_j(c, b, held=True) - compute_j(c, b)))
        if milp.held[b]:
            milp.loaded_at[f].append((milp.held[b], h))
            for t in range(f + 1, b + 1):
                milp.held_at[t].append((milp.held[b], h))

