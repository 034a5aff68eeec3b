"""Fitting a board file to the user's own measurements (``poetsim boards calibrate``).

Three kinds of measurement, each optional:

* **op times** (CSV ``op,time_s[,energy_j|current_a[,voltage_v]]``): an op of the graph
  by name, or a whole phase (``forward``, ``backward``, ``iteration``), and the seconds it
  took on the board. The compute side of the cost model is linear in the inverse of each op class's
  efficiency (:data:`poetsim.costs.OP_CLASSES`, ``[cpu.efficiency]``): a row's time is
  ``sum_k flops_k / (rate_w(k) * e_c(k))`` over its ops, plus the modelled time of ops in
  no class. The factors ``e`` are fitted by least squares over the rows, each weighted by
  its own time so that a short op counts as much as a long phase, and pulled weakly
  towards the board's own factors; a class is fitted only when some row is mostly of it
  (a phase mixes classes, so it refines classes that single ops pin down). An op the cost model
  prices as memory-bound keeps that side of its roofline, which a fit cannot move: the
  residuals, computed with the fitted board through the whole cost model, show it.
  ``energy_j`` (or ``current_a`` with a voltage) fits ``cpu.active_power_w`` as the
  energy of the rows over their time.
* **a storage benchmark**: SdFat's ``bench`` output as it prints it, or a CSV
  ``op,block_bytes,throughput_bytes_per_s,latency_s`` (``op`` ``read`` or ``write``):
  the throughput of each direction (SdFat: its KB/s, 1000 B per KB; CSV: the rows of the
  largest block), and the per-command latency (SdFat: the average latency of one buffer
  less its transfer; CSV: the mean ``latency_s``).
* **power** (CSV ``state,current_a|power_w[,voltage_v]``): a measured current or power per
  state (:data:`POWER_STATES`).

Every fitted number carries ``source = "measured"`` and its file in ``ref``; the new board
file is the old one's text with those lines replaced (comments and order kept), checked by
loading it before anything is written. Problems are one line naming the file, the row or
key, the value and the rule (:class:`~poetsim.errors.InputError`).
"""

from __future__ import annotations

import csv
import math
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from poetsim.boards.load import board_from_dict
from poetsim.boards.spec import EFFICIENCY_WIDTHS, Board
from poetsim.errors import BoardError, InputError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.graph.precision import compute_widths

__all__ = ["POWER_STATES", "Calibration", "Fitted", "Residual", "calibrate",
           "calibrated_text"]

#: Power states a ``--power`` file may name, and the board number each one sets.
POWER_STATES = {
    "cpu_active": "cpu.active_power_w", "cpu_idle": "cpu.idle_power_w",
    "cpu_sleep": "cpu.sleep_power_w", "dma_active": "dma.active_power_w",
    "storage_read": "storage.read_power_w", "storage_write": "storage.write_power_w",
    "storage_idle": "storage.idle_power_w", "storage_sleep": "storage.sleep_power_w",
}
_PHASES = {"forward": (Phase.FORWARD, Phase.LOSS), "backward": (Phase.BACKWARD,),
           "iteration": (Phase.FORWARD, Phase.LOSS, Phase.BACKWARD)}
_WIDTH_NAME = dict(zip((1, 2, 4), EFFICIENCY_WIDTHS))
#: The pull of a class's factor towards the board's own, against rows weighted by their
#: relative error: negligible beside one row that times the class.
_PRIOR_WEIGHT = 1e-3
#: A row measures a class when at least this share of its modelled compute is that class.
_PINNED_SHARE = 0.5


@attrs.frozen
class Fitted:
    """One fitted board number: dotted ``key``, ``value``, the file it came from and how."""

    key: str
    value: float
    source_file: str
    how: str

    @property
    def ref(self) -> str:
        return f"measured: {self.source_file} ({self.how}; poetsim boards calibrate)"


@attrs.frozen
class Residual:
    """A measurement against what the calibrated board predicts for it."""

    label: str
    measured: float
    predicted: float

    @property
    def relative(self) -> float:
        return self.predicted / self.measured - 1


@attrs.frozen
class Calibration:
    """What a calibration fitted and how well the fitted board reproduces each
    measurement (``residuals`` of op times and storage throughputs)."""

    fitted: tuple[Fitted, ...]
    residuals: tuple[Residual, ...]

    def median_error(self, prefix: str = "") -> float | None:
        """Median absolute relative residual of the rows whose label starts with
        ``prefix``; None without any."""
        errors = [abs(r.relative) for r in self.residuals if r.label.startswith(prefix)]
        return float(np.median(errors)) if errors else None


