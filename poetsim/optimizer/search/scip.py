"""Driving SCIP: the settings a search gives the built model, and the event handlers that
stop it within the gap against a bound SCIP does not know and report its progress."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pyscipopt import SCIP_PARAMSETTING

from poetsim.optimizer.milp import MilpModel
from poetsim.optimizer.search.result import SAME_ENERGY

__all__ = ["attach_progress", "configure", "stop_within_gap"]


#: Models larger than this use SCIP's fast presolve.
_FAST_PRESOLVE_BINARIES = 5000


def configure(milp: MilpModel, *, gap_limit: float, seed: int, threads: int) -> None:
    """The gap limit, random seed and threads, and the numerics and presolve the model's
    size asks for."""
    model = milp.model
    model.setParam("limits/gap", float(gap_limit))
    model.setParam("randomization/randomseedshift", int(seed))
    model.setParam("parallel/maxnthreads", int(threads))
    if milp.budget_units > 100_000:
        # Memory coefficients reach millions of units: tighten the relative tolerance so
        # that "feasible" means within a fraction of a byte.
        model.setParam("numerics/feastol", 1e-9)
    if milp.binaries > _FAST_PRESOLVE_BINARIES:
        # SCIP's default presolve spends most of a minute on ResNet-sized models and buys
        # little; the fast setting keeps the time for the search.
        model.setPresolve(SCIP_PARAMSETTING.FAST)


def stop_within_gap(model: Any, scale: float, lower_j: float, gap_limit: float) -> None:
    """Interrupt SCIP once an incumbent is within ``gap_limit`` of ``lower_j``, a bound
    SCIP does not know (it stops by its own, often weaker, bound otherwise)."""
    from pyscipopt import SCIP_EVENTTYPE, SCIP_STAGE, Eventhdlr

    class StopWithinGap(Eventhdlr):
        def eventinit(self):
            # A warm start arrives before SCIP may be interrupted: check again at the nodes.
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event):
            if self.model.getStage() != SCIP_STAGE.SOLVING or self.model.getNSols() == 0:
                return
            incumbent_j = self.model.getPrimalbound() / scale
            if incumbent_j * (1 - gap_limit) <= lower_j * (1 + SAME_ENERGY):
                self.model.interruptSolve()

    model.includeEventhdlr(StopWithinGap(), "poetsim_stop_within_gap",
                           "stops at the gap limit against the relaxation bound")


def attach_progress(model: Any, scale: float, callback: Callable[[dict[str, float]], None],
                    lower_j: float, scip_bound_valid: bool, every_s: float = 5.0) -> None:
    """Report the incumbent, bound and gap on every new incumbent, and every ``every_s``
    seconds of search otherwise. The bound is ``lower_j`` or SCIP's, whichever is higher
    (SCIP's only when it holds for the exact problem)."""
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    class Progress(Eventhdlr):
        last = -math.inf

        def eventinit(self):
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event):
            now = self.model.getSolvingTime()
            new_incumbent = event.getType() == SCIP_EVENTTYPE.BESTSOLFOUND
            if not new_incumbent and now - self.last < every_s:
                return
            primal = self.model.getPrimalbound()
            if abs(primal) >= 1e19:
                return
            self.last = now
            incumbent_j, bound_j = primal / scale, lower_j
            if scip_bound_valid:
                bound_j = max(bound_j, self.model.getDualbound() / scale)
            callback({"incumbent_j": incumbent_j, "bound_j": bound_j,
                      "gap": max(0.0, (incumbent_j - bound_j) / incumbent_j), "time_s": now})

    model.includeEventhdlr(Progress(), "poetsim_progress", "reports the search's progress")
