"""``poetsim costs``: what one training iteration of a graph costs on a board, as the
board's request plans it (the demo prints the same summary first)."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.boards import get_board
from poetsim.cli.options import (
    add_graph_and_board,
    add_json,
    add_model_options,
    add_optimizer,
    graph_from_args,
)
from poetsim.cli.output import emit_json, row
from poetsim.request import BOARD_RAM, Request, resolve_request
from poetsim.summary import cost_summary
from poetsim.units import format_bytes, format_quantity

__all__ = ["register"]


def _cmd_costs(args: argparse.Namespace) -> None:
    # the graph and costs the board's request plans (row bands, streamed weights), as solve
    show_costs(resolve_request(graph_from_args(args), get_board(args.board), ram=BOARD_RAM,
                               optimizer=args.optimizer or "sgd"), args)


def show_costs(request: Request, args: argparse.Namespace) -> None:
    """The cost summary of the graph ``request`` plans (the demo's: its own request's)."""
    graph, board, costs = request.graph, request.board, request.costs
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
        emit_json(doc)
        return
    s = summary
    print(f"{graph.name} on {board.name} ({board.title}; profile {s.profile})")
    print("one training iteration, every op computed once")
    print(row("compute time", f"{format_quantity(s.compute_time_s, 's')} "
               f"(forward {format_quantity(s.forward_time_s, 's')}, "
               f"backward {format_quantity(s.backward_time_s, 's')})"))
    print(row("compute energy", format_quantity(s.compute_energy_j, "J")))
    print(row("page every activation out+in", f"{format_quantity(s.page_all_time_s, 's')}, "
               f"{format_quantity(s.page_all_energy_j, 'J')}"))
    print("memory")
    print(row("RAM (usable)", f"{format_bytes(s.ram_bytes)} ({format_bytes(s.ram_usable_bytes)})"))
    print(row("resident: params + grads", format_bytes(s.resident_bytes)))
    if s.flash_weight_bytes:
        print(row("frozen weights in flash", f"{format_bytes(s.flash_weight_bytes)} "
                                              "(read in place, not in RAM)"))
    if s.streamed_weight_bytes:
        print(row("weights on storage", f"{format_bytes(s.streamed_weight_bytes)} "
                                         "(streamed by each op that reads them)"))
    if request.gradient_sum_ops:
        print(row("gradient sums", f"{request.gradient_sum_ops} ops of their own (so that "
                                    "no backward op holds several incoming gradients)"))
    if graph.metadata.get("row_bands"):
        print(row("row bands", f"{graph.metadata['row_bands']} (the frozen front, so that "
                                "every op fits the board)"))
    print(row("plain-schedule activation peak", format_bytes(s.plain_peak_bytes)))
    verdict = ("fits without remat or paging" if s.fits_without_remat_or_paging
               else "needs remat or paging" if s.resident_fits
               else "parameters alone do not fit")
    print(row("plain total vs usable RAM", f"{format_bytes(s.plain_total_bytes)}: {verdict}"))
    print(row("storage capacity", format_bytes(s.storage_capacity_bytes)))
    if s.measured_ops:
        print(row("ops with measured costs", str(s.measured_ops)))
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



def register(sub: Any) -> None:
    """Add ``costs`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser("costs", help="cost summary of a model's training graph on "
                                              "a board"))
    add_graph_and_board(p)
    add_per_op(p)
    add_model_options(p)
    add_optimizer(p)
    p.set_defaults(func=_cmd_costs)


def add_per_op(parser: argparse.ArgumentParser) -> None:
    """``--per-op``: list every op's costs too."""
    parser.add_argument("--per-op", action="store_true", help="also list every op's costs")
