"""Deterministic effort: a SCIP search bounded by counted work, not by the clock.

A wall-clock limit makes a result depend on the machine and its load. An effort of ``N``
instead gives a search ``N`` branch-and-bound nodes and ``N * LP_ITERATIONS_PER_NODE``
simplex iterations (a node is cheap on a small model and one LP can take a minute on a
large one: nodes alone do not bound the work). Both are counted by SCIP, which is
deterministic for fixed parameters, so the same model and effort give the same answer
on any machine; the time limit stays only as a safety cap.

The iteration budget is enforced twice: no single LP may run past what is left
(``lp/rootiterlim``, ``lp/iterlim``), and an event handler interrupts the search once
the total is spent. A search may thus overrun its iterations by at most one LP.
"""

from __future__ import annotations

from typing import Any

from pyscipopt import SCIP_EVENTTYPE, SCIP_STAGE, Eventhdlr

__all__ = ["LP_ITERATIONS_PER_NODE", "WorkLimit"]

#: Simplex iterations an effort of one node buys.
LP_ITERATIONS_PER_NODE = 100


class _InterruptWhenSpent(Eventhdlr):
    """Interrupts the search once its LP iterations reach the budget (set per solve)."""

    budget: int | None = None
    spent = False

    def eventinit(self):
        self.model.catchEvent(SCIP_EVENTTYPE.LPSOLVED, self)
        self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

    def eventexec(self, event):
        if (self.budget is not None and self.model.getStage() == SCIP_STAGE.SOLVING
                and self.model.getNLPIterations() >= self.budget):
            self.spent = True
            self.model.interruptSolve()


class WorkLimit:
    """The node and LP-iteration limits of one SCIP model, set again before each solve
    (the window search solves one model many times with different shares)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._handler = _InterruptWhenSpent()
        model.includeEventhdlr(self._handler, "poetsim_effort",
                               "interrupts the search when its LP iterations are spent")

    def set(self, nodes: int | None) -> None:
        """Allow ``nodes`` nodes and their LP iterations in the next solve (None: no limit)."""
        iterations = -1 if nodes is None else int(nodes) * LP_ITERATIONS_PER_NODE
        self.model.setParam("limits/totalnodes", -1 if nodes is None else int(nodes))
        self.model.setParam("lp/rootiterlim", iterations)
        self.model.setParam("lp/iterlim", iterations)
        self._handler.budget = None if nodes is None else iterations
        self._handler.spent = False

    @property
    def spent(self) -> bool:
        """Whether the last solve stopped because its LP iterations were spent."""
        return self._handler.spent
