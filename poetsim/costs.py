"""The cost model: (training graph, board) -> time and energy of every op and transfer.

This module is the only place where cost formulas live. The optimizer, the baselines and
the simulator all read :class:`OpCosts`.

Physical boards (``profile = "physical"``)
-------------------------------------------
Compute, op ``k``::

    time_s   = max(flops_k / cpu.flops_per_s,  moved_bytes_k / ram.bandwidth_bytes_per_s)
    energy_j = time_s * cpu.active_power_w

a roofline: ``moved_bytes_k`` is what the op reads and writes (its inputs, its output and
its parameters; a backward op also reads the weights and writes the gradients of the
trained ones, at the gradient width; a backward op that applies the update in place,
``Op.inplace_update``, also reads and writes its trained weights once more, the SGD step;
the separate optimizer step of a graph without in-place updates is no op and not priced),
so memory-bound ops (ReLU, add, batch norm) are not priced as if they were compute-bound.

Precision (:mod:`poetsim.graph.precision`): ``cpu.flops_per_s`` above is the throughput
at the op's compute width (the widest tensor it reads): an int8 op (width 1) runs at
``cpu.int8_ops_per_s``, an fp16 op (width 2) at ``cpu.fp16_flops_per_s``, an fp32 one at
``cpu.flops_per_s``. A board without the figure for a width falls back to
``flops_per_s`` (:func:`compute_rate` says so, and the cost summary marks the compute
time as an estimate). A board's optional ``[cpu.efficiency]`` scales that rate per op
class and width (``depthwise_int8 = 0.6``: depthwise convolutions run at 60% of the int8
rate; :data:`OP_CLASSES`), as measured kernels differ by op kind.
Paper-profile boards keep POET's formulas and fp32 figures.
The data input op reads the batch from storage, so its "compute" is a page-in; with DMA
the CPU waits for it, awake, at ``cpu.idle_power_w`` (without DMA it moves the bytes
itself, which the page-in's mover power already prices).
With weights on storage (:class:`~poetsim.graph.streaming.WeightsOnStorage`, read from
the graph's metadata), every op that reads them also reads them from storage each time it
runs, priced like that input, one transfer per slice (the stream holds two slices, so
each slice is its own command, block-rounded: :func:`~poetsim.graph.streaming.stream_commands`);
an in-place update of weights on storage writes them back slice by slice, page-outs of
those slices added too (``writeback_bytes``). Without DMA the CPU moves every slice
itself, between its computing. With DMA the stream is double-buffered: over ``N`` slices
(the larger of the read and write counts), with ``c``, ``r`` and ``w`` the op's compute,
reads and writes per slice, while slice ``i`` is computed in one of the op's two slice
buffers the other is written back (slice ``i - 1``) and refilled (slice ``i + 1``), so the
two buffers of its workspace (:data:`~poetsim.graph.streaming.STREAM_BUFFERS`) suffice;
counting the first and last slices as full steps, a little over the exact pipeline::

    time_s   = r + c + w + (N - 1) * max(c, r + w)
    energy_j = compute energy + transfers' energy + cpu.idle_power_w * (time_s - N c)
               - storage.sleep_power_w * (transfers + wake-ups) - dma.idle_power_w * transfers

(the CPU stalls, awake, for what the stream does not hide; the waiting power's rest,
below, runs through the whole run, so the time the card reads, writes or wakes and the
DMA moves, which draw their own power instead, takes it out again, as a page transfer's
busy time does). Of that energy, the storage device's share (its reads, writes, wake-ups
and awake time, less its rest) is ``storage_energy_j`` and, with DMA, the engine's share
of moving the slices ``dma_energy_j`` (less its rest; ``held_*`` for a run on held
weights), so that the simulator books each part on the component that spends it.
The storage between those commands is priced inside the op too: when it idles longer than
``auto_sleep_timeout_s`` between two commands (the op's computing between them without
DMA, what the computing does not cover of a slice with it) it falls asleep and each
command wakes it (``wakeup_j``, ``wakeup_s`` of latency with the CPU idle, and the awake
tail), else it wakes once and stays awake between them (``awake_w`` over the gaps, one
tail).

Page-out (write) of a tensor of ``b`` bytes, and page-in (read) symmetrically::

    rounded_bytes = ceil(b / block_bytes) * block_bytes
    commands      = ceil(rounded_bytes / max_command_bytes)
    time_s        = commands * write_latency_s + rounded_bytes / write_throughput_bytes_per_s
    energy_j      = time_s * (write_power_w + mover_power_w)

where ``mover_power_w`` is ``dma.active_power_w`` on a board with DMA and
``cpu.active_power_w`` on one without (the CPU then moves every byte itself). On NOR flash
a page-out first erases the sectors it covers (no pre-erased pool is assumed)::

    sectors   = ceil(rounded_bytes / erase_sector_bytes)
    time_s   += sectors * erase_time_s
    energy_j += sectors * erase_time_s * erase_power_w

A tensor of 0 bytes costs nothing to move.

A MOVE step (compaction, :mod:`poetsim.schedule.ops`) copies a tensor of ``b`` bytes
within RAM, reading and writing each byte once at the RAM's bandwidth, on the DMA engine
when the board has one (a memory-to-memory transfer, which does not touch the storage or
its bus; the CPU waits for it, awake, at its idle power: the time-proportional power
below) and on the CPU otherwise (:func:`move_cost`)::

    time_s   = 2 * b / ram.bandwidth_bytes_per_s
    energy_j = time_s * mover_power_w

Time-proportional power (:class:`WaitPower`)
--------------------------------------------
The board also draws power while it waits, in proportion to the time it waits, not to any
op. Over a run of ``makespan_s`` in which the CPU computes (or, without DMA, moves bytes)
for ``cpu_busy_s`` and the storage reads and writes for ``storage_busy_s``::

    wait_energy_j = cpu_wait_w * (makespan_s - cpu_busy_s)
                  + rest_w     * (makespan_s - storage_busy_s - wakeups * wakeup_s)
                  + wakeups * (wakeup_j + awake_w * awake_s)

``cpu_wait_w`` is the CPU's idle power (awake, waiting for a transfer: on the MCUs the clock
tree that the DMA needs keeps running); ``rest_w`` is the DMA's idle power plus the
storage's sleep power; every time the storage wakes (it starts asleep, and falls asleep
after ``auto_sleep_timeout_s`` without a command) it costs ``wakeup_j`` and ``wakeup_s``
of latency, and stays awake, at ``awake_w = idle - sleep`` more, for ``awake_s`` (the
timeout) after its last command. The timelines that give ``makespan_s`` and the wake-ups
are the stage model's (:func:`poetsim.optimizer.plan.evaluate_plan`) and the op list's
(:func:`poetsim.baselines.base.predict`); the simulator integrates the same powers over
its own timeline. Paper-profile boards have all these powers at 0, as POET.

Paper-profile boards (``profile = "paper"``)
--------------------------------------------
POET's published formulas (``poet/power_computation.py``), exactly::

    compute time_s   = flops / cpu.flops_per_s
    compute energy_j = flops / cpu.flops_per_j
    page time_s      = latency_s + bytes / throughput_bytes_per_s     (once per tensor)
    page energy_j    = page time_s * storage power (MEMORY_POWER)

Measured costs
--------------
Any cost an op carries in ``op.measured`` (from a profiled graph file) replaces the
analytic value of that cost alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import attrs
import numpy as np

from poetsim.boards.spec import Board, Profile, Storage, StorageKind
from poetsim.clock import Ticker, stop_at
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import compute_widths, precision_of, rescale_bytes
from poetsim.graph.streaming import (
    WeightsOnStorage,
    held_bytes,
    hold_owners,
    stream_commands,
    weight_steps,
)

__all__ = ["RATE_FIELDS", "ComputeRate", "OpCosts", "Transfer", "TransferPhases", "WaitPower",
           "compute_rate", "move_cost", "op_costs", "transfer_cost", "transfer_phases",
           "wait_power"]


@attrs.frozen
class Transfer:
    """Time and energy of moving one tensor between RAM and storage."""

    time_s: float
    energy_j: float


@attrs.frozen
class TransferPhases:
    """One page-in or page-out split into the phases the formulas above price: per-command
    latency, NOR erase, and the data at the device's throughput, with the powers drawn
    (``rw_power_w`` by the storage while it reads or writes, ``mover_power_w`` by the DMA
    or the CPU that moves the bytes, ``erase_power_w`` while erasing)."""

    device_bytes: int
    command_s: float
    erase_s: float
    data_s: float
    rw_power_w: float
    mover_power_w: float
    erase_power_w: float

    @property
    def time_s(self) -> float:
        return (self.command_s + self.data_s) + self.erase_s

    @property
    def storage_energy_j(self) -> float:
        return (self.command_s + self.data_s) * self.rw_power_w + self.erase_s * self.erase_power_w

    @property
    def energy_j(self) -> float:
        return ((self.command_s + self.data_s) * (self.rw_power_w + self.mover_power_w)
                + self.erase_s * self.erase_power_w)


def transfer_phases(board: Board, nbytes: int, *, write: bool) -> TransferPhases:
    """The phases of writing (page-out) or reading (page-in) ``nbytes`` on ``board``: the
    one transfer formula, which :func:`transfer_cost` and the simulator's storage share."""
    storage = board.storage
    latency = storage.write_latency_s if write else storage.read_latency_s
    throughput = (storage.write_throughput_bytes_per_s if write
                  else storage.read_throughput_bytes_per_s)
    power = storage.write_power_w if write else storage.read_power_w
    if board.profile is Profile.PAPER:
        device_bytes = max(int(nbytes), 0)
        return TransferPhases(device_bytes, latency, 0.0, device_bytes / throughput, power,
                              0.0, 0.0)
    if nbytes <= 0:
        return TransferPhases(0, 0.0, 0.0, 0.0, power, 0.0, 0.0)
    rounded = math.ceil(nbytes / storage.block_bytes) * storage.block_bytes
    commands = math.ceil(rounded / storage.max_command_bytes)
    mover_w = board.dma.active_power_w if board.dma.present else board.cpu.active_power_w
    erase_s = erase_w = 0.0
    if write and storage.kind is StorageKind.QSPI_NOR:
        erase_s = _erase_time_s(storage, rounded)
        erase_w = storage.erase_power_w  # type: ignore[assignment]
    return TransferPhases(rounded, commands * latency, erase_s, rounded / throughput, power,
                          mover_w, erase_w)


