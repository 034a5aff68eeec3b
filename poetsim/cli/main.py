"""The ``poetsim`` command: argument parsing and printing only; the work is in the library.

Every subcommand that prints results takes ``--json`` for machine-readable output. Exit
status (:data:`EXIT_CODES`): 0 success (PASS, optimal, feasible), 1 a negative answer
(infeasible, FAIL), 2 bad input (one line on stderr naming the file or flag, the value and
the rule), 3 an internal error (one line naming the file the traceback was saved to;
``--debug`` shows the traceback instead), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

from poetsim import __version__
from poetsim.boards import (
    DEFAULT_BOARD,
    board_to_dict,
    builtin_board_names,
    get_board,
    load_board,
)
from poetsim.boards.corners import CORNERS, corner_board
from poetsim.boards.spec import Board
from poetsim.cli import calibrate_command, sweep_commands, torch_commands
from poetsim.cli.options import add_accept_edits, add_corners
from poetsim.compare import compare, format_table, write_outcomes
from poetsim.costs import op_costs
from poetsim.demo import (
    DEMO_BOARD,
    DEMO_DEADLINE,
    DEMO_MODEL,
    DEMO_MODEL_OPTIONS,
    DEMO_RAM,
    DEMO_SETTINGS,
)
from poetsim.errors import (
    InputError,
    InternalError,
    PoetsimError,
    ScheduleError,
    ScheduleFileError,
)
from poetsim.graph import TrainingGraph, read_graph, write_graph
from poetsim.graph.graph import OPTIMIZER_STATE_COPIES
from poetsim.methods import DEFAULT_EFFORT, DEFAULT_TIME_LIMIT_S, SolverSettings
from poetsim.optimizer import SolveStatus
from poetsim.report import plot_simulation
from poetsim.request import (
    BOARD_RAM,
    Accounting,
    Request,
    request_for_schedule,
    resolve_request,
)
from poetsim.runs import Outcome, run_method
from poetsim.schedule import (
    Schedule,
    read_schedule,
    read_schedule_binary,
    write_schedule,
    write_schedule_binary,
)
from poetsim.schedule.io import DIGEST_FIELD, is_binary_schedule
from poetsim.schedule.metadata import disagreements, parse_metadata
from poetsim.sim.montecarlo import MAX_RUNS, MonteCarlo, monte_carlo
from poetsim.sim.report import SimReport
from poetsim.sim.trace import write_chrome_trace
from poetsim.summary import cost_summary, graph_summary
from poetsim.units import format_bytes, format_quantity
from poetsim.verdict import Verdict, check_on_board, judge_corners
from poetsim.zoo import (
    DEFAULT_MODEL,
    build_model,
    model_description,
    model_names,
    model_options,
)

__all__ = ["EXIT_CODES", "main"]

#: What each exit status means.
EXIT_CODES = {0: "success", 1: "a negative answer (infeasible, FAIL)", 2: "bad input",
              3: "internal error", 130: "interrupted"}


class _Parser(argparse.ArgumentParser):
    """argparse with poetsim's one-line errors (exit 2)."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("poetsim").strip()
        self.exit(2, f"poetsim: error: {where + ': ' if where else ''}{message}\n")


# ----------------------------------------------------------------------------- helpers

def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _model_options(args: argparse.Namespace) -> dict[str, int]:
    options: dict[str, int] = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--set {item!r}: expected KEY=VALUE, e.g. --set seq_len=64")
        try:
            options[key] = int(value)
        except ValueError:
            raise InputError(f"--set {item!r}: {key} must be a whole number") from None
    if args.batch_size is not None:
        options["batch_size"] = args.batch_size
    return options


def _graph_from_args(args: argparse.Namespace,
                     defaults: dict[str, int] | None = None) -> TrainingGraph:
    """The graph file, or the zoo model with ``defaults`` under the user's options."""
    if getattr(args, "graph", None):
        return read_graph(args.graph)
    return build_model(args.model, **{**(defaults or {}), **_model_options(args)})


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, metavar="N", help="batch size (default 1)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="a model option, e.g. --set seq_len=64 (repeatable)")


def _add_graph_and_board(parser: argparse.ArgumentParser, *, model: str = DEFAULT_MODEL,
                         board: str = DEFAULT_BOARD) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", default=model, metavar="NAME",
                        help=f"zoo model (default {model})")
    source.add_argument("--graph", metavar="FILE", help="graph file (JSON) instead of a model")
    parser.add_argument("--board", default=board, metavar="NAME|FILE",
                        help=f"built-in board or board file (default {board})")


def _row(label: str, value: str) -> str:
    return f"  {label:<34} {value}"