def _rows(path: str | Path, required: Sequence[str]) -> list[dict[str, str]]:
    """A CSV file's rows, the header holding ``required``; one-line errors."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in reader.fieldnames or []]
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(f"{path}: header {','.join(header) or '(none)'}: must have "
                                 f"the column {missing[0]!r}")
            rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k}
                    for row in reader]
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err.strerror}") from None
    if not rows:
        raise InputError(f"{path}: has no rows: nothing to fit")
    return rows


def _positive(path: str | Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{path}: row {line}: {column} = {text!r}: must be a number > 0")
    return value


# ----------------------------------------------------------------------------- compute

def _op_rows(path: str | Path, graph: TrainingGraph, voltage_v: float | None = None
             ) -> list[tuple[str, list[int], float, float | None]]:
    """(label, ops, seconds, joules or None) per row of an op-times file (``current_a``
    rows: joules from the current, the row's ``voltage_v`` or ``voltage_v``, and the
    time)."""
    rows = _rows(path, ("op", "time_s"))
    out = []
    for line, row in enumerate(rows, start=2):
        name = row["op"]
        if name in _PHASES:
            ops = [k for k, op in enumerate(graph.ops) if op.phase in _PHASES[name]]
        elif name in graph:
            ops = [graph.index(name)]
        else:
            raise InputError(f"{path}: row {line}: op = {name!r}: not an op of graph "
                             f"{graph.name!r}, nor forward, backward or iteration")
        seconds = _positive(path, line, "time_s", row["time_s"])
        joules = None
        if row.get("energy_j"):
            joules = _positive(path, line, "energy_j", row["energy_j"])
        elif row.get("current_a"):
            joules = _watts(path, line, row, voltage_v) * seconds
        out.append((name, ops, seconds, joules))
    return out


def _fit_compute(graph: TrainingGraph, board: Board, path: str | Path,
                 voltage_v: float | None = None
                 ) -> tuple[list[Fitted], list[tuple[str, list[int], float]]]:
    """The ``[cpu.efficiency]`` factors the op times fit (see the module docstring), and
    the rows to judge them by."""
    from poetsim.costs import compute_rate, op_class, op_costs

    rows = _op_rows(path, graph, voltage_v)
    widths = compute_widths(graph)
    nominal = op_costs(graph, attrs.evolve(board, cpu=attrs.evolve(board.cpu, efficiency=None)))
    columns: dict[str, int] = {}
    entries: list[tuple[int, int, float]] = []  # (row, column, seconds at factor 1)
    fixed = np.zeros(len(rows))
    for r, (_, ops, _, _) in enumerate(rows):
        for k in ops:
            op = graph.ops[k]
            name = op_class(op.kind)
            width = _WIDTH_NAME.get(widths[k])
            if name is None or width is None or not op.flops:
                fixed[r] += float(nominal.compute_time_s[k])
                continue
            column = columns.setdefault(f"{name}_{width}", len(columns))
            entries.append((r, column, op.flops / compute_rate(board, widths[k]).ops_per_s))
    if not columns:
        raise InputError(f"{path}: no row times an op of a class the board can rate "
                         "(convolutions, depthwise, dense, element-wise, norm, pool)")
    a = np.zeros((len(rows), len(columns)))
    for r, c, seconds in entries:
        a[r, c] += seconds
    times = np.array([t for _, _, t, _ in rows])
    weight = 1.0 / times
    # least squares on relative errors, pulled towards the board's own factors (weakly: a
    # class the rows do not pin down stays where the board had it)
    prior = np.array([1.0 / (getattr(board.cpu.efficiency, name, None) or 1.0)
                      if board.cpu.efficiency is not None else 1.0 for name in columns])
    lhs = np.vstack([a * weight[:, None], _PRIOR_WEIGHT * np.eye(len(columns))])
    rhs = np.concatenate([(times - fixed) * weight, _PRIOR_WEIGHT * prior])
    inverse, *_ = np.linalg.lstsq(lhs, rhs, rcond=None)
    share = a / np.maximum(a.sum(axis=1, keepdims=True), 1e-300)
    fitted = []
    for name, c in columns.items():
        pinned = int(np.count_nonzero(share[:, c] >= _PINNED_SHARE))
        if not pinned:
            continue  # no row is mostly this class: its factor is not measured
        if not inverse[c] > 0:
            raise InputError(f"{path}: the rows give {name} ops no positive time: their "
                             "rate cannot be fitted (time more rows, or whole phases)")
        fitted.append(Fitted(f"cpu.efficiency.{name}", float(1.0 / inverse[c]), str(path),
                             f"least squares, {pinned} of {len(rows)} rows mostly of it"))
    if not any(f.key.startswith("cpu.efficiency.") for f in fitted):
        raise InputError(f"{path}: no row is mostly of one op class, so no class's rate is "
                         "measured: time single ops (op,time_s rows naming them)")
    energy = [(t, e) for _, _, t, e in rows if e is not None]
    if energy:
        fitted.append(Fitted("cpu.active_power_w", sum(e for _, e in energy)
                             / sum(t for t, _ in energy), str(path),
                             f"energy over time of {len(energy)} rows"))
    return fitted, [(label, ops, t) for label, ops, t, _ in rows]


# ----------------------------------------------------------------------------- storage

_SDFAT_SECTION = re.compile(r"^(write|read) speed and latency", re.I)
_SDFAT_ROW = re.compile(r"^\s*([0-9.]+)\s*,\s*([0-9.]+)\s*,\s*([0-9.]+)\s*,\s*([0-9.]+)\s*$")
_SDFAT_BUF = re.compile(r"BUF_SIZE\s*=\s*([0-9]+)", re.I)


def _storage_rows(path: str | Path) -> dict[str, list[tuple[float, float, float]]]:
    """direction -> [(block bytes, throughput B/s, per-command latency s)]."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read it: {getattr(err, 'strerror', err)}") from None
    if text.lstrip().lower().startswith("op,"):
        out: dict[str, list[tuple[float, float, float]]] = {}
        for line, row in enumerate(_rows(path, ("op", "block_bytes", "throughput_bytes_per_s",
                                                "latency_s")), start=2):
            if row["op"] not in ("read", "write"):
                raise InputError(f"{path}: row {line}: op = {row['op']!r}: must be read or "
                                 "write")
            latency = float(row["latency_s"]) if row["latency_s"] else 0.0
            if not (math.isfinite(latency) and latency >= 0):
                raise InputError(f"{path}: row {line}: latency_s = {row['latency_s']!r}: "
                                 "must be a number >= 0")
            out.setdefault(row["op"], []).append((
                _positive(path, line, "block_bytes", row["block_bytes"]),
                _positive(path, line, "throughput_bytes_per_s",
                          row["throughput_bytes_per_s"]), latency))
        return out
    buffer = _SDFAT_BUF.search(text)
    if buffer is None:
        raise InputError(f"{path}: neither a CSV with header op,block_bytes,"
                         "throughput_bytes_per_s,latency_s nor SdFat bench output (no "
                         "'BUF_SIZE = ... bytes' line)")
    block = float(buffer.group(1))
    out = {}
    direction = None
    for line, raw in enumerate(text.splitlines(), start=1):
        section = _SDFAT_SECTION.match(raw.strip())
        if section:
            direction = section.group(1).lower()
            continue
        row = _SDFAT_ROW.match(raw)
        if row and direction:
            speed = float(row.group(1)) * 1000.0  # SdFat's KB/Sec: 1000 B
            average_s = float(row.group(4)) * 1e-6
            if speed <= 0:
                raise InputError(f"{path}: line {line}: speed {row.group(1)}: must be > 0")
            out.setdefault(direction, []).append(
                (block, speed, max(0.0, average_s - block / speed)))
    if not out:
        raise InputError(f"{path}: SdFat bench output without a speed row under 'write "
                         "speed and latency' or 'read speed and latency': nothing to fit")
    return out


