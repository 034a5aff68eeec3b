"""The compact binary schedule file for the device (the JSON form is
:mod:`poetsim.schedule.io`).

Binary (versions 1 to 3)
------------------------
Little-endian (the byte order of Cortex-M and Cortex-A cores), laid out so that the step
words are naturally aligned::

    offset  size  field
    0       4     magic b"POET"
    4       1     version (1, 2 or 3)
    5       1     flags: bit 0 = 32-bit step words, bit 1 = stage section present,
                  bit 2 = layout section present
    6       2     reserved, 0
    8       4     op count of the graph (uint32)
    12      4     step count (uint32)
    16      8     first 8 bytes of the graph fingerprint (the first 16 hex digits)
    24      ...   steps: one word each
    ...     ...   stage section (if flag bit 1)
    ...     ...   layout section (if flag bit 2)
    ...     ...   move section (version 3)
    end-4   4     CRC-32 (zlib) of all bytes before it

A step word holds the action in its top 2 bits (compute 0, page_out 1, page_in 2, free 3)
and the op index in the rest: 16-bit words (14-bit index) when the graph has at most
16384 ops, 32-bit words (30-bit index) otherwise.

Version 2 is the same with the action in the top 3 bits, adding read_weights 4,
write_weights 5, hold_weights 6 and drop_weights 7 (13-bit index in 16-bit words, up to
8192 ops; 29-bit in 32-bit words). A schedule with weight or hold steps is written as
version 2, any other as version 1; both are read.

Version 3 is version 2 with the action in the top 4 bits (12-bit index in 16-bit words, up
to 4096 ops; 28-bit in 32-bit words), adding move 8 (compaction,
:mod:`poetsim.schedule.ops`), and a move section after the layout section: per MOVE step,
in list order, its from and to offsets in bytes as varints (they must differ
[``bad_move``]). A schedule with a move is written as version 3; every version is read.

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

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from poetsim.errors import FileProblem, ScheduleFileError
from poetsim.fileio import atomic_write_bytes
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.schedule.check import ScheduleError
from poetsim.schedule.layout import KINDS, Buffer, Layout
from poetsim.schedule.ops import HOLD_ACTIONS, WEIGHT_ACTIONS, Action, Schedule, Step
from poetsim.schedule.problems import check_fits

__all__ = ["BINARY_MAGIC", "BINARY_VERSION", "decode_binary", "encode_binary",
           "is_binary_schedule", "read_schedule_binary", "write_schedule_binary"]

BINARY_MAGIC = b"POET"
#: The newest binary version; a schedule without move steps is still written as version 2,
#: one without weight or hold steps either as version 1.
BINARY_VERSION = 3

_HEADER = struct.Struct("<4sBBHII8s")
_CRC = struct.Struct("<I")
_FLAG_WIDE = 0x01
_FLAG_STAGES = 0x02
_FLAG_LAYOUT = 0x04
_CODES = {Action.COMPUTE: 0, Action.PAGE_OUT: 1, Action.PAGE_IN: 2, Action.FREE: 3,
          Action.READ_WEIGHTS: 4, Action.WRITE_WEIGHTS: 5, Action.HOLD_WEIGHTS: 6,
          Action.DROP_WEIGHTS: 7, Action.MOVE: 8}
_ACTIONS = {code: action for action, code in _CODES.items()}
#: The actions only version 2 can hold.
_VERSION_2 = WEIGHT_ACTIONS | HOLD_ACTIONS
#: Bits of a step word that hold the action, per binary version.
_ACTION_BITS = {1: 2, 2: 3, 3: 4}


def _version(steps: Sequence[Step]) -> int:
    """The oldest binary version that holds ``steps``."""
    actions = {step.action for step in steps}
    if Action.MOVE in actions:
        return 3
    return 2 if actions & _VERSION_2 else 1


def _index_bits(version: int, wide: bool) -> int:
    """Bits of a step word that hold the op index."""
    return (32 if wide else 16) - _ACTION_BITS[version]


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
        check_fits(schedule, graph)
        op_count = len(graph.ops)
    else:
        op_count = max((step.op for step in schedule.steps), default=-1) + 1
    version = _version(schedule.steps)
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
    if version >= 3:
        for step in schedule.steps:
            if step.action is Action.MOVE:
                _varint(step.from_offset_bytes, out)
                _varint(step.to_offset_bytes, out)
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
                raise FileProblem(self.section, "ends inside a number", self.rule)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise FileProblem(self.section, "number longer than 64 bits", self.rule)


def _decode_layout(reader: _Reader, op_count: int, step_count: int) -> Layout:
    arena, count = reader.varint(), reader.varint()
    buffers = []
    for i in range(count):
        kind, op, start, length, size, offset = (reader.varint() for _ in range(6))
        if (kind >= len(KINDS) or op > op_count or (kind == 0) != (op == 0) or length == 0
                or start + length > step_count or size == 0):
            raise FileProblem("layout section", f"buffer {i} (kind {kind}, op {op - 1}, steps "
                              f"{start} + {length}, {size} B) is invalid", "bad_layout")
        buffers.append(Buffer(KINDS[kind], op - 1, start, start + length, size, offset))
    return Layout(arena, tuple(buffers))


def _decode_header(data: bytes, fingerprint: str, op_count_expected: int | None
                   ) -> tuple[int, int, int, int]:
    """The header checked against the data's checksum and the graph: (version, flags, op
    count, step count)."""
    minimum = _HEADER.size + _CRC.size
    if data[:4] != BINARY_MAGIC and not (len(data) < 4 and BINARY_MAGIC.startswith(data)):
        raise FileProblem("", f"starts with {bytes(data[:4])!r}, not {BINARY_MAGIC!r}: not a "
                              "poetsim binary schedule", "bad_magic")
    if len(data) < minimum:
        raise FileProblem("", f"{len(data)} bytes: truncated (header and checksum need "
                              f"{minimum})", "truncated")
    (stored_crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(data[: -_CRC.size]) != stored_crc:
        raise FileProblem("", "checksum mismatch: the data is corrupted or truncated",
                          "checksum_mismatch")
    magic, version, flags, reserved, op_count, step_count, prefix = _HEADER.unpack_from(data)
    if version not in _ACTION_BITS:
        raise FileProblem("", f"version {version}: this poetsim reads versions 1 to "
                              f"{BINARY_VERSION}", "unsupported_version")
    if flags & ~(_FLAG_WIDE | _FLAG_STAGES | _FLAG_LAYOUT) or reserved:
        raise FileProblem("", f"header flags 0x{flags:02x} / reserved {reserved}: unknown bits set",
                          "bad_header")
    if prefix.hex() != fingerprint[:16]:
        raise FileProblem("", f"made for a graph with fingerprint {prefix.hex()!r}..., not "
                              f"{fingerprint[:16]!r}...", "fingerprint_mismatch")
    if op_count_expected is not None and op_count != op_count_expected:
        raise FileProblem("", f"made for a graph of {op_count} ops, the graph has "
                              f"{op_count_expected}", "op_count_mismatch")
    return version, flags, op_count, step_count


def _decode_stages(reader: _Reader, step_count: int) -> list[int]:
    """Every step's stage, from the run-length encoded stage section."""
    stage_of = [0] * step_count
    runs = reader.varint()
    position, stage = 0, 0
    for _ in range(runs):
        stage += _unzigzag(reader.varint())
        length = reader.varint()
        if stage < 0 or length == 0 or position + length > step_count:
            raise FileProblem("stage section", f"run at step {position} (stage {stage}, "
                                               f"length {length}) is invalid", "bad_stages")
        stage_of[position:position + length] = [stage] * length
        position += length
    if position != step_count:
        raise FileProblem("stage section", f"covers {position} of {step_count} steps",
                          "bad_stages")
    return stage_of