def _add_request_options(parser: argparse.ArgumentParser, *, ram: str | None,
                         deadline: str | None) -> None:
    """--ram, --deadline, --accounting and --optimizer: what every request is made of."""
    parser.add_argument("--ram", default=ram, metavar="50%|256KiB|BYTES|board",
                        help="RAM budget: a percentage of the plain schedule's activation "
                             "peak, a size (the whole RAM under physical accounting, "
                             "activations under paper), or 'board' (all usable RAM)"
                             + (f"; default {ram}".replace("%", "%%") if ram else ""))
    parser.add_argument("--deadline", default=deadline, metavar="1.5x|SECONDS",
                        help="time budget: a factor of the plain compute time, or seconds"
                             + (f"; default {deadline}" if deadline else ""))
    from_file = ram is None  # simulate: the schedule file's words are the defaults
    parser.add_argument("--accounting", default=None if from_file else Accounting.PHYSICAL.value,
                        choices=[a.value for a in Accounting],
                        help="physical: everything resident must fit the budget and the "
                             "board's RAM; paper: the budget covers activations only, as "
                             "POET's mu_RAM (the physical need is still reported). Default: "
                             + ("the one the schedule file records, else physical" if from_file
                                else "physical"))
    _add_optimizer(parser, "" if ram else ", or the one the schedule file records")


def _add_optimizer(parser: argparse.ArgumentParser, default_note: str = "") -> None:
    parser.add_argument("--optimizer", default=None, choices=list(OPTIMIZER_STATE_COPIES),
                        help="the training step's optimizer, which decides the optimizer "
                             "state (sgd: none, momentum: one copy of the trained weights, "
                             f"adam: two); default sgd{default_note}")


def _request_from_args(args: argparse.Namespace, graph: TrainingGraph, board: Board) -> Request:
    """The user's request (:func:`~poetsim.request.resolve_request`)."""
    return resolve_request(graph, board, ram=args.ram, deadline=args.deadline,
                           accounting=args.accounting, optimizer=args.optimizer or "sgd",
                           deadline_margin=getattr(args, "deadline_margin", None))


def _write_all_or_nothing(written: list[str],
                          outputs: Sequence[tuple[str | None, Callable[[str], Any]]]) -> None:
    """Write each requested output (path, writer), appending its path to ``written``; if
    one fails, remove those already written and re-raise: a failing command leaves none."""
    try:
        for path, write in outputs:
            if path:
                write(path)
                written.append(path)
    except BaseException:
        for path in written:
            Path(path).unlink(missing_ok=True)
        raise


#: The flag of each solver setting, for messages that name what the user typed.
_SETTING_FLAGS = {"time_limit_s": "--time-limit", "gap_limit": "--gap", "seed": "--seed",
                  "threads": "--threads", "effort": "--effort"}


def _solver_settings(args: argparse.Namespace) -> SolverSettings:
    try:
        return SolverSettings(time_limit_s=args.time_limit, gap_limit=getattr(args, "gap", 0.0),
                              seed=getattr(args, "seed", 0),
                              threads=getattr(args, "threads", 1),
                              effort=getattr(args, "effort", DEFAULT_EFFORT))
    except InputError as err:
        field, _, rest = str(err).partition(" = ")
        if field in _SETTING_FLAGS:
            raise InputError(f"{_SETTING_FLAGS[field]} {rest}") from None
        raise


# ----------------------------------------------------------------------------- boards

def _cmd_boards_list(args: argparse.Namespace) -> None:
    boards = [get_board(name) for name in builtin_board_names()]
    if args.json:
        _emit_json([{"name": b.name, "title": b.title, "profile": b.profile.value,
                     "ram_bytes": b.ram.bytes, "storage": b.storage.kind.value,
                     "dma_channels": b.dma.channels} for b in boards])
        return
    print(f"{'name':<20} {'profile':<9} {'RAM':>10}  {'storage':<9} {'DMA':>3}  title")
    for b in boards:
        print(f"{b.name:<20} {b.profile.value:<9} {format_bytes(b.ram.bytes):>10}  "
              f"{b.storage.kind.value:<9} {b.dma.channels:>3}  {b.title}")


def _print_board(board: Board) -> None:
    doc = board_to_dict(board)
    print(f"{board.name}: {board.title}  (profile: {board.profile.value})")
    def table(name: str, rows: dict[str, Any]) -> None:
        print(f"[{name}]")
        nested = {k: v for k, v in rows.items() if isinstance(v, dict) and "value" not in v}
        for key, value in rows.items():
            if key in nested:
                continue
            if isinstance(value, dict):
                spread = (f" (range {value['min']:g} to {value['max']:g})"
                          if "min" in value else "")
                print(f"  {key:<30} {value['value']:<14g} [{value['source']}]{spread} "
                      f"{value['ref']}")
            else:
                print(f"  {key:<30} {value}")
        for key, value in nested.items():  # sub-tables such as [storage.write_busy]
            table(f"{name}.{key}", value)

    for section in ("cpu", "ram", "flash", "dma", "storage", "bus"):
        if section in doc:  # [flash] is optional
            table(section, doc[section])
    storage = board.storage
    print("derived")
    print(_row("ram usable", format_bytes(board.ram.usable_bytes)))
    if board.flash is not None:
        print(_row("flash usable (frozen weights)", format_bytes(board.flash.usable_bytes)))
    print(_row("storage wire rate", format_quantity(storage.wire_bytes_per_s, "B/s")))
    print(_row("compute energy per FLOP",
               format_quantity(1 / board.cpu.flops_per_j if board.cpu.flops_per_j
                               else board.cpu.active_power_w / board.cpu.flops_per_s, "J")))
    if board.notes:
        print("notes")
        for line in board.notes.strip().splitlines():
            print(f"  {line}")


