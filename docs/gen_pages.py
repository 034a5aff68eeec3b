"""Pages made at build time from their one source (mkdocs-gen-files runs this file).

* ``cli.md``: every command's ``--help``, from the parser the CLI itself builds;
* ``board-files.md``: the board-file format, ``device_models/README.md``.
"""

from __future__ import annotations

import os
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]


def _cli_page() -> str:
    # argparse wraps help to the terminal's width: fix it (to the page's code width) so
    # the page is the same anywhere
    os.environ["COLUMNS"] = "80"
    from poetsim.cli.main import build_parser

    parser = build_parser()
    lines = ["# Command line", "",
             "Generated from the parser `poetsim` itself builds, so it is what `--help` says.",
             "Exit statuses: 0 PASS or done, 1 FAIL or no schedule, 2 bad input (one line, "
             "nothing written), 3 internal error (traceback saved to a file), 130/143 "
             "interrupted.", "", "```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._subparsers._group_actions:  # the subcommands, in order
        for name, sub in action.choices.items():
            lines += [f"## poetsim {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


with mkdocs_gen_files.open("cli.md", "w") as page:
    page.write(_cli_page())

with mkdocs_gen_files.open("board-files.md", "w") as page:
    page.write((ROOT / "device_models" / "README.md").read_text(encoding="utf-8"))