def transfer_cost(board: Board, nbytes: int, *, write: bool) -> Transfer:
    """Cost of writing (page-out) or reading (page-in) ``nbytes`` on ``board``."""
    phases = transfer_phases(board, nbytes, write=write)
    return Transfer(phases.time_s, phases.energy_j)


def move_cost(board: Board, nbytes: int) -> Transfer:
    """Cost of a MOVE: copying ``nbytes`` within RAM (the formula in the module
    docstring), on the DMA engine when ``board`` has one, else on the CPU."""
    time_s = 2 * max(int(nbytes), 0) / board.ram.bandwidth_bytes_per_s
    mover_w = board.dma.active_power_w if board.dma.present else board.cpu.active_power_w
    return Transfer(time_s, time_s * mover_w)


def _erase_time_s(storage: Storage, rounded_bytes: int) -> float:
    sectors = math.ceil(rounded_bytes / storage.erase_sector_bytes)  # type: ignore[operator]
    return sectors * storage.erase_time_s  # type: ignore[operator]


@attrs.frozen
class WaitPower:
    """The board's time-proportional power (see the module docstring)."""

    cpu_wait_w: float = 0.0
    rest_w: float = 0.0
    wakeup_j: float = 0.0
    wakeup_s: float = 0.0
    awake_w: float = 0.0
    awake_s: float = 0.0

    @property
    def wake_j(self) -> float:
        """Energy of one wake-up of the storage and its awake tail."""
        return self.wakeup_j + self.awake_w * self.awake_s

    @property
    def prices_time(self) -> bool:
        """Whether waiting costs anything on this board."""
        return bool(self.cpu_wait_w or self.rest_w or self.wake_j or self.wakeup_s)

    def energy_j(self, *, makespan_s: float, cpu_busy_s: float, storage_busy_s: float,
                 wakeups: int) -> float:
        """The wait energy of one run (the formula in the module docstring)."""
        return (self.cpu_wait_w * (makespan_s - cpu_busy_s)
                + self.rest_w * (makespan_s - storage_busy_s - wakeups * self.wakeup_s)
                + wakeups * self.wake_j)


