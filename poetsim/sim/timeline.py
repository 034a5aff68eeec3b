"""The timeline of a run (``simulate(..., trace=True)``): op slices, power states, RAM.

Three kinds of records, all in seconds from the start of the iteration:

* :class:`Slice`: something a component did, ``[start_s, end_s)``: an op or a stall on the
  ``cpu``, a transfer on ``dma0``, ``dma1``, ... (or on ``cpu`` without DMA);
* :class:`StateSlice`: a component's power state and the power drawn in it (``cpu``,
  ``dma``, ``storage``), contiguous from 0 to the makespan;
* RAM samples ``(time_s, bytes)``: the live bytes from that time on.

Power is piecewise constant between state slices, so integrating them gives the run's
energy exactly (:meth:`Timeline.energy_j`). :mod:`poetsim.sim.trace` writes all of it as a
Chrome / Perfetto trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Slice", "StateSlice", "Timeline"]


@attrs.frozen
class Slice:
    """One activity of one component."""

    component: str
    name: str
    start_s: float
    end_s: float
    args: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@attrs.frozen
class StateSlice:
    """A component in one power state, drawing ``power_w``."""

    component: str
    state: str
    start_s: float
    end_s: float
    power_w: float


@attrs.frozen
class Timeline:
    """Everything :func:`~poetsim.sim.simulate` recorded with ``trace=True``."""

    slices: tuple[Slice, ...]
    states: tuple[StateSlice, ...]
    ram: tuple[tuple[float, int], ...]

    def energy_j(self, component: str | None = None) -> float:
        """Integral of the power over the state slices (of one component, or all)."""
        return sum(s.power_w * (s.end_s - s.start_s) for s in self.states
                   if component is None or s.component == component)
