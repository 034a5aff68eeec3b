"""Board specifications: frozen, validated value classes for an edge board.

A :class:`Board` describes what the cost model and the simulator need to know about a
device: its CPU, RAM, DMA engine, secondary storage (SD card, eMMC or NOR flash) and the
shared bus between them. Every number is in SI units named in the field (``_hz``, ``_w``,
``_s``, ``_j``, ``_bytes``, ``_bytes_per_s``), and the board records where each number came
from (:class:`Source`).

Validation happens at construction: a field outside its range raises
:class:`BoardFieldError`, which names the field, the value and the rule. The TOML loader
(:mod:`poetsim.boards.load`) adds the file and section to that message.

Each numeric field declares its unit, range rule and plausible range
(:mod:`poetsim.boards.fields`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import attrs

from poetsim.boards.fields import (
    BYTES,
    DEVICE_POWER_W,
    LATENCY_S,
    POWER_W,
    SD_SPI_MAX_CLOCK_HZ,
    THROUGHPUT_BYTES_PER_S,
    choice_field,
    number_field,
    numeric_fields,
    subsection_fields,
    typed_field,
)
from poetsim.errors import BoardFieldError

__all__ = [
    "Board",
    "BoardFieldError",
    "Bus",
    "ContentionModel",
    "Cpu",
    "CpuEfficiency",
    "Dma",
    "EFFICIENCY_CLASSES",
    "EFFICIENCY_WIDTHS",
    "Flash",
    "Profile",
    "Ram",
    "Source",
    "SourceKind",
    "Storage",
    "StorageKind",
    "WriteBusy",
    "numeric_fields",
    "subsection_fields",
]


class SourceKind(enum.Enum):
    """Where a board number comes from."""

    DATASHEET = "datasheet"
    PAPER = "paper"
    MEASURED = "measured"
    ESTIMATE = "estimate"
    WHAT_IF = "what-if"


@attrs.frozen
class Source:
    """Provenance of one board number: its kind and a reference a reader can follow."""

    kind: SourceKind
    ref: str


class Profile(enum.Enum):
    """How costs are derived from the board.

    ``physical``: the full cost model (roofline compute, per-command storage latency,
    block rounding, power times time). ``paper``: POET's published formulas exactly
    (FLOP / FLOPS, FLOP / FLOPS_PER_WATT, latency + bytes / throughput once per tensor,
    times MEMORY_POWER), for like-for-like comparison with the paper.
    """

    PHYSICAL = "physical"
    PAPER = "paper"


class StorageKind(enum.Enum):
    SD_SPI = "sd_spi"
    SD_4BIT = "sd_4bit"
    EMMC = "emmc"
    QSPI_NOR = "qspi_nor"


class ContentionModel(enum.Enum):
    """How DMA traffic and compute share the bus.

    ``none``: they do not interfere. ``fair_share``: concurrent transfers split the bus
    bandwidth equally (recomputed when a transfer starts or ends) and compute runs
    ``compute_slowdown`` times slower while any DMA transfer is active.
    """

    NONE = "none"
    FAIR_SHARE = "fair_share"


# ----------------------------------------------------------------------------- sections

#: The op classes whose compute rate a board may give apart (``[cpu.efficiency]``) and
#: the compute widths; :data:`poetsim.costs.OP_CLASSES` says which kinds are in each.
EFFICIENCY_CLASSES = ("conv", "depthwise", "dense", "elementwise", "norm", "pool")
EFFICIENCY_WIDTHS = ("int8", "fp16", "fp32")

#: ``[cpu.efficiency]``: per op class and compute width (``depthwise_int8``), the factor
#: the width's rate (``int8_ops_per_s``, ``fp16_flops_per_s``, ``flops_per_s``) runs at
#: for that class; absent: 1 (the one figure). Fitted by ``poetsim boards calibrate``.
CpuEfficiency = attrs.make_class("CpuEfficiency", {
    f"{op_class}_{width}": number_field(
        "x", plausible=(1e-3, 100.0), optional=True,
        doc=f"{op_class} ops at {width}: this times the width's rate")
    for op_class in EFFICIENCY_CLASSES for width in EFFICIENCY_WIDTHS},
    frozen=True, slots=True)


@attrs.frozen
class Cpu:
    """The processor that runs the training ops."""

    core: str = typed_field(str, "a non-empty string")
    clock_hz: float = number_field("Hz", plausible=(1e4, 1e10))
    flops_per_s: float = number_field("FLOP/s", plausible=(1e3, 1e15),
                                 doc="effective fp32 throughput on training kernels")
    active_power_w: float = number_field("W", "non_negative", POWER_W,
                                    doc="board power while computing")
    idle_power_w: float = number_field("W", "non_negative", POWER_W,
                                  doc="board power while awake and waiting")
    sleep_power_w: float = number_field("W", "non_negative", POWER_W)
    wakeup_latency_s: float = number_field("s", "non_negative", LATENCY_S, doc="sleep to active")
    wakeup_energy_j: float = number_field("J", "non_negative", (1e-12, 100.0))
    flops_per_j: float | None = number_field(
        "FLOP/J", plausible=(1e3, 1e14), optional=True,
        doc="compute energy as FLOP / flops_per_j (POET's FLOPS_PER_WATT); profile 'paper' "
            "only (required there); physical boards use active_power_w x time",
    )
    int8_ops_per_s: float | None = number_field(
        "op/s", plausible=(1e3, 1e16), optional=True,
        doc="effective throughput of int8 ops (a MAC counts as 2 ops), used for ops whose "
            "tensors are all 1 byte wide; absent: flops_per_s stands in (an estimate)",
    )
    fp16_flops_per_s: float | None = number_field(
        "FLOP/s", plausible=(1e3, 1e16), optional=True,
        doc="effective fp16 throughput, used for ops whose widest tensor is 2 bytes; "
            "absent: flops_per_s stands in (an estimate)",
    )
    efficiency: Any = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(CpuEfficiency)),
        metadata={"section": CpuEfficiency,
                  "doc": "optional [cpu.efficiency] table: per op class and width, the "
                         "factor its rate is of the width's (absent: 1)"})

    def __attrs_post_init__(self) -> None:
        if self.idle_power_w > self.active_power_w:
            raise BoardFieldError("idle_power_w", self.idle_power_w,
                                  f"must not exceed active_power_w = {self.active_power_w!r}")
        if self.sleep_power_w > self.idle_power_w:
            raise BoardFieldError("sleep_power_w", self.sleep_power_w,
                                  f"must not exceed idle_power_w = {self.idle_power_w!r}")


def _check_reserved(total_bytes: int, reserved_bytes: int) -> None:
    """A memory of ``total_bytes`` with ``reserved_bytes`` of it not for training."""
    if total_bytes == 0:
        raise BoardFieldError("bytes", total_bytes, "must be > 0 B")
    if reserved_bytes >= total_bytes:
        raise BoardFieldError("reserved_bytes", reserved_bytes,
                              f"must be below bytes = {total_bytes}")


@attrs.frozen
class Ram:
    """On-chip (or on-board) RAM that holds activations, buffers and parameters."""

    bytes: int = number_field("B", "count", BYTES)
    reserved_bytes: int = number_field("B", "count", BYTES,
                                  doc="firmware, stack, OS: not available to training")
    bandwidth_bytes_per_s: float = number_field("B/s", plausible=THROUGHPUT_BYTES_PER_S,
                                           doc="CPU to RAM, the roofline of memory-bound ops")

    def __attrs_post_init__(self) -> None:
        _check_reserved(self.bytes, self.reserved_bytes)

    @property
    def usable_bytes(self) -> int:
        """RAM left for training after the reserved part."""
        return self.bytes - self.reserved_bytes


@attrs.frozen
class Flash:
    """Memory-mapped flash the CPU reads in place: internal program flash, or QSPI/XIP
    flash behind a cache.

    Frozen weights can stay here and be read in place, as real MCU training does (Lin et
    al., NeurIPS 2022: "frozen int8 weights stay in flash and are read in place"), so they
    take no RAM (:func:`poetsim.request.resolve_request` decides it). Reading in place costs
    no extra time in poetsim's model: the boards' compute figures are for code running from
    flash (CoreMark from flash), wait states and cache included.
    """

    bytes: int = number_field("B", "count", BYTES)
    reserved_bytes: int = number_field("B", "count", BYTES,
                                  doc="the firmware image: not available to weights")

    def __attrs_post_init__(self) -> None:
        _check_reserved(self.bytes, self.reserved_bytes)

    @property
    def usable_bytes(self) -> int:
        """Flash left for frozen weights after the firmware image."""
        return self.bytes - self.reserved_bytes


@attrs.frozen
class Dma:
    """DMA engine. ``channels = 0`` means none: the CPU moves every byte itself."""

    channels: int = number_field("channels", "count", (0, 64))
    active_power_w: float = number_field("W", "non_negative", DEVICE_POWER_W,
                                    doc="extra power while a transfer runs")
    idle_power_w: float = number_field("W", "non_negative", DEVICE_POWER_W)

    @property
    def present(self) -> bool:
        return self.channels > 0


#: The standard normal's 99th percentile, z with Phi(z) = 0.99.
Z_99 = 2.3263478740408408


@attrs.frozen
class WriteBusy:
    """Variable write-busy time of the storage device: the extra busy time of one write
    command beyond the nominal ``write_latency_s``.

    After a write command's data the card holds its busy signal while it programs flash;
    how long varies from command to command and has a heavy tail (SD Physical Layer
    Simplified Spec 4.6.2: up to 250 ms on SDHC/SDXC; garbage collection inside the card
    causes the rare long ones). The nominal cost model, the optimizer and the unseeded
    simulation use ``write_latency_s`` alone; a seeded simulation
    (:mod:`poetsim.sim.storage`) draws, independently for every write command of ``k``
    blocks (``block_bytes`` each),

    ``extra = body + stall`` where
    ``body ~ LogNormal(ln median_s, sigma)``, ``sigma = ln(p99_s / median_s) / z_0.99``
    (``median_s == p99_s``: the constant ``median_s``), and
    ``stall ~ Uniform(stall_min_s, stall_max_s)`` with probability
    ``1 - (1 - block_stall_probability) ** k`` (:meth:`stall_chance`), else 0.

    While busy the device draws ``power_w`` (absent: ``write_power_w``) and keeps its
    command slot (queue depth); the mover (DMA channel, or the CPU) keeps polling for the
    end of busy at the transfer's mover power.
    """

    median_s: float = number_field("s", plausible=(1e-7, 10.0),
                              doc="median extra busy time of one write command")
    p99_s: float = number_field("s", plausible=(1e-7, 10.0),
                           doc="99th percentile of the log-normal body (>= median_s)")
    block_stall_probability: float = number_field(
        "probability", "probability", (0.0, 1.0),
        doc="chance that writing one block triggers a long stall (a command of k blocks "
            "stalls with 1 - (1 - p)^k)")
    stall_min_s: float | None = number_field("s", plausible=(1e-6, 10.0), optional=True,
                                        doc="shortest stall (required when "
                                            "block_stall_probability > 0)")
    stall_max_s: float | None = number_field("s", plausible=(1e-6, 10.0), optional=True,
                                        doc="longest stall (>= stall_min_s)")
    power_w: float | None = number_field("W", "non_negative", DEVICE_POWER_W, optional=True,
                                    doc="storage power while busy (absent: write_power_w)")

    def __attrs_post_init__(self) -> None:
        if self.p99_s < self.median_s:
            raise BoardFieldError("p99_s", self.p99_s,
                                  f"must be at least median_s = {self.median_s!r}")
        for name in ("stall_min_s", "stall_max_s"):
            if self.block_stall_probability > 0 and getattr(self, name) is None:
                raise BoardFieldError(name, None,
                                      "is required when block_stall_probability > 0")
        if (self.stall_min_s is not None and self.stall_max_s is not None
                and self.stall_max_s < self.stall_min_s):
            raise BoardFieldError("stall_max_s", self.stall_max_s,
                                  f"must be at least stall_min_s = {self.stall_min_s!r}")
        if (self.stall_min_s is None) != (self.stall_max_s is None):
            missing = "stall_max_s" if self.stall_max_s is None else "stall_min_s"
            raise BoardFieldError(missing, None, "stall_min_s and stall_max_s go together")

    @property
    def sigma(self) -> float:
        """The log-normal body's shape parameter (0: a constant body)."""
        return math.log(self.p99_s / self.median_s) / Z_99

    def stall_chance(self, blocks: int) -> float:
        """Probability that a write command of ``blocks`` blocks stalls."""
        return 1.0 - (1.0 - self.block_stall_probability) ** max(int(blocks), 0)

    def mean_s(self, blocks: int) -> float:
        """Expected extra busy time of one write command of ``blocks`` blocks."""
        stall = 0.0
        if self.stall_min_s is not None and self.stall_max_s is not None:
            stall = self.stall_chance(blocks) * (self.stall_min_s + self.stall_max_s) / 2
        return self.median_s * math.exp(self.sigma ** 2 / 2) + stall