def wait_power(board: Board) -> WaitPower:
    """:class:`WaitPower` of ``board``, from its power states."""
    storage = board.storage
    return WaitPower(
        cpu_wait_w=board.cpu.idle_power_w,
        rest_w=(board.dma.idle_power_w if board.dma.present else 0.0) + storage.sleep_power_w,
        wakeup_j=storage.wakeup_energy_j, wakeup_s=storage.wakeup_latency_s,
        awake_w=max(storage.idle_power_w - storage.sleep_power_w, 0.0),
        awake_s=storage.auto_sleep_timeout_s)


def _readonly(values: Any, dtype: Any = np.float64) -> np.ndarray:
    array = np.array(values, dtype=dtype)
    array.flags.writeable = False
    return array


def _frozen_array(dtype: Any = np.float64):
    return attrs.field(converter=lambda v: _readonly(v, dtype),
                       eq=attrs.cmp_using(eq=np.array_equal))


@attrs.frozen
class OpCosts:
    """Per-op costs of one graph on one board, as read-only arrays indexed by op position.

    ``pagein_*`` / ``pageout_*`` are for the op's output tensor. ``measured`` marks ops
    with at least one profiled cost.
    """

    graph_name: str
    board_name: str
    compute_time_s: np.ndarray = _frozen_array()
    compute_energy_j: np.ndarray = _frozen_array()
    pagein_time_s: np.ndarray = _frozen_array()
    pagein_energy_j: np.ndarray = _frozen_array()
    pageout_time_s: np.ndarray = _frozen_array()
    pageout_energy_j: np.ndarray = _frozen_array()
    output_bytes: np.ndarray = _frozen_array(np.int64)
    workspace_bytes: np.ndarray = _frozen_array(np.int64)
    measured: np.ndarray = _frozen_array(bool)
    #: Bytes each op writes to storage every time it runs besides page-outs: weights on
    #: storage written back by their in-place update (:mod:`poetsim.graph.streaming`).
    writeback_bytes: np.ndarray = _frozen_array(np.int64)
    #: Ops that read or write weights on storage as they run (the ones a schedule brackets
    #: with weight steps, :func:`poetsim.graph.streaming.weight_steps`): they hold the
    #: storage device, so the stage model and the op-list model make them wait for the
    #: transfers before them, as the simulator does from their READ_WEIGHTS step.
    streams: np.ndarray = _frozen_array(bool)
    #: Holds (:func:`poetsim.graph.streaming.hold_owners`): for each op, the forward op
    #: whose run can load the weights it reads and keep them in RAM until it runs (-1:
    #: none), the bytes kept, and the op's run when they are kept (no read from storage;
    #: a write-back still streams). Equal to ``compute_*`` for an op without one.
    hold_owner: np.ndarray = _frozen_array(np.int64)
    held_bytes: np.ndarray = _frozen_array(np.int64)
    held_compute_time_s: np.ndarray = _frozen_array()
    held_compute_energy_j: np.ndarray = _frozen_array()
    #: Of an op's run that streams weights (reads or writes back; 0 for every other op),
    #: the storage device's energy and the DMA engine's, both inside ``compute_energy_j``
    #: (``held_*``: a run on held weights, inside ``held_compute_energy_j``).
    storage_energy_j: np.ndarray = _frozen_array()
    dma_energy_j: np.ndarray = _frozen_array()
    held_storage_energy_j: np.ndarray = _frozen_array()
    held_dma_energy_j: np.ndarray = _frozen_array()
    #: A MOVE of the op's tensor (:func:`move_cost`): a copy within RAM, on the DMA engine
    #: when the board has one (``cpu_moves`` False), else on the CPU.
    move_time_s: np.ndarray = _frozen_array()
    move_energy_j: np.ndarray = _frozen_array()
    wait: WaitPower = WaitPower()
    #: the CPU moves every byte itself (no DMA): transfers add to compute time
    cpu_moves: bool = False

    def __len__(self) -> int:
        return len(self.compute_time_s)

    @property
    def first_run_time_s(self) -> np.ndarray:
        """Each op's least time for a run: its held time where that is shorter (a hold
        serves its op's first run)."""
        return np.minimum(self.compute_time_s, self.held_compute_time_s)

    @property
    def plain_time_s(self) -> float:
        """Every op once, nothing paged, every weight hold taken where it is shorter: the
        shortest time any schedule can take."""
        return float(self.first_run_time_s.sum())

    @property
    def plain_energy_j(self) -> float:
        """Every op once, nothing paged, every weight hold taken where it is cheaper: the
        least energy any schedule can spend (the CPU never waits; the storage sleeps
        throughout)."""
        time_s = self.plain_time_s
        energy = np.minimum(self.compute_energy_j, self.held_compute_energy_j)
        return float(energy.sum()) + self.wait.energy_j(
            makespan_s=time_s, cpu_busy_s=time_s, storage_busy_s=0.0, wakeups=0)