def _cmd_boards_show(args: argparse.Namespace) -> None:
    from poetsim.regress import trained_on

    board = get_board(args.board)
    # the golden training jobs that run on this board, simulated again now
    folder = Path(args.goldens)
    trains = trained_on(board.name, folder) if folder.is_dir() else []
    if args.json:
        _emit_json({**board_to_dict(board), "trains": trains})
        return
    _print_board(board)
    print(f"trains (golden schedules in {folder}/ that PASS physically, simulated now)")
    if not trains:
        print("  none")
    for job in trains:
        options = ",".join(f"{k}={v}" for k, v in job["model_options"].items())
        lifetime = job["storage_lifetime_iterations"]
        step = "" if job["optimizer"] == "sgd" else f" with {job['optimizer']}"
        print(f"  {job['model']}{f' ({options})' if options else ''} by {job['method']}{step}, RAM "
              f"{job['ram']}, deadline {job['deadline'] or 'none'}: "
              f"{format_quantity(job['energy_j'], 'J')} and "
              f"{format_quantity(job['makespan_s'], 's')} per iteration, peak "
              f"{format_bytes(job['peak_total_bytes'])}"
              + (f", storage lifetime {lifetime:.3g} iterations" if lifetime else ""))


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
        _emit_json(results)
    else:
        for r in results:
            print(f"{r['file']}: ok ({r['name']})" if r["valid"] else r["error"],
                  file=sys.stdout if r["valid"] else sys.stderr)
    return 1 if failed else 0


# ----------------------------------------------------------------------------- models

def _cmd_models_list(args: argparse.Namespace) -> None:
    if args.json:
        _emit_json([{"name": n, "description": model_description(n),
                     "options": model_options(n)} for n in model_names()])
        return
    for name in model_names():
        print(f"{name:<20} {model_description(name)}")


def _cmd_models_show(args: argparse.Namespace) -> None:
    graph = build_model(args.model, **_model_options(args))
    summary = graph_summary(graph)
    if args.json:
        _emit_json({"description": model_description(args.model), **summary.as_dict()})
        return
    overridden = bool(args.set) or args.batch_size is not None
    print(summary.name if overridden else f"{summary.name}: {model_description(args.model)}")
    options = ", ".join(f"{k}={v}" for k, v in summary.metadata.items() if k != "model")
    print(_row("options", options))
    print(_row("ops (forward+loss / backward)",
               f"{summary.ops} ({summary.forward_ops} / {summary.backward_ops})"))
    print(_row("parameters", f"{summary.parameters:,} ({format_bytes(summary.param_bytes)})"))
    print(_row("forward MACs", format_quantity(summary.forward_macs, "MAC")))
    print(_row("forward FLOPs", format_quantity(summary.forward_flops, "FLOP")))
    print(_row("training FLOPs (one iteration)", format_quantity(summary.training_flops, "FLOP")))
    print(_row("activation bytes (all forward)", format_bytes(summary.activation_bytes)))
    print(_row("plain-schedule peak (activations)",
               f"{format_bytes(summary.plain_peak_bytes)} at {summary.plain_peak_op}"))


def _cmd_models_export(args: argparse.Namespace) -> None:
    graph = build_model(args.model, **_model_options(args))
    write_graph(graph, args.out)
    if args.json:
        _emit_json({"file": args.out, "ops": len(graph)})
    else:
        print(f"wrote {args.out} ({len(graph)} ops)")


# ----------------------------------------------------------------------------- costs

def _cmd_costs(args: argparse.Namespace) -> None:
    _show_costs(_graph_from_args(args), get_board(args.board), args)