def _decode_steps(words: Sequence[int], stage_of: list[int], version: int, shift: int,
                  op_count: int, moves: _Reader | None) -> list[Step]:
    """The step words as steps: the op index below ``shift`` bits, the action above; a
    MOVE's offsets from the move section (``moves``)."""
    mask = (1 << shift) - 1
    steps: list[Step] = []
    for i, value in enumerate(words):
        op = value & mask
        if op >= op_count:
            raise FileProblem(f"steps[{i}]", f"op index {op} is outside the graph's {op_count} "
                                             "ops", "unknown_op", i)
        action = _ACTIONS.get(value >> shift)
        if action is None or (action is Action.MOVE and moves is None):
            raise FileProblem(f"steps[{i}]", f"action code {value >> shift} is not one of "
                                             f"version {version}'s", "unknown_action", i)
        if action is Action.MOVE:
            source, target = moves.varint(), moves.varint()  # type: ignore[union-attr]
            if source == target:
                raise FileProblem(f"steps[{i}]", f"move of op {op} from {source} to {target}: "
                                                 "the offsets must differ", "bad_move", i)
            steps.append(Step.move(op, stage_of[i], source, target))
        else:
            steps.append(Step(action, op, stage_of[i]))
    return steps


def _decode(data: bytes, fingerprint: str, op_count_expected: int | None
            ) -> tuple[list[Step], Layout | None]:
    version, flags, op_count, step_count = _decode_header(data, fingerprint, op_count_expected)
    wide = bool(flags & _FLAG_WIDE)
    word, shift = (4 if wide else 2), _index_bits(version, wide)
    body_end = len(data) - _CRC.size
    steps_end = _HEADER.size + step_count * word
    if steps_end > body_end:
        raise FileProblem("", f"{step_count} steps announced but only "
                              f"{(body_end - _HEADER.size) // word} present", "truncated")
    words = struct.unpack_from(f"<{step_count}{'I' if wide else 'H'}", data, _HEADER.size)
    stage_of = [0] * step_count
    if flags & _FLAG_STAGES:
        reader = _Reader(data, steps_end, body_end)
        stage_of = _decode_stages(reader, step_count)
        steps_end = reader.pos
    layout = None
    if flags & _FLAG_LAYOUT:
        reader = _Reader(data, steps_end, body_end, "layout section", "bad_layout")
        layout = _decode_layout(reader, op_count, step_count)
        steps_end = reader.pos
    moves = _Reader(data, steps_end, body_end, "move section", "bad_move") if version >= 3 \
        else None
    steps = _decode_steps(words, stage_of, version, shift, op_count, moves)
    if moves is not None:
        steps_end = moves.pos
    if steps_end != body_end:
        raise FileProblem("", f"{body_end - steps_end} unexpected bytes after the steps",
                          "trailing_bytes")
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
    except FileProblem as problem:
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