@attrs.frozen
class ComputeRate:
    """The CPU throughput an op of one compute width runs at."""

    #: Operations per second (a multiply-accumulate counts as 2, as in FLOPs).
    ops_per_s: float
    #: The board field it comes from (``flops_per_s`` when the board gives none for the
    #: width: the fp32 figure stands in for it).
    field: str
    #: True when the board has no figure for this width and the fp32 one is used.
    fallback: bool


#: The optional CPU field giving the throughput of each narrow width.
RATE_FIELDS = {1: "int8_ops_per_s", 2: "fp16_flops_per_s"}

#: The op kinds of each class a board's ``[cpu.efficiency]`` rates apart
#: (:data:`poetsim.boards.spec.EFFICIENCY_CLASSES`); any other kind runs at its width's rate.
OP_CLASSES: dict[str, frozenset[str]] = {
    "conv": frozenset({"conv2d", "conv2d_relu", "conv2d_relu6"}),
    "depthwise": frozenset({"dwconv2d", "dwconv2d_relu", "dwconv2d_relu6"}),
    "dense": frozenset({"linear", "matmul", "embedding"}),
    "elementwise": frozenset({"relu", "relu6", "gelu", "tanh", "add", "cat", "grad_sum"}),
    "norm": frozenset({"batchnorm", "layernorm", "softmax"}),
    "pool": frozenset({"maxpool", "avgpool"}),
}
_CLASS_OF = {kind: name for name, kinds in OP_CLASSES.items() for kind in kinds}
_WIDTH_NAMES = {1: "int8", 2: "fp16", 4: "fp32"}


