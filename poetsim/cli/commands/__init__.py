"""One module per ``poetsim`` command, as pip's ``commands`` package: each parses its own
arguments (``register``) and prints what the library returns; none holds logic a library
user could not reach from Python."""

from __future__ import annotations

from poetsim.cli.commands import (
    boards,
    compare,
    costs,
    demo,
    execute,
    import_model,
    models,
    regress,
    simulate,
    solve,
    sweep,
)

#: The commands in the order ``poetsim --help`` lists them.
COMMANDS = (import_model, execute, boards, models, solve, compare, simulate, costs, demo,
            regress, sweep)
