"""``poetsim execute``: run a schedule's op list for real on a PyTorch model and check its
gradients, updated weights and measured bytes (PyTorch, optional; imported only when run).

The model is re-imported from its factory under the same options as ``poetsim import``
(:mod:`poetsim.cli.commands.import_model`), so the schedule's graph must be that one.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from poetsim.cli.commands.import_model import FACTORY_HELP, add_model_arguments, imported_model
from poetsim.cli.options import add_accept_edits, add_json
from poetsim.cli.output import row

__all__ = ["register"]


def _cmd_execute(args: argparse.Namespace) -> int:
    from poetsim.boards import board_for_schedule
    from poetsim.errors import ExecutionError
    from poetsim.schedule import read_schedule
    from poetsim.torchio import execute_schedule
    from poetsim.torchio.execute import check_learning_rate, check_tolerance

    lr = check_learning_rate(args.lr, "--lr")
    check_tolerance(args.rtol, "--rtol")
    imported = imported_model(args, args.model_factory)
    # checked against the imported graph, or its streamed form when the board's request
    # puts weights on storage, by execute_schedule (the fingerprint says which)
    schedule = read_schedule(args.schedule, accept_edits=args.accept_edits)
    board = board_for_schedule(args.board, schedule.metadata.get("board"), args.schedule)
    try:
        report = execute_schedule(imported, schedule, seed=args.seed, board=board,
                                  page_dir=args.page_dir, grad_rtol=args.rtol, lr=lr,
                                  arena=args.arena)
    except ExecutionError as err:
        raise ExecutionError(f"{args.schedule}: {err}") from None
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        r = report
        verdict = "PASS" if r.passed else "FAIL"
        print(f"{r.graph_name}: executed {r.steps} steps for real: {verdict}"
              + ("" if r.passed else f" ({'; '.join(r.reasons)})"))
        print(row("computes / recomputations", f"{r.computes} / {r.recomputations}"))
        print(row("page-outs / page-ins / frees", f"{r.page_outs} / {r.page_ins} / {r.frees}"))
        print(row("max relative gradient error", f"{r.max_rel_grad_error:.3g} "
                                                  f"({r.worst_param}; tolerance {r.grad_rtol:g})"))
        print(row(f"max relative weight error ({r.optimizer})",
                   f"{r.max_rel_weight_error:.3g} ({r.worst_weight_param}; of the step, "
                   f"lr {r.lr:g})"))
        if r.optimizer != "sgd":
            print(row("max relative state error", f"{r.max_rel_state_error:.3g} (against "
                                                   "torch.optim's)"))
        print(row("params stepped in place / after", f"{r.params_updated_in_place} / "
                                                      f"{r.params_updated_after}; "
                                                      f"{r.frozen_params} frozen, unchanged"))
        print(row("measured peak live bytes", f"{r.peak_live_bytes} B (graph units) at step "
                                               f"{r.peak_step}; {r.peak_live_raw_bytes} B raw"))
        print(row("activation budget", "none" if r.budget_bytes is None
                   else f"{r.budget_bytes} B"))
        print(row("checker / simulator peak", f"{r.checker_peak_bytes} B / "
                                               f"{r.simulated_peak_bytes} B"))
        if r.simulated_energy_j is not None:
            print(row("simulated energy", f"{r.simulated_energy_j:.6g} J on {board.name}"))
        print(row("written to page files", f"{r.bytes_written} B"))
        if r.arena_bytes is not None:
            print(row("activations in one arena", f"{r.arena_bytes} B, each at its offset"))
        if r.weights_on_storage != "none":
            print(row(f"weights on storage ({r.weights_on_storage})",
                       f"{r.params_on_storage} params in files"
                       + (f", {r.params_with_state_on_storage} with their {r.optimizer} state"
                          if r.params_with_state_on_storage else "")
                       + f"; read {r.weights_read_bytes} B, "
                       f"written back {r.weights_written_bytes} B (cost model "
                       f"{r.cost_model_weights_read_bytes} B / "
                       f"{r.cost_model_weights_written_bytes} B)"))
    return 0 if report.passed else 1


def register(sub: Any) -> None:
    """Add ``execute`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser(
        "execute", help="run a schedule for real on a PyTorch model and check its gradients "
                        "and updated weights",
        description="Execute SCHEDULE's op list on real float64 tensors on the CPU: compute "
                    "and recompute ops, page tensors out to files and back in, free them, "
                    "exactly in order; backward ops read only what the graph says they "
                    "read. The SGD step (--lr) is applied by the backward ops of an "
                    "--inplace-update graph, once, on their first computation, else after "
                    "the schedule. Then compare the parameter gradients and the updated "
                    "weights with plain autograd and torch.optim.SGD on the same batch "
                    "(frozen parameters must not change) and report the measured peak of "
                    "live tensor bytes next to the budget, the checker's and the "
                    "simulator's peak. The model is re-imported from --model-factory (same "
                    "--input-shape, --loss, --seed and --inplace-update as for `poetsim "
                    "import`); the schedule must be for that graph. Exit status 0 when the "
                    "gradients and weights match and the budget holds, 1 if not, 2 on bad "
                    "input."))
    p.add_argument("schedule", metavar="SCHEDULE", help="schedule file (JSON)")
    add_accept_edits(p)
    p.add_argument("--model-factory", required=True, metavar="MODULE:FACTORY",
                   help=FACTORY_HELP)
    p.add_argument("--board", default=None, metavar="NAME|FILE",
                   help="board whose request (weights on storage) and simulator prediction "
                        "the run follows (default: the board the schedule records, else "
                        "nrf52840)")
    p.add_argument("--page-dir", metavar="DIR",
                   help="directory for the page files (default: a temporary one)")
    p.add_argument("--rtol", type=float, default=1e-6, metavar="R",
                   help="relative tolerance of the gradient and updated-weight checks "
                        "(default 1e-6)")
    p.add_argument("--arena", action="store_true",
                   help="keep every activation in one preallocated region at the offset the "
                        "schedule's layout gives it (checked against the steps first; "
                        "without a layout, one planned now), so that a layout placing live "
                        "tensors on the same bytes corrupts the gradients and fails")
    p.add_argument("--lr", type=float, default=0.01, metavar="LR",
                   help="SGD learning rate of the step checked against torch.optim.SGD "
                        "(default 0.01)")
    add_model_arguments(p)
    p.set_defaults(func=_cmd_execute)
