"""Board files: the built-in boards load, carry their sources, reproduce POET's constants,
and bad board documents are rejected with one-line messages that name file, key and value."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from poetsim.boards import (
    DEFAULT_BOARD,
    Board,
    ContentionModel,
    Profile,
    SourceKind,
    StorageKind,
    board_from_dict,
    board_to_dict,
    builtin_board_dir,
    builtin_board_names,
    get_board,
    load_board,
)
from poetsim.boards.load import SECTIONS
from poetsim.boards.spec import WriteBusy, numeric_fields, subsection_fields
from poetsim.errors import BoardError, UnknownNameError

# ----------------------------------------------------------------------------- helpers

EXPECTED_BOARDS = {
    "mkr1000", "nrf52840", "nrf52840_qspi_nor", "rpi4", "jetson_tx2", "esp32s3", "stm32h743",
    "stm32f746", "rp2040", "rpi5", "poet_mkr1000", "poet_nrf52840", "poet_rpi4",
    "poet_rpi4_nocache", "poet_jetson_tx2",
}
PAPER_BOARDS = sorted(n for n in EXPECTED_BOARDS if n.startswith("poet_"))


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)  # 'inf' / 'nan' are valid TOML floats
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        raise TypeError("TOML has no null")
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def dump_toml(doc: dict[str, Any]) -> str:
    """A minimal TOML writer for board documents (top-level scalars, then one table per
    section whose values are scalars or inline tables). The stdlib has no TOML writer."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"\n[{_key(name)}]")
            lines.extend(f"{_key(k)} = {_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def builtin_doc(name: str) -> dict[str, Any]:
    with open(builtin_board_dir() / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def write_doc(tmp_path: Path, doc: dict[str, Any], stem: str = "bad_board") -> Path:
    path = tmp_path / f"{stem}.toml"
    path.write_text(dump_toml(doc), encoding="utf-8")
    return path


def assert_board_error(path: Path, *fragments: str) -> str:
    """load_board(path) raises BoardError: one line, naming the path and every fragment."""
    with pytest.raises(BoardError) as info:
        load_board(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# ----------------------------------------------------------------------------- built-in boards


def test_expected_boards_are_built_in():
    names = builtin_board_names()
    assert EXPECTED_BOARDS <= set(names)
    assert names == sorted(names)
    assert DEFAULT_BOARD in names


@pytest.mark.parametrize("name", sorted(EXPECTED_BOARDS))
def test_builtin_board_loads_and_is_fully_sourced(name):
    board = get_board(name)
    path = builtin_board_dir() / f"{name}.toml"
    assert board.name == path.stem == name
    assert board == load_board(path) == get_board(str(path))
    assert board.title and board.notes
    known: set[str] = set()
    tables = [(section, cls, getattr(board, section)) for section, cls in SECTIONS.items()
              if getattr(board, section) is not None]  # [flash] is optional
    while tables:
        section, cls, spec = tables.pop()
        for sub in subsection_fields(cls):  # sub-tables such as [storage.write_busy]
            key = f"{section}.{sub.name}"
            known |= {f"{key}.{f.name}" for f in numeric_fields(sub.metadata["section"])}
            if getattr(spec, sub.name) is not None:
                tables.append((key, sub.metadata["section"], getattr(spec, sub.name)))
        for field in numeric_fields(cls):
            value = getattr(spec, field.name)
            key = f"{section}.{field.name}"
            known.add(key)
            if value is None:  # optional fields (flops_per_j, erase_*) may be absent
                assert key not in board.sources
                continue
            source = board.source_of(key)
            assert source is not None, f"{name}: {key} has no recorded source"
            assert isinstance(source.kind, SourceKind)
            assert source.ref.strip(), f"{name}: {key} has an empty ref"
            assert math.isfinite(value)
    # Nothing recorded beyond the real numeric fields.
    assert set(board.sources) <= known


@pytest.mark.parametrize("name", sorted(EXPECTED_BOARDS))
def test_builtin_board_is_physically_consistent(name):
    board = get_board(name)
    s = board.storage
    assert s.read_throughput_bytes_per_s <= s.wire_bytes_per_s
    assert s.write_throughput_bytes_per_s <= s.wire_bytes_per_s
    assert s.read_throughput_bytes_per_s <= board.bus.bandwidth_bytes_per_s
    assert board.cpu.sleep_power_w <= board.cpu.idle_power_w <= board.cpu.active_power_w
    assert s.sleep_power_w <= s.idle_power_w
    assert 0 <= board.ram.reserved_bytes < board.ram.bytes
    assert s.max_command_bytes >= s.block_bytes
    if board.profile is Profile.PHYSICAL:
        assert board.ram.reserved_bytes > 0
        assert board.bus.compute_slowdown >= 1.0
        if s.kind in (StorageKind.SD_SPI, StorageKind.SD_4BIT):
            assert s.block_bytes == 512
            assert s.auto_sleep_timeout_s == pytest.approx(5e-3)


def test_mcu_ram_sizes_use_kib():
    assert get_board("mkr1000").ram.bytes == 32 * 1024
    assert get_board("nrf52840").ram.bytes == 256 * 1024
    assert get_board("rp2040").ram.bytes == 264 * 1024
    assert get_board("esp32s3").ram.bytes == 512 * 1024
    assert get_board("stm32h743").ram.bytes == 1024 * 1024
    assert get_board("stm32f746").ram.bytes == 320 * 1024


def test_default_board_is_a_physical_nrf52840_on_spi():
    board = get_board(DEFAULT_BOARD)
    assert board.name == "nrf52840"
    assert board.profile is Profile.PHYSICAL
    assert board.cpu.flops_per_j is None  # physical: energy = power x time
    s = board.storage
    assert s.kind is StorageKind.SD_SPI and s.bus_width_bits == 1
    # Realistic SD-over-SPI, well below the wire rate and far below POET's 4.6 MB/s.
    assert s.read_throughput_bytes_per_s < 0.5 * s.wire_bytes_per_s
    assert s.write_throughput_bytes_per_s < s.read_throughput_bytes_per_s
    assert board.source_of("storage.read_throughput_bytes_per_s").kind is SourceKind.MEASURED
    assert board.bus.contention_model is ContentionModel.FAIR_SHARE


def test_nor_board_has_erase_fields_and_sd_boards_do_not():
    nor = get_board("nrf52840_qspi_nor").storage
    assert nor.kind is StorageKind.QSPI_NOR
    assert nor.erase_sector_bytes == 4096 and nor.erase_sector_bytes % nor.block_bytes == 0
    assert nor.endurance_cycles == 100_000
    assert get_board("nrf52840").storage.erase_sector_bytes is None


SD_BOARDS = ("nrf52840", "mkr1000", "rp2040", "esp32s3", "stm32h743", "stm32f746", "rpi4",
             "rpi5")


@pytest.mark.parametrize("name", SD_BOARDS)
def test_sd_boards_give_an_estimated_endurance_and_a_wear_page(name):
    """Every SD-card board carries its card's wear figures, honestly sourced: the consumer
    32 GB card publishes no TBW, so the rating is an estimate (capacity x P/E cycles)."""
    board = get_board(name)
    s = board.storage
    assert s.kind in (StorageKind.SD_SPI, StorageKind.SD_4BIT)
    assert s.endurance_bytes_written == 31_910_000_000_000  # 31.91 GB x 1,000 P/E cycles
    assert s.wear_page_bytes == 16_384 and s.wear_page_bytes % s.block_bytes == 0
    assert s.wear_unit_bytes == 16_384
    for key in ("storage.endurance_bytes_written", "storage.wear_page_bytes"):
        assert board.source_of(key).kind is SourceKind.ESTIMATE
    assert "P/E" in board.source_of("storage.endurance_bytes_written").ref


def test_wear_fields_are_optional_and_the_unit_defaults_to_the_block():
    for name in ("jetson_tx2", "poet_nrf52840", "nrf52840_qspi_nor"):
        s = get_board(name).storage
        assert s.endurance_bytes_written is None and s.wear_page_bytes is None
        assert s.wear_unit_bytes == s.block_bytes


def test_unknown_board_name():
    with pytest.raises(UnknownNameError, match="nrf52833"):
        get_board("nrf52833")


# ----------------------------------------------------------------------------- POET constants

# poet/chipsets.py @6e63098, evaluated exactly as Python evaluates it.
POET = {
    "poet_mkr1000": {
        "FLOPS_PER_WATT": 2000 / (0.012 * 0.020 * 3.3),
        "FLOPS": 2000 / 0.012,
        "PAGEIN_LATENCY": 0.109 * (10 ** (-3)),
        "PAGEIN_THROUGHPUT": 4616.51 * (10 ** (3)),
        "PAGEOUT_LATENCY": 0.113 * (10 ** (-3)),
        "PAGEOUT_THROUGHPUT": 4440 * (10 ** (3)),
        "MEMORY_POWER": 100 * (10 ** (-3)) * 3.3,
        "POWER": 20 * (10 ** (-3)) * 3.3,
    },
    "poet_nrf52840": {
        "FLOPS_PER_WATT": (16283 * 100 * 1000) / (255.6237 * 0.003328 * 3.3),
        "FLOPS": (16283 * 100 * 1000) / (255.6237),
        "PAGEIN_LATENCY": 0.109 * (10 ** (-3)),
        "PAGEIN_THROUGHPUT": 4616.51 * (10 ** (3)),
        "PAGEOUT_LATENCY": 0.113 * (10 ** (-3)),
        "PAGEOUT_THROUGHPUT": 4440 * (10 ** (3)),
        "MEMORY_POWER": 100 * (10 ** (-3)) * 3.3,
        "POWER": 3.328 * (10 ** (-3)) * 3.3,
    },
    "poet_rpi4": {
        "FLOPS_PER_WATT": (16283 * 100 * 1000) / (13.53 * 0.6 * 5),
        "FLOPS": (2 * 1000 * 1000 * 1000),
        "PAGEIN_LATENCY": 0.00509561 * (10 ** (-3)),
        "PAGEIN_THROUGHPUT": 45.5 * (10 ** (6)),
        "PAGEOUT_LATENCY": 0.0185314 * (10 ** (-3)),
        "PAGEOUT_THROUGHPUT": 24.5 * (10 ** (6)),
        "MEMORY_POWER": 30 * (10 ** (-3)) * 5,
        "POWER": 0.6 * 5,
    },
    "poet_rpi4_nocache": {
        "FLOPS_PER_WATT": (16283 * 100 * 1000) / (13.53 * 0.6 * 5),
        "FLOPS": (16283 * 100 * 1000) / (13.53),
        "PAGEIN_LATENCY": 0.00509561 * (10 ** (-3)),
        "PAGEIN_THROUGHPUT": 45.5 * (10 ** (6)),
        "PAGEOUT_LATENCY": 4.23532 * (10 ** (-3)),
        "PAGEOUT_THROUGHPUT": 17.1 * (10 ** (6)),
        "MEMORY_POWER": 30 * (10 ** (-3)) * 5,
        "POWER": 0.6 * 5,
    },
    "poet_jetson_tx2": {  # no FLOPS / FLOPS_PER_WATT in POET (KeyError)
        "PAGEIN_LATENCY": 0.00054,
        "PAGEOUT_LATENCY": 0.002396,
        "POWER": (995 - 229) * (10 ** (-3)),
        "PAGEIN_THROUGHPUT": 108.5 * (10 ** (6)),
        "PAGEOUT_THROUGHPUT": 94.37 * (10 ** (6)),
        "MEMORY_POWER": 309 * (10 ** (-3)),
    },
}

# POET constant -> (board key, source must be "paper")
POET_FIELDS = {
    "FLOPS": "cpu.flops_per_s",
    "FLOPS_PER_WATT": "cpu.flops_per_j",
    "PAGEIN_LATENCY": "storage.read_latency_s",
    "PAGEIN_THROUGHPUT": "storage.read_throughput_bytes_per_s",
    "PAGEOUT_LATENCY": "storage.write_latency_s",
    "PAGEOUT_THROUGHPUT": "storage.write_throughput_bytes_per_s",
    "MEMORY_POWER": "storage.read_power_w",
    "POWER": "cpu.active_power_w",
}


def _get(board: Board, dotted: str) -> Any:
    section, field = dotted.split(".")
    return getattr(getattr(board, section), field)


def test_poet_constants_cover_every_paper_board():
    assert set(POET) == set(PAPER_BOARDS)
    for name in PAPER_BOARDS:
        assert get_board(name).profile is Profile.PAPER


@pytest.mark.parametrize("name", PAPER_BOARDS)
def test_paper_board_reproduces_poet_constants_exactly(name):
    board = get_board(name)
    for constant, value in POET[name].items():
        key = POET_FIELDS[constant]
        assert _get(board, key) == value, f"{name}: {key} != POET {constant}"
        source = board.source_of(key)
        assert source.kind is SourceKind.PAPER
        assert "chipsets.py" in source.ref and constant in source.ref
    s = board.storage
    assert s.write_power_w == s.read_power_w == POET[name]["MEMORY_POWER"]


@pytest.mark.parametrize("name", PAPER_BOARDS)
def test_paper_board_follows_poets_cost_model(name):
    board = get_board(name)
    cpu, s = board.cpu, board.storage
    assert cpu.flops_per_j is not None
    # POET models no power states, no DMA power and no contention.
    assert cpu.idle_power_w == cpu.sleep_power_w == 0
    assert cpu.wakeup_latency_s == cpu.wakeup_energy_j == 0
    assert s.idle_power_w == s.sleep_power_w == s.wakeup_latency_s == s.wakeup_energy_j == 0
    assert board.dma.active_power_w == board.dma.idle_power_w == 0
    assert board.bus.contention_model is ContentionModel.NONE
    assert board.bus.compute_slowdown == 1.0
    # Latency + bytes / throughput once per tensor: no block rounding, one command per tensor.
    assert s.block_bytes == 1
    assert s.max_command_bytes == s.capacity_bytes
    assert board.ram.reserved_bytes == 0


def test_paper_boards_pin_the_published_numbers():
    """The numbers of boards.md section 1, as published (rounded)."""
    nrf, mkr = get_board("poet_nrf52840"), get_board("poet_mkr1000")
    rpi, nocache = get_board("poet_rpi4"), get_board("poet_rpi4_nocache")
    tx2 = get_board("poet_jetson_tx2")
    approx = lambda x: pytest.approx(x, rel=5e-3)  # noqa: E731
    assert nrf.cpu.flops_per_s == approx(6.37e6)
    assert nrf.cpu.flops_per_j == approx(5.80e8)
    assert nrf.cpu.flops_per_s / nrf.cpu.flops_per_j == approx(0.011)  # implied 3.328 mA x 3.3 V
    assert mkr.cpu.flops_per_s == approx(1.67e5)
    assert mkr.cpu.flops_per_j == approx(2.53e6)
    for b in (nrf, mkr):
        assert b.storage.read_throughput_bytes_per_s == approx(4.62e6)
        assert b.storage.write_throughput_bytes_per_s == approx(4.44e6)
        assert b.storage.read_latency_s == approx(0.109e-3)
        assert b.storage.write_latency_s == approx(0.113e-3)
        assert b.storage.read_power_w == approx(0.33)
    assert rpi.cpu.flops_per_s == 2.0e9
    assert rpi.cpu.flops_per_j == approx(4.01e7)
    assert rpi.cpu.flops_per_s / rpi.cpu.flops_per_j == approx(49.9)  # the inconsistency
    assert nocache.cpu.flops_per_s == approx(1.20e8)
    assert nocache.cpu.flops_per_s / nocache.cpu.flops_per_j == approx(3.0)
    assert rpi.storage.write_latency_s == approx(18.5e-6)
    assert nocache.storage.write_latency_s == approx(4.24e-3)
    assert nocache.storage.write_throughput_bytes_per_s == approx(17.1e6)
    assert rpi.storage.read_power_w == approx(0.15)
    assert tx2.storage.read_throughput_bytes_per_s == approx(108.5e6)
    assert tx2.storage.write_latency_s == approx(2.40e-3)
    assert tx2.storage.read_power_w == approx(0.309)
    assert tx2.cpu.active_power_w == approx(0.766)
    # POET has no JetsonTX2 FLOPS / FLOPS_PER_WATT: estimates, and marked as such.
    assert tx2.source_of("cpu.flops_per_s").kind is SourceKind.ESTIMATE
    assert tx2.source_of("cpu.flops_per_j").kind is SourceKind.ESTIMATE


@pytest.mark.parametrize("name", ["poet_mkr1000", "poet_nrf52840"])
def test_poet_mcu_sd_speed_needs_an_estimated_bus_clock(name):
    """4.62 MB/s over 1-bit SPI needs >= 37 MHz: the clock is an estimate, not a datasheet."""
    board = get_board(name)
    assert board.storage.read_throughput_bytes_per_s > 25e6 / 8  # beyond SD default speed
    assert board.storage.bus_clock_hz == 50e6
    assert board.source_of("storage.bus_clock_hz").kind is SourceKind.ESTIMATE
    assert "inconsistent" in board.notes.lower()


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", sorted(EXPECTED_BOARDS))
def test_board_to_dict_round_trips_with_sources(name, tmp_path):
    board = get_board(name)
    doc = board_to_dict(board)
    again = board_from_dict(doc)
    assert again == board
    assert dict(again.sources) == dict(board.sources)  # Board.__eq__ ignores sources
    assert board_to_dict(again) == doc
    # Through a TOML file as well (our minimal writer).
    path = write_doc(tmp_path, doc, stem=name)
    from_file = load_board(path)
    assert from_file == board and dict(from_file.sources) == dict(board.sources)


@pytest.mark.parametrize("name", sorted(EXPECTED_BOARDS))
def test_test_toml_writer_round_trips_board_files(name):
    doc = builtin_doc(name)
    assert tomllib.loads(dump_toml(doc)) == doc


# ----------------------------------------------------------------------------- bad boards

Mutation = Callable[[dict[str, Any]], None]


def _set(section: str, key: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc[section][key]["value"] = value
    return mutate


def _replace(section: str, key: str, raw: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc[section][key] = raw
    return mutate


def _delete(section: str | None, key: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        del (doc[section] if section else doc)[key]
    return mutate


def _set_busy(key: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc["storage"]["write_busy"][key]["value"] = value
    return mutate


def _top(key: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc[key] = value
    return mutate


def _sourced(value: Any) -> dict[str, Any]:
    return {"value": value, "source": "estimate", "ref": "test"}


BAD_BOARDS = [
    # (id, base board, mutation, fragments the message must contain)
    ("unknown-key", "nrf52840",
     lambda d: d["cpu"].__setitem__("clock_mhz", _sourced(64)),
     ["unknown key 'cpu.clock_mhz'", "did you mean 'clock_hz'"]),
    ("unknown-top-key", "nrf52840", _top("note", "typo"),
     ["unknown key 'note'", "did you mean 'notes'"]),
    ("unknown-source-key", "nrf52840",
     lambda d: d["cpu"]["clock_hz"].__setitem__("unit", "Hz"),
     ["unknown key 'cpu.clock_hz.unit'"]),
    ("missing-key", "nrf52840", _delete("storage", "read_latency_s"),
     ["missing key 'storage.read_latency_s'"]),
    ("missing-section", "nrf52840", _delete(None, "bus"), ["missing key 'bus'"]),
    ("number-without-source", "nrf52840", _replace("cpu", "clock_hz", 64e6),
     ["cpu.clock_hz = 64000000.0", "source"]),
    ("source-without-ref", "nrf52840", lambda d: d["cpu"]["clock_hz"].pop("ref"),
     ["missing key 'cpu.clock_hz.ref'"]),
    ("empty-ref", "nrf52840", lambda d: d["cpu"]["clock_hz"].__setitem__("ref", "  "),
     ["cpu.clock_hz.ref = '  '"]),
    ("wrong-source-kind", "nrf52840",
     lambda d: d["cpu"]["clock_hz"].__setitem__("source", "guess"),
     ["cpu.clock_hz.source = 'guess'", "datasheet"]),
    ("string-for-number", "nrf52840", _set("cpu", "clock_hz", "64 MHz"),
     ["cpu.clock_hz = '64 MHz'", "must be a number"]),
    ("bool-for-number", "nrf52840", _set("storage", "read_latency_s", True),
     ["storage.read_latency_s = True", "must be a number"]),
    ("unit-slip-clock", "nrf52840", _set("cpu", "clock_hz", 64),
     ["cpu.clock_hz = 64", "plausible"]),
    ("unit-slip-power-uW", "nrf52840", _set("storage", "read_power_w", 214500.0),
     ["storage.read_power_w = 214500.0", "plausible"]),
    ("unit-slip-bytes", "nrf52840", _set("storage", "capacity_bytes", 3.2e13),
     ["storage.capacity_bytes = 32000000000000", "plausible"]),
    ("zero-throughput", "nrf52840", _set("storage", "read_throughput_bytes_per_s", 0),
     ["storage.read_throughput_bytes_per_s = 0", "> 0"]),
    ("zero-clock", "nrf52840", _set("cpu", "clock_hz", 0.0),
     ["cpu.clock_hz = 0.0", "> 0"]),
    ("negative-power", "nrf52840", _set("cpu", "idle_power_w", -0.001),
     ["cpu.idle_power_w = -0.001", ">= 0"]),
    ("negative-count", "nrf52840", _set("ram", "reserved_bytes", -1),
     ["ram.reserved_bytes = -1", ">= 0"]),
    ("infinite-latency", "nrf52840", _set("storage", "write_latency_s", math.inf),
     ["storage.write_latency_s = inf", "finite"]),
    ("above-spi-wire-rate", "nrf52840", _set("storage", "read_throughput_bytes_per_s", 3e6),
     ["storage.read_throughput_bytes_per_s = 3000000.0", "wire rate"]),
    ("above-4bit-wire-rate", "rpi4", _set("storage", "write_throughput_bytes_per_s", 60e6),
     ["storage.write_throughput_bytes_per_s = 60000000.0", "wire rate", "DDR"]),
    ("above-bus-bandwidth", "nrf52840", _set("bus", "bandwidth_bytes_per_s", 1e5),
     ["storage.read_throughput_bytes_per_s = 364000.0", "bus.bandwidth_bytes_per_s"]),
    ("spi-wider-than-1-bit", "nrf52840", _set("storage", "bus_width_bits", 4),
     ["storage.bus_width_bits = 4", "sd_spi"]),
    ("idle-above-active", "nrf52840", _set("cpu", "idle_power_w", 1.0),
     ["cpu.idle_power_w = 1.0", "active_power_w"]),
    ("sleep-above-idle", "nrf52840", _set("storage", "sleep_power_w", 0.01),
     ["storage.sleep_power_w = 0.01", "idle_power_w"]),
    ("reserved-equals-ram", "nrf52840", _set("ram", "reserved_bytes", 262144),
     ["ram.reserved_bytes = 262144", "bytes = 262144"]),
    ("command-below-block", "nrf52840", _set("storage", "max_command_bytes", 256),
     ["storage.max_command_bytes = 256", "block_bytes = 512"]),
    ("slowdown-below-one", "nrf52840", _set("bus", "compute_slowdown", 0.5),
     ["bus.compute_slowdown = 0.5"]),
    ("nor-without-erase-time", "nrf52840_qspi_nor", _delete("storage", "erase_time_s"),
     ["storage.erase_time_s = None", "qspi_nor"]),
    ("nor-without-endurance", "nrf52840_qspi_nor", _delete("storage", "endurance_cycles"),
     ["storage.endurance_cycles = None", "qspi_nor"]),
    ("nor-erase-not-page-multiple", "nrf52840_qspi_nor",
     _set("storage", "erase_sector_bytes", 1000),
     ["storage.erase_sector_bytes = 1000", "block_bytes = 256"]),
    ("erase-fields-on-sd", "nrf52840",
     lambda d: d["storage"].__setitem__("erase_sector_bytes", _sourced(4096)),
     ["storage.erase_sector_bytes = 4096", "qspi_nor", "sd_spi"]),
    # wear of SD cards and eMMC
    ("wear-page-not-block-multiple", "nrf52840", _set("storage", "wear_page_bytes", 1000),
     ["storage.wear_page_bytes = 1000", "multiple of block_bytes = 512"]),
    ("wear-page-zero", "nrf52840", _set("storage", "wear_page_bytes", 0),
     ["storage.wear_page_bytes = 0", "> 0"]),
    ("queue-depth-zero", "nrf52840",
     _replace("storage", "queue_depth", {"value": 0, "source": "estimate", "ref": "x"}),
     ["storage.queue_depth = 0", "must be >= 1 commands"]),
    ("endurance-zero", "nrf52840", _set("storage", "endurance_bytes_written", 0),
     ["storage.endurance_bytes_written = 0", "> 0"]),
    ("endurance-unit-slip", "nrf52840", _set("storage", "endurance_bytes_written", 32),
     ["storage.endurance_bytes_written = 32", "plausible"]),
    ("endurance-not-whole", "nrf52840", _set("storage", "endurance_bytes_written", 3.5e12 + 0.5),
     ["storage.endurance_bytes_written = 3500000000000.5", "whole number"]),
    ("endurance-without-source", "nrf52840",
     _replace("storage", "endurance_bytes_written", 31_910_000_000_000),
     ["storage.endurance_bytes_written = 31910000000000", "source"]),
    ("endurance-on-nor", "nrf52840_qspi_nor",
     lambda d: d["storage"].__setitem__("endurance_bytes_written", _sourced(10**12)),
     ["storage.endurance_bytes_written = 1000000000000", "wear-levelled", "qspi_nor",
      "endurance_cycles"]),
    ("wear-page-on-nor", "nrf52840_qspi_nor",
     lambda d: d["storage"].__setitem__("wear_page_bytes", _sourced(4096)),
     ["storage.wear_page_bytes = 4096", "qspi_nor"]),
    ("bad-profile", "nrf52840", _top("profile", "physics"),
     ["profile = 'physics'", "'physical'", "'paper'"]),
    ("bad-storage-kind", "nrf52840",
     lambda d: d["storage"].__setitem__("kind", "sd_sdio"),
     ["storage.kind = 'sd_sdio'", "'sd_spi'"]),
    ("bad-contention-model", "nrf52840",
     lambda d: d["bus"].__setitem__("contention_model", "greedy"),
     ["bus.contention_model = 'greedy'", "'fair_share'"]),
    ("paper-without-flops-per-j", "poet_nrf52840", _delete("cpu", "flops_per_j"),
     ["cpu.flops_per_j = None", "paper"]),
    ("schema-version", "nrf52840", _top("schema_version", 2), ["schema_version = 2"]),
    ("name-not-identifier", "nrf52840", _top("name", "nrf 52840"), ["name = 'nrf 52840'"]),
    ("section-not-table", "nrf52840", _top("cpu", 5), ["cpu = 5", "[cpu]"]),
    ("notes-not-string", "nrf52840", _top("notes", 3), ["notes = 3"]),
    # [storage.write_busy]: the distribution of extra write-busy time
    ("write-busy-p99-below-median", "nrf52840", _set_busy("p99_s", 1e-5),
     ["storage.write_busy.p99_s = 1e-05", "at least median_s = 2e-05"]),
    ("write-busy-probability-over-one", "nrf52840",
     _set_busy("block_stall_probability", 1.5),
     ["storage.write_busy.block_stall_probability = 1.5", "probability in [0, 1]"]),
    ("write-busy-negative-probability", "nrf52840",
     _set_busy("block_stall_probability", -0.1),
     ["storage.write_busy.block_stall_probability = -0.1", "[0, 1]"]),
    ("write-busy-stall-max-below-min", "nrf52840", _set_busy("stall_max_s", 0.005),
     ["storage.write_busy.stall_max_s = 0.005", "at least stall_min_s = 0.0109"]),
    ("write-busy-stall-without-range", "nrf52840",
     lambda d: (d["storage"]["write_busy"].pop("stall_min_s"),
                d["storage"]["write_busy"].pop("stall_max_s")),
     ["storage.write_busy.stall_min_s = None", "block_stall_probability > 0"]),
    ("write-busy-half-range", "rpi4",
     lambda d: (d["storage"]["write_busy"].__setitem__("block_stall_probability",
                                                       _sourced(0.0)),
                d["storage"]["write_busy"].pop("stall_max_s")),
     ["storage.write_busy.stall_max_s = None", "go together"]),
    ("write-busy-unit-slip-ms", "nrf52840", _set_busy("median_s", 20.0),
     ["storage.write_busy.median_s = 20.0", "plausible"]),
    ("write-busy-zero-median", "nrf52840", _set_busy("median_s", 0.0),
     ["storage.write_busy.median_s = 0.0", "> 0"]),
    ("write-busy-unknown-key", "nrf52840",
     lambda d: d["storage"]["write_busy"].__setitem__("sigma", _sourced(1.0)),
     ["unknown key 'storage.write_busy.sigma'"]),
    ("write-busy-missing-key", "nrf52840", lambda d: d["storage"]["write_busy"].pop("p99_s"),
     ["missing key 'storage.write_busy.p99_s'"]),
    ("write-busy-without-source", "nrf52840",
     lambda d: d["storage"]["write_busy"].__setitem__("median_s", 2e-5),
     ["storage.write_busy.median_s = 2e-05", "source"]),
    ("write-busy-not-a-table", "nrf52840",
     lambda d: d["storage"].__setitem__("write_busy", 0.1),
     ["storage.write_busy = 0.1", "[storage.write_busy]"]),
]


@pytest.mark.parametrize(("base", "mutate", "fragments"),
                         [pytest.param(b, m, f, id=i) for i, b, m, f in BAD_BOARDS])
def test_bad_board_is_rejected_with_a_one_line_message(tmp_path, base, mutate, fragments):
    doc = copy.deepcopy(builtin_doc(base))
    board_from_dict(copy.deepcopy(doc))  # the unmodified document is valid
    mutate(doc)
    assert_board_error(write_doc(tmp_path, doc), *fragments)


def test_bad_board_cases_are_many_and_distinct():
    ids = [case[0] for case in BAD_BOARDS]
    assert len(ids) == len(set(ids)) >= 12


def test_invalid_toml_syntax(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("schema_version = 1\nname = \n[cpu\n", encoding="utf-8")
    assert_board_error(path, "not valid TOML", "line 2")


def test_unreadable_board_file(tmp_path):
    assert_board_error(tmp_path / "missing.toml", "cannot read board file")


def test_board_errors_are_value_errors(tmp_path):
    doc = builtin_doc("nrf52840")
    doc["cpu"]["clock_hz"]["value"] = 64
    with pytest.raises(ValueError):
        load_board(write_doc(tmp_path, doc))


# ----------------------------------------------------------------------------- type slips
# Values of the right unit but the wrong type or an implausible size.

VALIDATOR_GAPS = [
    ("fractional-count", "nrf52840", _set("ram", "bytes", 262144.5),
     ["ram.bytes = 262144.5"], "count fields are int()-converted before validation: "
     "262144.5 is silently truncated"),
    ("string-count", "nrf52840", _set("dma", "channels", "1"),
     ["dma.channels = '1'"], "int('1') accepts a string where a number is required"),
    ("garbage-count", "nrf52840", _set("dma", "channels", "two"),
     ["dma.channels = 'two'"], "int('two') raises a bare ValueError, not BoardError"),
    ("infinite-count", "nrf52840", _set("storage", "capacity_bytes", math.inf),
     ["storage.capacity_bytes = inf"], "int(inf) raises OverflowError, not BoardError"),
    ("power-mW-as-W", "nrf52840", _set("storage", "read_power_w", 214.5),
     ["storage.read_power_w = 214.5"], "one plausible range (up to 500 W) for every power: "
     "an SD card's 214.5 mW written as 214.5 W passes"),
    ("string-field-wrong-type", "nrf52840", lambda d: d["cpu"].__setitem__("core", 5),
     ["cpu.core = 5"], "attrs TypeError message names '[cpu]' and 'core', not 'cpu.core'"),
    ("bool-field-wrong-type", "nrf52840",
     lambda d: d["storage"].__setitem__("double_data_rate", "no"),
     ["storage.double_data_rate = 'no'"], "attrs TypeError message, not the dotted key"),
    ("schema-version-true", "nrf52840", _top("schema_version", True),
     ["schema_version = True"], "True == 1 in Python, so schema_version = true is accepted"),
]


@pytest.mark.parametrize(
    ("base", "mutate", "fragments"),
    [pytest.param(b, m, f, id=i) for i, b, m, f, _ in VALIDATOR_GAPS])
def test_validator_gap(tmp_path, base, mutate, fragments):
    doc = copy.deepcopy(builtin_doc(base))
    mutate(doc)
    assert_board_error(write_doc(tmp_path, doc), *fragments)


def test_name_must_equal_file_stem(tmp_path):
    doc = builtin_doc("nrf52840")
    assert_board_error(write_doc(tmp_path, doc, stem="my_board"), "name = 'nrf52840'")


def test_numeric_fields_declare_units_and_rules():
    """Every numeric field of every section carries the metadata the loader relies on."""
    for cls in (*SECTIONS.values(), WriteBusy):
        for field in numeric_fields(cls):
            assert field.metadata["rule"] in ("positive", "non_negative", "count",
                                              "positive_count", "factor", "probability")
            low, high = field.metadata["plausible"]
            assert low <= high
        assert all(isinstance(f, attrs.Attribute) for f in attrs.fields(cls))


# ----------------------------------------------------------------------------- write busy


SD_BOARDS_WITH_BUSY = ("mkr1000", "nrf52840", "rp2040", "esp32s3", "stm32h743", "stm32f746",
                       "rpi4", "rpi5")


@pytest.mark.parametrize("name", sorted(EXPECTED_BOARDS))
def test_physical_sd_boards_carry_a_write_busy_distribution_and_others_do_not(name):
    busy = get_board(name).storage.write_busy
    if name in SD_BOARDS_WITH_BUSY:
        assert busy is not None
        # the tail reaches the SD spec's 250 ms busy limit, cited as a datasheet figure
        assert busy.stall_max_s == 0.25
        assert get_board(name).source_of("storage.write_busy.stall_max_s").kind \
            is SourceKind.DATASHEET
        assert get_board(name).source_of("storage.write_busy.median_s").kind \
            is SourceKind.ESTIMATE
    else:  # NOR flash, eMMC and the paper's boards reproduce nominal timing only
        assert busy is None


def test_write_busy_shape_and_mean():
    busy = WriteBusy(median_s=1e-3, p99_s=1e-2, block_stall_probability=0.1, stall_min_s=0.1,
                     stall_max_s=0.3)
    assert busy.sigma == pytest.approx(math.log(10) / 2.3263478740408408)
    assert busy.stall_chance(1) == pytest.approx(0.1)
    assert busy.stall_chance(2) == pytest.approx(1 - 0.9 ** 2)
    assert busy.mean_s(2) == pytest.approx(1e-3 * math.exp(busy.sigma ** 2 / 2)
                                           + (1 - 0.9 ** 2) * 0.2)
    constant = WriteBusy(median_s=0.004, p99_s=0.004, block_stall_probability=0.0)
    assert constant.sigma == 0.0 and constant.mean_s(128) == 0.004


# ----------------------------------------------------------------------------- flash

FLASH_BOARDS = {"nrf52840": 1 << 20, "nrf52840_qspi_nor": 1 << 20, "stm32h743": 2 << 20,
                "stm32f746": 1 << 20, "rp2040": 2 << 20, "esp32s3": 8 << 20, "mkr1000": 256 << 10}


@pytest.mark.parametrize("name", sorted(EXPECTED_BOARDS))
def test_mcu_boards_describe_their_memory_mapped_flash_and_others_do_not(name):
    flash = get_board(name).flash
    if name not in FLASH_BOARDS:
        assert flash is None  # paper-profile and Linux boards: no [flash]
        return
    assert flash.bytes == FLASH_BOARDS[name]
    assert 0 < flash.reserved_bytes < flash.bytes
    assert flash.usable_bytes == flash.bytes - flash.reserved_bytes
    board = get_board(name)
    assert board.source_of("flash.bytes").kind is SourceKind.DATASHEET
    assert board.source_of("flash.reserved_bytes").kind is SourceKind.ESTIMATE
    assert "CoreMark from flash" in board.source_of("flash.bytes").ref  # the in-place rule


def test_a_board_with_and_without_flash_round_trips():
    with_flash = get_board("nrf52840")
    doc = board_to_dict(with_flash)
    assert doc["flash"]["bytes"]["value"] == 1 << 20
    assert board_from_dict(doc) == with_flash
    del doc["flash"]
    without = board_from_dict(doc)
    assert without.flash is None and "flash" not in board_to_dict(without)
    assert attrs.evolve(with_flash, flash=None) == without


def test_flash_reserved_at_or_over_its_size_is_a_one_line_error(tmp_path):
    doc = builtin_doc("nrf52840")
    doc["flash"]["reserved_bytes"]["value"] = doc["flash"]["bytes"]["value"]
    assert_board_error(write_doc(tmp_path, doc), "flash.reserved_bytes", "must be below bytes")
    doc["flash"]["bytes"]["value"] = 0
    assert_board_error(write_doc(tmp_path, doc), "flash.bytes")
    doc = builtin_doc("nrf52840")
    doc["flash"]["size"] = doc["flash"].pop("bytes")
    assert_board_error(write_doc(tmp_path, doc), "flash.size")


def test_boards_show_prints_the_flash(capsys, tmp_path):
    from poetsim.cli.main import main

    # one golden of another board: nothing to simulate
    golden = Path(__file__).parents[1] / "schedules" / "poet-mlp-rpi5-70.json"
    (tmp_path / "g.json").write_bytes(golden.read_bytes())
    none = str(tmp_path)
    assert main(["boards", "show", "stm32h743", "--goldens", none]) in (0, None)
    out = capsys.readouterr().out
    assert "[flash]" in out and "flash usable (frozen weights)" in out
    assert main(["boards", "show", "rpi4", "--goldens", none]) in (0, None)
    assert "[flash]" not in capsys.readouterr().out


@pytest.mark.parametrize(("goldens", "words"), [
    ("missing", "missing: not a folder of golden schedules"),
    ("s.json", "s.json: not a folder of golden schedules"),
    (".", "x.json: not JSON: Expecting property name enclosed in double quotes (line 1)"),
])
def test_boards_show_goldens_that_cannot_be_read_are_one_line(capsys, tmp_path, goldens, words):
    from poetsim.cli.main import main

    (tmp_path / "s.json").write_text("{nope")
    (tmp_path / "x.json").write_text("{nope") if goldens == "." else None
    (tmp_path / "s.json").unlink() if goldens == "." else None
    assert main(["boards", "show", "rpi4", "--goldens", str(tmp_path / goldens)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_board_for_schedule_prefers_the_given_then_the_recorded_then_the_default():
    from poetsim.boards import DEFAULT_BOARD, board_for_schedule

    assert board_for_schedule("rpi4", "mkr1000", "s.json").name == "rpi4"
    assert board_for_schedule(None, "mkr1000", "s.json").name == "mkr1000"
    assert board_for_schedule(None, None, "s.json").name == DEFAULT_BOARD
    with pytest.raises(UnknownNameError, match=r"^s\.json: made for board 'tiny', which is not "
                                               r"built in: give it with --board FILE"):
        board_for_schedule(None, "tiny", "s.json")