def op_class(kind: str) -> str | None:
    """The efficiency class of an op kind (:data:`OP_CLASSES`), or None."""
    return _CLASS_OF.get(kind)


def compute_rate(board: Board, width: int, kind: str | None = None) -> ComputeRate:
    """Throughput of ``board``'s CPU for ops of compute width ``width`` (bytes per element;
    see the module docstring), for an op of ``kind`` when its class has a factor in the
    board's ``[cpu.efficiency]``."""
    field = RATE_FIELDS.get(width)
    value = getattr(board.cpu, field) if field else None
    rate = (ComputeRate(board.cpu.flops_per_s, "flops_per_s", field is not None)
            if value is None else ComputeRate(value, field, False))  # type: ignore[arg-type]
    efficiency = board.cpu.efficiency
    name = op_class(kind) if kind is not None else None
    factor = (getattr(efficiency, f"{name}_{_WIDTH_NAMES.get(width, 'fp32')}")
              if efficiency is not None and name is not None else None)
    if factor is None:
        return rate
    return ComputeRate(rate.ops_per_s * factor, f"{rate.field} x cpu.efficiency."
                       f"{name}_{_WIDTH_NAMES.get(width, 'fp32')}", rate.fallback)


def _moved_bytes(graph: TrainingGraph, k: int) -> int:
    op = graph.ops[k]
    moved = op.output_bytes + sum(graph.ops[p].output_bytes for p in graph.predecessors(k))
    if op.forward_of is not None:
        # reads the weights, writes the gradients of the trained ones (none when frozen)
        forward = graph.op(op.forward_of)  # type: ignore[arg-type]
        precision = precision_of(graph)
        moved += forward.param_bytes + rescale_bytes(
            forward.trained_param_bytes, precision.weight_bytes, precision.gradient_bytes)
        if op.inplace_update:  # the fused SGD step reads and writes the trained weights
            moved += 2 * forward.trained_param_bytes
    return moved + op.param_bytes


