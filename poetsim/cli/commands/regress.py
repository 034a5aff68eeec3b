"""``poetsim regress``: check the golden schedules (re-simulated, and re-solved with
``--resolve``) and report what moved."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.cli.options import (
    add_corners,
    add_json,
    flags_named,
)
from poetsim.cli.output import emit_json

__all__ = ["register"]


def _cmd_regress(args: argparse.Namespace) -> int:
    from poetsim.api import regress_goldens

    with flags_named():  # the API names its parameters, the command line its flags
        found = regress_goldens(args.dir, tolerance=args.tolerance, resolve=args.resolve,
                                corners=args.corners, make=args.make, update=args.update,
                                say=None if args.json else print)
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
    p.add_argument("dir", nargs="?", metavar="DIR",
                   help="folder of golden schedules (default: the built-in ones, schedules/ "
                        "of the checkout or of the installed package)")
    p.add_argument("--resolve", action="store_true",
                   help="also solve every MILP case again under its deterministic effort")
    p.add_argument("--update", action="store_true",
                   help="rewrite the expected figures (and re-solved schedules) on purpose")
    p.add_argument("--make", action="store_true",
                   help="first make the goldens that DIR/cases.toml lists and DIR lacks")
    p.add_argument("--tolerance", default="0.1%", metavar="SHARE",
                   help="relative change before a figure counts as moved (default 0.1%%)")
    add_corners(p)
    p.set_defaults(func=_cmd_regress)
