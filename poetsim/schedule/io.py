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

Version 3 adds the compaction step ``move`` (:mod:`poetsim.schedule.ops`), written
``["move", op name, stage, from_offset_bytes, to_offset_bytes]``: the two arena offsets
are whole non-negative numbers of bytes and differ [``bad_move``]. A schedule with a move
is written as version 3, any other as before; versions 1 and 2 hold no move
[``unknown_action``].

The compact binary form for the device is :mod:`poetsim.schedule.binary`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from poetsim.errors import FileProblem, InputError, ScheduleFileError
from poetsim.fileio import atomic_write_text
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.schedule.binary import (
    BINARY_MAGIC,
    BINARY_VERSION,
    decode_binary,
    encode_binary,
    is_binary_schedule,
    read_schedule_binary,
    write_schedule_binary,
)
from poetsim.schedule.check import ScheduleError
from poetsim.schedule.layout import KINDS, Buffer, Layout
from poetsim.schedule.metadata import parse_metadata
from poetsim.schedule.ops import Action, Schedule, Step
from poetsim.schedule.problems import check_fits

__all__ = [
    "BINARY_MAGIC", "BINARY_VERSION", "DIGEST_FIELD", "FORMAT", "VERSION",
    "ScheduleFileError", "content_digest", "decode_binary", "encode_binary",
    "is_binary_schedule", "read_schedule", "read_schedule_binary",
    "schedule_from_dict", "schedule_to_dict", "write_schedule", "write_schedule_binary",
]

FORMAT = "poetsim-schedule"
#: The newest JSON version (with MOVE steps); a schedule without one is written as version
#: 2 with a layout, 1 without.
VERSION = 3
#: The versions this poetsim reads.
_VERSIONS = (1, 2, 3)

_KEYS = ("format", "version", "graph", "graph_fingerprint", "metadata", "ops", "steps")
#: Top-level keys of version 2 beyond version 1's.
_LAYOUT_KEY = "layout"


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
    check_fits(schedule, graph)
    names = [op.name for op in graph.ops]
    doc: dict[str, Any] = {
        "format": FORMAT, "version": _version(schedule),
        "graph": schedule.graph_name,
        "graph_fingerprint": schedule.graph_fingerprint, "metadata": dict(schedule.metadata),
        "ops": names,
        "steps": [_step_to_list(step, names) for step in schedule.steps],
    }
    if schedule.layout is not None:
        doc[_LAYOUT_KEY] = {
            "arena_bytes": schedule.layout.arena_bytes,
            "buffers": [[b.kind, None if b.op < 0 else names[b.op], b.start, b.end,
                         b.size_bytes, b.offset_bytes] for b in schedule.layout.buffers]}
    doc["metadata"][DIGEST_FIELD] = content_digest(doc)
    return doc


def _version(schedule: Schedule) -> int:
    """The oldest version that holds ``schedule``."""
    if any(step.action is Action.MOVE for step in schedule.steps):
        return 3
    return 1 if schedule.layout is None else 2


def _step_to_list(step: Step, names: list[str]) -> list[Any]:
    out: list[Any] = [step.action.value, names[step.op], step.stage]
    if step.action is Action.MOVE:
        out += [step.from_offset_bytes, step.to_offset_bytes]
    return out


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


def _steps_from_list(raw_steps: Any, index: dict[str, int], version: int) -> list[Step]:
    if not isinstance(raw_steps, list):
        raise FileProblem("steps", f"{type(raw_steps).__name__}: must be a list", "bad_format")
    actions = {a.value: a for a in Action if version >= 3 or a is not Action.MOVE}
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        where = f"steps[{i}]"
        move = isinstance(raw, list) and len(raw) > 3 and raw[0] == Action.MOVE.value
        if not isinstance(raw, list) or (len(raw) != 3 and not move):
            raise FileProblem(where, f"{_short(raw)}: must be [action, op name, stage]",
                              "bad_step", i)
        action, name, stage = raw[:3]
        if not isinstance(action, str) or action not in actions:
            later = " (move: version 3)" if action == Action.MOVE.value else ""
            raise FileProblem(where, f"action {_short(action)}: must be one of "
                                     f"{', '.join(actions)}{later}", "unknown_action", i)
        if not isinstance(name, str) or name not in index:
            raise FileProblem(where, f"op {_short(name)} is not in the ops list", "unknown_op", i)
        if not _is_int(stage) or stage < 0:
            raise FileProblem(where, f"stage {_short(stage)}: must be a non-negative integer",
                              "bad_stage", i)
        if actions[action] is Action.MOVE:
            steps.append(_move_from(raw, index[name], stage, where, i))
        else:
            steps.append(Step(actions[action], index[name], stage))
    return steps


