"""What a finished simulation reports: the weight streams booked on the storage device,
the violations found, the op-list model's prediction beside the simulated figures, the
timeline, and the :class:`~poetsim.sim.report.SimReport` that carries them all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poetsim.costs import transfer_phases
from poetsim.graph.streaming import WeightsOnStorage, stream_commands
from poetsim.schedule.model import predict
from poetsim.schedule.ops import Action
from poetsim.sim.dma import DONE
from poetsim.sim.jobs import transfer_record
from poetsim.sim.report import Prediction, SimReport, SimViolation
from poetsim.sim.timeline import Slice, StateSlice, Timeline

if TYPE_CHECKING:
    from poetsim.sim.engine import Simulation

__all__ = ["finished_report"]


def _book_weight_streams(sim: Simulation) -> None:
    """Book on the storage device the weights the ops streamed and wrote back (each op's
    commands worked out once, however often it runs)."""
    graph, board, storage, steps = sim.graph, sim.board, sim.storage, sim.steps
    on_storage = WeightsOnStorage.of(graph)
    device: dict[tuple[int, bool], int] = {}

    def device_bytes(size: int, write: bool) -> int:
        if (size, write) not in device:
            device[size, write] = transfer_phases(board, size, write=write).device_bytes
        return device[size, write]

    read_by_op: dict[int, int] = {}
    for i, read in enumerate(sim.replay.reads_weights):
        if read:
            k = steps[i].op
            if k not in read_by_op:
                read_by_op[k] = sum(count * device_bytes(size, False) for size, count
                                    in stream_commands(graph, k, on_storage.bytes_read(graph, k)))
            storage.read_weights(read_by_op[k])
    written_by_op: dict[int, list[tuple[int, int]]] = {}
    for i in sim.replay.write_back_positions:
        k = steps[i].op
        if k not in written_by_op:
            written = int(sim.costs.writeback_bytes[k])
            written_by_op[k] = [(device_bytes(size, True), count)
                                for size, count in stream_commands(graph, k, written)]
        for nbytes, count in written_by_op[k]:
            storage.write_back(nbytes, count)


def _violations(sim: Simulation, makespan: float) -> tuple[SimViolation, ...]:
    """What the run broke: the program's own findings, RAM overflows and a worn-out flash
    sector (deadlines are the verdict's)."""
    violations = list(sim.violations)
    for over in sim.ram.overflows:
        violations.append(SimViolation(
            "ram_overflow",
            f"step {over.step} ({over.action} {over.op!r}) at {over.time_s:.6g} s: RAM "
            f"reaches {over.ram_bytes} B, {over.excess_bytes} B over the budget of "
            f"{over.budget_bytes} B", over.step, over.op, over.time_s))
    wear = sim.storage.wear
    if wear is not None and wear.max_erase_count > wear.endurance_cycles:
        violations.append(SimViolation(
            "flash_worn_out",
            f"a flash sector was erased {wear.max_erase_count} times, over the endurance "
            f"of {wear.endurance_cycles} cycles"))
    return tuple(violations)


def _prediction(sim: Simulation, makespan: float) -> Prediction:
    """What the op-list model says of this schedule, recomputed (never a file's figure)."""
    model = predict(sim.graph, sim.costs, sim.replay)
    return Prediction(
        predicted_energy_j=model.energy_j, simulated_energy_j=sim.ledger.total_j,
        predicted_time_s=model.time_s, simulated_time_s=makespan,
        predicted_peak_ram_bytes=model.peak_ram_bytes,
        simulated_peak_ram_bytes=sim.ram.peak - sim.ram.resident_bytes)


def _timeline(sim: Simulation, machines: list) -> Timeline | None:
    """The trace's slices, power states and RAM samples, when the run recorded them."""
    if not sim.trace:
        return None
    states = []
    for m in machines:
        states.extend(StateSlice(m.component, st, a, b, p) for a, b, st, p in m.intervals)
    return Timeline(
        slices=tuple(Slice(c, n, a, b, args) for c, n, a, b, args in sim.slices or ()),
        states=tuple(sorted(states, key=lambda s: (s.start_s, s.component))),
        ram=tuple(sim.ram.samples or ()))


def _storage_fields(sim: Simulation) -> dict[str, Any]:
    """The report's storage figures: bytes moved, capacity, flash erases and wear."""
    storage, board = sim.storage, sim.board
    wear = storage.wear
    done = [job for job in sim.jobs if job.state == DONE]
    return dict(
        bytes_read=storage.bytes_read, bytes_written=storage.bytes_written,
        bytes_paged_in=sum(job.timing.nbytes for job in done if job.kind == "page_in"),
        bytes_paged_out=sum(job.timing.nbytes for job in done if job.kind == "page_out"),
        peak_storage_bytes=storage.peak_used_bytes,
        storage_capacity_bytes=board.storage.capacity_bytes,
        flash_erases=wear.erases if wear else 0,
        flash_max_erase_count=wear.max_erase_count if wear else 0,
        flash_sectors_used=wear.sectors_used if wear else 0,
        flash_endurance_cycles=wear.endurance_cycles if wear else None,
        flash_lifetime_iterations=wear.lifetime_iterations() if wear else None,
        storage_wear_bytes=storage.wear_bytes,
        storage_lifetime_iterations=storage.lifetime_iterations(),
        write_busy_s=sum(job.timing.busy_s for job in done)
        + sum(busy_s for busy_s, _ in sim.writeback_busy.values()))


def _ram_fields(sim: Simulation) -> dict[str, Any]:
    """The report's RAM figures: the peak and where, the limit, the arena."""
    ram, arena = sim.ram, sim.arena
    return dict(
        peak_ram_bytes=ram.peak, peak_step=ram.peak_step, peak_op=ram.peak_op,
        peak_action=ram.peak_action, peak_time_s=ram.peak_time_s,
        budget_bytes=ram.budget_bytes, resident_bytes=ram.resident_bytes,
        ram_limit_bytes=sim.ram_limit, program_peak_ram_bytes=sim.profile.peak_bytes,
        arena_bytes=arena.arena_bytes, fragmentation_bytes=arena.fragmentation_bytes,
        layout=arena.layout, layout_from_schedule=arena.order == "file")


def finished_report(sim: Simulation, makespan: float, machines: list, events: int,
                    wall: float, cpu: float) -> SimReport:
    """The report of ``sim``, run to its end at ``makespan``."""
    _book_weight_streams(sim)
    ledger, board, counts = sim.ledger, sim.board, sim.profile.counts
    return SimReport(
        graph_name=sim.graph.name, board_name=board.name, steps=len(sim.steps),
        violations=_violations(sim, makespan),
        makespan_s=makespan, compute_s=sim.compute_s,
        cpu_transfer_s=sim.cpu_transfer_s, stall_s=sim.stall_s, tail_s=sim.tail_s,
        **_ram_fields(sim),
        energy_j=ledger.total_j,
        energy_by_component_j=dict(sorted(ledger.by(0).items())),
        energy_by_state_j=dict(sorted(ledger.by_state().items())),
        energy_by_kind_j=dict(sorted(ledger.by(2).items())),
        residency_s={m.component: dict(sorted(m.residency.items())) for m in machines},
        transitions={m.component: {f"{a}->{b}": n for (a, b), n in sorted(m.transitions.items())}
                     for m in machines},
        wakeups={"cpu": sim.cpu.wakeups, "storage": sim.storage.wakeups},
        **_storage_fields(sim),
        bus_busy_s=sim.bus.busy_s, bus_bytes=sim.bus.bytes_moved,
        bus_bandwidth_bytes_per_s=board.bus.bandwidth_bytes_per_s,
        dma_busy_s=sim.dma.busy_s if sim.dma is not None else 0.0,
        computes=counts[Action.COMPUTE], recomputes=sim.profile.recomputes,
        page_ins=counts[Action.PAGE_IN], page_outs=counts[Action.PAGE_OUT],
        frees=counts[Action.FREE], transfers=tuple(transfer_record(job) for job in sim.jobs),
        prediction=_prediction(sim, makespan),
        events=events, timeline=_timeline(sim, machines), wall_s=wall, cpu_s=cpu,
        seed=sim.seed,
    )
