"""``poetsim regress``: check the golden schedules (re-simulated, and re-solved with
``--resolve``) and report what moved."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.cli.options import (
    add_corners,
    add_json,
)
from poetsim.cli.output import emit_json
from poetsim.errors import InputError

__all__ = ["register"]


def _tolerance(text: str) -> float:
    value = text.strip()
    try:
        number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise InputError(f"--tolerance {text!r}: expected a share such as 0.1% or 0.001"
                         ) from None
    if not (0 <= number < 1):
        raise InputError(f"--tolerance {text!r}: must be in [0, 100%)")
    return number


def _cmd_regress(args: argparse.Namespace) -> int:
    from poetsim.regress import check_goldens, make_goldens, update_goldens

    say = (lambda _line: None) if args.json else print
    if args.make:
        make_goldens(args.dir, say=say)
    checks = check_goldens(args.dir, tolerance=_tolerance(args.tolerance),
                           resolve=args.resolve, corners=args.corners)
    updated = update_goldens(checks) if args.update else []
    regressed = [c.name for c in checks if c.status in ("regressed", "error")]
    if args.json:
        emit_json({"cases": [c.as_dict() for c in checks], "updated": updated,
                    "regressed": regressed})
    else:
        for check in checks:
            print(check.line())
        for line in updated:
            print(line)
        counts = {s: sum(c.status == s for c in checks)
                  for s in ("ok", "improved", "regressed", "error")}
        print(f"{len(checks)} goldens: {counts['ok']} ok, {counts['improved']} improved, "
              f"{counts['regressed']} regressed, {counts['error']} errors"
              + (f"; regressed: {', '.join(regressed)}" if regressed else ""))
    return 1 if regressed and not args.update else 0



def register(sub: Any) -> None:
    """Add ``regress`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser(
        "regress", help="check the golden schedules: re-simulate them (and re-solve the MILP "
                        "cases with --resolve) and report what moved"))
    p.add_argument("dir", nargs="?", default="schedules", metavar="DIR",
                   help="folder of golden schedules (default schedules/)")
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