@attrs.frozen
class Storage:
    """Secondary storage that activations are paged to."""

    kind: StorageKind = choice_field(StorageKind, "kind")
    bus_clock_hz: float = number_field("Hz", plausible=(1e4, 1e10))
    bus_width_bits: int = number_field("bits", "count", (1, 64))
    double_data_rate: bool = typed_field(bool, "true or false")
    read_throughput_bytes_per_s: float = number_field("B/s", plausible=THROUGHPUT_BYTES_PER_S,
                                                 doc="sustained multi-block read")
    write_throughput_bytes_per_s: float = number_field("B/s", plausible=THROUGHPUT_BYTES_PER_S,
                                                  doc="sustained multi-block write")
    read_latency_s: float = number_field("s", "non_negative", LATENCY_S, doc="per read command")
    write_latency_s: float = number_field("s", "non_negative", LATENCY_S, doc="per write command")
    block_bytes: int = number_field("B", "count", (1, 1 << 26), doc="transfers round up to blocks")
    max_command_bytes: int = number_field("B", "count", BYTES,
                                     doc="largest transfer one command moves")
    read_power_w: float = number_field("W", "non_negative", DEVICE_POWER_W)
    write_power_w: float = number_field("W", "non_negative", DEVICE_POWER_W)
    idle_power_w: float = number_field("W", "non_negative", DEVICE_POWER_W)
    sleep_power_w: float = number_field("W", "non_negative", DEVICE_POWER_W)
    wakeup_latency_s: float = number_field("s", "non_negative", LATENCY_S, doc="sleep to ready")
    wakeup_energy_j: float = number_field("J", "non_negative", (1e-12, 100.0))
    auto_sleep_timeout_s: float = number_field("s", "non_negative", (1e-9, 3600.0),
                                          doc="idle time after which the device sleeps")
    capacity_bytes: int = number_field("B", "count", BYTES)
    erase_sector_bytes: int | None = number_field("B", "count", (1, 1 << 26), optional=True,
                                             doc="NOR only: erase granularity")
    erase_time_s: float | None = number_field("s", "non_negative", LATENCY_S, optional=True,
                                         doc="NOR only: time to erase one sector")
    erase_power_w: float | None = number_field("W", "non_negative", DEVICE_POWER_W, optional=True)
    endurance_cycles: int | None = number_field("cycles", "count", (1, 1e12), optional=True,
                                           doc="NOR only: erase cycles per sector")
    endurance_bytes_written: int | None = number_field(
        "B", "count", (1e6, 1e18), optional=True,
        doc="wear-levelled kinds only (SD, eMMC): rated total bytes written (TBW) over the "
            "device's life; the simulator's storage_lifetime_iterations divide it by the bytes "
            "worn per iteration")
    wear_page_bytes: int | None = number_field(
        "B", "count", (1, 1 << 26), optional=True,
        doc="wear-levelled kinds only (SD, eMMC): NAND program unit; every write command "
            "wears a whole number of these (absent: block_bytes)")
    queue_depth: int | None = number_field("commands", "positive_count", (1, 1024), optional=True,
                                      doc="commands the device serves at once (absent: 1, "
                                          "as an SD card over SPI); more DMA channels than "
                                          "this do not add storage bandwidth")
    write_busy: WriteBusy | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(WriteBusy)),
        metadata={"section": WriteBusy,
                  "doc": "optional [storage.write_busy] table: the distribution of extra "
                         "write-busy time per command, drawn only by seeded simulations"})

    def __attrs_post_init__(self) -> None:
        for name in ("bus_width_bits", "block_bytes", "max_command_bytes", "capacity_bytes"):
            if getattr(self, name) == 0:
                raise BoardFieldError(name, 0, "must be > 0")
        self._check_wire()
        for name in ("max_command_bytes", "capacity_bytes"):
            if getattr(self, name) < self.block_bytes:
                raise BoardFieldError(name, getattr(self, name),
                                      f"must be at least block_bytes = {self.block_bytes}")
        if self.sleep_power_w > self.idle_power_w:
            raise BoardFieldError("sleep_power_w", self.sleep_power_w,
                                  f"must not exceed idle_power_w = {self.idle_power_w!r}")
        self._check_wear()
        for name in ("wear_page_bytes", "erase_sector_bytes"):
            value = getattr(self, name)
            if value is not None and value % self.block_bytes:
                raise BoardFieldError(name, value,
                                      f"must be a multiple of block_bytes = {self.block_bytes}")

    def _check_wire(self) -> None:
        """SPI's one bit per clock at its highest clock; no throughput above the wire's."""
        if self.kind is StorageKind.SD_SPI and self.bus_width_bits != 1:
            raise BoardFieldError("bus_width_bits", self.bus_width_bits,
                                  "must be 1 for kind 'sd_spi' (SPI moves one bit per clock)")
        if self.kind is StorageKind.SD_SPI and self.bus_clock_hz > SD_SPI_MAX_CLOCK_HZ:
            raise BoardFieldError("bus_clock_hz", self.bus_clock_hz,
                                  f"SD cards in SPI mode run at most {SD_SPI_MAX_CLOCK_HZ:g} Hz "
                                  "(SD Physical Layer spec, high speed)")
        wire = self.wire_bytes_per_s
        for name in ("read_throughput_bytes_per_s", "write_throughput_bytes_per_s"):
            value = getattr(self, name)
            if value > wire * (1 + 1e-9):
                raise BoardFieldError(
                    name, value,
                    f"exceeds the wire rate {wire:.6g} B/s that bus_clock_hz x bus_width_bits"
                    f"{' x 2 (DDR)' if self.double_data_rate else ''} / 8 can carry",
                )

    def _check_wear(self) -> None:
        """NOR flash wears per erase sector (its erase fields required), the wear-levelled
        kinds per byte written (theirs)."""
        nor = self.kind is StorageKind.QSPI_NOR
        for name in ("erase_sector_bytes", "erase_time_s", "erase_power_w", "endurance_cycles"):
            value = getattr(self, name)
            if nor and value is None:
                raise BoardFieldError(name, None, "is required for kind 'qspi_nor'")
            if not nor and value is not None:
                raise BoardFieldError(name, value,
                                      f"applies only to kind 'qspi_nor', not {self.kind.value!r}")
        for name in ("endurance_bytes_written", "wear_page_bytes"):
            value = getattr(self, name)
            if value is None:
                continue
            if nor:
                raise BoardFieldError(name, value,
                                      "applies only to the wear-levelled kinds 'sd_spi', "
                                      "'sd_4bit' and 'emmc', not 'qspi_nor' (NOR flash wear is "
                                      "endurance_cycles per erase sector)")
            if value == 0:
                raise BoardFieldError(name, 0, "must be > 0")

    @property
    def concurrent_commands(self) -> int:
        """How many transfers the device serves at once (``queue_depth``, default 1)."""
        return self.queue_depth or 1

    @property
    def wear_unit_bytes(self) -> int:
        """The smallest amount one write command wears: ``wear_page_bytes`` (absent:
        ``block_bytes``)."""
        return self.wear_page_bytes or self.block_bytes

    @property
    def wire_bytes_per_s(self) -> float:
        """Raw bit rate of the storage bus in bytes per second."""
        return self.bus_clock_hz * self.bus_width_bits * (2 if self.double_data_rate else 1) / 8


