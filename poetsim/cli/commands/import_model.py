"""``poetsim import``: trace a PyTorch model into a training graph file (PyTorch, optional).

Argument parsing and printing only; the work is in :mod:`poetsim.torchio`. Torch is
imported only when this command or ``execute`` runs, so every other command works without it.

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
from typing import Any

from poetsim.cli.options import add_json
from poetsim.cli.output import print_graph_summary, row
from poetsim.errors import InputError

__all__ = ["FACTORY_HELP", "add_model_arguments", "imported_model", "register"]

FACTORY_HELP = "model factory: package.module:function or file.py:function"


def imported_model(args: argparse.Namespace, factory_spec: str) -> Any:
    """The factory's model, imported under the user's options."""
    from poetsim.torchio import import_module, load_factory, make_inputs, parse_input_spec
    from poetsim.torchio.trace import call_factory, require_torch

    torch = require_torch()
    specs = [parse_input_spec(s) for s in args.input_shape or ()]
    factory = load_factory(factory_spec)
    torch.manual_seed(args.seed)
    module, inputs = call_factory(factory_spec, factory)
    if specs:
        inputs = make_inputs(specs, args.seed)
    if inputs is None:
        raise InputError(f"model factory {factory_spec!r} gives no example inputs: pass "
                         "--input-shape, e.g. --input-shape 1,3,32,32")
    # by default the graph is named after the module's class, as the API names it, not
    # after the factory function (every factory called "make" gave graphs called "make")
    return import_module(module, tuple(inputs), name=args.name, loss=args.loss,
                         dtype_bytes=args.dtype_bytes, output_index=args.output_index,
                         metadata={"factory": factory_spec},
                         inplace_update=args.inplace_update, gradient_sums=args.gradient_sums)


def _cmd_import(args: argparse.Namespace) -> int:
    from poetsim.graph import write_graph
    from poetsim.summary import graph_summary

    imported = imported_model(args, args.factory)
    write_graph(imported.graph, args.out)
    summary = graph_summary(imported.graph)
    if args.json:
        print(json.dumps({"graph": summary.as_dict(), "wrote": args.out}, indent=2,
                         default=str))
    else:
        print(f"imported {args.factory} as graph {imported.graph.name!r}")
        print_graph_summary(summary)
        print(row("wrote", args.out))
    return 0


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options that say how a factory's model is imported (``import`` and ``execute``)."""
    p.add_argument("--input-shape", action="append", metavar="SHAPE[:int:HIGH]",
                   help="one example input per forward argument, e.g. 2,3,32,32 or "
                        "2,16:int:100 (repeatable; default: the factory's own inputs)")
    p.add_argument("--loss", default="cross_entropy", choices=("cross_entropy", "mse"),
                   help="loss added on the model's output (default cross_entropy)")
    p.add_argument("--output-index", type=int, default=0, metavar="N",
                   help="which tensor output the loss reads (default 0)")
    p.add_argument("--name", metavar="NAME",
                   help="graph name (default: the module's class name, lower case)")
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


def register(sub: Any) -> None:
    """Add ``import`` to the ``poetsim`` subcommands."""
    p = add_json(sub.add_parser(
        "import", help="trace a PyTorch nn.Module (torch.export) into a training graph file",
        description="Trace a PyTorch model with torch.export and write its poetsim training "
                    "graph: forward ops with shapes, FLOPs, activation and parameter bytes, "
                    "a loss, and the backward ops with the tensors each one saves. Needs "
                    "PyTorch (pip install 'poetsim[torch]')."))
    p.add_argument("factory", metavar="MODULE:FACTORY", help=FACTORY_HELP)
    p.add_argument("--out", required=True, metavar="FILE", help="graph file to write (JSON)")
    add_model_arguments(p)
    p.set_defaults(func=_cmd_import)
