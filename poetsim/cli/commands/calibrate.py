"""``poetsim boards calibrate``: a board file fitted to the user's measurements (parsing and
printing; the fit is :mod:`poetsim.boards.calibrate`)."""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import attrs

from poetsim.cli.options import add_json, add_model_options, graph_from_args
from poetsim.cli.output import row
from poetsim.errors import InputError, InternalError

EXAMPLE = """\
example (the measurement files are made up for the example, and say so):
  poetsim boards calibrate nrf52840 --model ds_cnn_s --set train_last=3 \\
      --op-times device_models/measurements/nrf52840_ds_cnn_s_op_times.csv \\
      --storage-bench device_models/measurements/nrf52840_sdfat_bench.txt \\
      --power device_models/measurements/nrf52840_power.csv --out my_nrf52840.toml
"""


def register(boards_sub: Any) -> None:
    """Add ``calibrate`` to the ``poetsim boards`` actions."""
    p = add_json(boards_sub.add_parser(
        "calibrate", help="fit a board file to your own measurements",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLE,
        description="Write a new board file whose numbers are fitted to measurements on the "
                    "board on your desk: per-op or per-phase times (the compute rate of each "
                    "op class, [cpu.efficiency], by least squares), a storage benchmark "
                    "(SdFat's bench output or a CSV: throughput and per-command latency) "
                    "and measured powers per state. Fitted numbers carry source = "
                    "\"measured\" and their file; the residuals say how well the fitted "
                    "board reproduces each measurement."))
    p.add_argument("board", metavar="NAME|FILE", help="the board to start from")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="NAME", help="zoo model the op times are of")
    source.add_argument("--graph", metavar="FILE", help="graph file the op times are of")
    add_model_options(p)
    p.add_argument("--op-times", metavar="FILE.csv",
                   help="CSV op,time_s[,energy_j|current_a[,voltage_v]]: an op name, or "
                        "forward / backward / "
                        "iteration, and its measured seconds")
    p.add_argument("--storage-bench", metavar="FILE",
                   help="SdFat bench output, or CSV op,block_bytes,throughput_bytes_per_s,"
                        "latency_s")
    p.add_argument("--power", metavar="FILE.csv",
                   help="CSV state,current_a|power_w[,voltage_v]; states cpu_active, "
                        "cpu_idle, cpu_sleep, dma_active, storage_read, storage_write, "
                        "storage_idle, storage_sleep")
    p.add_argument("--voltage", type=float, metavar="V",
                   help="supply voltage for current_a rows without voltage_v")
    p.add_argument("--out", required=True, metavar="NEW.toml",
                   help="the board file to write; its name is the file's stem")
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from poetsim.boards import builtin_board_dir, get_board
    from poetsim.boards.calibrate import calibrate, calibrated_text
    from poetsim.boards.load import board_from_dict
    from poetsim.fileio import atomic_write_text

    board = get_board(args.board)
    base = Path(args.board) if Path(args.board).suffix == ".toml" else (
        builtin_board_dir() / f"{board.name}.toml")
    out = Path(args.out)
    if out.suffix != ".toml":
        raise InputError(f"--out {args.out!r}: must name a .toml board file")
    graph = graph_from_args(args) if args.model or args.graph else None
    new, calibration = calibrate(board, graph=graph, op_times=args.op_times,
                                 storage_bench=args.storage_bench, power=args.power,
                                 voltage_v=args.voltage)
    text = calibrated_text(base.read_text(encoding="utf-8"), out.stem, calibration.fitted)
    # the file as written must read back as the board fitted, before it is written
    written = board_from_dict(tomllib.loads(text), origin=str(out))
    if attrs.evolve(written, name=new.name) != new:
        raise InternalError(f"{out}: the calibrated board file does not read back as the "
                            "board fitted")
    atomic_write_text(out, text)
    if args.json:
        print(json.dumps({
            "board": board.name, "out": str(out),
            "fitted": [{"key": f.key, "value": f.value, "was": _was(board, f.key),
                        "how": f.how, "file": f.source_file} for f in calibration.fitted],
            "residuals": [{"label": r.label, "measured": r.measured,
                           "predicted": r.predicted, "relative": r.relative}
                          for r in calibration.residuals]}, indent=2))
        return 0
    print(f"calibrated {board.name} -> {out}")
    for f in calibration.fitted:
        was = _was(board, f.key)
        print(row(f.key, f"{f.value:.6g}" + (f" (was {was:.6g})" if was is not None else "")
                   + f": {f.how}"))
    for prefix, what in (("op ", "op times"), ("storage ", "storage throughput")):
        median = calibration.median_error(prefix)
        if median is not None:
            worst = max((r for r in calibration.residuals if r.label.startswith(prefix)),
                        key=lambda r: abs(r.relative))
            print(row(f"{what} reproduced", f"median error {median:.2%}, worst "
                       f"{worst.relative:+.2%} ({worst.label.removeprefix(prefix)})"))
    print(row("wrote", str(out)))
    return 0


def _was(board: Any, key: str) -> float | None:
    """The number ``key`` had before, or None (an efficiency not given: 1)."""
    value: Any = board
    for part in key.split("."):
        value = getattr(value, part, None)
        if value is None:
            return 1.0 if key.startswith("cpu.efficiency.") else None
    return float(value)
