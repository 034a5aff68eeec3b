"""poetsim's public API: plan a schedule, check it on a board, compare methods, sweep, and
check the golden schedules, from Python, exactly as the ``poetsim`` command does (the
command is a thin layer over these functions, so both give the same schedule).

* :func:`plan` -> :class:`Plan`: POET's least-energy schedule (``poetsim solve``);
* :func:`simulate` -> :class:`Check`: a schedule file simulated and judged
  (``poetsim simulate``); :meth:`Plan.check` does the same for a plan;
* :func:`compare_methods` -> :class:`Comparison`: POET against the baselines
  (``poetsim compare``);
* :func:`run_sweep`: a what-if sweep on Dask (``poetsim sweep``);
* :func:`regress_goldens` -> :class:`Regression`: the golden schedules (``poetsim regress``).

Every name is also at the package's top level (``poetsim.plan``). Bad arguments raise
:class:`~poetsim.errors.InputError` (a wrong type: :class:`~poetsim.errors.ArgumentTypeError`,
naming the parameter and the type expected), both :class:`~poetsim.errors.PoetsimError`.
"""

from poetsim.api.checking import Check, simulate
from poetsim.api.planning import Plan, Search, plan
from poetsim.api.studies import (
    Comparison,
    Regression,
    compare_methods,
    regress_goldens,
    run_sweep,
)

__all__ = ["Check", "Comparison", "Plan", "Regression", "Search", "compare_methods", "plan",
           "regress_goldens", "run_sweep", "simulate"]