def _move_from(raw: list[Any], op: int, stage: int, where: str, i: int) -> Step:
    """A ``move`` step's offsets checked: whole, non-negative, different."""
    if len(raw) != 5:
        raise FileProblem(where, f"{_short(raw)}: a move is [\"move\", op name, stage, "
                                 "from_offset_bytes, to_offset_bytes]", "bad_move", i)
    source, target = raw[3], raw[4]
    for label, value in (("from_offset_bytes", source), ("to_offset_bytes", target)):
        if not _is_int(value) or value < 0:
            raise FileProblem(where, f"move of {_short(raw[1])}: {label} {_short(value)}: "
                                     "must be a non-negative whole number of bytes",
                              "bad_move", i)
    if source == target:
        raise FileProblem(where, f"move of {raw[1]!r} from {source} to {target}: the offsets "
                                 "must differ (a move must move)", "bad_move", i)
    return Step.move(op, stage, source, target)


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_top_level(data: Any) -> None:
    """The document's form: an object of this format, a version read here, its keys."""
    if not isinstance(data, dict):
        raise FileProblem("", "top level must be a JSON object", "bad_format")
    if data.get("format") != FORMAT:
        raise FileProblem("", f"format = {_short(data.get('format'))}: must be {FORMAT!r}",
                          "bad_format")
    version = data.get("version")
    if not _is_int(version) or version not in _VERSIONS:
        raise FileProblem("", f"version = {_short(version)}: this poetsim reads versions 1 to "
                              f"{VERSION}", "unsupported_version")
    keys = _KEYS if version == 1 else (*_KEYS, _LAYOUT_KEY)
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise FileProblem("", f"unknown top-level key {unknown[0]!r}; allowed in version "
                              f"{version}: {', '.join(keys)}", "bad_format")
    missing = [key for key in _KEYS if key not in data]
    if missing:
        raise FileProblem("", f"missing key {missing[0]!r}", "bad_format")


def _op_index(data: dict[str, Any], graph: TrainingGraph | None) -> dict[str, int]:
    """Op name -> index, from the file's ops list (which must be the graph's, if given)."""
    name, fingerprint = data["graph"], data["graph_fingerprint"]
    names = data["ops"]
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        raise FileProblem("ops", "must be a list of op names", "bad_format")
    index: dict[str, int] = {}
    for i, op_name in enumerate(names):
        if op_name in index:
            raise FileProblem(f"ops[{i}]", f"duplicate op name {op_name!r}", "bad_format")
        index[op_name] = i
    if graph is not None:
        expected = graph_fingerprint(graph)
        if fingerprint != expected:
            raise FileProblem("", f"made for graph {name!r} with fingerprint {fingerprint[:12]!r}, "
                                  f"not for graph {graph.name!r} (fingerprint {expected[:12]!r})",
                              "fingerprint_mismatch")
        graph_names = [op.name for op in graph.ops]
        if names != graph_names:
            at = next((i for i, (a, b) in enumerate(zip(names, graph_names)) if a != b),
                      min(len(names), len(graph_names)))
            raise FileProblem(f"ops[{at}]", f"the ops list does not match graph {graph.name!r} "
                                            "although the fingerprint does", "ops_mismatch")
    return index


