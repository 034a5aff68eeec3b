"""``poetsim boards``: list the built-in boards, show one with the source of every number
and the golden jobs it trains, validate board files (``calibrate`` is its own module)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from poetsim.boards import (
    board_to_dict,
    builtin_board_names,
    get_board,
    load_board,
)
from poetsim.boards.spec import Board
from poetsim.cli.commands import calibrate
from poetsim.cli.options import add_json
from poetsim.cli.output import emit_json, row, wrapped
from poetsim.data import data_dir
from poetsim.errors import PoetsimError
from poetsim.units import format_bytes, format_quantity

__all__ = ["register"]


def _cmd_boards_list(args: argparse.Namespace) -> None:
    boards = [get_board(name) for name in builtin_board_names()]
    if args.json:
        emit_json([{"name": b.name, "title": b.title, "profile": b.profile.value,
                     "ram_bytes": b.ram.bytes, "storage": b.storage.kind.value,
                     "dma_channels": b.dma.channels} for b in boards])
        return
    print(f"{'name':<20} {'profile':<9} {'RAM':>10}  {'storage':<9} {'DMA':>3}  title")
    for b in boards:
        print(f"{b.name:<20} {b.profile.value:<9} {format_bytes(b.ram.bytes):>10}  "
              f"{b.storage.kind.value:<9} {b.dma.channels:>3}  {b.title}")


def _print_board(board: Board) -> None:
    doc = board_to_dict(board)
    print(f"{board.name}: {board.title}")
    print(f"profile: {board.profile.value}")
    def table(name: str, rows: dict[str, Any]) -> None:
        print(f"[{name}]")
        nested = {k: v for k, v in rows.items() if isinstance(v, dict) and "value" not in v}
        for key, value in rows.items():
            if key in nested:
                continue
            if isinstance(value, dict):
                spread = (f" (range {value['min']:g} to {value['max']:g})"
                          if "min" in value else "")
                # the reference continues under the source, past the key and value columns
                print(wrapped(f"  {key:<30} {value['value']:<14g} [{value['source']}]{spread} "
                              f"{value['ref']}", indent=48))
            else:
                print(f"  {key:<30} {value}")
        for key, value in nested.items():  # sub-tables such as [storage.write_busy]
            table(f"{name}.{key}", value)

    for section in ("cpu", "ram", "flash", "dma", "storage", "bus"):
        if section in doc:  # [flash] is optional
            table(section, doc[section])
    storage = board.storage
    print("derived")
    print(row("ram usable", format_bytes(board.ram.usable_bytes)))
    if board.flash is not None:
        print(row("flash usable (frozen weights)", format_bytes(board.flash.usable_bytes)))
    print(row("storage wire rate", format_quantity(storage.wire_bytes_per_s, "B/s")))
    print(row("compute energy per FLOP",
               format_quantity(1 / board.cpu.flops_per_j if board.cpu.flops_per_j
                               else board.cpu.active_power_w / board.cpu.flops_per_s, "J")))
    if board.notes:
        print("notes")
        for line in board.notes.strip().splitlines():
            print(wrapped(f"  {line}", indent=4))


def _cmd_boards_show(args: argparse.Namespace) -> None:
    from poetsim.regress import trained_on

    board = get_board(args.board)
    # the golden training jobs that run on this board, simulated again now
    folder = data_dir("schedules") if args.goldens is None else Path(args.goldens)
    # a package without its goldens lists none; a folder the user names must be one
    trains = trained_on(board.name, folder) if args.goldens or folder.is_dir() else []
    if args.json:
        emit_json({**board_to_dict(board), "trains": trains})
        return
    _print_board(board)
    where = "built-in golden schedules" if args.goldens is None else \
        f"golden schedules in {folder}/"
    print(f"trains ({where} that PASS physically, simulated now)")
    if not trains:
        print("  none")
    for job in trains:
        options = ",".join(f"{k}={v}" for k, v in job["model_options"].items())
        lifetime = job["storage_lifetime_iterations"]
        step = "" if job["optimizer"] == "sgd" else f" with {job['optimizer']}"
        print(wrapped(f"  {job['model']}{f' ({options})' if options else ''} by "
                      f"{job['method']}{step}, RAM {job['ram']}, deadline "
                      f"{job['deadline'] or 'none'}: {format_quantity(job['energy_j'], 'J')} and "
                      f"{format_quantity(job['makespan_s'], 's')} per iteration, peak "
                      f"{format_bytes(job['peak_total_bytes'])}"
                      + (f", storage lifetime {lifetime:.3g} iterations" if lifetime else ""),
                      indent=4))


def _cmd_boards_validate(args: argparse.Namespace) -> int:
    results = []
    failed = False
    for path in args.files:
        try:
            board = load_board(path)
            results.append({"file": path, "valid": True, "name": board.name})
        except PoetsimError as err:
            failed = True
            results.append({"file": path, "valid": False, "error": str(err)})
    if args.json:
        emit_json(results)
    else:
        for r in results:
            print(f"{r['file']}: ok ({r['name']})" if r["valid"] else r["error"],
                  file=sys.stdout if r["valid"] else sys.stderr)
    return 1 if failed else 0



def register(sub: Any) -> None:
    """Add ``boards`` and its actions to the ``poetsim`` subcommands."""
    boards = sub.add_parser("boards", help="list, show, validate and calibrate board files")
    actions = boards.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_json(actions.add_parser("list", help="list the built-in boards")).set_defaults(
        func=_cmd_boards_list)
    p = add_json(actions.add_parser("show", help="print one board with the source of "
                                                 "every number"))
    p.add_argument("board", metavar="NAME|FILE")
    p.add_argument("--goldens", metavar="DIR",
                   help="folder of golden schedules whose training jobs on this board are "
                        "listed (default: the built-in ones, schedules/ of the checkout or "
                        "of the installed package)")
    p.set_defaults(func=_cmd_boards_show)
    p = add_json(actions.add_parser("validate", help="check board files"))
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_boards_validate)
    calibrate.register(actions)