def _show_costs(graph: TrainingGraph, board: Board, args: argparse.Namespace) -> None:
    # the graph and costs the board's request plans (row bands, streamed weights), as solve
    request = resolve_request(graph, board, ram=BOARD_RAM, optimizer=args.optimizer or "sgd")
    graph, costs = request.graph, request.costs
    summary = cost_summary(graph, board, costs, request=request)
    if args.json:
        doc: dict[str, Any] = summary.as_dict()
        if args.per_op:
            doc["ops"] = [{
                "op": op.name, "phase": op.phase.value, "kind": op.kind,
                "output_bytes": op.output_bytes,
                "compute_time_s": float(costs.compute_time_s[i]),
                "compute_energy_j": float(costs.compute_energy_j[i]),
                "pagein_time_s": float(costs.pagein_time_s[i]),
                "pagein_energy_j": float(costs.pagein_energy_j[i]),
                "pageout_time_s": float(costs.pageout_time_s[i]),
                "pageout_energy_j": float(costs.pageout_energy_j[i]),
            } for i, op in enumerate(graph.ops)]
        _emit_json(doc)
        return
    s = summary
    print(f"{graph.name} on {board.name} ({board.title}; profile {s.profile})")
    print("one training iteration, every op computed once")
    print(_row("compute time", f"{format_quantity(s.compute_time_s, 's')} "
               f"(forward {format_quantity(s.forward_time_s, 's')}, "
               f"backward {format_quantity(s.backward_time_s, 's')})"))
    print(_row("compute energy", format_quantity(s.compute_energy_j, "J")))
    print(_row("page every activation out+in", f"{format_quantity(s.page_all_time_s, 's')}, "
               f"{format_quantity(s.page_all_energy_j, 'J')}"))
    print("memory")
    print(_row("RAM (usable)", f"{format_bytes(s.ram_bytes)} ({format_bytes(s.ram_usable_bytes)})"))
    print(_row("resident: params + grads", format_bytes(s.resident_bytes)))
    if s.flash_weight_bytes:
        print(_row("frozen weights in flash", f"{format_bytes(s.flash_weight_bytes)} "
                                              "(read in place, not in RAM)"))
    if s.streamed_weight_bytes:
        print(_row("weights on storage", f"{format_bytes(s.streamed_weight_bytes)} "
                                         "(streamed by each op that reads them)"))
    if request.gradient_sum_ops:
        print(_row("gradient sums", f"{request.gradient_sum_ops} ops of their own (so that "
                                    "no backward op holds several incoming gradients)"))
    if graph.metadata.get("row_bands"):
        print(_row("row bands", f"{graph.metadata['row_bands']} (the frozen front, so that "
                                "every op fits the board)"))
    print(_row("plain-schedule activation peak", format_bytes(s.plain_peak_bytes)))
    verdict = ("fits without remat or paging" if s.fits_without_remat_or_paging
               else "needs remat or paging" if s.resident_fits
               else "parameters alone do not fit")
    print(_row("plain total vs usable RAM", f"{format_bytes(s.plain_total_bytes)}: {verdict}"))
    print(_row("storage capacity", format_bytes(s.storage_capacity_bytes)))
    if s.measured_ops:
        print(_row("ops with measured costs", str(s.measured_ops)))
    print("most energy-hungry ops")
    for entry in s.top_energy_ops:
        print(f"  {entry['op']:<34} {format_quantity(entry['compute_energy_j'], 'J'):>10} "
              f"{format_quantity(entry['compute_time_s'], 's'):>10}  {entry['share']:6.1%}")
    if args.per_op:
        print(f"\n{'op':<34} {'out':>10} {'compute':>10} {'E_comp':>10} {'page-in':>10} "
              f"{'E_in':>10} {'page-out':>10} {'E_out':>10}")
        for i, op in enumerate(graph.ops):
            print(f"{op.name:<34} {format_bytes(op.output_bytes):>10} "
                  f"{format_quantity(costs.compute_time_s[i], 's', 3):>10} "
                  f"{format_quantity(costs.compute_energy_j[i], 'J', 3):>10} "
                  f"{format_quantity(costs.pagein_time_s[i], 's', 3):>10} "
                  f"{format_quantity(costs.pagein_energy_j[i], 'J', 3):>10} "
                  f"{format_quantity(costs.pageout_time_s[i], 's', 3):>10} "
                  f"{format_quantity(costs.pageout_energy_j[i], 'J', 3):>10}")


# ----------------------------------------------------------------------------- solve

def _progress_printer(quiet: bool):
    if quiet:
        return None

    def report(p: dict[str, float]) -> None:
        gap = f"{p['gap']:.2%}" if p["gap"] < 1e6 else "-"
        print(f"  [{p['time_s']:7.1f} s] incumbent {format_quantity(p['incumbent_j'], 'J')}, "
              f"bound {format_quantity(p['bound_j'], 'J')}, gap {gap}", file=sys.stderr)
    return report