class _Run(NamedTuple):
    """One run of an op: its time and energy, and of that energy the storage device's and
    the DMA engine's while it streams weights."""

    time_s: float
    energy_j: float
    storage_j: float = 0.0
    dma_j: float = 0.0


def _compute(graph: TrainingGraph, board: Board, k: int, width: int,
             on_storage: WeightsOnStorage, *, held: bool = False) -> _Run:
    op = graph.ops[k]
    cpu = board.cpu
    if board.profile is Profile.PAPER:
        return _Run(op.flops / cpu.flops_per_s, op.flops / cpu.flops_per_j)  # type: ignore[operator]
    if op.kind == "input":
        read = transfer_cost(board, op.output_bytes, write=False)
        if board.dma.present:  # the CPU waits, awake, for the batch the DMA brings in
            return _Run(read.time_s, read.energy_j + read.time_s * cpu.idle_power_w)
        return _Run(read.time_s, read.energy_j)
    time_s = max(op.flops / compute_rate(board, width, op.kind).ops_per_s,
                 _moved_bytes(graph, k) / board.ram.bandwidth_bytes_per_s)
    compute = _Run(time_s, time_s * cpu.active_power_w)
    if not on_storage:  # weights in RAM or flash: nothing streamed
        return compute
    read = 0 if held else on_storage.bytes_read(graph, k)
    moved_s, moved_j, counts = [0.0, 0.0], 0.0, [0, 0]
    storage_j = 0.0
    for nbytes, write in ((read, False), (on_storage.bytes_written(graph, k), True)):
        for size, count in stream_commands(graph, k, nbytes):
            phases = transfer_phases(board, size, write=write)
            moved_s[write] += count * phases.time_s
            moved_j += count * phases.energy_j
            storage_j += count * phases.storage_energy_j
            counts[write] += count
    commands = sum(counts)
    if not commands:
        return compute
    io_s = sum(moved_s)
    if board.dma.present:  # double-buffered (see the module docstring)
        slices = max(counts)
        per_compute, per_io = time_s / slices, io_s / slices
        streamed_s = per_compute + per_io + (slices - 1) * max(per_compute, per_io)
        stall_j = (streamed_s - time_s) * board.cpu.idle_power_w
        idle_s = slices * max(per_compute - per_io, 0.0)
    else:
        streamed_s, stall_j, idle_s = time_s + io_s, 0.0, time_s
    latency_s, wake_j = _stream_waits(board, commands, idle_s / commands)
    # with DMA the engine moves the slices; without, the CPU does (its share stays the CPU's)
    dma_j = moved_j - storage_j if board.dma.present else 0.0
    storage_j += wake_j
    # the waiting power's rest (storage asleep, DMA idle) runs through every op: take it
    # out of the shares for the time the card reads, writes or wakes and the DMA moves
    rest_j = (board.storage.sleep_power_w * (io_s + latency_s)
              + (board.dma.idle_power_w * io_s if board.dma.present else 0.0))
    storage_j -= board.storage.sleep_power_w * (io_s + latency_s)
    dma_j -= rest_j - board.storage.sleep_power_w * (io_s + latency_s)
    return _Run(streamed_s + latency_s,
                compute.energy_j + moved_j + stall_j + wake_j - rest_j
                + latency_s * wait_power(board).cpu_wait_w,
                storage_j, dma_j)