@attrs.frozen
class Bus:
    """The shared system bus between CPU, DMA and RAM."""

    bandwidth_bytes_per_s: float = number_field("B/s", plausible=THROUGHPUT_BYTES_PER_S)
    contention_model: ContentionModel = choice_field(ContentionModel, "contention_model")
    compute_slowdown: float = number_field("x", "factor", plausible=(1.0, 100.0),
                                      doc="compute time factor while DMA is active (>= 1)")


# ----------------------------------------------------------------------------- board

def _source_map(value: Mapping[str, Source]) -> Mapping[str, Source]:
    return dict(value)


@attrs.frozen
class Board:
    """A complete board description.

    ``sources`` maps every dotted numeric key (``"cpu.clock_hz"``) to its :class:`Source`.
    ``flash`` (optional) is memory-mapped flash that frozen weights can be read from in
    place; None: the board has none (or the file does not describe it).
    """

    name: str = typed_field(str, "a non-empty string")
    title: str = typed_field(str, "a non-empty string")
    profile: Profile = choice_field(Profile, "profile")
    cpu: Cpu = attrs.field(validator=attrs.validators.instance_of(Cpu))
    ram: Ram = attrs.field(validator=attrs.validators.instance_of(Ram))
    dma: Dma = attrs.field(validator=attrs.validators.instance_of(Dma))
    storage: Storage = attrs.field(validator=attrs.validators.instance_of(Storage))
    bus: Bus = attrs.field(validator=attrs.validators.instance_of(Bus))
    flash: Flash | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Flash)))
    sources: Mapping[str, Source] = attrs.field(factory=dict, converter=_source_map,
                                                eq=False, repr=False)
    notes: str = ""
    #: dotted numeric key -> (min, max) of the numbers given as ranges
    #: (:mod:`poetsim.boards.corners`); the field holds the typical value
    ranges: Mapping[str, tuple[float, float]] = attrs.field(factory=dict, converter=dict,
                                                            eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise BoardFieldError("name", self.name,
                                  "must be a non-empty identifier of letters, digits, '_' or '-'")
        if self.profile is Profile.PAPER and self.cpu.flops_per_j is None:
            raise BoardFieldError("cpu.flops_per_j", None, "is required for profile 'paper'")
        if self.profile is Profile.PHYSICAL and self.cpu.flops_per_j is not None:
            raise BoardFieldError("cpu.flops_per_j", self.cpu.flops_per_j,
                                  "applies only to profile 'paper' (physical boards use "
                                  "active_power_w x time)")
        for name in ("read_throughput_bytes_per_s", "write_throughput_bytes_per_s"):
            value = getattr(self.storage, name)
            if value > self.bus.bandwidth_bytes_per_s * (1 + 1e-9):
                raise BoardFieldError(
                    f"storage.{name}", value,
                    f"exceeds bus.bandwidth_bytes_per_s = {self.bus.bandwidth_bytes_per_s:.6g}",
                )

    def number(self, key: str) -> Any:
        """The value of a dotted field (``"storage.read_latency_s"``)."""
        value: Any = self
        for part in key.split("."):
            value = getattr(value, part)
        return value

    def source_of(self, key: str) -> Source | None:
        """The provenance of a dotted numeric key, or None if it was not recorded."""
        return self.sources.get(key)
