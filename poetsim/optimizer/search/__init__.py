"""The search: heuristics, the relaxation bound, SCIP on the MILP, honest status.

:func:`solve` is the optimizer's public entry point. It takes a resolved
:class:`~poetsim.request.Request` (budget and deadline already in bytes and seconds),
rules out requests no schedule can meet (and says why in one line), starts SCIP from the
best greedy plan, and returns a :class:`SolveResult` whose status is never better than
what was proven:

* ``optimal``: SCIP proved the schedule optimal for the exact formulation;
* ``feasible``: a schedule with SCIP's bound and the gap (time or gap limit, or a
  restricted formulation, whose result is labelled as such);
* ``infeasible``: proven: no schedule meets the request;
* ``no_solution``: the limit ended the search before any schedule was found.

The MILP itself is :mod:`poetsim.optimizer.milp`; this package drives it:

* :mod:`~poetsim.optimizer.search.pipeline`: :func:`solve` and its steps in order;
* :mod:`~poetsim.optimizer.search.state`: one solve as it moves through them;
* :mod:`~poetsim.optimizer.search.problem`: what a plan must meet, as one value;
* :mod:`~poetsim.optimizer.search.portfolio`: the heuristic plans (warm starts);
* :mod:`~poetsim.optimizer.search.windows`: the window search and the remat neighbourhood;
* :mod:`~poetsim.optimizer.search.scip`: SCIP's settings, its stop within the gap and its
  progress reports;
* :mod:`~poetsim.optimizer.search.oplist`: graphs beyond stage form;
* :mod:`~poetsim.optimizer.search.finish` and :mod:`~poetsim.optimizer.search.result`:
  what was proven, and the result type.
"""

from poetsim.optimizer.search.oplist import STAGE_MAX_OPS
from poetsim.optimizer.search.pipeline import solve
from poetsim.optimizer.search.result import SolveResult, SolveStatus

__all__ = ["STAGE_MAX_OPS", "SolveResult", "SolveStatus", "solve"]
