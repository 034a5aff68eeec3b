"""Board specifications: frozen, validated value classes for an edge board.

A :class:`Board` describes what the cost model and the simulator need to know about a
device: its CPU, RAM, DMA engine, secondary storage (SD card, eMMC or NOR flash) and the
shared bus between them. Every number is in SI units named in the field (``_hz``, ``_w``,
``_s``, ``_j``, ``_bytes``, ``_bytes_per_s``), and the board records where each number came
from (:class:`Source`).

Validation happens at construction: a field outside its range raises
:class:`BoardFieldError`, which names the field, the value and the rule. The TOML loader
(:mod:`poetsim.boards.load`) adds the file and section to that message.

Each numeric field declares, in its metadata,

* ``rule``: ``"positive"`` (> 0), ``"non_negative"`` (>= 0), ``"count"`` (integer >= 0),
  ``"positive_count"`` (integer >= 1), ``"factor"`` (>= 1) or ``"probability"`` (in [0, 1]),
* ``plausible``: a ``(low, high)`` range; a value outside it is almost always a unit slip
  (MHz written into ``clock_hz``, mW into ``_w``) and is rejected as such.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import attrs

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


# ----------------------------------------------------------------------------- fields

_INF = math.inf

#: SD Physical Layer Simplified Specification: SPI mode is 25 MHz default, 50 MHz high speed.
SD_SPI_MAX_CLOCK_HZ = 50e6


def _check_number(rule: str, plausible: tuple[float, float], unit: str):
    def validate(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        name = attribute.name
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BoardFieldError(name, value, f"must be a number in {unit}")
        if math.isnan(value) or math.isinf(value):
            raise BoardFieldError(name, value, "must be finite")
        if rule in ("count", "positive_count") and not isinstance(value, int):
            raise BoardFieldError(name, value, "must be a whole number")
        if rule == "positive_count" and value < 1:
            raise BoardFieldError(name, value, f"must be >= 1 {unit}")
        if rule == "probability" and not (0 <= value <= 1):
            raise BoardFieldError(name, value, "must be a probability in [0, 1]")
        if rule == "factor" and value < 1:
            raise BoardFieldError(name, value, "must be >= 1 (a factor, 1 = no effect)")
        if rule == "positive" and value <= 0:
            raise BoardFieldError(name, value, f"must be > 0 {unit}")
        if rule in ("non_negative", "count") and value < 0:
            raise BoardFieldError(name, value, f"must be >= 0 {unit}")
        low, high = plausible
        if value != 0 and not (low <= value <= high):
            raise BoardFieldError(
                name, value,
                f"outside the plausible range [{low:g}, {high:g}] {unit}: check the unit",
            )

    return validate


def _number(unit: str, rule: str = "positive", plausible: tuple[float, float] = (0.0, _INF),
            optional: bool = False, doc: str = ""):
    """A numeric field with its unit, range rule and plausible range in metadata."""
    check = _check_number(rule, plausible, unit)
    meta = {"unit": unit, "rule": rule, "plausible": plausible, "doc": doc, "optional": optional}
    convert = _whole if rule in ("count", "positive_count") else None
    if optional:
        return attrs.field(default=None, validator=attrs.validators.optional(check),
                           converter=convert, metadata=meta)
    return attrs.field(validator=check, converter=convert, metadata=meta)


def _whole(value: Any) -> Any:
    """``4096.0`` -> ``4096``; anything else is left for the validator to judge."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _typed(kind: type, what: str):
    """A plain (unsourced) field of type ``kind``, with a BoardFieldError on mismatch."""
    def validate(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, kind) or (kind is str and not value.strip()):
            raise BoardFieldError(attribute.name, value, f"must be {what}")
    return attrs.field(validator=validate)


def numeric_fields(cls: type) -> list[attrs.Attribute]:
    """The numeric (sourced) fields of a spec class, in declaration order."""
    return [f for f in attrs.fields(cls) if "unit" in f.metadata]


def subsection_fields(cls: type) -> list[attrs.Attribute]:
    """The optional sub-tables of a spec class (``storage.write_busy``), in declaration
    order; each field's ``metadata["section"]`` is the spec class of the sub-table."""
    return [f for f in attrs.fields(cls) if "section" in f.metadata]


_POWER = (1e-9, 500.0)       # from nanowatts to a large SBC
_DEVICE_POWER = (1e-9, 20.0)  # a storage device or DMA engine, never tens of watts
_LATENCY = (1e-9, 10.0)
_THROUGHPUT = (1e2, 1e11)
_BYTES = (1, 1e13)


def _enum_converter(enum_cls: type[enum.Enum], name: str):
    def convert(value: Any) -> enum.Enum:
        if isinstance(value, enum_cls):
            return value
        try:
            return enum_cls(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in enum_cls)
            raise BoardFieldError(name, value, f"must be one of {allowed}") from None
    return convert


