"""``poetsim simulate``: run a schedule file in the simulation of the board and judge it,
optionally at the corners of the board's ranges and as a Monte Carlo of its timing."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.boards import (
    DEFAULT_BOARD,
    get_board,
)
from poetsim.cli.options import (
    add_accept_edits,
    add_corners,
    add_json,
    add_model_options,
    add_request_options,
    graph_from_args,
    model_options,
)
from poetsim.cli.output import emit_json, print_simulation, row, write_all_or_nothing
from poetsim.errors import InputError, ScheduleError, ScheduleFileError
from poetsim.graph import read_graph
from poetsim.report import plot_simulation
from poetsim.request import BOARD_RAM, Accounting, Request, request_for_schedule, resolve_request
from poetsim.schedule import Schedule, read_schedule, read_schedule_binary
from poetsim.schedule.io import DIGEST_FIELD, is_binary_schedule
from poetsim.schedule.metadata import disagreements, parse_metadata
from poetsim.sim.montecarlo import MAX_RUNS, MonteCarlo, monte_carlo
from poetsim.sim.trace import write_chrome_trace
from poetsim.units import format_quantity
from poetsim.verdict import check_on_board, deadline_met_runs, judge_corners

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


def _simulated_request(args: argparse.Namespace) -> tuple[Request, Schedule, list[str]]:
    """The request a simulation judges, the schedule, and where the command line and the
    file disagree. A JSON file records its request, each part overridden by the command
    line (the file's own byte and second figures are only compared); a binary one records
    none, so it is the user's words (--model or --graph and --board; --ram, default the
    board's RAM, --deadline, --accounting, default physical)."""
    if is_binary_schedule(args.schedule):
        if args.model is None and args.graph is None or args.board is None:
            raise InputError(f"{args.schedule}: a binary schedule records neither its model "
                             "nor its board: give --model (or --graph) and --board")
        request = resolve_request(graph_from_args(args), get_board(args.board),
                                  ram=BOARD_RAM if args.ram is None else args.ram,
                                  deadline=args.deadline,
                                  accounting=args.accounting or Accounting.PHYSICAL.value,
                                  optimizer=args.optimizer or "sgd")
        return request, read_schedule_binary(args.schedule, request.graph), []
    edited: list[str] = []
    try:
        recorded = read_schedule(args.schedule)
    except ScheduleFileError as err:
        if err.rule != "edited" or not args.accept_edits:
            raise
        recorded = read_schedule(args.schedule, accept_edits=True)
        edited.append(f"{args.schedule} was changed after poetsim wrote it: judged as it is "
                      "now (--accept-edits)")
    options = model_options(args)
    request = request_for_schedule(
        recorded, args.board, source=args.schedule,
        graph=read_graph(args.graph) if args.graph else None, model=args.model,
        model_options=options or None, ram=args.ram, deadline=args.deadline,
        accounting=args.accounting, optimizer=args.optimizer)
    schedule = read_schedule(args.schedule, request.graph, accept_edits=args.accept_edits)
    notes = edited + disagreements(parse_metadata(recorded.metadata), request.metadata())
    if DIGEST_FIELD not in recorded.metadata:
        notes.append(f"{args.schedule} records no digest (written by an older poetsim, or "
                     "stripped): changes made to it since cannot be detected")
    return request, schedule, notes


def _cmd_simulate(args: argparse.Namespace) -> int:
    variance = _monte_carlo_args(args)
    request, schedule, notes = _simulated_request(args)
    graph, board = request.graph, request.board
    try:
        report, verdict = check_on_board(request, schedule, trace=bool(args.trace or args.plot),
                                         notes=notes)
    except ScheduleError as err:  # a rule of the op-list contract: say which file broke it
        raise ScheduleError(f"{args.schedule}: {err}") from None
    corners = judge_corners(request, schedule, verdict) if args.corners else None
    mc = None
    if variance is not None:
        mc = monte_carlo(graph, board, schedule, runs=variance[0], seed=variance[1],
                         budget_bytes=request.ram_limit_bytes,
                         resident_bytes=request.resident_bytes, costs=request.costs)
    written: list[str] = []
    write_all_or_nothing(written, (
        (args.trace, lambda path: write_chrome_trace(report, path, verdict=verdict.label,
                                                      deadline_s=verdict.deadline_s)),
        (args.plot, lambda path: plot_simulation(graph, schedule, report, path,
                                                  verdict=verdict.label))))
    if args.json:
        doc = {**report.as_dict(transfers=args.transfers), **verdict.as_dict(),
               "request": request.metadata()}
        if mc is not None:
            doc["monte_carlo"] = {
                **mc.as_dict(), **_deadline_runs(request, mc),
                "verdict_is_of": "the nominal run (the figures and verdict above); "
                                 "monte_carlo is reported beside it"}
        if corners is not None:
            doc["corners"] = [c.as_dict() for c in corners]
        emit_json(doc)
    else:
        print_simulation(report, verdict)
        if corners is not None:
            print(row("corners", "; ".join(c.phrase() for c in corners)
                       if len(corners) > 1 else
                       f"{verdict.label} (typical): {board.name} gives no ranges, so every "
                       "corner is the typical one"))
        for path in written:
            print(row("wrote", path))
        if mc is not None:
            _print_monte_carlo(mc, _deadline_runs(request, mc))
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
