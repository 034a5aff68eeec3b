"""Schedule files: a readable versioned JSON format, and a compact binary one for the device.

JSON (version 1)
----------------
Steps name their op, so a reader can follow the file without the graph::

    {
      "format": "poetsim-schedule",
      "version": 1,
      "graph": "residual",
      "graph_fingerprint": "5f1c...64 hex digits",
      "metadata": {"method": "plain"},
      "ops": ["x", "fc1", "r", ...],
      "steps": [
        ["compute", "x", 0],
        ["compute", "fc1", 1],
        ["page_out", "fc1", 1],
        ["free", "fc1", 1],
        ...
      ]
    }

Version 2 adds the schedule's layout (:mod:`poetsim.schedule.layout`), the offset of
every buffer in one static arena, as a last key ``layout``::

      "layout": {"arena_bytes": 233472, "buffers": [
        ["resident", null, 0, 5875, 32768, 0],
        ["tensor", "conv1", 3, 10, 4096, 32768],
        ["workspace", "conv1", 3, 4, 288, 36864],
        ...
      ]}

one ``[kind, op name, start, end, size_bytes, offset_bytes]`` per buffer: ``kind`` one of
``resident`` (op ``null``), ``tensor``, ``workspace``, ``held``; live while the steps at
positions ``start`` to ``end - 1`` run; at ``offset_bytes`` from the arena's start. A
schedule with a layout is written as version 2, any other as version 1; both are read.
The reader checks the layout's form [``bad_layout``]; the checker and the simulator check
it against the steps (:func:`poetsim.schedule.arena.adopt_layout`).

``metadata.digest`` is the SHA-256 of the document as written, every key but itself
(:func:`content_digest`): the request the file records, its figures, steps and layout. A
reader refuses a well-formed file whose content no longer matches it, a file changed after
poetsim wrote it [``edited``], unless asked to judge it as it is (``accept_edits``,
``--accept-edits``); a file with no digest (an older poetsim's) is read as it is.

Each step is ``[action, op name, stage]`` with ``action`` one of ``compute``,
``page_out``, ``page_in``, ``free``, ``read_weights``, ``write_weights``,
``hold_weights``, ``drop_weights`` (see :mod:`poetsim.schedule.ops` for their meaning).
``ops`` lists the graph's op names in graph order; it maps names to the op indices of
:class:`~poetsim.schedule.ops.Step` when the file is read without the graph. Read with a
graph, the file's fingerprint must equal the graph's. Any problem raises a one-line
:class:`ScheduleFileError` naming the file, the position (``steps[12]``) and a rule code in
brackets, e.g. ``plan.json: steps[12]: op 'conv9' is not in the ops list [unknown_op]``.

Binary (versions 1 and 2)
-------------------------
Little-endian (the byte order of Cortex-M and Cortex-A cores), laid out so that the step
words are naturally aligned::

    offset  size  field
    0       4     magic b"POET"
    4       1     version (1 or 2)
    5       1     flags: bit 0 = 32-bit step words, bit 1 = stage section present,
                  bit 2 = layout section present
    6       2     reserved, 0
    8       4     op count of the graph (uint32)
    12      4     step count (uint32)
    16      8     first 8 bytes of the graph fingerprint (the first 16 hex digits)
    24      ...   steps: one word each
    ...     ...   stage section (if flag bit 1)
    ...     ...   layout section (if flag bit 2)
    end-4   4     CRC-32 (zlib) of all bytes before it

A step word holds the action in its top 2 bits (compute 0, page_out 1, page_in 2, free 3)
and the op index in the rest: 16-bit words (14-bit index) when the graph has at most
16384 ops, 32-bit words (30-bit index) otherwise.

Version 2 is the same with the action in the top 3 bits, adding read_weights 4,
write_weights 5, hold_weights 6 and drop_weights 7 (13-bit index in 16-bit words, up to
8192 ops; 29-bit in 32-bit words). A schedule with weight or hold steps is written as
version 2, any other as version 1; both are read.

Stages are kept, run-length encoded, by default: the section is a LEB128 varint run count,
then per run of equal stages the zigzag-varint change of stage from the previous run (the
first from 0) and the varint run length. A schedule whose stage advances with each
COMPUTE costs two bytes per stage. The device does not need stages; ``stages=False``
drops the section, and decoding then gives every step stage 0.

The layout section, written when the schedule has a layout: varints of the arena's bytes
and the buffer count, then per buffer its kind (0 resident, 1 tensor, 2 workspace, 3 held),
its op index + 1 (0 for the resident state), start, length (end - start), size and offset
in bytes, each a varint. The binary form never
holds metadata, the graph name or the full fingerprint: the decoder is given the graph
(or its fingerprint) and checks the 8-byte prefix.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from poetsim.errors import InputError, ScheduleFileError
from poetsim.fileio import atomic_write_bytes, atomic_write_text
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.schedule.check import ScheduleError
from poetsim.schedule.layout import KINDS, Buffer, Layout
from poetsim.schedule.metadata import parse_metadata
from poetsim.schedule.ops import HOLD_ACTIONS, WEIGHT_ACTIONS, Action, Schedule, Step

__all__ = [
    "BINARY_MAGIC", "BINARY_VERSION", "DIGEST_FIELD", "FORMAT", "VERSION",
    "ScheduleFileError", "content_digest", "decode_binary", "encode_binary",
    "is_binary_schedule", "read_schedule", "read_schedule_binary",
    "schedule_from_dict", "schedule_to_dict", "write_schedule", "write_schedule_binary",
]

FORMAT = "poetsim-schedule"
#: The newest JSON version (with a layout); a schedule without one is written as version 1.
VERSION = 2
BINARY_MAGIC = b"POET"
#: The newest binary version; a schedule without weight or hold steps is still written as
#: version 1.
BINARY_VERSION = 2

_KEYS = ("format", "version", "graph", "graph_fingerprint", "metadata", "ops", "steps")
#: Top-level keys of version 2 beyond version 1's.
_LAYOUT_KEY = "layout"
_HEADER = struct.Struct("<4sBBHII8s")
_CRC = struct.Struct("<I")
_FLAG_WIDE = 0x01
_FLAG_STAGES = 0x02
_FLAG_LAYOUT = 0x04
_CODES = {Action.COMPUTE: 0, Action.PAGE_OUT: 1, Action.PAGE_IN: 2, Action.FREE: 3,
          Action.READ_WEIGHTS: 4, Action.WRITE_WEIGHTS: 5, Action.HOLD_WEIGHTS: 6,
          Action.DROP_WEIGHTS: 7}
_ACTIONS = {code: action for action, code in _CODES.items()}
#: The actions only version 2 can hold.
_VERSION_2 = WEIGHT_ACTIONS | HOLD_ACTIONS
#: Bits of a step word that hold the action, per binary version.
_ACTION_BITS = {1: 2, 2: 3}


def _index_bits(version: int, wide: bool) -> int:
    """Bits of a step word that hold the op index."""
    return (32 if wide else 16) - _ACTION_BITS[version]


class _Problem(Exception):
    """Internal: a problem found while decoding, before the source is prefixed."""

    def __init__(self, where: str, detail: str, rule: str, position: int | None = None) -> None:
        super().__init__(detail)
        self.where, self.detail, self.rule, self.position = where, detail, rule, position

    def error(self, source: str) -> ScheduleFileError:
        parts = [source, self.where, self.detail] if self.where else [source, self.detail]
        return ScheduleFileError(f"{': '.join(parts)} [{self.rule}]", self.rule, self.position)


def _check_fits(schedule: Schedule, graph: TrainingGraph) -> None:
    expected = graph_fingerprint(graph)
    if schedule.graph_fingerprint != expected:
        raise ScheduleError(
            f"schedule for graph {schedule.graph_name!r} (fingerprint "
            f"{schedule.graph_fingerprint[:12]!r}) does not fit graph {graph.name!r} "
            f"(fingerprint {expected[:12]!r}) [fingerprint_mismatch]")
    n = len(graph.ops)
    for position, step in enumerate(schedule.steps):
        if step.op >= n:
            raise ScheduleError(f"step {position} ({step.describe()}): op index {step.op} is "
                                f"not an op of graph {graph.name!r} ({n} ops) [unknown_op]")


# ---------------------------------------------------------------------------- JSON


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):  # numpy arrays
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def schedule_to_dict(schedule: Schedule, graph: TrainingGraph) -> dict[str, Any]:
    """The schedule as a JSON-ready document (raises :class:`ScheduleError` if it does not
    fit ``graph``)."""
    _check_fits(schedule, graph)
    names = [op.name for op in graph.ops]
    doc: dict[str, Any] = {
        "format": FORMAT, "version": 1 if schedule.layout is None else VERSION,
        "graph": schedule.graph_name,
        "graph_fingerprint": schedule.graph_fingerprint, "metadata": dict(schedule.metadata),
        "ops": names,
        "steps": [[step.action.value, names[step.op], step.stage] for step in schedule.steps],
    }
    if schedule.layout is not None:
        doc[_LAYOUT_KEY] = {
            "arena_bytes": schedule.layout.arena_bytes,
            "buffers": [[b.kind, None if b.op < 0 else names[b.op], b.start, b.end,
                         b.size_bytes, b.offset_bytes] for b in schedule.layout.buffers]}
    doc["metadata"][DIGEST_FIELD] = content_digest(doc)
    return doc


#: The metadata field that records :func:`content_digest` of the file as written.
DIGEST_FIELD = "digest"


def content_digest(doc: Mapping[str, Any]) -> str:
    """SHA-256 of a schedule document as a reader parses it, every key but
    ``metadata.digest``: the request it records (graph fingerprint, board, budget and
    deadline words, accounting, model and options), its figures, steps and layout."""
    try:
        plain = json.loads(json.dumps(doc, default=_json_default, allow_nan=True))
    except (TypeError, ValueError) as err:
        raise ScheduleError(f"schedule metadata cannot be written as JSON: {err}") from None
    if isinstance(plain.get("metadata"), dict):
        plain["metadata"].pop(DIGEST_FIELD, None)
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "), default=_json_default, allow_nan=True)


def _render(doc: dict[str, Any]) -> str:
    """One key per line, one step per line: diff-friendly and easy to follow."""
    lines = [f"  {json.dumps(key)}: {_dumps(doc[key])}" for key in _KEYS if key != "steps"]
    steps = ",\n".join(f"    {_dumps(step)}" for step in doc["steps"])
    lines.append(f'  "steps": [\n{steps}\n  ]' if steps else '  "steps": []')
    layout = doc.get(_LAYOUT_KEY)
    if layout is not None:
        buffers = ",\n".join(f"    {_dumps(b)}" for b in layout["buffers"])
        lines.append(f'  "{_LAYOUT_KEY}": {{"arena_bytes": {layout["arena_bytes"]}, '
                     f'"buffers": [\n{buffers}\n  ]}}')
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_schedule(schedule: Schedule, graph: TrainingGraph, path: str | Path) -> None:
    """Write ``schedule`` (made for ``graph``) as a JSON schedule file, atomically."""
    doc = schedule_to_dict(schedule, graph)
    try:
        text = _render(doc)
    except (TypeError, ValueError) as err:
        raise ScheduleError(f"schedule metadata cannot be written as JSON: {err}") from None
    atomic_write_text(path, text)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _steps_from_list(raw_steps: Any, index: dict[str, int]) -> list[Step]:
    if not isinstance(raw_steps, list):
        raise _Problem("steps", f"{type(raw_steps).__name__}: must be a list", "bad_format")
    actions = {a.value: a for a in Action}
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        where = f"steps[{i}]"
        if not isinstance(raw, list) or len(raw) != 3:
            raise _Problem(where, f"{_short(raw)}: must be [action, op name, stage]",
                           "bad_step", i)
        action, name, stage = raw
        if not isinstance(action, str) or action not in actions:
            raise _Problem(where, f"action {_short(action)}: must be one of "
                                  f"{', '.join(actions)}", "unknown_action", i)
        if not isinstance(name, str) or name not in index:
            raise _Problem(where, f"op {_short(name)} is not in the ops list", "unknown_op", i)
        if not _is_int(stage) or stage < 0:
            raise _Problem(where, f"stage {_short(stage)}: must be a non-negative integer",
                           "bad_stage", i)
        steps.append(Step(actions[action], index[name], stage))
    return steps


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _from_dict(data: Any, graph: TrainingGraph | None, accept_edits: bool) -> Schedule:
    if not isinstance(data, dict):
        raise _Problem("", "top level must be a JSON object", "bad_format")
    if data.get("format") != FORMAT:
        raise _Problem("", f"format = {_short(data.get('format'))}: must be {FORMAT!r}",
                       "bad_format")
    version = data.get("version")
    if not _is_int(version) or version not in (1, VERSION):
        raise _Problem("", f"version = {_short(version)}: this poetsim reads versions 1 to "
                           f"{VERSION}", "unsupported_version")
    keys = _KEYS if version == 1 else (*_KEYS, _LAYOUT_KEY)
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise _Problem("", f"unknown top-level key {unknown[0]!r}; allowed in version "
                           f"{version}: {', '.join(keys)}", "bad_format")
    missing = [key for key in _KEYS if key not in data]
    if missing:
        raise _Problem("", f"missing key {missing[0]!r}", "bad_format")
    name, fingerprint, metadata = data["graph"], data["graph_fingerprint"], data["metadata"]
    if not isinstance(name, str):
        raise _Problem("graph", f"{_short(name)}: must be a string", "bad_format")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise _Problem("graph_fingerprint", f"{_short(fingerprint)}: must be a non-empty string",
                       "bad_format")
    if not isinstance(metadata, dict):
        raise _Problem("metadata", f"{_short(metadata)}: must be an object", "bad_format")
    try:
        parse_metadata(metadata)
    except InputError as err:
        raise _Problem("", str(err), "bad_metadata") from None
    names = data["ops"]
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        raise _Problem("ops", "must be a list of op names", "bad_format")
    index: dict[str, int] = {}
    for i, op_name in enumerate(names):
        if op_name in index:
            raise _Problem(f"ops[{i}]", f"duplicate op name {op_name!r}", "bad_format")
        index[op_name] = i
    if graph is not None:
        expected = graph_fingerprint(graph)
        if fingerprint != expected:
            raise _Problem("", f"made for graph {name!r} with fingerprint {fingerprint[:12]!r}, "
                               f"not for graph {graph.name!r} (fingerprint {expected[:12]!r})",
                           "fingerprint_mismatch")
        graph_names = [op.name for op in graph.ops]
        if names != graph_names:
            at = next((i for i, (a, b) in enumerate(zip(names, graph_names)) if a != b),
                      min(len(names), len(graph_names)))
            raise _Problem(f"ops[{at}]", f"the ops list does not match graph {graph.name!r} "
                                         "although the fingerprint does", "ops_mismatch")
    steps = _steps_from_list(data["steps"], index)
    layout = (_layout_from(data[_LAYOUT_KEY], index, len(steps)) if _LAYOUT_KEY in data
              else None)
    # last: a malformed file is named for what is wrong with it
    recorded = metadata.get(DIGEST_FIELD)
    if recorded is not None and not accept_edits and recorded != content_digest(data):
        raise _Problem(f"metadata.{DIGEST_FIELD}", "the file was changed after poetsim "
                       "wrote it (its content no longer matches its digest), so its request, "
                       "steps or figures may not be what was solved; judge it as it is with "
                       "--accept-edits", "edited")
    return Schedule(name, fingerprint, steps, metadata, layout)


def _layout_from(raw: Any, index: dict[str, int], n: int) -> Layout:
    """A layout's form: every number a whole number in range, every op in the ops list."""
    if not isinstance(raw, dict) or set(raw) != {"arena_bytes", "buffers"}:
        raise _Problem(_LAYOUT_KEY, f"{_short(raw)}: must be an object with arena_bytes and "
                                    "buffers", "bad_layout")
    arena = raw["arena_bytes"]
    if not _is_int(arena) or arena < 0:
        raise _Problem(f"{_LAYOUT_KEY}.arena_bytes", f"{_short(arena)}: must be a whole number "
                                                     "of bytes", "bad_layout")
    if not isinstance(raw["buffers"], list):
        raise _Problem(f"{_LAYOUT_KEY}.buffers", "must be a list", "bad_layout")
    buffers = []
    for i, item in enumerate(raw["buffers"]):
        where = f"{_LAYOUT_KEY}.buffers[{i}]"
        if not isinstance(item, list) or len(item) != 6:
            raise _Problem(where, f"{_short(item)}: must be [kind, op name, start, end, "
                                  "size_bytes, offset_bytes]", "bad_layout")
        kind, name, start, end, size, offset = item
        if kind not in KINDS:
            raise _Problem(where, f"kind {_short(kind)}: must be one of {', '.join(KINDS)}",
                           "bad_layout")
        if (kind == "resident") != (name is None) or (name is not None and name not in index):
            raise _Problem(where, f"op {_short(name)}: must be null for the resident state, "
                                  "else an op of the ops list", "bad_layout")
        for field, value, low, high in (("start", start, 0, n), ("end", end, 1, n),
                                         ("size_bytes", size, 1, None),
                                         ("offset_bytes", offset, 0, None)):
            if not _is_int(value) or value < low or (high is not None and value > high):
                bound = f"[{low}, {high}]" if high is not None else f">= {low}"
                raise _Problem(where, f"{field} = {_short(value)}: must be a whole number "
                                      f"{bound}", "bad_layout")
        if start >= end:
            raise _Problem(where, f"start {start} must come before end {end}", "bad_layout")
        buffers.append(Buffer(kind, -1 if name is None else index[name], start, end, size,
                              offset))
    return Layout(arena, tuple(buffers))


