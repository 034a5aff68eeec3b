"""Command-line options that several commands share: each defined once, and read once into
the library's values (a graph, a request, solver settings)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from poetsim.boards import DEFAULT_BOARD, get_board
from poetsim.errors import InputError
from poetsim.graph import TrainingGraph, read_graph
from poetsim.graph.graph import OPTIMIZER_STATE_COPIES
from poetsim.methods import DEFAULT_EFFORT, SolverSettings
from poetsim.request import Accounting, Request, resolve_request
from poetsim.zoo import DEFAULT_MODEL, build_model


def add_json(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--json``: machine-readable output instead of lines for a reader."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def add_accept_edits(parser: argparse.ArgumentParser) -> None:
    """``--accept-edits``: judge a schedule file changed after poetsim wrote it."""
    parser.add_argument("--accept-edits", action="store_true",
                        help="judge the schedule file even if it was changed after poetsim "
                             "wrote it (its metadata.digest no longer matches; without this "
                             "flag such a file is refused, exit 2)")


def add_corners(parser: argparse.ArgumentParser) -> None:
    """``--corners``: judge at the corners of the board's ranges too."""
    parser.add_argument("--corners", action="store_true",
                        help="also judge at the slow and the costly corner of the board's "
                             "ranges (every range at its end that costs time, or energy); "
                             "the exit status follows the typical corner")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """``--batch-size`` and ``--set KEY=VALUE``: a zoo model's options."""
    parser.add_argument("--batch-size", type=int, metavar="N", help="batch size (default 1)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="a model option, e.g. --set seq_len=64 (repeatable)")


def add_graph_and_board(parser: argparse.ArgumentParser, *, model: str = DEFAULT_MODEL,
                        board: str = DEFAULT_BOARD) -> None:
    """``--model`` or ``--graph``, and ``--board``."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", default=model, metavar="NAME",
                        help=f"zoo model (default {model})")
    source.add_argument("--graph", metavar="FILE", help="graph file (JSON) instead of a model")
    parser.add_argument("--board", default=board, metavar="NAME|FILE",
                        help=f"built-in board or board file (default {board})")


def add_request_options(parser: argparse.ArgumentParser, *, ram: str | None,
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
    add_optimizer(parser, "" if ram else ", or the one the schedule file records")


def add_optimizer(parser: argparse.ArgumentParser, default_note: str = "") -> None:
    """``--optimizer``: the training step's optimizer (sgd, momentum, adam)."""
    parser.add_argument("--optimizer", default=None, choices=list(OPTIMIZER_STATE_COPIES),
                        help="the training step's optimizer, which decides the optimizer "
                             "state (sgd: none, momentum: one copy of the trained weights, "
                             f"adam: two); default sgd{default_note}")


def model_options(args: argparse.Namespace) -> dict[str, int]:
    """The zoo model options the user gave (``--set`` and ``--batch-size``)."""
    options: dict[str, int] = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--set {item!r}: expected KEY=VALUE, e.g. --set seq_len=64")
        if key in options:  # the last would win silently
            raise InputError(f"--set {item!r}: {key} is set twice; give each option once")
        try:
            options[key] = int(value)
        except ValueError:
            raise InputError(f"--set {item!r}: {key} must be a whole number") from None
    if args.batch_size is not None:
        if "batch_size" in options:
            raise InputError(f"--batch-size {args.batch_size}: batch_size is set by --set too; "
                             "give it once")
        options["batch_size"] = args.batch_size
    return options


def graph_from_args(args: argparse.Namespace,
                    defaults: dict[str, int] | None = None) -> TrainingGraph:
    """The graph file, or the zoo model with ``defaults`` under the user's options."""
    if getattr(args, "graph", None):
        return read_graph(args.graph)
    return build_model(args.model, **{**(defaults or {}), **model_options(args)})


def model_from_args(args: argparse.Namespace) -> tuple[str | Path | None, dict[str, int]]:
    """What the API takes as ``model`` (the graph file as a :class:`~pathlib.Path`, else
    the zoo model's name, or None for a schedule's own) and the zoo model's options
    (``--set``, ``--batch-size``; none with a graph file, which takes none)."""
    if getattr(args, "graph", None):
        return Path(args.graph), {}
    return args.model, model_options(args)


def request_from_args(args: argparse.Namespace,
                      defaults: dict[str, int] | None = None) -> Request:
    """The user's request (:func:`~poetsim.request.resolve_request`) of the graph
    (:func:`graph_from_args`, with ``defaults``) on the board they named."""
    graph, board = graph_from_args(args, defaults), get_board(args.board)
    with flags_named():
        return resolve_request(graph, board, ram=args.ram, deadline=args.deadline,
                               accounting=args.accounting, optimizer=args.optimizer or "sgd",
                               deadline_margin=getattr(args, "deadline_margin", None))


#: The flag of each API parameter whose name differs, for messages that name what the
#: user typed.
FLAGS = {"time_limit_s": "--time-limit", "gap_limit": "--gap", "seed": "--seed",
          "threads": "--threads", "effort": "--effort", "tolerance": "--tolerance",
          "ram": "--ram", "deadline": "--deadline", "deadline_margin": "--deadline-margin",
          "accounting": "--accounting", "optimizer": "--optimizer"}


@contextmanager
def flags_named() -> Iterator[None]:
    """Re-raise the API's one-line :class:`InputError` about a parameter
    (``effort = -1: ...``) as one about the flag the user typed (``--effort -1: ...``)."""
    try:
        yield
    except InputError as err:
        field, sep, rest = str(err).partition(" = ")
        if sep and field in FLAGS:
            raise InputError(f"{FLAGS[field]} {rest}") from None
        raise


def solver_settings(args: argparse.Namespace) -> SolverSettings:
    """The solver settings the user gave, a bad one named by its flag."""
    with flags_named():
        return SolverSettings(time_limit_s=args.time_limit, gap_limit=getattr(args, "gap", 0.0),
                              seed=getattr(args, "seed", 0),
                              threads=getattr(args, "threads", 1),
                              effort=getattr(args, "effort", DEFAULT_EFFORT))