def _choice(enum_cls: type[enum.Enum], name: str):
    return attrs.field(converter=_enum_converter(enum_cls, name), metadata={"choice": enum_cls})


# ----------------------------------------------------------------------------- sections

#: The op classes whose compute rate a board may give apart (``[cpu.efficiency]``) and
#: the compute widths; :data:`poetsim.costs.OP_CLASSES` says which kinds are in each.
EFFICIENCY_CLASSES = ("conv", "depthwise", "dense", "elementwise", "norm", "pool")
EFFICIENCY_WIDTHS = ("int8", "fp16", "fp32")

#: ``[cpu.efficiency]``: per op class and compute width (``depthwise_int8``), the factor
#: the width's rate (``int8_ops_per_s``, ``fp16_flops_per_s``, ``flops_per_s``) runs at
#: for that class; absent: 1 (the one figure). Fitted by ``poetsim boards calibrate``.
CpuEfficiency = attrs.make_class("CpuEfficiency", {
    f"{op_class}_{width}": _number(
        "x", plausible=(1e-3, 100.0), optional=True,
        doc=f"{op_class} ops at {width}: this times the width's rate")
    for op_class in EFFICIENCY_CLASSES for width in EFFICIENCY_WIDTHS},
    frozen=True, slots=True)


@attrs.frozen
class Cpu:
    """The processor that runs the training ops."""

    core: str = _typed(str, "a non-empty string")
    clock_hz: float = _number("Hz", plausible=(1e4, 1e10))
    flops_per_s: float = _number("FLOP/s", plausible=(1e3, 1e15),
                                 doc="effective fp32 throughput on training kernels")
    active_power_w: float = _number("W", "non_negative", _POWER,
                                    doc="board power while computing")
    idle_power_w: float = _number("W", "non_negative", _POWER,
                                  doc="board power while awake and waiting")
    sleep_power_w: float = _number("W", "non_negative", _POWER)
    wakeup_latency_s: float = _number("s", "non_negative", _LATENCY, doc="sleep to active")
    wakeup_energy_j: float = _number("J", "non_negative", (1e-12, 100.0))
    flops_per_j: float | None = _number(
        "FLOP/J", plausible=(1e3, 1e14), optional=True,
        doc="compute energy as FLOP / flops_per_j (POET's FLOPS_PER_WATT); profile 'paper' "
            "only (required there); physical boards use active_power_w x time",
    )
    int8_ops_per_s: float | None = _number(
        "op/s", plausible=(1e3, 1e16), optional=True,
        doc="effective throughput of int8 ops (a MAC counts as 2 ops), used for ops whose "
            "tensors are all 1 byte wide; absent: flops_per_s stands in (an estimate)",
    )
    fp16_flops_per_s: float | None = _number(
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

    bytes: int = _number("B", "count", _BYTES)
    reserved_bytes: int = _number("B", "count", _BYTES,
                                  doc="firmware, stack, OS: not available to training")
    bandwidth_bytes_per_s: float = _number("B/s", plausible=_THROUGHPUT,
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

    bytes: int = _number("B", "count", _BYTES)
    reserved_bytes: int = _number("B", "count", _BYTES,
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

    channels: int = _number("channels", "count", (0, 64))
    active_power_w: float = _number("W", "non_negative", _DEVICE_POWER,
                                    doc="extra power while a transfer runs")
    idle_power_w: float = _number("W", "non_negative", _DEVICE_POWER)

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

    median_s: float = _number("s", plausible=(1e-7, 10.0),
                              doc="median extra busy time of one write command")
    p99_s: float = _number("s", plausible=(1e-7, 10.0),
                           doc="99th percentile of the log-normal body (>= median_s)")
    block_stall_probability: float = _number(
        "probability", "probability", (0.0, 1.0),
        doc="chance that writing one block triggers a long stall (a command of k blocks "
            "stalls with 1 - (1 - p)^k)")
    stall_min_s: float | None = _number("s", plausible=(1e-6, 10.0), optional=True,
                                        doc="shortest stall (required when "
                                            "block_stall_probability > 0)")
    stall_max_s: float | None = _number("s", plausible=(1e-6, 10.0), optional=True,
                                        doc="longest stall (>= stall_min_s)")
    power_w: float | None = _number("W", "non_negative", _DEVICE_POWER, optional=True,
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

    kind: StorageKind = _choice(StorageKind, "kind")
    bus_clock_hz: float = _number("Hz", plausible=(1e4, 1e10))
    bus_width_bits: int = _number("bits", "count", (1, 64))
    double_data_rate: bool = _typed(bool, "true or false")
    read_throughput_bytes_per_s: float = _number("B/s", plausible=_THROUGHPUT,
                                                 doc="sustained multi-block read")
    write_throughput_bytes_per_s: float = _number("B/s", plausible=_THROUGHPUT,
                                                  doc="sustained multi-block write")
    read_latency_s: float = _number("s", "non_negative", _LATENCY, doc="per read command")
    write_latency_s: float = _number("s", "non_negative", _LATENCY, doc="per write command")
    block_bytes: int = _number("B", "count", (1, 1 << 26), doc="transfers round up to blocks")
    max_command_bytes: int = _number("B", "count", _BYTES,
                                     doc="largest transfer one command moves")
    read_power_w: float = _number("W", "non_negative", _DEVICE_POWER)
    write_power_w: float = _number("W", "non_negative", _DEVICE_POWER)
    idle_power_w: float = _number("W", "non_negative", _DEVICE_POWER)
    sleep_power_w: float = _number("W", "non_negative", _DEVICE_POWER)
    wakeup_latency_s: float = _number("s", "non_negative", _LATENCY, doc="sleep to ready")
    wakeup_energy_j: float = _number("J", "non_negative", (1e-12, 100.0))
    auto_sleep_timeout_s: float = _number("s", "non_negative", (1e-9, 3600.0),
                                          doc="idle time after which the device sleeps")
    capacity_bytes: int = _number("B", "count", _BYTES)
    erase_sector_bytes: int | None = _number("B", "count", (1, 1 << 26), optional=True,
                                             doc="NOR only: erase granularity")
    erase_time_s: float | None = _number("s", "non_negative", _LATENCY, optional=True,
                                         doc="NOR only: time to erase one sector")
    erase_power_w: float | None = _number("W", "non_negative", _DEVICE_POWER, optional=True)
    endurance_cycles: int | None = _number("cycles", "count", (1, 1e12), optional=True,
                                           doc="NOR only: erase cycles per sector")
    endurance_bytes_written: int | None = _number(
        "B", "count", (1e6, 1e18), optional=True,
        doc="wear-levelled kinds only (SD, eMMC): rated total bytes written (TBW) over the "
            "device's life; the simulator's storage_lifetime_iterations divide it by the bytes "
            "worn per iteration")
    wear_page_bytes: int | None = _number(
        "B", "count", (1, 1 << 26), optional=True,
        doc="wear-levelled kinds only (SD, eMMC): NAND program unit; every write command "
            "wears a whole number of these (absent: block_bytes)")
    queue_depth: int | None = _number("commands", "positive_count", (1, 1024), optional=True,
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
        if self.max_command_bytes < self.block_bytes:
            raise BoardFieldError("max_command_bytes", self.max_command_bytes,
                                  f"must be at least block_bytes = {self.block_bytes}")
        if self.capacity_bytes < self.block_bytes:
            raise BoardFieldError("capacity_bytes", self.capacity_bytes,
                                  f"must be at least block_bytes = {self.block_bytes}")
        if self.sleep_power_w > self.idle_power_w:
            raise BoardFieldError("sleep_power_w", self.sleep_power_w,
                                  f"must not exceed idle_power_w = {self.idle_power_w!r}")
        erase = ("erase_sector_bytes", "erase_time_s", "erase_power_w", "endurance_cycles")
        for name in erase:
            value = getattr(self, name)
            if self.kind is StorageKind.QSPI_NOR and value is None:
                raise BoardFieldError(name, None, "is required for kind 'qspi_nor'")
            if self.kind is not StorageKind.QSPI_NOR and value is not None:
                raise BoardFieldError(name, value,
                                      f"applies only to kind 'qspi_nor', not {self.kind.value!r}")
        for name in ("endurance_bytes_written", "wear_page_bytes"):
            value = getattr(self, name)
            if value is None:
                continue
            if self.kind is StorageKind.QSPI_NOR:
                raise BoardFieldError(name, value,
                                      "applies only to the wear-levelled kinds 'sd_spi', "
                                      "'sd_4bit' and 'emmc', not 'qspi_nor' (NOR flash wear is "
                                      "endurance_cycles per erase sector)")
            if value == 0:
                raise BoardFieldError(name, 0, "must be > 0")
        if self.wear_page_bytes is not None and self.wear_page_bytes % self.block_bytes:
            raise BoardFieldError("wear_page_bytes", self.wear_page_bytes,
                                  f"must be a multiple of block_bytes = {self.block_bytes}")
        if self.erase_sector_bytes is not None and self.erase_sector_bytes % self.block_bytes:
            raise BoardFieldError("erase_sector_bytes", self.erase_sector_bytes,
                                  f"must be a multiple of block_bytes = {self.block_bytes}")

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

    bandwidth_bytes_per_s: float = _number("B/s", plausible=_THROUGHPUT)
    contention_model: ContentionModel = _choice(ContentionModel, "contention_model")
    compute_slowdown: float = _number("x", "factor", plausible=(1.0, 100.0),
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

    name: str = _typed(str, "a non-empty string")
    title: str = _typed(str, "a non-empty string")
    profile: Profile = _choice(Profile, "profile")
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