def _fit_storage(path: str | Path) -> tuple[list[Fitted], list[Residual]]:
    fitted, residuals = [], []
    for direction, rows in sorted(_storage_rows(path).items()):
        largest = max(block for block, _, _ in rows)
        speeds = [speed for block, speed, _ in rows if block == largest]
        throughput = float(np.mean(speeds))
        latency = float(np.mean([lat for _, _, lat in rows]))
        fitted.append(Fitted(f"storage.{direction}_throughput_bytes_per_s", throughput,
                             str(path), f"mean of {len(speeds)} runs at {largest:g} B"))
        if latency > 0:
            fitted.append(Fitted(f"storage.{direction}_latency_s", latency, str(path),
                                 f"mean per-command latency of {len(rows)} runs"))
        residuals += [Residual(f"storage {direction} {block:g} B", speed, throughput)
                      for block, speed, _ in rows if block == largest]
    return fitted, residuals


# ----------------------------------------------------------------------------- power

def _fit_power(path: str | Path, voltage_v: float | None) -> list[Fitted]:
    rows = _rows(path, ("state",))
    fitted = []
    for line, row in enumerate(rows, start=2):
        state = row["state"]
        if state not in POWER_STATES:
            raise InputError(f"{path}: row {line}: state = {state!r}: must be one of "
                             f"{', '.join(POWER_STATES)}")
        if row.get("power_w"):
            watts = _positive(path, line, "power_w", row["power_w"])
        elif row.get("current_a"):
            watts = _watts(path, line, row, voltage_v)
        else:
            raise InputError(f"{path}: row {line}: state {state!r} has neither power_w nor "
                             "current_a")
        fitted.append(Fitted(POWER_STATES[state], watts, str(path), f"state {state}"))
    return fitted


