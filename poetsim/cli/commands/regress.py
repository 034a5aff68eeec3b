"""``poetsim regress``: check the golden schedules (re-simulated, and re-solved with
``--resolve``) and report what moved."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from poetsim.cli.options import (
    add_corners,
    add_json,
    flags_named,
)
from poetsim.cli.output import emit_json
from poetsim.regress import CaseCheck

__all__ = ["register"]


def _folder_and_names(targets: list[str]) -> tuple[str | None, list[str]]:
    """``[DIR] [NAME ...]``: a first word that is a folder is the folder of goldens, the
    rest are case names (of the built-in goldens without a folder: None)."""
    if targets and Path(targets[0]).is_dir():
        return targets[0], targets[1:]
    return None, targets


def _progress(check: CaseCheck) -> None:
    """A line on stderr per golden checked (a re-solving run takes minutes)."""
    print(f"regress: {check.name}: {check.status}", file=sys.stderr, flush=True)


def _cmd_regress(args: argparse.Namespace) -> int:
    from poetsim.api import regress_goldens

    folder, names = _folder_and_names(args.targets)
    with flags_named():  # the API names its parameters, the command line its flags
        found = regress_goldens(folder, names=names, tolerance=args.tolerance,
                                resolve=args.resolve, corners=args.corners, make=args.make,
                                update=args.update, say=None if args.json else print,
                                progress=_progress if args.resolve else None)
    if args.json:
        emit_json(found.as_dict())
    else:
        for line in found.lines():
            print(line)
    return 0 if found.passed else 1



def register(sub: Any) -> None:
    """Add ``regress`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser(
        "regress", help="check the golden schedules: re-simulate them (and re-solve the MILP "
                        "cases with --resolve) and report what moved"))
    p.add_argument("targets", nargs="*", metavar="[DIR] [NAME]",
                   help="a folder of golden schedules (default: the built-in ones, schedules/ "
                        "of the checkout or of the installed package), then the cases to "
                        "check (default: all of them)")
    p.add_argument("--resolve", action="store_true",
                   help="also solve every MILP case again under its deterministic effort "
                        "(its time_limit_s, a safety cap, holds for each re-solve and its "
                        "simulation)")
    p.add_argument("--update", action="store_true",
                   help="rewrite the expected figures (and re-solved schedules) on purpose")
    p.add_argument("--make", action="store_true",
                   help="first make the goldens that DIR/cases.toml lists and DIR lacks")
    p.add_argument("--tolerance", default="0.1%", metavar="SHARE",
                   help="relative change before a figure counts as moved (default 0.1%%)")
    add_corners(p)
    p.set_defaults(func=_cmd_regress)