def _from_dict(data: Any, graph: TrainingGraph | None, accept_edits: bool) -> Schedule:
    _check_top_level(data)
    name, fingerprint, metadata = data["graph"], data["graph_fingerprint"], data["metadata"]
    if not isinstance(name, str):
        raise FileProblem("graph", f"{_short(name)}: must be a string", "bad_format")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise FileProblem("graph_fingerprint", f"{_short(fingerprint)}: must be a non-empty string",
                          "bad_format")
    if not isinstance(metadata, dict):
        raise FileProblem("metadata", f"{_short(metadata)}: must be an object", "bad_format")
    try:
        parse_metadata(metadata)
    except InputError as err:
        raise FileProblem("", str(err), "bad_metadata") from None
    index = _op_index(data, graph)
    steps = _steps_from_list(data["steps"], index, data["version"])
    layout = (_layout_from(data[_LAYOUT_KEY], index, len(steps)) if _LAYOUT_KEY in data
              else None)
    _check_arena_moves(metadata, steps)
    # last: a malformed file is named for what is wrong with it
    recorded = metadata.get(DIGEST_FIELD)
    if recorded is not None and not accept_edits and recorded != content_digest(data):
        raise FileProblem(f"metadata.{DIGEST_FIELD}", "the file was changed after poetsim "
                          "wrote it (its content no longer matches its digest), so its request, "
                          "steps or figures may not be what was solved; judge it as it is with "
                          "--accept-edits", "edited")
    return Schedule(name, fingerprint, steps, metadata, layout)


def _check_arena_moves(metadata: Mapping[str, Any], steps: list[Step]) -> None:
    """``metadata.arena_moves`` (recorded by compaction) must count the file's MOVE steps:
    a figure that disagrees with the steps it describes is a damaged file."""
    if "arena_moves" not in metadata:
        return
    recorded = metadata["arena_moves"]
    moves = sum(step.action is Action.MOVE for step in steps)
    if not _is_int(recorded) or recorded != moves:
        raise FileProblem("metadata.arena_moves", f"{_short(recorded)}: the file has {moves} "
                          "MOVE steps; it must count them", "bad_metadata")


def _layout_from(raw: Any, index: dict[str, int], n: int) -> Layout:
    """A layout's form: every number a whole number in range, every op in the ops list."""
    if not isinstance(raw, dict) or set(raw) != {"arena_bytes", "buffers"}:
        raise FileProblem(_LAYOUT_KEY, f"{_short(raw)}: must be an object with arena_bytes and "
                                       "buffers", "bad_layout")
    arena = raw["arena_bytes"]
    if not _is_int(arena) or arena < 0:
        raise FileProblem(f"{_LAYOUT_KEY}.arena_bytes", f"{_short(arena)}: must be a whole number "
                                                        "of bytes", "bad_layout")
    if not isinstance(raw["buffers"], list):
        raise FileProblem(f"{_LAYOUT_KEY}.buffers", "must be a list", "bad_layout")
    buffers = []
    for i, item in enumerate(raw["buffers"]):
        where = f"{_LAYOUT_KEY}.buffers[{i}]"
        if not isinstance(item, list) or len(item) != 6:
            raise FileProblem(where, f"{_short(item)}: must be [kind, op name, start, end, "
                                     "size_bytes, offset_bytes]", "bad_layout")
        kind, name, start, end, size, offset = item
        if kind not in KINDS:
            raise FileProblem(where, f"kind {_short(kind)}: must be one of {', '.join(KINDS)}",
                              "bad_layout")
        if (kind == "resident") != (name is None) or (name is not None and name not in index):
            raise FileProblem(where, f"op {_short(name)}: must be null for the resident state, "
                                     "else an op of the ops list", "bad_layout")
        for field, value, low, high in (("start", start, 0, n), ("end", end, 1, n),
                                         ("size_bytes", size, 1, None),
                                         ("offset_bytes", offset, 0, None)):
            if not _is_int(value) or value < low or (high is not None and value > high):
                bound = f"[{low}, {high}]" if high is not None else f">= {low}"
                raise FileProblem(where, f"{field} = {_short(value)}: must be a whole number "
                                         f"{bound}", "bad_layout")
        if start >= end:
            raise FileProblem(where, f"start {start} must come before end {end}", "bad_layout")
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
    except FileProblem as problem:
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