def _cmd_solve(args: argparse.Namespace) -> int:
    board = get_board(args.board)
    request = _request_from_args(args, _graph_from_args(args), board)
    if args.plan_for != "typical":  # the user's words resolved on the board as given
        board = corner_board(board, args.plan_for)
        request = attrs.evolve(request, board=board, costs=op_costs(request.graph, board))
    graph = request.graph
    # --time-limit holds for the whole command: reading and costing a large graph counts
    settings = _solver_settings(args)
    spent_s = time.perf_counter() - args.started
    settings = attrs.evolve(settings, time_limit_s=max(0.1 * settings.time_limit_s,
                                                       settings.time_limit_s - spent_s))
    # the method path compare and the demo take: re-solved when the simulation finds the
    # schedule late or its buffers do not lay out on the board
    outcome = run_method(request, "poet", settings, solve_options=dict(
        remat=not args.no_remat, paging=not args.no_paging, restricted=args.restricted,
        progress=_progress_printer(args.json)))
    result, schedule = outcome.solve_result, outcome.schedule
    if schedule is not None and args.plan_for != "typical":
        schedule = schedule.with_metadata(plan_for=args.plan_for)
    written: list[str] = []
    if schedule is not None:
        _write_all_or_nothing(written, (
            (args.out, lambda path: write_schedule(schedule, graph, path)),
            (args.binary, lambda path: write_schedule_binary(schedule, path, graph))))
    if args.json:
        _emit_json({**result.summary(), **_replanned(outcome), "plan_for": args.plan_for,
                    "files": written})
    else:
        _print_solve(graph, board, outcome, written, args.plan_for)
    return 0 if result.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) else 1


def _replanned(outcome: Outcome) -> dict[str, Any]:
    """What the method path added to POET's result: the simulated arena, and the budget
    and deadline planned against when the board asked for less."""
    return {"arena_bytes": outcome.verdict.arena_bytes if outcome.verdict else None,
            "planned_activation_bytes": outcome.planned_activation_bytes,
            "tightenings": outcome.tightenings}


def _print_solve(graph: TrainingGraph, board: Board, outcome: Outcome,
                 written: list[str], plan_for: str = "typical") -> None:
    result = outcome.solve_result
    s = result.summary()
    print(f"{graph.name} on {board.name}: {s['method']}: {result.message}")
    if plan_for != "typical":
        print(_row("planned for", f"the {plan_for} corner of the board's ranges (simulate "
                   "--corners judges every corner)"))
    print(_row("budget", result.request.describe_budget()))
    if outcome.planned_activation_bytes is not None:
        print(_row("planned against", f"{format_bytes(outcome.planned_activation_bytes)} of "
                   "activations, so that every buffer lays out in the arena"))
    if s["deadline_s"] is not None:
        margin = result.request.deadline_margin
        print(_row("deadline", format_quantity(s["deadline_s"], "s") + (
            f" (planned against {format_quantity(s['planning_deadline_s'], 's')}: margin "
            f"{margin}; check with simulate --runs N)" if margin is not None else "")))
    if result.metrics is not None:
        print(_row("energy", f"{format_quantity(s['energy_j'], 'J')} "
                             f"({s['energy_overhead']:+.2%} vs every op once)"))
        print(_row("  compute / page-in / page-out",
                   f"{format_quantity(s['compute_energy_j'], 'J')} / "
                   f"{format_quantity(s['pagein_energy_j'], 'J')} / "
                   f"{format_quantity(s['pageout_energy_j'], 'J')}"))
        if s["bound_j"] is not None:
            print(_row("lower bound", format_quantity(s["bound_j"], "J")))
        print(_row("time (optimizer model)", format_quantity(s["time_s"], "s")))
        print(_row("peak RAM (optimizer model)",
                   f"{format_bytes(s['peak_total_bytes'])} in all = "
                   f"{format_bytes(s['resident_bytes'])} resident + "
                   f"{format_bytes(s['peak_ram_bytes'])} activations"))
        if outcome.verdict is not None:
            print(_row("arena (simulated layout)",
                       f"{format_bytes(outcome.verdict.arena_bytes)} of "
                       f"{format_bytes(outcome.verdict.board_ram_bytes)} usable"))
        print(_row("recomputations / page-ins / page-outs",
                   f"{s['recomputations']} / {s['page_ins']} / {s['page_outs']}"))
        if s["weight_holds_possible"]:
            print(_row("weight holds", f"{s['weight_holds']} of "
                       f"{s['weight_holds_possible']} backward ops keep their weights"))
    print(_row("binaries after reduction", str(s["binaries"])))
    print(_row("build / solve time", f"{s['build_time_s']:.2f} s / {s['solve_time_s']:.2f} s"))
    if s["warm_start"]:
        print(_row("warm start", s["warm_start"]))
    if s["effort_nodes"] is not None:
        print(_row("effort (deterministic)", f"{s['effort_nodes']} nodes"
                   + ("; the time limit bound first" if s["time_cap_bound"] else "")))
    for path in written:
        print(_row("wrote", path))


# ----------------------------------------------------------------------------- demo

def _cmd_demo(args: argparse.Namespace) -> int:
    """Costs, POET at a tight budget, simulation, two baselines; files in a new folder."""
    from poetsim.demo import run_demo

    board = get_board(args.board)
    request = _request_from_args(
        args, _graph_from_args(args, DEMO_MODEL_OPTIONS if args.model == DEMO_MODEL else None),
        board)
    graph = request.graph
    if not args.json:
        _show_costs(graph, board, args)
        print(flush=True)
    result = run_demo(request, _solver_settings(args), out_dir=args.out,
                      echo=None if args.json else lambda line: print(line, flush=True))
    if args.json:
        _emit_json({**result.summary, "out_dir": str(result.out_dir)})
        return 0 if result.passed else 1
    poet = result.outcomes[0]
    if poet.report is not None and poet.verdict is not None:
        print()
        _print_sim(poet.report, poet.verdict)
    print()
    print(format_table(result.outcomes))
    print(f"\nwrote {', '.join(result.files)} into\n{result.out_dir.resolve()}"
          f"  ({result.wall_s:.1f} s; start with summary.md)")
    return 0 if result.passed else 1


