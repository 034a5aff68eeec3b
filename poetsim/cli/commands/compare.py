"""``poetsim compare``: POET against every baseline that applies, all simulated and judged
on the board."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from poetsim.api import compare_methods
from poetsim.cli.options import (
    add_corners,
    add_graph_and_board,
    add_json,
    add_model_options,
    add_request_options,
    flags_named,
    model_from_args,
)
from poetsim.cli.output import emit_json
from poetsim.errors import InputError
from poetsim.fileio import check_new_folder
from poetsim.methods import DEFAULT_EFFORT, DEFAULT_TIME_LIMIT_S
from poetsim.runs import Outcome
from poetsim.units import format_quantity

#: compare runs three MILP searches (POET, Checkmate, paging-only) under one limit: each
#: keeps the safety cap a lone search has, so that their effort, not the cap, ends them.
COMPARE_TIME_LIMIT_S = 3 * DEFAULT_TIME_LIMIT_S

__all__ = ["register"]


def _progress(position: int, methods: int, outcome: Outcome) -> None:
    """One line on stderr as each method ends (stdout keeps the table or the JSON)."""
    figure = ("" if outcome.energy_j is None
              else f", {format_quantity(outcome.energy_j, 'J')}")
    verdict = f", {outcome.verdict_label}" if outcome.verdict_label else ""
    print(f"[{position}/{methods}] {outcome.method}: {outcome.status.value}{verdict}{figure} "
          f"({outcome.run_time_s:.1f} s)", file=sys.stderr, flush=True)


def _cmd_compare(args: argparse.Namespace) -> int:
    model, options = model_from_args(args)
    if args.out:  # a folder it could not write is bad input: said before any method runs
        check_new_folder(args.out, InputError)
    with flags_named():  # the API names its parameters, the command line its flags
        table = compare_methods(model, args.board, ram=args.ram, deadline=args.deadline,
                                accounting=args.accounting,
                                optimizer=args.optimizer or "sgd", effort=args.effort,
                                time_limit_s=args.time_limit, progress=_progress,
                                started=args.started, **options)
    if args.corners:
        table = table.at_corners()
    written = [str(p) for p in table.save(args.out)] if args.out else []
    if args.json:
        emit_json(table.as_dicts())
    else:
        print(table.table())
        if written:
            print(f"wrote {len(written)} files into {args.out}")
    return 0 if any(o.feasible for o in table.outcomes) else 1



def register(sub: Any) -> None:
    """Add ``compare`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser("compare", help="POET against every baseline that applies, "
                                                "all simulated on the board"))
    add_graph_and_board(p)
    add_request_options(p, ram="70%", deadline=None)
    p.add_argument("--time-limit", type=float, default=COMPARE_TIME_LIMIT_S, metavar="S",
                   help="safety cap on the whole command, shared by every method (default "
                        f"{COMPARE_TIME_LIMIT_S:g} s: {DEFAULT_TIME_LIMIT_S:g} s for each "
                        "of the three MILP searches)")
    p.add_argument("--effort", type=int, default=DEFAULT_EFFORT, metavar="NODES",
                   help="deterministic work limit of each MILP solve (SCIP nodes and their "
                        f"LP iterations; default {DEFAULT_EFFORT}, 0: the time limit alone)")
    p.add_argument("--out", metavar="DIR",
                   help="write every method's schedule and comparison.json into DIR (new)")
    add_corners(p)
    add_model_options(p)
    p.set_defaults(func=_cmd_compare)
