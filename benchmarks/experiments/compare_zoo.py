"""``poetsim compare`` on every zoo model and every built-in board, in both accountings.

Each cell runs :func:`poetsim.compare.compare` (every method, 1 s MILP limits, RAM 50% of
the plain activation peak, deadline 1.5x) and shows POET's simulated energy overhead over
every op once with unlimited RAM, and how many of the methods PASS. The paper's accounting
counts activations only; the physical one (poetsim's default) everything resident, within
the board's RAM. Writes ``benchmarks/results/compare_zoo.md``::

    python -m benchmarks.experiments.compare_zoo
"""

from __future__ import annotations

import time
from pathlib import Path

from poetsim.boards import get_board
from poetsim.boards.registry import builtin_board_names
from poetsim.compare import compare
from poetsim.methods import METHODS, SolverSettings
from poetsim.request import resolve_request
from poetsim.zoo import build_model, model_names

OUT = Path(__file__).resolve().parents[1] / "results" / "compare_zoo.md"
SETTINGS = SolverSettings(time_limit_s=1.0)


def _cell(outcomes) -> str:
    poet = outcomes[0]
    passed = sum(o.feasible for o in outcomes)
    if poet.feasible:
        return f"{poet.energy_overhead:+.1%} ({passed})"
    if "parameters, gradients and optimizer state alone need" in poet.reason:
        return "does not fit"
    return f"{poet.status.value} ({passed})"


def main() -> None:
    started = time.perf_counter()
    boards = builtin_board_names()
    tables = {"paper": [], "physical": []}
    for name in model_names():
        graph = build_model(name)
        rows = {"paper": [name], "physical": [name]}
        for board_name in boards:
            board = get_board(board_name)
            for accounting in ("paper", "physical"):
                request = resolve_request(graph, board, ram="50%", deadline="1.5x",
                                          accounting=accounting)
                rows[accounting].append(_cell(compare(request, settings=SETTINGS)))
            print(f"{name} on {board_name}: paper {rows['paper'][-1]}, physical "
                  f"{rows['physical'][-1]}", flush=True)
        for accounting in tables:
            tables[accounting].append(rows[accounting])
    header = "| model | " + " | ".join(boards) + " |\n" + "|---" * (len(boards) + 1) + "|"
    parts = [
        "# `poetsim compare` on every zoo model and every built-in board", "",
        "Made by `python -m benchmarks.experiments.compare_zoo`. Each cell: "
        "`compare(resolve_request(model, board, ram=\"50%\", deadline=\"1.5x\", "
        "accounting=A), settings=SolverSettings(time_limit_s=1))`, default model options, "
        f"every method ({len(METHODS)}). Shown: POET's simulated energy overhead vs every op "
        "once with unlimited RAM, and in brackets how many methods PASS the verdict. "
        "`infeasible` = 50% is below the model's largest single-op working set "
        "(transformer_block, VGG16), so every method is infeasible there; `does not fit` = "
        "parameters, gradients and optimizer state alone exceed the board's RAM. 1 s MILP "
        "limits: POET's figures are not optimal; this grid checks that every combination "
        "runs and what each accounting says, not quality.", "",
        "## Paper accounting (activations only, POET's mu_RAM)", "",
        "A PASS here is not a promise that the schedule runs: on every MCU board the "
        "resident state alone is over the RAM (`physical_fit.md`).", "", header]
    parts += ["| " + " | ".join(row) + " |" for row in tables["paper"]]
    parts += ["", "## Physical accounting (poetsim's default: everything resident, within "
              "the board's RAM)", "", header]
    parts += ["| " + " | ".join(row) + " |" for row in tables["physical"]]
    parts += ["", f"Total wall time of the grid: {(time.perf_counter() - started) / 60:.1f} "
              "min (one process).", ""]
    OUT.write_text("\n".join(parts))
    print(OUT)


if __name__ == "__main__":
    main()