# ----------------------------------------------------------------------------- simulate

def _print_sim(r: SimReport, verdict: Verdict) -> None:
    print(f"{r.graph_name} on {r.board_name}: {verdict.line()}")
    for note in verdict.notes:
        print(_row("note", note))
    deadline = (f" (deadline {format_quantity(verdict.deadline_s, 's')}, "
                f"{'met' if verdict.deadline_met else 'missed'})"
                if verdict.deadline_s is not None else "")
    print(_row("makespan", format_quantity(r.makespan_s, "s") + deadline))
    print(_row("  compute / stall", f"{format_quantity(r.compute_s, 's')} / "
                                    f"{format_quantity(r.stall_s, 's')}"))
    print(_row("peak RAM", f"{format_bytes(verdict.peak_total_bytes)} of "
                           f"{format_bytes(verdict.board_ram_bytes)} usable at step "
                           f"{r.peak_step} ({r.peak_action} {r.peak_op})"))
    whose = "the schedule's own layout" if r.layout_from_schedule else "a layout planned now"
    print(_row("arena", f"{format_bytes(verdict.arena_bytes)} ({r.fragmentation_bytes} B of "
                        f"fragmentation: every buffer at an offset of one static region, "
                        f"{whose})"))
    budget_kind = ("in all" if verdict.accounting is Accounting.PHYSICAL
                   else "of activations")
    print(_row("budget", f"{format_bytes(verdict.budget_bytes)} {budget_kind}: "
                         + ("kept" if verdict.within_budget else "exceeded")))
    print(_row("energy", format_quantity(r.energy_j, "J")))
    for title, table in (("  by component", r.energy_by_component_j),
                         ("  by kind", r.energy_by_kind_j)):
        parts = ", ".join(f"{k} {format_quantity(v, 'J')}" for k, v in table.items() if v)
        print(_row(title, parts))
    print(_row("paged out / in", f"{format_bytes(r.bytes_paged_out)} / "
                                 f"{format_bytes(r.bytes_paged_in)}"))
    print(_row("bus busy", f"{r.bus_utilisation:.1%} of the makespan"))
    wakeups = ", ".join(f"{k} {v}" for k, v in r.wakeups.items() if v)
    if wakeups:
        print(_row("wake-ups", wakeups))
    if r.flash_erases:
        print(_row("flash erases (max per sector)",
                   f"{r.flash_erases} ({r.flash_max_erase_count})"))
    if r.storage_wear_bytes:
        worn = format_bytes(r.storage_wear_bytes)
        life = r.storage_lifetime_iterations
        if life is None:
            print(_row("storage wear", f"{worn} worn per iteration (the board file gives no "
                                       "endurance)"))
        else:
            if r.flash_endurance_cycles is not None:
                rating = f"{r.flash_endurance_cycles:,} erase cycles per sector"
                worn += " erased"
            else:
                rating = f"{life * r.storage_wear_bytes / 1e12:.3g} TB written rating"
                worn += " worn"
            count = f"{life:.3g}".replace("e+0", "e").replace("e+", "e")
            print(_row("storage lifetime", f"{count} iterations ({rating}, {worn} per "
                                           "iteration)"))
    p = r.prediction  # the op-list model's figures, recomputed
    for label, diff in (("energy", p.energy_diff_pct), ("time", p.time_diff_pct),
                        ("peak RAM", p.peak_diff_pct)):
        if diff is not None:
            print(_row(f"simulated vs predicted {label}", f"{diff:+.2f}%"))


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


