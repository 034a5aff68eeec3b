"""``poetsim demo``: the built-in default job end to end (costs, POET at a tight budget,
the simulation, two baselines), its files in a new folder."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim import clock
from poetsim.cli.commands.costs import add_per_op, show_costs
from poetsim.cli.options import (
    add_graph_and_board,
    add_json,
    add_model_options,
    add_request_options,
    request_from_args,
    solver_settings,
)
from poetsim.cli.output import emit_json, print_simulation
from poetsim.compare import format_table
from poetsim.demo import (
    DEMO_BOARD,
    DEMO_DEADLINE,
    DEMO_MODEL,
    DEMO_MODEL_OPTIONS,
    DEMO_RAM,
    DEMO_SETTINGS,
)

__all__ = ["register"]


def _cmd_demo(args: argparse.Namespace) -> int:
    """Costs, POET at a tight budget, simulation, two baselines; files in a new folder."""
    from poetsim.demo import run_demo

    with clock.doing("reading the model"):  # under --time-limit (cli.main)
        request = request_from_args(
            args, DEMO_MODEL_OPTIONS if args.model == DEMO_MODEL else None)
    if not args.json:
        show_costs(request, args)
        print(flush=True)
    result = run_demo(request, solver_settings(args), out_dir=args.out,
                      echo=None if args.json else lambda line: print(line, flush=True),
                      started_at=args.started)
    if args.json:
        emit_json({**result.summary, "out_dir": str(result.out_dir)})
        return 0 if result.passed else 1
    poet = result.outcomes[0]
    if poet.report is not None and poet.verdict is not None:
        print()
        print_simulation(poet.report, poet.verdict)
    print()
    print(format_table(result.outcomes))
    print(f"\nwrote {', '.join(result.files)} into\n{result.out_dir.resolve()}"
          f"  ({result.wall_s:.1f} s; start with summary.md)")
    return 0 if result.passed else 1



def register(sub: Any) -> None:
    """Add ``demo`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser(
        "demo", help=f"the built-in default job: fine-tuning {DEMO_MODEL} "
                     f"({', '.join(f'{k}={v}' for k, v in DEMO_MODEL_OPTIONS.items())}) "
                     f"on the {DEMO_BOARD} within its RAM: costs, then POET's least-energy "
                     "schedule, verified in the simulator and compared"))
    add_graph_and_board(p, model=DEMO_MODEL, board=DEMO_BOARD)
    add_per_op(p)
    add_model_options(p)
    add_request_options(p, ram=DEMO_RAM, deadline=DEMO_DEADLINE)
    p.add_argument("--time-limit", type=float, default=DEMO_SETTINGS.time_limit_s,
                   metavar="S", help="solver time limit, a safety cap (default "
                   f"{DEMO_SETTINGS.time_limit_s:g} s)")
    p.add_argument("--effort", type=int, default=DEMO_SETTINGS.effort, metavar="NODES",
                   help="deterministic work limit of each MILP solve (SCIP nodes; "
                   f"default {DEMO_SETTINGS.effort}: the same schedule on any machine)")
    p.add_argument("--out", metavar="DIR", help="output folder (must not exist; "
                   "default ./poetsim-demo-YYYYmmdd-HHMMSS)")
    p.set_defaults(func=_cmd_demo)
