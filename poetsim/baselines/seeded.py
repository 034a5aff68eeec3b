"""POET started from the fast baselines' schedules, as well as from its own greedy plans.

The MILP's search is only as good as its starting point on large graphs. The heuristic
baselines (DTR, Chen's greedy, Capuchin, ...) cost milliseconds, and lifted into stage
form their schedules are valid starting points, so the optimizer begins from the best of
all of them.
"""

from __future__ import annotations

from typing import Any

from poetsim.baselines.capuchin import capuchin
from poetsim.baselines.chen import chen_greedy, chen_sqrt_n
from poetsim.baselines.dtr import dtr
from poetsim.baselines.pofo import pofo
from poetsim.baselines.revolve import revolve
from poetsim.boards.spec import Board
from poetsim.costs import op_costs
from poetsim.graph.graph import TrainingGraph
from poetsim.optimizer.solve import (
    SolveResult,
    minimum_ram_bytes,
    parse_deadline,
    resolve_budget,
    solve,
)

__all__ = ["FAST_BASELINES", "seeded_solve"]

#: Baselines fast enough to run before every solve.
FAST_BASELINES = (dtr, chen_greedy, chen_sqrt_n, capuchin, revolve, pofo)


def seeded_solve(graph: TrainingGraph, board: Board, *, ram: str | int = "100%",
                 deadline: str | float | None = None, total_memory: bool = False,
                 gradients: bool = True, optimizer: str = "sgd",
                 **solve_options: Any) -> SolveResult:
    """:func:`poetsim.optimizer.solve` with the fast baselines' schedules as warm starts.

    Takes the same arguments as ``solve``.
    """
    costs = op_costs(graph, board)
    budget = resolve_budget(graph, ram, total_memory=total_memory, gradients=gradients,
                            optimizer=optimizer)
    deadline_s = parse_deadline(deadline, float(costs.compute_time_s.sum()))
    schedules = []
    # Below the smallest possible working set the solver answers at once; nothing to seed.
    if budget.activation_bytes >= minimum_ram_bytes(graph)[0]:
        for method in FAST_BASELINES:
            result = method(graph, board, costs, budget.activation_bytes, deadline_s=deadline_s)
            if result.schedule is not None:
                schedules.append(result.schedule)
    return solve(graph, board, ram=ram, deadline=deadline, total_memory=total_memory,
                 gradients=gradients, optimizer=optimizer, warm_starts=schedules,
                 **solve_options)
