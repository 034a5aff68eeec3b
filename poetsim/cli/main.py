"""The ``poetsim`` command: argument parsing and printing only; the work is in the library.

Every subcommand that prints results takes ``--json`` for machine-readable output. Exit
status (:data:`EXIT_CODES`): 0 success (PASS, optimal, feasible), 1 a negative answer
(infeasible, FAIL), 2 bad input (one line on stderr naming the file or flag, the value and
the rule), 3 an internal error (one line naming the file the traceback was saved to;
``--debug`` shows the traceback instead), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from poetsim import IMPORTED_AT, __version__, clock
from poetsim.cli.commands import COMMANDS
from poetsim.cli.output import emit_json
from poetsim.errors import InputError, InternalError, OutOfTime, PoetsimError
from poetsim.optimizer.settings import SolverSettings
from poetsim.status import Status

__all__ = ["EXIT_CODES", "build_parser", "main"]

#: What each exit status means.
EXIT_CODES = {0: "success", 1: "a negative answer (infeasible, FAIL)", 2: "bad input",
              3: "internal error", 130: "interrupted"}


class _Parser(argparse.ArgumentParser):
    """argparse with poetsim's one-line errors (exit 2)."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("poetsim").strip()
        self.exit(2, f"poetsim: error: {where + ': ' if where else ''}{message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``poetsim`` parser: each command's module adds its own subcommand."""
    parser = _Parser(
        prog="poetsim",
        description="Energy-optimal rematerialization and paging schedules for training on "
                    "edge boards, checked in a simulation of the board.",
    )
    parser.add_argument("--version", action="version", version=f"poetsim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, show the traceback instead of saving it")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def _save_traceback() -> Path:
    """The current exception's traceback in a new file; its path."""
    import tempfile
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


def _whole_command_limit(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """A command's ``--time-limit`` holds for all of it (:func:`poetsim.clock.command`),
    once it is a valid one (else the command says why it is not)."""
    limit_s = getattr(args, "time_limit", None)
    if limit_s is None:
        return contextlib.nullcontext()
    try:
        SolverSettings(time_limit_s=limit_s)  # its one validator
    except InputError:
        return contextlib.nullcontext()
    return clock.command(args.started, limit_s, "--time-limit")


def _say_ran_out(args: argparse.Namespace, reason: str) -> None:
    """The command's one answer when its limit ran out before it had one of its own."""
    if getattr(args, "json", False):
        emit_json({"status": Status.NO_SOLUTION.value, "reason": reason,
                   "limits_hit": ["time"]})
    else:
        print(f"{args.command}: {reason}")


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    parser = build_parser()
    args = parser.parse_args(argv)
    # a time limit holds for the whole command: from the process's start when it is one
    # (no argv given: the command line's), else from this call
    args.started = IMPORTED_AT if argv is None else time.perf_counter()
    try:
        with _whole_command_limit(args):
            status = args.func(args)
    except OutOfTime as err:  # before any method could answer: reading the model, say
        _say_ran_out(args, str(err))
        return 1
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
