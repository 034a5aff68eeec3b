"""The ``poetsim import`` and ``poetsim execute`` commands (PyTorch, optional).

Argument parsing and printing only; the work is in :mod:`poetsim.torchio`. Torch is
imported only when one of these commands runs, so every other command works without it.

A model is named by a factory, ``package.module:function`` or ``path/to/file.py:function``,
called with no arguments; it returns an ``nn.Module``, or ``(module, example_inputs)``.
Without example inputs from the factory, ``--input-shape`` gives one per forward argument:
``2,3,32,32`` (random normal floats) or ``2,16:int:100`` (random integers in [0, 100)).
torch is seeded with ``--seed`` before the factory runs, so ``import`` and ``execute`` of
the same factory see the same weights and batch. Parameters the factory leaves with
``requires_grad=False`` are frozen; ``--inplace-update`` fuses each trained parameter's SGD
step into its backward op, and ``--gradient-sums`` sums each gradient with several
parts in an op of its own (give them to ``execute`` too: the graph must be the same).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from poetsim.cli.options import add_accept_edits
from poetsim.errors import InputError

__all__ = ["register"]

_FACTORY_HELP = "model factory: package.module:function or file.py:function"


def _row(label: str, value: str) -> str:
    return f"  {label:<34} {value}"


def _imported(args: argparse.Namespace, factory_spec: str) -> Any:
    from poetsim.torchio import import_module, load_factory, make_inputs, parse_input_spec
    from poetsim.torchio.trace import call_factory, require_torch

    torch = require_torch()
    specs = [parse_input_spec(s) for s in args.input_shape or ()]
    factory = load_factory(factory_spec)
    torch.manual_seed(args.seed)
    made = call_factory(factory_spec, factory)
    module, inputs = (made if isinstance(made, tuple) else (made, None))
    if specs:
        inputs = make_inputs(specs, args.seed)
    if inputs is None:
        raise InputError(f"model factory {factory_spec!r} gives no example inputs: pass "
                         "--input-shape, e.g. --input-shape 1,3,32,32")
    name = args.name or factory_spec.rpartition(":")[2]
    return import_module(module, tuple(inputs), name=name, loss=args.loss,
                         dtype_bytes=args.dtype_bytes, output_index=args.output_index,
                         metadata={"factory": factory_spec},
                         inplace_update=args.inplace_update, gradient_sums=args.gradient_sums)


def _cmd_import(args: argparse.Namespace) -> int:
    from poetsim.graph import write_graph
    from poetsim.summary import graph_summary

    imported = _imported(args, args.factory)
    write_graph(imported.graph, args.out)
    summary = graph_summary(imported.graph).as_dict()
    if args.json:
        print(json.dumps({"graph": summary, "wrote": args.out}, indent=2, default=str))
    else:
        graph = imported.graph
        print(f"imported {args.factory} as graph {graph.name!r}")
        print(_row("ops (forward + loss + backward)", str(len(graph.ops))))
        for key in ("parameters", "param_bytes", "forward_flops", "training_flops",
                    "forward_macs", "activation_bytes", "plain_peak_bytes"):
            print(_row(key.replace("_", " "), f"{summary[key]:,.0f}"))
        print(_row("wrote", args.out))
    return 0


def _cmd_execute(args: argparse.Namespace) -> int:
    from poetsim.boards import board_for_schedule
    from poetsim.errors import ExecutionError
    from poetsim.schedule import read_schedule
    from poetsim.torchio import execute_schedule
    from poetsim.torchio.execute import check_learning_rate, check_tolerance

    lr = check_learning_rate(args.lr, "--lr")
    check_tolerance(args.rtol, "--rtol")
    imported = _imported(args, args.model_factory)
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
        print(_row("computes / recomputations", f"{r.computes} / {r.recomputations}"))
        print(_row("page-outs / page-ins / frees", f"{r.page_outs} / {r.page_ins} / {r.frees}"))
        print(_row("max relative gradient error", f"{r.max_rel_grad_error:.3g} "
                                                  f"({r.worst_param}; tolerance {r.grad_rtol:g})"))
        print(_row(f"max relative weight error ({r.optimizer})",
                   f"{r.max_rel_weight_error:.3g} ({r.worst_weight_param}; of the step, "
                   f"lr {r.lr:g})"))
        if r.optimizer != "sgd":
            print(_row("max relative state error", f"{r.max_rel_state_error:.3g} (against "
                                                   "torch.optim's)"))
        print(_row("params stepped in place / after", f"{r.params_updated_in_place} / "
                                                      f"{r.params_updated_after}; "
                                                      f"{r.frozen_params} frozen, unchanged"))
        print(_row("measured peak live bytes", f"{r.peak_live_bytes} B (graph units) at step "
                                               f"{r.peak_step}; {r.peak_live_raw_bytes} B raw"))
        print(_row("activation budget", "none" if r.budget_bytes is None
                   else f"{r.budget_bytes} B"))
        print(_row("checker / simulator peak", f"{r.checker_peak_bytes} B / "
                                               f"{r.simulated_peak_bytes} B"))
        if r.simulated_energy_j is not None:
            print(_row("simulated energy", f"{r.simulated_energy_j:.6g} J on {board.name}"))
        print(_row("written to page files", f"{r.bytes_written} B"))
        if r.arena_bytes is not None:
            print(_row("activations in one arena", f"{r.arena_bytes} B, each at its offset"))
        if r.weights_on_storage != "none":
            print(_row(f"weights on storage ({r.weights_on_storage})",
                       f"{r.params_on_storage} params in files"
                       + (f", {r.params_with_state_on_storage} with their {r.optimizer} state"
                          if r.params_with_state_on_storage else "")
                       + f"; read {r.weights_read_bytes} B, "
                       f"written back {r.weights_written_bytes} B (cost model "
                       f"{r.cost_model_weights_read_bytes} B / "
                       f"{r.cost_model_weights_written_bytes} B)"))
    return 0 if report.passed else 1


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", metavar="SHAPE[:int:HIGH]",
                   help="one example input per forward argument, e.g. 2,3,32,32 or "
                        "2,16:int:100 (repeatable; default: the factory's own inputs)")
    p.add_argument("--loss", default="cross_entropy", choices=("cross_entropy", "mse"),
                   help="loss added on the model's output (default cross_entropy)")
    p.add_argument("--output-index", type=int, default=0, metavar="N",
                   help="which tensor output the loss reads (default 0)")
    p.add_argument("--name", metavar="NAME", help="graph name (default: the factory's name)")
    p.add_argument("--dtype-bytes", type=int, default=4, metavar="N",
                   help="bytes per element in the graph (default 4, float32)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="torch seed for the factory and the random inputs (default 0)")
    p.add_argument("--inplace-update", action="store_true",
                   help="each backward op applies the SGD step to the parameters whose "
                        "gradient it computes (Lin et al.'s in-place update); parameters "
                        "with requires_grad=False are frozen either way")
    p.add_argument("--gradient-sums", action="store_true",
                   help="the gradient of each op read by several others is summed by an op "
                        "of its own, so that no backward op holds several incoming "
                        "gradients at once")


def register(sub: Any, with_json: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
             ) -> None:
    """Add ``import`` and ``execute`` to the ``poetsim`` subcommands."""
    p = with_json(sub.add_parser(
        "import", help="trace a PyTorch nn.Module (torch.export) into a training graph file",
        description="Trace a PyTorch model with torch.export and write its poetsim training "
                    "graph: forward ops with shapes, FLOPs, activation and parameter bytes, "
                    "a loss, and the backward ops with the tensors each one saves. Needs "
                    "PyTorch (pip install 'poetsim[torch]')."))
    p.add_argument("factory", metavar="MODULE:FACTORY", help=_FACTORY_HELP)
    p.add_argument("--out", required=True, metavar="FILE", help="graph file to write (JSON)")
    _model_arguments(p)
    p.set_defaults(func=_cmd_import)

    p = with_json(sub.add_parser(
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
                   help=_FACTORY_HELP)
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
    _model_arguments(p)
    p.set_defaults(func=_cmd_execute)