def _watts(path: str | Path, line: int, row: dict[str, str], voltage_v: float | None
           ) -> float:
    """A row's ``current_a`` times its ``voltage_v`` (else ``voltage_v``)."""
    volts = (_positive(path, line, "voltage_v", row["voltage_v"]) if row.get("voltage_v")
             else voltage_v)
    if volts is None:
        raise InputError(f"{path}: row {line}: current_a without a voltage: give a "
                         "voltage_v column or --voltage")
    return _positive(path, line, "current_a", row["current_a"]) * volts


# ----------------------------------------------------------------------------- together

def calibrate(board: Board, *, graph: TrainingGraph | None = None,
              op_times: str | Path | None = None, storage_bench: str | Path | None = None,
              power: str | Path | None = None, voltage_v: float | None = None
              ) -> tuple[Board, Calibration]:
    """``board`` fitted to the measurement files given (see the module docstring), and
    what was fitted with its residuals. ``op_times`` needs the ``graph`` it timed."""
    if op_times is None and storage_bench is None and power is None:
        raise InputError("nothing to calibrate: give --op-times, --storage-bench or --power")
    fitted: list[Fitted] = []
    residuals: list[Residual] = []
    rows: list[tuple[str, list[int], float]] = []
    if power is not None:
        fitted += _fit_power(power, voltage_v)
    if storage_bench is not None:
        found, storage = _fit_storage(storage_bench)
        fitted += found
        residuals += storage
    if op_times is not None:
        if graph is None:
            raise InputError("--op-times needs the graph it timed: give --model or --graph")
        found, rows = _fit_compute(graph, board, op_times, voltage_v)
        fitted += found
    new = _with_numbers(board, fitted)
    if rows:
        from poetsim.costs import op_costs

        costs = op_costs(graph, new)  # type: ignore[arg-type]
        residuals += [Residual(f"op {label}", seconds,
                               float(costs.compute_time_s[ops].sum()))
                      for label, ops, seconds in rows]
    return new, Calibration(tuple(fitted), tuple(residuals))


def _with_numbers(board: Board, fitted: Sequence[Fitted]) -> Board:
    """``board`` with the fitted numbers, checked like a board file's."""
    from poetsim.boards.load import board_to_dict

    doc = board_to_dict(board)
    for f in fitted:
        *path, field = f.key.split(".")
        table = doc
        for part in path:
            table = table.setdefault(part, {})
        table[field] = {"value": f.value, "source": "measured", "ref": f.ref}
    try:
        return board_from_dict(doc, origin=f"{board.name} (calibrated)")
    except BoardError as err:
        raise InputError(str(err)) from None


def calibrated_text(text: str, name: str, fitted: Sequence[Fitted]) -> str:
    """A board file's ``text`` with ``name`` and the fitted numbers put in: each fitted
    key's line replaced in its table (comments and order kept), a missing one added at the
    table's end, a missing table (``[cpu.efficiency]``) at the file's end."""
    lines = text.splitlines()
    lines = [f'name = "{name}"' if re.match(r"^name\s*=", line) else line for line in lines]
    for f in fitted:
        *path, field = f.key.split(".")
        table = ".".join(path)
        entry = (f'{field} = {{ value = {f.value!r}, source = "measured", '
                 f'ref = "{f.ref.replace(chr(34), chr(39))}" }}')
        start = next((i for i, line in enumerate(lines) if line.strip() == f"[{table}]"), None)
        if start is None:
            lines += ["", f"[{table}]", entry]
            continue
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].lstrip().startswith("[")), len(lines))
        at = next((i for i in range(start + 1, end)
                   if re.match(rf"^\s*{re.escape(field)}\s*=", lines[i])), None)
        if at is None:
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            lines.insert(end, entry)
        else:
            lines[at] = entry
    out = "\n".join(lines) + "\n"
    tomllib.loads(out)  # a TOML slip here is poetsim's, not the user's
    return out