def _print_monte_carlo(mc: MonteCarlo) -> None:
    seeds = f"seed {mc.seed}" if mc.runs == 1 else f"seeds {mc.seed}..{mc.last_seed}"
    print(f"monte carlo: {mc.runs} run{'s' if mc.runs != 1 else ''} ({seeds}); the verdict "
          "above is the nominal run's")
    if not mc.varies:
        print(_row("runs", f"all identical: {mc.identical_reason}"))
    for label, dist, unit in (("makespan", mc.makespan_s, "s"), ("energy", mc.energy_j, "J"),
                              ("drawn write-busy", mc.write_busy_s, "s")):
        print(_row(f"{label} p50 / p99 / max",
                   f"{format_quantity(dist.p50, unit)} / {format_quantity(dist.p99, unit)} / "
                   f"{format_quantity(dist.max, unit)} (mean {format_quantity(dist.mean, unit)})"))
    if mc.deadline_met_runs is not None and mc.deadline_s is not None:
        print(_row("deadline met", f"{mc.deadline_met_runs} of {mc.runs} runs "
                   f"({mc.deadline_met_share:.1%}) within {format_quantity(mc.deadline_s, 's')}"))
    if mc.varies and mc.runs > 1:
        print(_row("slowest run", f"seed {mc.worst_seed} ({format_quantity(mc.makespan_s.max, 's')}"
                   f"; reproduce with --runs 1 --seed {mc.worst_seed})"))
    print(_row("wall time", f"{mc.wall_s:.2f} s"))


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
        request = resolve_request(_graph_from_args(args), get_board(args.board),
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
    options = _model_options(args)
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
                         resident_bytes=request.resident_bytes,
                         deadline_s=request.deadline_s, costs=request.costs)
    written: list[str] = []
    _write_all_or_nothing(written, (
        (args.trace, lambda path: write_chrome_trace(report, path, verdict=verdict.label)),
        (args.plot, lambda path: plot_simulation(graph, schedule, report, path,
                                                  verdict=verdict.label))))
    if args.json:
        doc = {**report.as_dict(transfers=args.transfers), **verdict.as_dict(),
               "request": request.metadata()}
        if mc is not None:
            doc["monte_carlo"] = {
                **mc.as_dict(), "verdict_is_of": "the nominal run (the figures and verdict "
                                                 "above); monte_carlo is reported beside it"}
        if corners is not None:
            doc["corners"] = [c.as_dict() for c in corners]
        _emit_json(doc)
    else:
        _print_sim(report, verdict)
        if corners is not None:
            print(_row("corners", "; ".join(c.phrase() for c in corners)
                       if len(corners) > 1 else
                       f"{verdict.label} (typical): {board.name} gives no ranges, so every "
                       "corner is the typical one"))
        for path in written:
            print(_row("wrote", path))
        if mc is not None:
            _print_monte_carlo(mc)
    return 0 if verdict.passed else 1


# ----------------------------------------------------------------------------- compare

def _cmd_compare(args: argparse.Namespace) -> int:
    board = get_board(args.board)
    request = _request_from_args(args, _graph_from_args(args), board)
    outcomes = compare(request, settings=_solver_settings(args), corners=args.corners)
    written = [str(p) for p in write_outcomes(outcomes, request, args.out)] if args.out else []
    if args.json:
        _emit_json([o.as_dict() for o in outcomes])
    else:
        print(format_table(outcomes))
        if written:
            print(f"wrote {len(written)} files into {args.out}")
    return 0 if any(o.feasible for o in outcomes) else 1


