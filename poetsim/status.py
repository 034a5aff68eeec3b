"""The one vocabulary of what a method answered, for the optimizer, the baselines, every
outcome and the files and stores that record them."""

from __future__ import annotations

import enum

__all__ = ["Status"]


class Status(enum.Enum):
    """What a method answered. ``optimal`` (proven) and ``feasible`` (with a gap) are the
    MILP methods', ``ok`` a heuristic's; ``infeasible``: the method found no schedule
    (a proof only where the reason says so); ``no_solution``: a MILP method's limit ended
    the search first; ``not_applicable``: the method does not handle this graph."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    OK = "ok"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"
    NOT_APPLICABLE = "not_applicable"
