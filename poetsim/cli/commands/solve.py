"""``poetsim solve``: POET's least-energy schedule for one request, through the same
method path as ``compare`` and the demo (re-solved when the simulation finds it late or its
buffers do not lay out)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from poetsim.api import Plan, Search, plan
from poetsim.boards.corners import CORNERS
from poetsim.cli.options import (
    add_graph_and_board,
    add_json,
    add_model_options,
    add_request_options,
    flags_named,
    model_from_args,
)
from poetsim.cli.output import check_outputs, emit_json, row, write_all_or_nothing
from poetsim.methods import DEFAULT_EFFORT, DEFAULT_TIME_LIMIT_S
from poetsim.optimizer import SolveStatus
from poetsim.units import format_bytes, format_quantity

__all__ = ["register"]


def _progress_printer(quiet: bool):
    if quiet:
        return None

    def report(p: dict[str, float]) -> None:
        gap = f"{p['gap']:.2%}" if p["gap"] < 1e6 else "-"
        print(f"  [{p['time_s']:7.1f} s] incumbent {format_quantity(p['incumbent_j'], 'J')}, "
              f"bound {format_quantity(p['bound_j'], 'J')}, gap {gap}", file=sys.stderr)
    return report


def _cmd_solve(args: argparse.Namespace) -> int:
    check_outputs({"--out": args.out, "--binary": args.binary},
                  {"--graph": getattr(args, "graph", None), "--board": args.board})
    model, options = model_from_args(args)
    with flags_named():  # the API names its parameters, the command line its flags
        planned = plan(model, args.board, ram=args.ram, deadline=args.deadline,
                       accounting=args.accounting, optimizer=args.optimizer or "sgd",
                       effort=args.effort, time_limit_s=args.time_limit, search=Search(
                           deadline_margin=args.deadline_margin, gap_limit=args.gap,
                           seed=args.seed, threads=args.threads, remat=not args.no_remat,
                           paging=not args.no_paging, restricted=args.restricted,
                           plan_for=args.plan_for, progress=_progress_printer(args.json)),
                       started=args.started, **options)
    written: list[str] = []
    if planned.schedule is not None:
        write_all_or_nothing(written, (
            (args.out, planned.save),
            (args.binary, lambda path: planned.save(path, binary=True))))
    if args.json:
        emit_json({**planned.summary(), "files": written})
    else:
        _print_solve(planned, written)
    return 0 if planned.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) else 1


def _print_solve(planned: Plan, written: list[str]) -> None:
    outcome, result, plan_for = planned.outcome, planned.result, planned.plan_for
    s = result.summary()
    print(f"{planned.request.graph.name} on {planned.request.board.name}: {s['method']}: "
          f"{planned.message}")
    if plan_for != "typical":
        print(row("planned for", f"the {plan_for} corner of the board's ranges (simulate "
                   "--corners judges every corner)"))
    print(row("budget", result.request.describe_budget()))
    if outcome.planned_activation_bytes is not None:
        print(row("planned against", f"{format_bytes(outcome.planned_activation_bytes)} of "
                   "activations, so that every buffer lays out in the arena"))
    fit = outcome.schedule.metadata.get("arena_fit") if outcome.schedule is not None else None
    if fit:  # its buffers did not lay out: compaction or replanning, whichever cost less
        print(row("laid out", fit))
    if s["deadline_s"] is not None:
        margin = result.request.deadline_margin
        print(row("deadline", format_quantity(s["deadline_s"], "s") + (
            f" (planned against {format_quantity(s['planning_deadline_s'], 's')}: margin "
            f"{margin}; check with simulate --runs N)" if margin is not None else "")))
    if result.metrics is not None:
        print(row("energy", f"{format_quantity(s['energy_j'], 'J')} "
                             f"({s['energy_overhead']:+.2%} vs every op once)"))
        print(row("  compute / page-in / page-out",
                   f"{format_quantity(s['compute_energy_j'], 'J')} / "
                   f"{format_quantity(s['pagein_energy_j'], 'J')} / "
                   f"{format_quantity(s['pageout_energy_j'], 'J')}"))
        if s["bound_j"] is not None:
            print(row("lower bound", format_quantity(s["bound_j"], "J")))
        print(row("time (optimizer model)", format_quantity(s["time_s"], "s")))
        print(row("peak RAM (optimizer model)",
                   f"{format_bytes(s['peak_total_bytes'])} in all = "
                   f"{format_bytes(s['resident_bytes'])} resident + "
                   f"{format_bytes(s['peak_ram_bytes'])} activations"))
        if outcome.verdict is not None:
            print(row("arena (simulated layout)",
                       f"{format_bytes(outcome.verdict.arena_bytes)} of "
                       f"{format_bytes(outcome.verdict.board_ram_bytes)} usable"))
        print(row("recomputations / page-ins / page-outs",
                   f"{s['recomputations']} / {s['page_ins']} / {s['page_outs']}"))
        if s["weight_holds_possible"]:
            print(row("weight holds", f"{s['weight_holds']} of "
                       f"{s['weight_holds_possible']} backward ops keep their weights"))
    print(row("binaries after reduction", str(s["binaries"])))
    print(row("build / solve time", f"{s['build_time_s']:.2f} s / {s['solve_time_s']:.2f} s"))
    if s["warm_start"]:
        print(row("warm start", s["warm_start"]))
    if s["effort_nodes"] is not None:
        print(row("effort (deterministic)", f"{s['effort_nodes']} nodes"
                   + ("; the time limit bound first" if s["time_cap_bound"] else "")))
    for path in written:
        print(row("wrote", path))



def register(sub: Any) -> None:
    """Add ``solve`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser("solve", help="find the least-energy schedule (POET MILP, "
                                              "SCIP)"))
    add_graph_and_board(p)
    add_request_options(p, ram="board", deadline=None)
    ablation = p.add_mutually_exclusive_group()
    ablation.add_argument("--no-remat", action="store_true", help="paging only (ablation)")
    ablation.add_argument("--no-paging", action="store_true",
                          help="recomputation only (ablation)")
    p.add_argument("--restricted", action="store_true",
                   help="faster restricted formulation (backward ops once, forward ops at most "
                        "twice); its result is labelled and never reported optimal")
    p.add_argument("--plan-for", choices=CORNERS, default="typical",
                   help="plan against this corner of the board's ranges (default typical: "
                        "the board as given; slow: every range at the end that costs time; "
                        "costly: at the end that costs energy); the budget and deadline are "
                        "resolved on the board as given, the schedule judged at the corner")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   help=f"safety cap on the whole command (default {DEFAULT_TIME_LIMIT_S:g} s; "
                        "the effort normally ends the search first)")
    p.add_argument("--gap", type=float, default=0.0, metavar="G",
                   help="stop at this relative gap, e.g. 0.01 (default 0: prove optimality)")
    p.add_argument("--threads", type=int, default=1, metavar="N")
    p.add_argument("--effort", type=int, default=DEFAULT_EFFORT, metavar="NODES",
                   help="bound the search by deterministic work (SCIP nodes and 100 LP "
                        "iterations a node, in all): the same schedule on any machine under "
                        "any load, with --time-limit only a safety cap that the output "
                        f"reports when it binds (default {DEFAULT_EFFORT}; 0: the time limit "
                        "alone)")
    p.add_argument("--seed", type=int, default=0, metavar="N")
    p.add_argument("--deadline-margin", metavar="10%|SECONDS",
                   help="plan against the deadline minus this margin (a share of the "
                        "deadline, or seconds), leaving room for the board's timing "
                        "variance; the verdict still judges --deadline. Check the schedule "
                        "with simulate --runs N")
    p.add_argument("--out", metavar="FILE", help="write the schedule (JSON)")
    p.add_argument("--binary", metavar="FILE", help="write the compact binary schedule")
    add_model_options(p)
    p.set_defaults(func=_cmd_solve)
