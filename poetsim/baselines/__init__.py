"""Heuristic baseline schedulers, each producing an executable op list POET is compared against.

One module per method, each a plain function
``method(graph, board, costs, budget_bytes, *, deadline_s=None) -> BaselineResult``
(``costs`` may be ``None``; ``budget_bytes`` is the activation budget, as
``poetsim.request.Request.activation_budget_bytes``; all but checkpoint-all also take a
``stop_at``, see :func:`poetsim.baselines.base.out_of_time`):

==================  ====================================================================
``checkpoint_all``  PyTorch's default: every op once, everything kept (the plain schedule)
``chen_sqrt_n``     Chen et al. 2016, sqrt(n) segments over the forward articulation points
``chen_greedy``     Chen's memory-threshold greedy, threshold searched for the budget
``revolve``         Griewank & Walther binomial checkpointing (chains only)
``capuchin``        Capuchin: swap when hidden, else by memory saving per second
``dtr``             Dynamic Tensor Rematerialization, simulated over the op list
``pofo``            Beaumont et al. 2021: keep / offload / recompute-once DP (chains only)
==================  ====================================================================

The MILP-based methods (POET, and Checkmate and paging-only, its ablations) live above
this package, in :mod:`poetsim.methods`, which names every method; none of these
baselines imports the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable

from poetsim.baselines.base import (
    INFEASIBLE,
    NOT_APPLICABLE,
    OK,
    STATUSES,
    BaselineResult,
)
from poetsim.baselines.capuchin import capuchin
from poetsim.baselines.checkpoint_all import checkpoint_all
from poetsim.baselines.chen import chen_greedy, chen_sqrt_n
from poetsim.baselines.dtr import dtr
from poetsim.baselines.pofo import pofo
from poetsim.baselines.revolve import revolve

__all__ = [
    "BASELINES", "CHAIN_ONLY", "INFEASIBLE", "NOT_APPLICABLE", "OK", "STATUSES",
    "BaselineResult", "capuchin", "checkpoint_all", "chen_greedy",
    "chen_sqrt_n", "dtr", "pofo", "revolve",
]

#: Every heuristic baseline by name.
BASELINES: dict[str, Callable[..., BaselineResult]] = {
    "checkpoint_all": checkpoint_all,
    "chen_sqrt_n": chen_sqrt_n,
    "chen_greedy": chen_greedy,
    "revolve": revolve,
    "capuchin": capuchin,
    "dtr": dtr,
    "pofo": pofo,
}

#: Baselines defined for chains only (``not_applicable`` elsewhere).
CHAIN_ONLY = frozenset({"revolve", "pofo"})
