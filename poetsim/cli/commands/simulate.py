"""``poetsim simulate``: run a schedule file in the simulation of the board and judge it,
optionally at the corners of the board's ranges and as a Monte Carlo of its timing."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.api import simulate
from poetsim.boards import DEFAULT_BOARD
from poetsim.cli.options import (
    add_accept_edits,
    add_corners,
    add_json,
    add_model_options,
    add_request_options,
    model_from_args,
)
from poetsim.cli.output import check_outputs, emit_json, print_simulation, row, write_all_or_nothing
from poetsim.errors import InputError
from poetsim.request import Request
from poetsim.sim.montecarlo import MAX_RUNS, MonteCarlo
from poetsim.units import format_quantity
from poetsim.verdict import deadline_met_runs

__all__ = ["register"]


def _monte_carlo_args(args: argparse.Namespace) -> tuple[int, int] | None:
    """(runs, first seed) of a Monte Carlo, or None for the nominal run alone."""
    if args.runs is None and args.seed is None:
        return None
    runs = 1 if args.runs is None else args.runs
    seed = 0 if args.seed is None else args.seed
    if not 1 <= runs <= MAX_RUNS:
        raise InputError(f"--runs {runs}: must be a whole number in [1, {MAX_RUNS}]")
    if seed < 0:
        raise InputError(f"--seed {seed}: must be a whole number >= 0")
    return runs, seed


def _deadline_runs(request: Request, mc: MonteCarlo) -> dict[str, Any]:
    """The Monte Carlo runs that meet the deadline, as the verdict judges each."""
    met = deadline_met_runs(request, mc.makespans_s)
    return {"deadline_s": request.deadline_s, "deadline_met_runs": met,
            "deadline_met_share": None if met is None else met / mc.runs}


def _print_monte_carlo(mc: MonteCarlo, deadline: dict[str, Any]) -> None:
    seeds = f"seed {mc.seed}" if mc.runs == 1 else f"seeds {mc.seed}..{mc.last_seed}"
    print(f"monte carlo: {mc.runs} run{'s' if mc.runs != 1 else ''} ({seeds}); the verdict "
          "above is the nominal run's")
    if not mc.varies:
        print(row("runs", f"all identical: {mc.identical_reason}"))
    for label, dist, unit in (("makespan", mc.makespan_s, "s"), ("energy", mc.energy_j, "J"),
                              ("drawn write-busy", mc.write_busy_s, "s")):
        print(row(f"{label} p50 / p99 / max",
                   f"{format_quantity(dist.p50, unit)} / {format_quantity(dist.p99, unit)} / "
                   f"{format_quantity(dist.max, unit)} (mean {format_quantity(dist.mean, unit)})"))
    if deadline["deadline_met_runs"] is not None:
        print(row("deadline met", f"{deadline['deadline_met_runs']} of {mc.runs} runs "
                   f"({deadline['deadline_met_share']:.1%}) within "
                   f"{format_quantity(deadline['deadline_s'], 's')}"))
    if mc.varies and mc.runs > 1:
        print(row("slowest run", f"seed {mc.worst_seed} ({format_quantity(mc.makespan_s.max, 's')}"
                   f"; reproduce with --runs 1 --seed {mc.worst_seed})"))
    print(row("wall time", f"{mc.wall_s:.2f} s"))


def _cmd_simulate(args: argparse.Namespace) -> int:
    check_outputs({"--trace": args.trace, "--plot": args.plot},
                  {"SCHEDULE": args.schedule, "--graph": args.graph, "--board": args.board})
    variance = _monte_carlo_args(args)
    model, options = model_from_args(args)
    check = simulate(args.schedule, args.board, model=model, ram=args.ram,
                     deadline=args.deadline, accounting=args.accounting,
                     optimizer=args.optimizer, accept_edits=args.accept_edits,
                     trace=bool(args.trace or args.plot), **options)
    verdict, board = check.verdict, check.request.board
    corners = check.corners() if args.corners else None
    mc = None if variance is None else check.monte_carlo(*variance)
    written: list[str] = []
    write_all_or_nothing(written, ((args.trace, check.trace), (args.plot, check.plot)))
    if args.json:
        doc = check.as_dict(transfers=args.transfers)
        if mc is not None:
            doc["monte_carlo"] = {
                **mc.as_dict(), **_deadline_runs(check.request, mc),
                "verdict_is_of": "the nominal run (the figures and verdict above); "
                                 "monte_carlo is reported beside it"}
        if corners is not None:
            doc["corners"] = [c.as_dict() for c in corners]
        emit_json(doc)
    else:
        print_simulation(check.report, verdict)
        if corners is not None:
            print(row("corners", "; ".join(c.phrase() for c in corners)
                       if len(corners) > 1 else
                       f"{verdict.label} (typical): {board.name} gives no ranges, so every "
                       "corner is the typical one"))
        for path in written:
            print(row("wrote", path))
        if mc is not None:
            _print_monte_carlo(mc, _deadline_runs(check.request, mc))
    return 0 if verdict.passed else 1



def register(sub: Any) -> None:
    """Add ``simulate`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser("simulate", help="verify a schedule in a simulation of the "
                                                 "board"))
    p.add_argument("schedule", metavar="SCHEDULE",
                   help="schedule file (JSON, or binary with --model or --graph and --board)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="NAME",
                        help="zoo model (default: the schedule's graph name)")
    source.add_argument("--graph", metavar="FILE", help="graph file (JSON)")
    p.add_argument("--board", metavar="NAME|FILE",
                   help="built-in board or board file (default: the board the schedule "
                        f"records, else {DEFAULT_BOARD})")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome / Perfetto trace (JSON)")
    p.add_argument("--plot", metavar="FILE",
                   help="write RAM, power and schedule-matrix plots (.png, .svg or .pdf)")
    p.add_argument("--transfers", action="store_true",
                   help="with --json, include the transfer plan")
    add_corners(p)
    add_accept_edits(p)
    p.add_argument("--runs", type=int, metavar="N",
                   help=f"also a Monte Carlo of N runs (1..{MAX_RUNS}) that draw each write's "
                        "extra busy time from the board's storage.write_busy: p50/p99 "
                        "makespan and energy and the share of runs meeting the deadline, "
                        "beside the nominal run's verdict")
    p.add_argument("--seed", type=int, metavar="S",
                   help="first seed of the Monte Carlo (>= 0, default 0); run i uses S+i")
    add_request_options(p, ram=None, deadline=None)
    p.description = ("Without --ram / --deadline, the budget and deadline the schedule file "
                     "records in words (\"50%\", \"1.5x\") are resolved again on this graph "
                     "and board; without any, the board's RAM and no deadline.")
    add_model_options(p)
    p.set_defaults(func=_cmd_simulate)