def _stream_waits(board: Board, commands: int, gap_s: float) -> tuple[float, float]:
    """What the storage adds to an op that streams ``commands`` commands ``gap_s`` of
    idling apart (see the module docstring): the wake-ups' latency (the CPU idles through
    it), and the storage's energy of wake-ups, awake time between commands and the awake
    tail."""
    wait = wait_power(board)
    if gap_s > wait.awake_s:  # the storage falls asleep between two commands
        wakes, awake_j = commands, 0.0
    else:  # it stays awake between them
        wakes, awake_j = 1, (commands - 1) * wait.awake_w * gap_s
    return wakes * wait.wakeup_s, wakes * wait.wake_j + awake_j


def op_costs(graph: TrainingGraph, board: Board) -> OpCosts:
    """Costs of every op of ``graph`` on ``board`` (see the module docstring)."""
    columns: dict[str, list[float]] = {name: [] for name in (
        "compute_time_s", "compute_energy_j", "pagein_time_s", "pagein_energy_j",
        "pageout_time_s", "pageout_energy_j")}
    widths = compute_widths(graph)
    on_storage = WeightsOnStorage.of(graph)
    owners = hold_owners(graph)
    held_time, held_energy = [], []
    shares: dict[str, list[float]] = {name: [] for name in _SHARES}
    # a long graph has few distinct tensor sizes: each one's transfers are priced once
    pageins = _Priced(lambda nbytes: transfer_cost(board, nbytes, write=False))
    pageouts = _Priced(lambda nbytes: transfer_cost(board, nbytes, write=True))
    moves = _Priced(lambda nbytes: move_cost(board, nbytes))
    ticker = Ticker(stop_at(), every=256)
    for k, op in enumerate(graph.ops):
        ticker.tick()
        compute = _compute(graph, board, k, widths[k], on_storage)
        held = (_compute(graph, board, k, widths[k], on_storage, held=True)
                if owners[k] >= 0 else compute)
        held_time.append(held.time_s)
        held_energy.append(held.energy_j)
        measured = not op.measured.empty  # a measured run's split is unknown: all the CPU's
        for name, value in zip(_SHARES, (*compute[2:], *held[2:])):
            shares[name].append(0.0 if measured else value)
        pagein, pageout = pageins[op.output_bytes], pageouts[op.output_bytes]
        analytic = {
            "compute_time_s": compute.time_s, "compute_energy_j": compute.energy_j,
            "pagein_time_s": pagein.time_s, "pagein_energy_j": pagein.energy_j,
            "pageout_time_s": pageout.time_s, "pageout_energy_j": pageout.energy_j,
        }
        analytic.update(op.measured.as_dict())
        for name, value in analytic.items():
            columns[name].append(value)
    return OpCosts(
        graph_name=graph.name,
        board_name=board.name,
        output_bytes=[op.output_bytes for op in graph.ops],
        workspace_bytes=[op.workspace_bytes for op in graph.ops],
        measured=[not op.measured.empty for op in graph.ops],
        writeback_bytes=[on_storage.bytes_written(graph, k) for k in range(len(graph))],
        streams=[read or written for read, written in zip(*weight_steps(graph))],
        hold_owner=owners,
        held_bytes=held_bytes(graph, owners),
        held_compute_time_s=held_time, held_compute_energy_j=held_energy,
        move_time_s=[moves[op.output_bytes].time_s for op in graph.ops],
        move_energy_j=[moves[op.output_bytes].energy_j for op in graph.ops],
        wait=wait_power(board), cpu_moves=not board.dma.present,
        **columns, **shares,
    )


class _Priced(dict):
    """A transfer's cost by its size in bytes, priced the first time it is asked for."""

    def __init__(self, price: Callable[[int], Transfer]) -> None:
        super().__init__()
        self.price = price

    def __missing__(self, nbytes: int) -> Transfer:
        cost = self[nbytes] = self.price(nbytes)
        return cost


#: The columns of a streamed run's split, in :class:`_Run`'s order, the run then the held run.
_SHARES = ("storage_energy_j", "dma_energy_j", "held_storage_energy_j", "held_dma_energy_j")
