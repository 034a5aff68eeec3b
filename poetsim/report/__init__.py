"""Plots of simulations and schedules, and the pure data extraction behind them.

* :func:`plot_ram`, :func:`plot_power`: RAM and power over time of a report made with
  ``simulate(..., trace=True)``;
* :func:`plot_schedule_matrix`: a schedule as a stage x op matrix (POET Figure 2);
* :func:`plot_simulation`: the three panels in one figure (the CLI's ``--plot``);
* :func:`ram_series`, :func:`power_series`, :func:`schedule_matrix`: the numbers plotted,
  without matplotlib (which is imported only when a plot is drawn, on the Agg canvas).

Depends on :mod:`poetsim.sim`, :mod:`poetsim.schedule` and :mod:`poetsim.graph` only.
"""

from poetsim.report.data import (
    CELL_COMPUTE,
    CELL_EMPTY,
    CELL_NAMES,
    CELL_PAGE_IN,
    CELL_PAGE_OUT,
    CELL_RECOMPUTE,
    CELL_RESIDENT,
    backward_start,
    byte_unit,
    power_series,
    ram_series,
    schedule_matrix,
    watt_unit,
)
from poetsim.report.plots import plot_power, plot_ram, plot_schedule_matrix, plot_simulation

__all__ = [
    "CELL_COMPUTE", "CELL_EMPTY", "CELL_NAMES", "CELL_PAGE_IN", "CELL_PAGE_OUT",
    "CELL_RECOMPUTE", "CELL_RESIDENT", "backward_start", "byte_unit", "plot_power",
    "plot_ram", "plot_schedule_matrix", "plot_simulation", "power_series", "ram_series",
    "schedule_matrix", "watt_unit",
]