def schedule_from_dict(data: Any, graph: TrainingGraph | None = None, *,
                       source: str = "schedule", accept_edits: bool = False) -> Schedule:
    """Validate a parsed schedule document; with ``graph``, check it was made for it.
    A document whose ``metadata.digest`` does not match its content was edited after it
    was written [``edited``]: refused unless ``accept_edits``."""
    try:
        return _from_dict(data, graph, accept_edits)
    except _Problem as problem:
        raise problem.error(source) from None


def read_schedule(path: str | Path, graph: TrainingGraph | None = None, *,
                  accept_edits: bool = False) -> Schedule:
    """Read a JSON schedule file; with ``graph``, check the fingerprint matches; a file
    changed after poetsim wrote it is refused unless ``accept_edits``
    (:func:`schedule_from_dict`).

    Any problem raises a one-line :class:`ScheduleFileError` naming the file.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ScheduleFileError(f"{path}: cannot read schedule file: {err.strerror} [unreadable]",
                                "unreadable") from None
    except UnicodeDecodeError:
        raise ScheduleFileError(f"{path}: not a text file (a binary schedule? use "
                                "read_schedule_binary) [not_json]", "not_json") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ScheduleFileError(f"{path}: not valid JSON: {err} [not_json]", "not_json") from None
    except RecursionError:
        raise ScheduleFileError(f"{path}: not valid JSON: arrays or objects nested too deeply "
                                "[not_json]", "not_json") from None
    except ValueError as err:  # a number of thousands of digits
        raise ScheduleFileError(f"{path}: not valid JSON: {err} [not_json]", "not_json") from None
    return schedule_from_dict(data, graph, source=str(path), accept_edits=accept_edits)


# ---------------------------------------------------------------------------- binary


def _varint(value: int, out: bytearray) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


def _stage_runs(steps: Sequence[Step]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for step in steps:
        if runs and runs[-1][0] == step.stage:
            runs[-1] = (step.stage, runs[-1][1] + 1)
        else:
            runs.append((step.stage, 1))
    return runs


def _fingerprint_prefix(fingerprint: str) -> bytes:
    try:
        prefix = bytes.fromhex(fingerprint[:16])
    except ValueError:
        prefix = b""
    if len(prefix) != 8:
        raise ScheduleError(f"graph fingerprint {fingerprint[:20]!r}: must start with 16 hex "
                            "digits (a SHA-256 digest from graph_fingerprint)")
    return prefix


def encode_binary(schedule: Schedule, graph: TrainingGraph | None = None, *,
                  stages: bool = True) -> bytes:
    """The compact binary form of ``schedule`` (layout in the module docstring).

    The op count in the header is ``len(graph)``, or without a graph the highest op index
    + 1 (the same for any valid schedule, which computes every op). ``stages=False`` drops
    the stage section.
    """
    if graph is not None:
        _check_fits(schedule, graph)
        op_count = len(graph.ops)
    else:
        op_count = max((step.op for step in schedule.steps), default=-1) + 1
    version = 2 if any(step.action in _VERSION_2 for step in schedule.steps) else 1
    most = 1 << _index_bits(version, True)
    if op_count > most:
        raise ScheduleError(f"graph has {op_count} ops: the binary format holds at most "
                            f"{most}")
    if len(schedule.steps) >= 1 << 32:
        raise ScheduleError(f"{len(schedule.steps)} steps: the binary format holds fewer "
                            "than 2**32")
    wide = op_count > 1 << _index_bits(version, False)
    layout = schedule.layout
    flags = ((_FLAG_WIDE if wide else 0) | (_FLAG_STAGES if stages else 0)
             | (_FLAG_LAYOUT if layout is not None else 0))
    out = bytearray(_HEADER.pack(BINARY_MAGIC, version, flags, 0, op_count,
                                 len(schedule.steps),
                                 _fingerprint_prefix(schedule.graph_fingerprint)))
    shift, fmt = _index_bits(version, wide), ("<I" if wide else "<H")
    words = [(_CODES[step.action] << shift) | step.op for step in schedule.steps]
    out += struct.pack(f"{fmt[0]}{len(words)}{fmt[1]}", *words)
    if stages:
        runs = _stage_runs(schedule.steps)
        _varint(len(runs), out)
        previous = 0
        for stage, length in runs:
            _varint(_zigzag(stage - previous), out)
            _varint(length, out)
            previous = stage
    if layout is not None:
        _varint(layout.arena_bytes, out)
        _varint(len(layout.buffers), out)
        for b in layout.buffers:
            for value in (KINDS.index(b.kind), b.op + 1, b.start, b.end - b.start,
                          b.size_bytes, b.offset_bytes):
                _varint(value, out)
    out += _CRC.pack(zlib.crc32(out))
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes, start: int, end: int, section: str = "stage section",
                 rule: str = "bad_stages") -> None:
        self.data, self.pos, self.end = data, start, end
        self.section, self.rule = section, rule

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= self.end:
                raise _Problem(self.section, "ends inside a number", self.rule)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise _Problem(self.section, "number longer than 64 bits", self.rule)


def _decode_layout(reader: _Reader, op_count: int, step_count: int) -> Layout:
    arena, count = reader.varint(), reader.varint()
    buffers = []
    for i in range(count):
        kind, op, start, length, size, offset = (reader.varint() for _ in range(6))
        if (kind >= len(KINDS) or op > op_count or (kind == 0) != (op == 0) or length == 0
                or start + length > step_count or size == 0):
            raise _Problem("layout section", f"buffer {i} (kind {kind}, op {op - 1}, steps "
                           f"{start} + {length}, {size} B) is invalid", "bad_layout")
        buffers.append(Buffer(KINDS[kind], op - 1, start, start + length, size, offset))
    return Layout(arena, tuple(buffers))


def _decode(data: bytes, fingerprint: str, op_count_expected: int | None
            ) -> tuple[list[Step], Layout | None]:
    minimum = _HEADER.size + _CRC.size
    if data[:4] != BINARY_MAGIC and not (len(data) < 4 and BINARY_MAGIC.startswith(data)):
        raise _Problem("", f"starts with {bytes(data[:4])!r}, not {BINARY_MAGIC!r}: not a "
                           "poetsim binary schedule", "bad_magic")
    if len(data) < minimum:
        raise _Problem("", f"{len(data)} bytes: truncated (header and checksum need "
                           f"{minimum})", "truncated")
    (stored_crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(data[: -_CRC.size]) != stored_crc:
        raise _Problem("", "checksum mismatch: the data is corrupted or truncated",
                       "checksum_mismatch")
    magic, version, flags, reserved, op_count, step_count, prefix = _HEADER.unpack_from(data)
    if version not in _ACTION_BITS:
        raise _Problem("", f"version {version}: this poetsim reads versions 1 to "
                           f"{BINARY_VERSION}", "unsupported_version")
    if flags & ~(_FLAG_WIDE | _FLAG_STAGES | _FLAG_LAYOUT) or reserved:
        raise _Problem("", f"header flags 0x{flags:02x} / reserved {reserved}: unknown bits set",
                       "bad_header")
    if prefix.hex() != fingerprint[:16]:
        raise _Problem("", f"made for a graph with fingerprint {prefix.hex()!r}..., not "
                           f"{fingerprint[:16]!r}...", "fingerprint_mismatch")
    if op_count_expected is not None and op_count != op_count_expected:
        raise _Problem("", f"made for a graph of {op_count} ops, the graph has "
                           f"{op_count_expected}", "op_count_mismatch")
    wide = bool(flags & _FLAG_WIDE)
    word, shift = (4 if wide else 2), _index_bits(version, wide)
    body_end = len(data) - _CRC.size
    steps_end = _HEADER.size + step_count * word
    if steps_end > body_end:
        raise _Problem("", f"{step_count} steps announced but only "
                           f"{(body_end - _HEADER.size) // word} present", "truncated")
    words = struct.unpack_from(f"<{step_count}{'I' if wide else 'H'}", data, _HEADER.size)
    mask = (1 << shift) - 1
    stage_of = [0] * step_count
    if flags & _FLAG_STAGES:
        reader = _Reader(data, steps_end, body_end)
        runs = reader.varint()
        position, stage = 0, 0
        for _ in range(runs):
            stage += _unzigzag(reader.varint())
            length = reader.varint()
            if stage < 0 or length == 0 or position + length > step_count:
                raise _Problem("stage section", f"run at step {position} (stage {stage}, "
                               f"length {length}) is invalid", "bad_stages")
            stage_of[position:position + length] = [stage] * length
            position += length
        if position != step_count:
            raise _Problem("stage section", f"covers {position} of {step_count} steps",
                           "bad_stages")
        steps_end = reader.pos
    layout = None
    if flags & _FLAG_LAYOUT:
        reader = _Reader(data, steps_end, body_end, "layout section", "bad_layout")
        layout = _decode_layout(reader, op_count, step_count)
        steps_end = reader.pos
    if steps_end != body_end:
        raise _Problem("", f"{body_end - steps_end} unexpected bytes after the steps",
                       "trailing_bytes")
    steps: list[Step] = []
    for i, value in enumerate(words):
        op = value & mask
        if op >= op_count:
            raise _Problem(f"steps[{i}]", f"op index {op} is outside the graph's {op_count} "
                                          "ops", "unknown_op", i)
        action = _ACTIONS.get(value >> shift)
        if action is None:  # pragma: no cover - versions 1 and 2 give every code an action
            raise _Problem(f"steps[{i}]", f"action code {value >> shift} is not one of "
                                          f"version {version}'s", "unknown_action", i)
        steps.append(Step(action, op, stage_of[i]))
    return steps, layout


def decode_binary(data: bytes, graph: TrainingGraph | str, *, graph_name: str | None = None,
                  source: str = "binary schedule") -> Schedule:
    """Decode :func:`encode_binary`'s output for ``graph`` (a graph, or its fingerprint).

    The binary holds only the first 8 bytes of the fingerprint; they must match. The
    schedule gets the graph's name (or ``graph_name``), its full fingerprint and empty
    metadata. Problems raise a one-line :class:`ScheduleFileError` starting with ``source``.
    """
    if isinstance(graph, TrainingGraph):
        fingerprint, op_count = graph_fingerprint(graph), len(graph.ops)
        name = graph.name if graph_name is None else graph_name
    else:
        fingerprint, op_count, name = graph, None, graph_name or ""
    try:
        steps, layout = _decode(bytes(data), fingerprint, op_count)
    except _Problem as problem:
        raise problem.error(source) from None
    return Schedule(name, fingerprint, steps, {}, layout)


def write_schedule_binary(schedule: Schedule, path: str | Path,
                          graph: TrainingGraph | None = None, *, stages: bool = True) -> None:
    """Write :func:`encode_binary`'s output to ``path``, atomically."""
    atomic_write_bytes(path, encode_binary(schedule, graph, stages=stages))


def is_binary_schedule(path: str | Path) -> bool:
    """Whether ``path`` starts with the binary form's magic (False when it cannot be read:
    :func:`read_schedule` then says why)."""
    try:
        with open(path, "rb") as raw:
            return raw.read(len(BINARY_MAGIC)) == BINARY_MAGIC
    except OSError:
        return False


def read_schedule_binary(path: str | Path, graph: TrainingGraph | str, *,
                         graph_name: str | None = None) -> Schedule:
    """Read a binary schedule file (see :func:`decode_binary`)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ScheduleFileError(f"{path}: cannot read schedule file: {err.strerror} [unreadable]",
                                "unreadable") from None
    return decode_binary(data, graph, graph_name=graph_name, source=str(path))
