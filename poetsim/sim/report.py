"""The result of a simulation: verdict, time, RAM, energy breakdowns, transfers, plan.

:class:`SimReport` is frozen; :meth:`SimReport.as_dict` gives a JSON-ready summary whose keys
carry their units (``energy_j``, ``peak_ram_bytes``, ``makespan_s``, ``stall_s``, ...), one
row per run for regression diffs.

Energy breakdowns (all in joules, each summing to ``energy_j``):

* ``energy_by_component_j``: ``cpu``, ``dma``, ``storage``;
* ``energy_by_state_j``: ``"component.state"`` (``cpu.active``, ``storage.sleep``, ...);
* ``energy_by_kind_j``: what the energy was spent on: ``compute`` (first run of an op),
  ``recompute``, ``page_in``, ``page_out``, ``idle`` (components waiting outside the
  program's stalls, e.g. the storage between commands), ``stall`` (the CPU waiting for a
  page-in or a write), ``wakeup`` (CPU and storage wake-ups).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from poetsim.schedule.layout import Layout
from poetsim.sim.timeline import Timeline

__all__ = ["Prediction", "SimReport", "SimViolation", "TransferRecord"]


@attrs.frozen
class SimViolation:
    """Something the run broke: ``ram_overflow``, ``storage_full``, ``flash_worn_out``.
    ``step`` / ``op`` say where (``None`` for the whole run)."""

    rule: str
    message: str
    step: int | None = None
    op: str | None = None
    time_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class TransferRecord:
    """One transfer: its plan (see :class:`~poetsim.sim.planner.PlannedTransfer`) and what
    happened. Times are -1 for a transfer that never ran (freed before it started).

    ``issued_s``: handed to the DMA queue (or started by the CPU); ``started_s``: taken by a
    channel; ``service_s``: the storage began serving it (after a wake-up);
    ``stall_s``: how long the CPU waited for it.
    """

    kind: str
    tensor: int
    op: str
    step: int
    consumer_step: int
    trigger_step: int
    planned_start_s: float
    needed_s: float
    issued_s: float
    started_s: float
    service_s: float
    ended_s: float
    stall_s: float
    ram_delayed: bool
    channel: int
    bytes: int
    device_bytes: int

    @property
    def start_delay_s(self) -> float:
        """Actual minus planned start (positive: later than planned)."""
        return self.started_s - self.planned_start_s

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _pct(simulated: float, predicted: float) -> float | None:
    if predicted == 0:
        return 0.0 if simulated == 0 else None
    return (simulated - predicted) / predicted * 100.0


@attrs.frozen
class Prediction:
    """The op-list model's figures of the schedule (:func:`poetsim.schedule.model.predict`,
    recomputed, never read from a file) next to the simulation.

    The peak compared is the activation peak (the model's figure excludes the resident
    region). Differences are ``(simulated - predicted) / predicted`` in percent.
    """

    predicted_energy_j: float | None
    simulated_energy_j: float
    predicted_time_s: float | None
    simulated_time_s: float
    predicted_peak_ram_bytes: int | None
    simulated_peak_ram_bytes: int

    @property
    def energy_diff_pct(self) -> float | None:
        if self.predicted_energy_j is None:
            return None
        return _pct(self.simulated_energy_j, self.predicted_energy_j)

    @property
    def time_diff_pct(self) -> float | None:
        if self.predicted_time_s is None:
            return None
        return _pct(self.simulated_time_s, self.predicted_time_s)

    @property
    def peak_diff_pct(self) -> float | None:
        if self.predicted_peak_ram_bytes is None:
            return None
        return _pct(self.simulated_peak_ram_bytes, self.predicted_peak_ram_bytes)

    def as_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out.update(energy_diff_pct=self.energy_diff_pct, time_diff_pct=self.time_diff_pct,
                   peak_diff_pct=self.peak_diff_pct)
        return out


def _mapping(value: Mapping) -> Mapping:
    return dict(value)


@attrs.frozen
class SimReport:
    """Everything one simulated training iteration produced (see the module docstring)."""

    graph_name: str
    board_name: str
    steps: int
    # what the run broke, against the limits it was given (judged by poetsim.verdict)
    violations: tuple[SimViolation, ...]
    # time
    makespan_s: float
    compute_s: float
    cpu_transfer_s: float
    stall_s: float
    tail_s: float
    # RAM
    peak_ram_bytes: int
    peak_step: int
    peak_op: str
    peak_action: str
    peak_time_s: float
    budget_bytes: int
    resident_bytes: int
    ram_limit_bytes: int
    program_peak_ram_bytes: int
    #: the static arena that holds every buffer at its offset (resident state included;
    #: :mod:`poetsim.schedule.arena`): its size, and how far it is above its byte peak
    arena_bytes: int
    fragmentation_bytes: int
    # energy
    energy_j: float
    energy_by_component_j: Mapping[str, float] = attrs.field(converter=_mapping)
    energy_by_state_j: Mapping[str, float] = attrs.field(converter=_mapping)
    energy_by_kind_j: Mapping[str, float] = attrs.field(converter=_mapping)
    residency_s: Mapping[str, Mapping[str, float]] = attrs.field(converter=_mapping)
    transitions: Mapping[str, Mapping[str, int]] = attrs.field(converter=_mapping)
    wakeups: Mapping[str, int] = attrs.field(converter=_mapping)
    # storage, bus, DMA
    bytes_read: int
    bytes_written: int
    bytes_paged_in: int
    bytes_paged_out: int
    peak_storage_bytes: int
    storage_capacity_bytes: int
    bus_busy_s: float
    bus_bytes: int
    bus_bandwidth_bytes_per_s: float
    dma_busy_s: float
    flash_erases: int
    flash_max_erase_count: int
    flash_sectors_used: int
    flash_endurance_cycles: int | None
    flash_lifetime_iterations: float | None
    # wear of every kind of storage (poetsim.sim.storage): bytes worn per iteration and
    # iterations until the board's endurance (NOR: flash_lifetime_iterations)
    storage_wear_bytes: int
    storage_lifetime_iterations: float | None
    # counts
    computes: int
    recomputes: int
    page_ins: int
    page_outs: int
    frees: int
    # plan and predictions
    transfers: tuple[TransferRecord, ...]
    prediction: Prediction
    events: int
    timeline: Timeline | None = attrs.field(default=None, eq=False, repr=False)
    #: the event loop's wall-clock and CPU (process) seconds: for benchmarks, never a figure
    #: of the simulated board
    wall_s: float = attrs.field(default=0.0, eq=False, repr=False)
    cpu_s: float = attrs.field(default=0.0, eq=False, repr=False)
    # timing variance: the seed of a seeded run (None: nominal) and the extra write-busy
    # time it drew for the page-outs (see poetsim.sim.storage)
    seed: int | None = None
    write_busy_s: float = 0.0
    #: the layout the run used (:class:`~poetsim.schedule.layout.Layout`), and whether it
    #: is the schedule's own (else planned for this run)
    layout: Layout | None = attrs.field(default=None, eq=False, repr=False)
    layout_from_schedule: bool = False

    # ------------------------------------------------------------------ derived
    @property
    def peak_activation_bytes(self) -> int:
        return self.peak_ram_bytes - self.resident_bytes

    @property
    def ram_overflow(self) -> bool:
        return self.peak_ram_bytes > self.budget_bytes

    @property
    def bus_utilisation(self) -> float:
        """Fraction of the makespan with at least one transfer on the bus."""
        return self.bus_busy_s / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def bus_bandwidth_utilisation(self) -> float:
        """Bytes moved over what the bus could carry in the makespan."""
        capacity = self.bus_bandwidth_bytes_per_s * self.makespan_s
        return self.bus_bytes / capacity if capacity > 0 else 0.0

    @property
    def stalls(self) -> tuple[TransferRecord, ...]:
        """Transfers the CPU waited for."""
        return tuple(t for t in self.transfers if t.stall_s > 0)

    def as_dict(self, *, transfers: bool = True) -> dict[str, Any]:
        """JSON-ready summary with units in the keys (``transfers=False`` drops the plan)."""
        out: dict[str, Any] = {
            "graph": self.graph_name,
            "board": self.board_name,
            "steps": self.steps,
            "violations": [v.as_dict() for v in self.violations],
            "makespan_s": self.makespan_s,
            "compute_s": self.compute_s,
            "cpu_transfer_s": self.cpu_transfer_s,
            "stall_s": self.stall_s,
            "tail_s": self.tail_s,
            "peak_ram_bytes": self.peak_ram_bytes,
            "peak_activation_bytes": self.peak_activation_bytes,
            "peak_step": self.peak_step,
            "peak_op": self.peak_op,
            "peak_action": self.peak_action,
            "peak_time_s": self.peak_time_s,
            "budget_bytes": self.budget_bytes,
            "resident_bytes": self.resident_bytes,
            "ram_limit_bytes": self.ram_limit_bytes,
            "program_peak_ram_bytes": self.program_peak_ram_bytes,
            "ram_overflow": self.ram_overflow,
            "arena_bytes": self.arena_bytes,
            "fragmentation_bytes": self.fragmentation_bytes,
            "layout_from_schedule": self.layout_from_schedule,
            "energy_j": self.energy_j,
            "energy_by_component_j": dict(self.energy_by_component_j),
            "energy_by_state_j": dict(self.energy_by_state_j),
            "energy_by_kind_j": dict(self.energy_by_kind_j),
            "residency_s": {k: dict(v) for k, v in self.residency_s.items()},
            "transitions": {k: dict(v) for k, v in self.transitions.items()},
            "wakeups": dict(self.wakeups),
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "bytes_paged_in": self.bytes_paged_in,
            "bytes_paged_out": self.bytes_paged_out,
            "peak_storage_bytes": self.peak_storage_bytes,
            "storage_capacity_bytes": self.storage_capacity_bytes,
            "bus_busy_s": self.bus_busy_s,
            "bus_bytes": self.bus_bytes,
            "bus_utilisation": self.bus_utilisation,
            "bus_bandwidth_utilisation": self.bus_bandwidth_utilisation,
            "dma_busy_s": self.dma_busy_s,
            "flash_erases": self.flash_erases,
            "flash_max_erase_count": self.flash_max_erase_count,
            "flash_sectors_used": self.flash_sectors_used,
            "flash_endurance_cycles": self.flash_endurance_cycles,
            "flash_lifetime_iterations": self.flash_lifetime_iterations,
            "storage_wear_bytes": self.storage_wear_bytes,
            "storage_lifetime_iterations": self.storage_lifetime_iterations,
            "computes": self.computes,
            "recomputes": self.recomputes,
            "page_ins": self.page_ins,
            "page_outs": self.page_outs,
            "frees": self.frees,
            "events": self.events,
            "seed": self.seed,
            "write_busy_s": self.write_busy_s,
            "prediction": self.prediction.as_dict() if self.prediction else None,
        }
        if transfers:
            out["transfers"] = [t.as_dict() for t in self.transfers]
        return out
