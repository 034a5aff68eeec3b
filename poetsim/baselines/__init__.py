"""Baseline schedulers, each producing an executable op list POET is compared against.

One module per method, each a plain function
``method(graph, board, costs, budget_bytes, *, deadline_s=None) -> BaselineResult``
(``costs`` may be ``None``; ``budget_bytes`` is the activation budget, as
``poetsim.optimizer.Budget.activation_bytes``):

==================  ====================================================================
``checkpoint_all``  PyTorch's default: every op once, everything kept (the plain schedule)
``chen_sqrt_n``     Chen et al. 2016, sqrt(n) segments over the forward articulation points
``chen_greedy``     Chen's memory-threshold greedy, threshold searched for the budget
``revolve``         Griewank & Walther binomial checkpointing (chains only)
``checkmate``       POET's MILP without paging (``solve(..., paging=False)``)
``paging_only``     POET's MILP without rematerialization (``solve(..., remat=False)``)
``capuchin``        Capuchin: swap when hidden, else by memory saving per second
``dtr``             Dynamic Tensor Rematerialization, simulated over the op list
``pofo``            Beaumont et al. 2021: keep / offload / recompute-once DP (chains only)
==================  ====================================================================

:func:`seeded_solve` is POET started from the fast baselines' schedules;
:func:`poetsim.compare.compare` runs POET and all of them and simulates every schedule.
"""

from __future__ import annotations

from collections.abc import Callable

from poetsim.baselines.base import (
    INFEASIBLE,
    NOT_APPLICABLE,
    OK,
    STATUSES,
    BaselineResult,
    OpListFigures,
    predict,
)
from poetsim.baselines.capuchin import capuchin
from poetsim.baselines.checkmate import checkmate
from poetsim.baselines.checkpoint_all import checkpoint_all
from poetsim.baselines.chen import chen_greedy, chen_sqrt_n
from poetsim.baselines.dtr import dtr
from poetsim.baselines.paging_only import paging_only
from poetsim.baselines.pofo import pofo
from poetsim.baselines.revolve import revolve
from poetsim.baselines.seeded import FAST_BASELINES, seeded_solve

__all__ = [
    "BASELINES", "CHAIN_ONLY", "FAST_BASELINES", "INFEASIBLE", "NOT_APPLICABLE", "OK", "STATUSES",
    "BaselineResult", "OpListFigures", "capuchin", "checkmate",
    "checkpoint_all", "chen_greedy", "chen_sqrt_n", "dtr",
    "paging_only", "pofo", "predict", "revolve", "seeded_solve",
]

#: Every baseline by name, in the order :func:`poetsim.compare.compare` reports them.
BASELINES: dict[str, Callable[..., BaselineResult]] = {
    "checkpoint_all": checkpoint_all,
    "chen_sqrt_n": chen_sqrt_n,
    "chen_greedy": chen_greedy,
    "revolve": revolve,
    "checkmate": checkmate,
    "paging_only": paging_only,
    "capuchin": capuchin,
    "dtr": dtr,
    "pofo": pofo,
}

#: Baselines defined for chains only (``not_applicable`` elsewhere).
CHAIN_ONLY = frozenset({"revolve", "pofo"})
