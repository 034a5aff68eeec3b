"""``poetsim compare``: POET against every baseline that applies, all simulated and judged
on the board."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.cli.options import (
    add_corners,
    add_graph_and_board,
    add_json,
    add_model_options,
    add_request_options,
    request_from_args,
    solver_settings,
)
from poetsim.cli.output import emit_json
from poetsim.compare import compare, format_table, write_outcomes
from poetsim.methods import DEFAULT_EFFORT, DEFAULT_TIME_LIMIT_S

__all__ = ["register"]


def _cmd_compare(args: argparse.Namespace) -> int:
    request = request_from_args(args)
    outcomes = compare(request, settings=solver_settings(args), corners=args.corners)
    written = [str(p) for p in write_outcomes(outcomes, request, args.out)] if args.out else []
    if args.json:
        emit_json([o.as_dict() for o in outcomes])
    else:
        print(format_table(outcomes))
        if written:
            print(f"wrote {len(written)} files into {args.out}")
    return 0 if any(o.feasible for o in outcomes) else 1



def register(sub: Any) -> None:
    """Add ``compare`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser("compare", help="POET against every baseline that applies, "
                                                "all simulated on the board"))
    add_graph_and_board(p)
    add_request_options(p, ram="70%", deadline=None)
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   help=f"safety cap on each MILP solve (default {DEFAULT_TIME_LIMIT_S:g} s)")
    p.add_argument("--effort", type=int, default=DEFAULT_EFFORT, metavar="NODES",
                   help="deterministic work limit of each MILP solve (SCIP nodes and their "
                        f"LP iterations; default {DEFAULT_EFFORT}, 0: the time limit alone)")
    p.add_argument("--out", metavar="DIR",
                   help="write every method's schedule and comparison.json into DIR (new)")
    add_corners(p)
    add_model_options(p)
    p.set_defaults(func=_cmd_compare)
