"""What-if sweeps: many (model, board variant, budget, deadline, method) points on Dask.

* :mod:`poetsim.sweep.spec`: sweep files (TOML), board overrides, the points;
* :mod:`poetsim.sweep.worker`: one point on a worker (solve or fetch, simulate);
* :mod:`poetsim.sweep.store`: the SQLite results store (resumable, one row per point);
* :mod:`poetsim.sweep.execute`: running a sweep on Dask distributed;
* :mod:`poetsim.sweep.report`: table, CSV / JSON and Pareto plots of the results.

Dask is imported only when a sweep runs.
"""

from poetsim.sweep.execute import Progress, SweepOutcome, run_sweep
from poetsim.sweep.spec import (
    BOARD_BUDGET,
    Point,
    SolverSettings,
    Sweep,
    SweepError,
    apply_overrides,
    expand_points,
    load_sweep,
    parse_sweep,
    variant_label,
)
from poetsim.sweep.store import ResultsStore, cache_dir_for

__all__ = ["BOARD_BUDGET", "Point", "Progress", "ResultsStore", "SolverSettings", "Sweep",
           "SweepError", "SweepOutcome", "apply_overrides", "cache_dir_for", "expand_points",
           "load_sweep", "parse_sweep", "run_sweep", "variant_label"]
