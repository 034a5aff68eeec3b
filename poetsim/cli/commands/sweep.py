"""``poetsim sweep``: run a what-if sweep on Dask, and report its results.

Two forms (``run`` may be left out)::

    poetsim sweep [run] FILE [--results R.sqlite] [--scheduler tcp://HOST:PORT] ...
    poetsim sweep report RESULTS [--csv out.csv] [--json] [--plots DIR | --no-plots]

Argument parsing and printing only; the work is in :mod:`poetsim.sweep`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["register"]

_DESCRIPTION = """\
Run a what-if sweep (a TOML file: models, boards, board overrides, RAM budgets, deadlines,
methods) on Dask distributed, or report a finished one.

  poetsim sweep [run] FILE [options]          run (or resume) the sweep; see
                                              'poetsim sweep run --help'
  poetsim sweep report RESULTS [options]      table, CSV/JSON export and Pareto plots; see
                                              'poetsim sweep report --help'
"""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="poetsim sweep [run]",
        description="Run every point of a sweep file not yet in the results store, on Dask "
                    "distributed. A finished point is written at once, so a killed sweep "
                    "resumes where it stopped when run again.")
    p.add_argument("file", metavar="FILE", help="sweep file (TOML, see sweeps/)")
    p.add_argument("--results", metavar="R.sqlite",
                   help="results store (SQLite; default: ./NAME.sqlite, NAME from the file)")
    p.add_argument("--cache", metavar="DIR",
                   help="schedule cache folder (default: R.cache beside the store; on a "
                        "multi-machine cluster use a folder every worker mounts)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="use this running Dask cluster (default: a local cluster)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="worker processes of the local cluster (default: one per core)")
    p.add_argument("--retry-failed", action="store_true",
                   help="run points that failed before again (default: skip them)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    return p


def _report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="poetsim sweep report",
        description="Print a sweep's results as a table and draw Pareto plots (energy vs RAM "
                    "budget and vs deadline, one panel per model and board variant).")
    p.add_argument("results", metavar="RESULTS", help="results store (R.sqlite)")
    p.add_argument("--csv", metavar="FILE", help="also write every column as CSV")
    p.add_argument("--json", action="store_true", help="print the points as JSON instead")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--plots", metavar="DIR",
                     help="folder for the PNG plots (default: R.plots beside the store)")
    out.add_argument("--no-plots", action="store_true", help="draw no plots")
    return p


def _format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _progress_line(enabled: bool, terminal: bool) -> Callable[[Any], None] | None:
    """On a terminal one line rewritten in place; elsewhere (a log, CI, a pipe) a line per
    finished point, so that progress reads there too."""
    if not enabled:
        return None

    def show(p: Any) -> None:
        finished = p.skipped + p.done + p.failed
        line = (f"sweep: {finished}/{p.total} points ({p.skipped} skipped, {p.done} done, "
                f"{p.failed} failed), {p.running} running, ETA "
                f"{_format_duration(p.eta_s)}")
        if not terminal:
            sys.stderr.write(line + "\n")
        else:
            sys.stderr.write("\r" + line.ljust(90))
            if p.remaining == 0:
                sys.stderr.write("\n")
        sys.stderr.flush()
    return show


def _cmd_run(argv: list[str]) -> int:
    from poetsim.api import run_sweep
    from poetsim.sweep import load_sweep

    args = _run_parser().parse_args(argv)
    sweep = load_sweep(args.file)
    show = not args.quiet and not args.json
    outcome = run_sweep(sweep, args.results, scheduler=args.scheduler, workers=args.workers,
                        cache_dir=args.cache, retry_failed=args.retry_failed,
                        progress=_progress_line(show, sys.stderr.isatty()))
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2))
    elif not args.quiet:
        o = outcome
        rate = f", {o.points_per_min:.1f} points/min" if o.ran else ""
        hits = (f", {o.cache_hits} of {o.done} from the cache" if o.done else "")
        print(f"sweep {sweep.name}: {o.total} points: {o.skipped} already stored, {o.done} "
              f"done, {o.failed} failed in {o.wall_s:.1f} s on {o.workers} worker(s) "
              f"({o.scheduler}){rate}{hits}")
        print(f"  results: {o.results}\n  cache:   {o.cache_dir}")
        print(f"  report:  poetsim sweep report {o.results}")
    return 1 if outcome.failed else 0


def _cmd_report(argv: list[str]) -> int:
    from poetsim.sweep.report import format_table, read_results, write_csv, write_plots

    args = _report_parser().parse_args(argv)
    rows = read_results(args.results)
    written: list[str] = []
    if args.csv:
        write_csv(rows, args.csv)
        written.append(args.csv)
    if not args.no_plots:
        path = Path(args.results)
        folder = Path(args.plots) if args.plots else path.with_name(path.stem + ".plots")
        written += [str(p) for p in write_plots(rows, folder)]
    if args.json:
        print(json.dumps({"points": rows, "files": written}, indent=2, default=str))
        return 0
    print(format_table(rows))
    for path in written:
        print(f"wrote {path}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    argv = list(args.sweep_args)
    if argv and argv[0] == "report":
        return _cmd_report(argv[1:])
    if argv and argv[0] == "run":
        argv = argv[1:]
    return _cmd_run(argv)


def register(sub: Any) -> None:
    """Add ``sweep`` to the ``poetsim`` subcommands (both forms parse their own arguments,
    ``--json`` among them)."""
    p = sub.add_parser("sweep", help="run a what-if sweep on Dask, or report one",
                       description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       usage="poetsim sweep [run] FILE [options] | "
                             "poetsim sweep report RESULTS [options]")
    p.add_argument("sweep_args", nargs=argparse.REMAINDER, metavar="...",
                   help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_sweep)
