"""The JSON graph file format: read, write, and fingerprint training graphs.

A graph file holds a complete training graph, so that costs measured on a device can
replace poetsim's analytic ones. The format (version 1)::

    {
      "format": "poetsim-graph",
      "version": 1,
      "name": "my_net",
      "metadata": {"batch_size": 1, "dtype_bytes": 4, "weight_bytes": 4,
                   "activation_bytes": 4, "gradient_bytes": 4},
      "ops": [
        {"name": "x", "kind": "input", "phase": "forward", "inputs": [],
         "output_bytes": 3072},
        {"name": "conv1", "kind": "conv2d", "phase": "forward", "inputs": ["x"],
         "flops": 1769472, "output_bytes": 65536, "workspace_bytes": 432,
         "param_bytes": 1728,
         "measured": {"compute_time_s": 0.21, "compute_energy_j": 0.0023,
                      "pageout_time_s": 0.6, "pageout_energy_j": 0.05}},
        ...
        {"name": "loss", "kind": "cross_entropy", "phase": "loss", "inputs": ["fc"],
         "flops": 40, "output_bytes": 4},
        {"name": "loss/grad", "kind": "cross_entropy", "phase": "backward",
         "forward_of": "loss", "inputs": ["loss", "fc"], "flops": 30, "output_bytes": 40},
        ...
      ]
    }

Per op: ``name`` (unique), ``kind``, ``phase`` (``forward``, ``loss`` or ``backward``),
``inputs`` (names of the ops whose outputs it reads; the data-dependency edges),
``flops``, ``output_bytes``, and optionally ``workspace_bytes``, ``param_bytes`` (forward
ops), ``frozen_param_bytes`` (forward ops: the part of ``param_bytes`` that is not trained,
at most ``param_bytes``; default 0, everything trained), ``forward_of`` (backward ops: the
op they differentiate), ``gradient_sum_of`` (instead of ``forward_of``, on an op of kind
``grad_sum``: the op read by several others whose gradient it sums), ``inplace_update``
(backward ops of an op with trained parameters: ``true`` when the op applies their SGD
step itself, so their gradient is never resident; its ``workspace_bytes`` must hold that
gradient, the trained parameter bytes at ``gradient_bytes`` per element; default
``false``), ``overwrites`` (the name of one of the op's inputs whose buffer its output may
take over, an in-place kernel; the output must be no larger than that input, and
``workspace_bytes`` must hold what the kernel needs besides) and ``measured`` with any of
``compute_time_s``, ``compute_energy_j``, ``pagein_time_s``, ``pagein_energy_j``,
``pageout_time_s``, ``pageout_energy_j``.
``flops`` may be left out (0) when the op has measured compute time and energy. Ops may
appear in any order; poetsim sorts them topologically and deterministically.

Every number must be finite, not negative and within generous plausibility bounds
(:mod:`poetsim.graph.ops`); a value outside them is almost always a unit slip or a corrupt
file, and is rejected with the file, op, field, value and range:

* ``output_bytes``, ``workspace_bytes``, ``param_bytes``, ``frozen_param_bytes``: whole
  numbers, 0 to 2**44 B
  (16 TiB; sums of half a million such tensors still fit a 64-bit integer);
* ``flops``: 0 to 1e18;
* ``measured.*_time_s``: 0 to 1e6 s; ``measured.*_energy_j``: 0 to 1e9 J.

``metadata`` is free-form except for the precision keys (:mod:`poetsim.graph.precision`):
``weight_bytes``, ``activation_bytes`` and ``gradient_bytes``, each optional and, when
given, one of 1, 2, 4 or 8 (bytes per element of parameters, forward outputs and
gradients / optimizer state). A file without them has every width equal to its
``dtype_bytes``, or 4. The byte sizes of the ops are what they are; the widths tell
:func:`~poetsim.graph.graph.resident_memory` how wide gradients and optimizer state are
and the cost model which throughput an op computes at.

The graph must also be a training graph as reverse-mode autograd derives it
(:func:`poetsim.graph.graph.check_gradients`): exactly one loss; every forward op reaches
it; every backward op depends on it and differentiates one forward (or loss) op; an op
with trained parameters has a backward op (or its weights would never be trained; an op
whose parameters are all frozen needs none); only an op that needs a gradient (it has
trained parameters or reads an op that does) has one, so the data input has none, nor
has a frozen layer before the first trained one; every backward op reads exactly the
gradient of its forward op's output (the outputs of its consumers' backward ops, or their
gradient-sum op), and a gradient-sum op sums exactly those parts; and at least one op has
trained parameters.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from poetsim.errors import GraphError, GraphFileError
from poetsim.fileio import atomic_write_text, read_text
from poetsim.graph.graph import TrainingGraph, check_gradients
from poetsim.graph.ops import MeasuredCosts, Op
from poetsim.graph.precision import check_metadata
from poetsim.memo import PerObject

__all__ = ["FORMAT", "GRAPH_FILE", "VERSION", "graph_fingerprint", "graph_from_dict",
           "graph_to_dict", "read_graph", "write_graph"]

FORMAT = "poetsim-graph"
VERSION = 1

_OP_KEYS = {"name", "kind", "phase", "inputs", "flops", "output_bytes", "workspace_bytes",
            "param_bytes", "frozen_param_bytes", "forward_of", "gradient_sum_of", "inplace_update",
            "overwrites", "measured"}
_MEASURED_KEYS = {"compute_time_s", "compute_energy_j", "pagein_time_s", "pagein_energy_j",
                  "pageout_time_s", "pageout_energy_j"}


def graph_to_dict(graph: TrainingGraph) -> dict[str, Any]:
    """The graph as a JSON-ready document (ops in topological order)."""
    ops = []
    for i, op in enumerate(graph.ops):
        entry: dict[str, Any] = {"name": op.name, "kind": op.kind, "phase": op.phase.value,
                                 "inputs": graph.inputs_of(i), "flops": op.flops,
                                 "output_bytes": op.output_bytes}
        if op.workspace_bytes:
            entry["workspace_bytes"] = op.workspace_bytes
        if op.param_bytes:
            entry["param_bytes"] = op.param_bytes
        if op.frozen_param_bytes:  # absent when everything is trained, as before
            entry["frozen_param_bytes"] = op.frozen_param_bytes
        if op.forward_of is not None:
            entry["forward_of"] = op.forward_of
        if op.gradient_sum_of is not None:
            entry["gradient_sum_of"] = op.gradient_sum_of
        if op.inplace_update:  # absent when the gradient is resident, as before
            entry["inplace_update"] = True
        if op.overwrites is not None:  # absent without an in-place kernel, as before
            entry["overwrites"] = op.overwrites
        if not op.measured.empty:
            entry["measured"] = op.measured.as_dict()
        ops.append(entry)
    return {"format": FORMAT, "version": VERSION, "name": graph.name,
            "metadata": {k: v for k, v in graph.metadata.items() if k != GRAPH_FILE},
            "ops": ops}


def _op_from_dict(raw: Any, position: int) -> tuple[Op, list[str]]:
    where = f"ops[{position}]"
    if not isinstance(raw, dict):
        raise GraphError(f"{where}: must be an object")
    name = raw.get("name")
    label = f"op {name!r} ({where})" if isinstance(name, str) else where
    unknown = sorted(set(raw) - _OP_KEYS)
    if unknown:
        raise GraphError(f"{label}: unknown key {unknown[0]!r}; allowed: "
                         f"{', '.join(sorted(_OP_KEYS))}")
    for key in ("name", "kind", "phase", "output_bytes"):
        if key not in raw:
            raise GraphError(f"{label}: missing key {key!r}")
    inputs = raw.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
        raise GraphError(f"{label}: inputs = {inputs!r}: must be a list of op names")
    measured_raw = raw.get("measured", {})
    if not isinstance(measured_raw, dict):
        raise GraphError(f"{label}: measured = {measured_raw!r}: must be an object")
    unknown = sorted(set(measured_raw) - _MEASURED_KEYS)
    if unknown:
        raise GraphError(f"{label}: unknown key 'measured.{unknown[0]}'; allowed: "
                         f"{', '.join(sorted(_MEASURED_KEYS))}")
    if raw["phase"] not in ("forward", "loss", "backward"):
        raise GraphError(f"{label}: phase = {raw['phase']!r}: must be forward, loss or backward")
    has_measured_compute = {"compute_time_s", "compute_energy_j"} <= set(measured_raw)
    if "flops" not in raw and not has_measured_compute and raw["kind"] != "input":
        raise GraphError(f"{label}: needs flops, or measured compute_time_s and compute_energy_j")
    try:
        op = Op(name=name, kind=raw["kind"], phase=raw["phase"], flops=raw.get("flops", 0.0),
                output_bytes=raw["output_bytes"], workspace_bytes=raw.get("workspace_bytes", 0),
                param_bytes=raw.get("param_bytes", 0), forward_of=raw.get("forward_of"),
                measured=MeasuredCosts(**measured_raw),
                frozen_param_bytes=raw.get("frozen_param_bytes", 0),
                inplace_update=raw.get("inplace_update", False),
                gradient_sum_of=raw.get("gradient_sum_of"), overwrites=raw.get("overwrites"))
    except GraphError as err:
        raise GraphError(f"{err} ({where})") from None
    return op, inputs


def graph_from_dict(data: Any) -> TrainingGraph:
    """Validate a parsed graph document and build the graph."""
    if not isinstance(data, dict):
        raise GraphError("top level must be a JSON object")
    if data.get("format") != FORMAT:
        raise GraphError(f"format = {data.get('format')!r}: must be {FORMAT!r}")
    if data.get("version") != VERSION:
        raise GraphError(f"version = {data.get('version')!r}: this poetsim reads version {VERSION}")
    unknown = sorted(set(data) - {"format", "version", "name", "metadata", "ops"})
    if unknown:
        raise GraphError(f"unknown top-level key {unknown[0]!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise GraphError(f"name = {name!r}: must be a non-empty string")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise GraphError(f"metadata = {metadata!r}: must be an object")
    check_metadata(metadata)
    raw_ops = data.get("ops")
    if not isinstance(raw_ops, list) or not raw_ops:
        raise GraphError("ops: must be a non-empty list")
    ops: list[Op] = []
    inputs: dict[str, list[str]] = {}
    for position, raw in enumerate(raw_ops):
        op, op_inputs = _op_from_dict(raw, position)
        if op.name in inputs:
            raise GraphError(f"op {op.name!r} (ops[{position}]): duplicate op name")
        ops.append(op)
        inputs[op.name] = op_inputs
    graph = TrainingGraph.from_ops(name, ops, inputs, metadata=metadata)
    check_gradients(graph)
    return graph


#: The metadata key that records the graph file a graph was read from.
GRAPH_FILE = "graph_file"


def read_graph(path: str | Path) -> TrainingGraph:
    """Read a graph file; any problem raises a one-line :class:`GraphFileError`."""
    text = read_text(path, GraphFileError, "graph file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise GraphFileError(f"{path}: not valid JSON: {err}") from None
    except RecursionError:
        raise GraphFileError(f"{path}: not valid JSON: arrays or objects nested too deeply") \
            from None
    except ValueError as err:  # a number of thousands of digits
        raise GraphFileError(f"{path}: not valid JSON: {err}") from None
    if isinstance(data, dict) and isinstance(data.get("metadata", {}), dict):
        # where it came from, so that a schedule made for it can find it again (not
        # content: the fingerprint and a written graph file leave it out)
        data = {**data, "metadata": {**data.get("metadata", {}),
                                     GRAPH_FILE: str(Path(path).resolve())}}
    try:
        return graph_from_dict(data)
    except GraphError as err:
        raise GraphFileError(f"{path}: {err}") from None


def write_graph(graph: TrainingGraph, path: str | Path) -> None:
    """Write ``graph`` as a graph file (atomically)."""
    atomic_write_text(path, json.dumps(graph_to_dict(graph), indent=1) + "\n")


#: a graph is immutable, and hashing a 50,000-op graph takes a good part of a second, once
#: per schedule written, checked or read for it
_FINGERPRINTS: PerObject[str] = PerObject()


def _fingerprint(graph: TrainingGraph) -> str:
    canonical = json.dumps(graph_to_dict(graph)["ops"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def graph_fingerprint(graph: TrainingGraph) -> str:
    """SHA-256 of the graph's content (ops, costs and edges; not its name or metadata),
    remembered while the graph lives."""
    return _FINGERPRINTS(graph, _fingerprint)


def fingerprint_known(graph: TrainingGraph) -> bool:
    """Whether :func:`graph_fingerprint` of ``graph`` is already computed (costs nothing)."""
    return _FINGERPRINTS.known(graph)
