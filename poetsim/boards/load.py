"""Reading board files (TOML) into :class:`~poetsim.boards.spec.Board`.

The file format is documented in ``device_models/README.md``. Every numeric key is an
inline table ``{ value = ..., source = "datasheet|paper|measured|estimate|what-if",
ref = "..." }``, with ``min`` and ``max`` too when the number is a range
(:mod:`poetsim.boards.corners`). Any problem raises :class:`~poetsim.errors.BoardError`
with one line that names the file, the dotted key, the value and the rule.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import attrs

from poetsim.boards.corners import check_range, check_ranges
from poetsim.boards.spec import (
    Board,
    BoardFieldError,
    Bus,
    Cpu,
    Dma,
    Flash,
    Ram,
    Source,
    SourceKind,
    Storage,
    numeric_fields,
    subsection_fields,
)
from poetsim.errors import BoardError
from poetsim.fileio import read_toml

__all__ = ["OPTIONAL_SECTIONS", "SCHEMA_VERSION", "SECTIONS", "board_from_dict", "board_numbers",
           "board_to_dict", "load_board"]

SCHEMA_VERSION = 1

#: Section name -> spec class, in file order.
SECTIONS: dict[str, type] = {"cpu": Cpu, "ram": Ram, "flash": Flash, "dma": Dma,
                             "storage": Storage, "bus": Bus}
#: Sections a board file may leave out (the board's attribute is then None).
OPTIONAL_SECTIONS = frozenset({"flash"})

_TOP_KEYS = ("schema_version", "name", "title", "profile", "notes", *SECTIONS)
_REQUIRED_TOP = ("schema_version", "name", "title", "profile",
                 *(s for s in SECTIONS if s not in OPTIONAL_SECTIONS))
_SOURCE_KEYS = ("value", "source", "ref")
_RANGE_KEYS = ("min", "max")


def board_numbers(board: Board) -> dict[str, Any]:
    """Every number and choice of ``board`` that can change a result (no names, titles,
    notes or sources), JSON-ready: what a run's cache key and a sweep point's id hold of
    the board."""

    def plain(_inst: Any, _field: Any, value: Any) -> Any:
        return value.value if hasattr(value, "value") and not isinstance(value, (int, float)) \
            else value

    doc: dict[str, Any] = {"profile": board.profile.value}
    for section in SECTIONS:
        if getattr(board, section) is not None:  # an optional section such as [flash]
            doc[section] = attrs.asdict(getattr(board, section), value_serializer=plain)
    return doc


def load_board(path: str | Path) -> Board:
    """Read and validate one board file."""
    path = Path(path)
    data = read_toml(path, BoardError, "board file")
    board = board_from_dict(data, origin=str(path))
    if board.name != path.stem:
        raise BoardError(f"{path}: name = {board.name!r}: must equal the file name "
                         f"{path.stem!r} (without .toml)")
    return board


def _unknown(origin: str, key: str, allowed: list[str]) -> BoardError:
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return BoardError(f"{origin}: unknown key {key!r}{hint}; allowed: {', '.join(allowed)}")


def _missing(origin: str, key: str, what: str) -> BoardError:
    return BoardError(f"{origin}: missing key {key!r}: {what}")


def _sourced(origin: str, key: str, raw: Any, sources: dict[str, Source],
             ranges: dict[str, tuple[float, float]]) -> Any:
    if not isinstance(raw, dict):
        raise BoardError(
            f"{origin}: {key} = {raw!r}: must be a table {{ value = ..., source = ..., ref = ... }}"
            " so that the number carries its source"
        )
    for sub in raw:
        if sub not in _SOURCE_KEYS + _RANGE_KEYS:
            raise _unknown(origin, f"{key}.{sub}", list(_SOURCE_KEYS + _RANGE_KEYS))
    for sub in _SOURCE_KEYS:
        if sub not in raw:
            raise _missing(origin, f"{key}.{sub}", "every number needs value, source and ref")
    kinds = [k.value for k in SourceKind]
    if raw["source"] not in kinds:
        raise BoardError(f"{origin}: {key}.source = {raw['source']!r}: must be one of {kinds}")
    if not isinstance(raw["ref"], str) or not raw["ref"].strip():
        raise BoardError(f"{origin}: {key}.ref = {raw['ref']!r}: must be a non-empty reference")
    sources[key] = Source(SourceKind(raw["source"]), raw["ref"].strip())
    if any(sub in raw for sub in _RANGE_KEYS):
        for sub in _RANGE_KEYS:
            if sub not in raw:
                raise _missing(origin, f"{key}.{sub}", "a range needs min and max")
        ranges[key] = (raw["min"], raw["max"])  # checked once the value has passed its rules
    return raw["value"]


def _section(origin: str, name: str, cls: type, raw: Any, sources: dict[str, Source],
             ranges: dict[str, tuple[float, float]]) -> Any:
    if not isinstance(raw, dict):
        raise BoardError(f"{origin}: {name} = {raw!r}: must be a table [{name}]")
    fields = {f.name: f for f in attrs.fields(cls)}
    numeric = {f.name for f in numeric_fields(cls)}
    for key in raw:
        if key not in fields:
            raise _unknown(origin, f"{name}.{key}", list(fields))
    kwargs: dict[str, Any] = {}
    for fname, field in fields.items():
        key = f"{name}.{fname}"
        if fname not in raw:
            if field.default is attrs.NOTHING:
                unit = field.metadata.get("unit")
                what = f"a number in {unit}" if unit else "required"
                raise _missing(origin, key, what)
            continue
        value = raw[fname]
        if fname in numeric:
            value = _sourced(origin, key, value, sources, ranges)
        elif "section" in field.metadata:  # a sub-table such as [storage.write_busy]
            value = _section(origin, key, field.metadata["section"], value, sources, ranges)
        kwargs[fname] = value
    try:
        return cls(**kwargs)
    except BoardFieldError as err:
        raise BoardError(f"{origin}: {err.within(name)}") from None


def board_from_dict(data: dict[str, Any], origin: str = "<board>") -> Board:
    """Validate a parsed board document and build the :class:`Board`."""
    for key in data:
        if key not in _TOP_KEYS:
            raise _unknown(origin, key, list(_TOP_KEYS))
    for key in _REQUIRED_TOP:
        if key not in data:
            raise _missing(origin, key, "every board file has it")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version != SCHEMA_VERSION:
        raise BoardError(
            f"{origin}: schema_version = {data['schema_version']!r}: this poetsim reads "
            f"version {SCHEMA_VERSION}"
        )
    sources: dict[str, Source] = {}
    ranges: dict[str, tuple[float, float]] = {}
    sections = {name: _section(origin, name, cls, data[name], sources, ranges)
                for name, cls in SECTIONS.items() if name in data}
    for key in ("name", "title", "notes"):
        if key in data and not isinstance(data[key], str):
            raise BoardError(f"{origin}: {key} = {data[key]!r}: must be a string")
    try:
        board = Board(name=data["name"], title=data["title"], profile=data["profile"],
                      notes=data.get("notes", ""), sources=sources, **sections)
        if ranges:
            board = attrs.evolve(board, ranges={
                key: check_range(key, low, board.number(key), high)
                for key, (low, high) in ranges.items()})
            check_ranges(board)  # every corner and every end is a consistent board
    except BoardFieldError as err:
        raise BoardError(f"{origin}: {err}") from None
    return board


def board_to_dict(board: Board) -> dict[str, Any]:
    """The board as a plain document (the TOML structure), sources included."""
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "name": board.name, "title": board.title,
        "profile": board.profile.value,
    }
    if board.notes:
        out["notes"] = board.notes
    for name, cls in SECTIONS.items():
        if getattr(board, name) is not None:  # an optional section the board leaves out
            out[name] = _table(board, name, cls, getattr(board, name))
    return out


def _table(board: Board, name: str, cls: type, section: Any) -> dict[str, Any]:
    """One section (or sub-table, ``name`` dotted) as a plain document, sources included."""
    numeric = {f.name for f in numeric_fields(cls)}
    nested = {f.name: f.metadata["section"] for f in subsection_fields(cls)}
    table: dict[str, Any] = {}
    for field in attrs.fields(cls):
        value = getattr(section, field.name)
        if value is None:
            continue
        if field.name in numeric:
            key = f"{name}.{field.name}"
            src = board.sources.get(key)
            table[field.name] = {
                "value": value,
                "source": src.kind.value if src else SourceKind.ESTIMATE.value,
                "ref": src.ref if src else "not recorded",
            }
            if key in board.ranges:
                table[field.name].update(zip(_RANGE_KEYS, board.ranges[key]))
        elif field.name in nested:
            table[field.name] = _table(board, f"{name}.{field.name}", nested[field.name], value)
        else:
            table[field.name] = value.value if hasattr(value, "value") else value
    return table