# ----------------------------------------------------------------------------- regress

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
        _emit_json({"cases": [c.as_dict() for c in checks], "updated": updated,
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


# ----------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="poetsim",
        description="Energy-optimal rematerialization and paging schedules for training on "
                    "edge boards, checked in a simulation of the board.",
    )
    parser.add_argument("--version", action="version", version=f"poetsim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, show the traceback instead of saving it")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_json(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    torch_commands.register(sub, with_json)

    boards = sub.add_parser("boards", help="list, show, validate and calibrate board files")
    boards_sub = boards.add_subparsers(dest="action", required=True, metavar="ACTION")
    with_json(boards_sub.add_parser("list", help="list the built-in boards")).set_defaults(
        func=_cmd_boards_list)
    p = with_json(boards_sub.add_parser("show", help="print one board with the source of "
                                                     "every number"))
    p.add_argument("board", metavar="NAME|FILE")
    p.add_argument("--goldens", default="schedules", metavar="DIR",
                   help="folder of golden schedules whose training jobs on this board are "
                        "listed (default schedules/)")
    p.set_defaults(func=_cmd_boards_show)
    p = with_json(boards_sub.add_parser("validate", help="check board files"))
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_boards_validate)
    calibrate_command.register(boards_sub, with_json)

    models = sub.add_parser("models", help="list and show the model zoo")
    models_sub = models.add_subparsers(dest="action", required=True, metavar="ACTION")
    with_json(models_sub.add_parser("list", help="list the models")).set_defaults(
        func=_cmd_models_list)
    p = with_json(models_sub.add_parser("show", help="op count, parameters, FLOPs and "
                                                     "activation bytes of a model"))
    p.add_argument("model", metavar="NAME")
    _add_model_options(p)
    p.set_defaults(func=_cmd_models_show)
    p = with_json(models_sub.add_parser("export", help="write a model's training graph file"))
    p.add_argument("model", metavar="NAME")
    p.add_argument("--out", required=True, metavar="FILE", help="graph file to write (JSON)")
    _add_model_options(p)
    p.set_defaults(func=_cmd_models_export)

    p = with_json(sub.add_parser("solve", help="find the least-energy schedule (POET MILP, SCIP)"))
    _add_graph_and_board(p)
    _add_request_options(p, ram="board", deadline=None)
    ablation = p.add_mutually_exclusive_group()
    ablation.add_argument("--no-remat", action="store_true", help="paging only (ablation)")
    ablation.add_argument("--no-paging", action="store_true", help="recomputation only (ablation)")
    p.add_argument("--restricted", action="store_true",
                   help="faster restricted formulation (backward ops once, forward ops at most "
                        "twice); its result is labelled and never reported optimal")
    p.add_argument("--plan-for", choices=CORNERS, default="typical",
                   help="plan against this corner of the board's ranges (default typical: "
                        "the board as given; slow: every range at the end that costs time; "
                        "costly: at the end that costs energy); the budget and deadline are "
                        "resolved on the board as given, the schedule judged at the corner",
                   )
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
    _add_model_options(p)
    p.set_defaults(func=_cmd_solve)

    p = with_json(sub.add_parser("compare", help="POET against every baseline that applies, "
                                                 "all simulated on the board"))
    _add_graph_and_board(p)
    _add_request_options(p, ram="70%", deadline=None)
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   help=f"safety cap on each MILP solve (default {DEFAULT_TIME_LIMIT_S:g} s)")
    p.add_argument("--effort", type=int, default=DEFAULT_EFFORT, metavar="NODES",
                   help="deterministic work limit of each MILP solve (SCIP nodes and their "
                        f"LP iterations; default {DEFAULT_EFFORT}, 0: the time limit alone)")
    p.add_argument("--out", metavar="DIR",
                   help="write every method's schedule and comparison.json into DIR (new)")
    add_corners(p)
    _add_model_options(p)
    p.set_defaults(func=_cmd_compare)

    p = with_json(sub.add_parser("simulate", help="verify a schedule in a simulation of the board"))
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
    _add_request_options(p, ram=None, deadline=None)
    p.description = ("Without --ram / --deadline, the budget and deadline the schedule file "
                     "records in words (\"50%\", \"1.5x\") are resolved again on this graph "
                     "and board; without any, the board's RAM and no deadline.")
    _add_model_options(p)
    p.set_defaults(func=_cmd_simulate)

    for name, help_text in (
        ("costs", "cost summary of a model's training graph on a board"),
        ("demo", f"the built-in default job: fine-tuning {DEMO_MODEL} "
                 f"({', '.join(f'{k}={v}' for k, v in DEMO_MODEL_OPTIONS.items())}) "
                 f"on the {DEMO_BOARD} within its RAM: costs, then POET's least-energy "
                 "schedule, verified in the simulator and compared"),
    ):
        p = with_json(sub.add_parser(name, help=help_text))
        if name == "demo":
            _add_graph_and_board(p, model=DEMO_MODEL, board=DEMO_BOARD)
        else:
            _add_graph_and_board(p)
        p.add_argument("--per-op", action="store_true", help="also list every op's costs")
        _add_model_options(p)
        p.set_defaults(func=_cmd_costs)
        if name == "costs":
            _add_optimizer(p)
        if name == "demo":
            _add_request_options(p, ram=DEMO_RAM, deadline=DEMO_DEADLINE)
            p.add_argument("--time-limit", type=float, default=DEMO_SETTINGS.time_limit_s,
                           metavar="S", help="solver time limit, a safety cap (default "
                           f"{DEMO_SETTINGS.time_limit_s:g} s)")
            p.add_argument("--effort", type=int, default=DEMO_SETTINGS.effort, metavar="NODES",
                           help="deterministic work limit of each MILP solve (SCIP nodes; "
                           f"default {DEMO_SETTINGS.effort}: the same schedule on any machine)")
            p.add_argument("--out", metavar="DIR", help="output folder (must not exist; "
                           "default ./poetsim-demo-YYYYmmdd-HHMMSS)")
            p.set_defaults(func=_cmd_demo)
    p = with_json(sub.add_parser(
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
    sweep_commands.register(sub, with_json)
    return parser


def _save_traceback() -> Path:
    """The current exception's traceback in a new file; its path."""
    import tempfile
    import time
    import traceback

    stamp = time.strftime("%Y%m%d-%H%M%S")
    fd, name = tempfile.mkstemp(prefix=f"poetsim-crash-{stamp}-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"poetsim {__version__}, argv {sys.argv!r}\n")
        traceback.print_exc(file=out)
    return Path(name)


def _one_line_warning(message: Warning | str, category: type[Warning], *_args: Any,
                      **_kwargs: Any) -> str:
    return f"poetsim: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = time.perf_counter()
    try:
        status = args.func(args)
    except InternalError as err:
        if args.debug:
            raise
        print(f"poetsim: internal error: {err} (traceback in {_save_traceback()}; "
              "please report it)", file=sys.stderr)
        return 3
    except PoetsimError as err:
        print(f"poetsim: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("poetsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # noqa: BLE001 - any other exception is a bug of ours
        if args.debug:
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(f"poetsim: internal error: {type(err).__name__}: {first} (traceback in "
              f"{_save_traceback()}; please report it)", file=sys.stderr)
        return 3
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
