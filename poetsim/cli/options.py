"""Command-line options that several commands share, defined once."""

from __future__ import annotations

import argparse


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
