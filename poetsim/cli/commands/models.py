"""``poetsim models``: list the model zoo, show one model's size, export its graph file."""

from __future__ import annotations

import argparse
from typing import Any

from poetsim.cli.options import (
    add_json,
    add_model_options,
    model_options,
)
from poetsim.cli.output import emit_json, print_graph_summary, row, wrapped
from poetsim.graph import write_graph
from poetsim.summary import graph_summary
from poetsim.zoo import build_model, model_description, model_names
from poetsim.zoo import model_options as zoo_model_options

__all__ = ["register"]


def _cmd_models_list(args: argparse.Namespace) -> None:
    if args.json:
        emit_json([{"name": n, "description": model_description(n),
                     "options": zoo_model_options(n)} for n in model_names()])
        return
    for name in model_names():
        print(f"{name:<20} {model_description(name)}")


def _cmd_models_show(args: argparse.Namespace) -> None:
    graph = build_model(args.model, **model_options(args))
    summary = graph_summary(graph)
    if args.json:
        emit_json({"description": model_description(args.model), **summary.as_dict()})
        return
    overridden = bool(args.set) or args.batch_size is not None
    print(summary.name if overridden else f"{summary.name}: {model_description(args.model)}")
    options = ", ".join(f"{k}={v}" for k, v in summary.metadata.items() if k != "model")
    print(wrapped(row("options", options), indent=37))
    print_graph_summary(summary)


def _cmd_models_export(args: argparse.Namespace) -> None:
    graph = build_model(args.model, **model_options(args))
    write_graph(graph, args.out)
    if args.json:
        emit_json({"file": args.out, "ops": len(graph)})
    else:
        print(f"wrote {args.out} ({len(graph)} ops)")



def register(sub: Any) -> None:
    """Add ``models`` and its actions to the ``poetsim`` subcommands."""
    models = sub.add_parser("models", help="list and show the model zoo")
    actions = models.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_json(actions.add_parser("list", help="list the models")).set_defaults(
        func=_cmd_models_list)
    p = add_json(actions.add_parser("show", help="op count, parameters, FLOPs and "
                                                 "activation bytes of a model"))
    p.add_argument("model", metavar="NAME")
    add_model_options(p)
    p.set_defaults(func=_cmd_models_show)
    p = add_json(actions.add_parser("export", help="write a model's training graph file"))
    p.add_argument("model", metavar="NAME")
    p.add_argument("--out", required=True, metavar="FILE", help="graph file to write (JSON)")
    add_model_options(p)
    p.set_defaults(func=_cmd_models_export)
