"""Ctrl-C stops a SCIP search and the command (poetsim.interrupt)."""

from __future__ import annotations

import os
import signal

import pytest
from pyscipopt import SCIP_EVENTTYPE, SCIP_PARAMSETTING, Eventhdlr, quicksum

from poetsim import interrupt


def _knapsack(n: int = 60):
    """A three-dimensional knapsack SCIP needs many nodes for (no presolve, cuts or
    heuristics)."""
    model = interrupt.scip_model("knapsack")
    xs = [model.addVar(vtype="B") for _ in range(n)]
    for d in range(3):
        weights = [50 + (37 * i + 11 * d) % 71 for i in range(n)]
        model.addCons(quicksum(w * x for w, x in zip(weights, xs)) <= sum(weights) // 2)
    model.setObjective(quicksum((60 + (29 * i) % 53) * x for i, x in enumerate(xs)),
                       "maximize")
    model.setPresolve(SCIP_PARAMSETTING.OFF)
    model.setSeparating(SCIP_PARAMSETTING.OFF)
    model.setHeuristics(SCIP_PARAMSETTING.OFF)
    return model


class _PressCtrlC(Eventhdlr):
    """Sends SIGINT to this process at the first solved node, as a user at a terminal."""

    def eventinit(self):
        self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

    def eventexec(self, event):
        if not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_during_a_search_ends_it_and_raises():
    # what SIGINT did before: Python's handler, or SIG_IGN when the suite was started in
    # the background of a non-interactive shell (nohup ... &), which ignores it
    before = signal.getsignal(signal.SIGINT)
    model = _knapsack()
    model.includeEventhdlr(_PressCtrlC(), "press", "presses Ctrl-C")
    with pytest.raises(KeyboardInterrupt):
        with interrupt.solving():
            model.optimize()
    assert model.getStatus() == "userinterrupt" and model.getNNodes() < 50
    assert not interrupt.requested()  # the next search starts afresh
    # SCIP's own handler is off and the one before is back
    assert model.getParam("misc/catchctrlc") is False
    assert signal.getsignal(signal.SIGINT) is before


def test_a_search_without_ctrl_c_runs_to_its_end():
    model = _knapsack(12)
    with interrupt.solving():
        model.optimize()
    assert model.getStatus() == "optimal"
