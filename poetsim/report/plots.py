"""PNG (or SVG / PDF) plots of a simulation and of a schedule.

* :func:`plot_ram`: RAM over time, step-wise, with the budget and the marked peak;
* :func:`plot_power`: power over time stacked by component, with each one's energy;
* :func:`plot_schedule_matrix`: the stage x op matrix (POET Figure 2, Checkmate's R / S);
* :func:`plot_simulation`: the three in one figure (the CLI's ``--plot``).

matplotlib is imported when a plot is drawn, not with :mod:`poetsim`. The figures are
drawn on the non-interactive Agg canvas directly (no :mod:`matplotlib.pyplot`), so the
global backend of the caller is never touched, and style settings apply only inside
:func:`matplotlib.rc_context`. Files are written atomically: the image is rendered in
memory, then :func:`poetsim.fileio.atomic_write_bytes` renames it into place.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from poetsim.errors import InputError
from poetsim.fileio import atomic_write_bytes
from poetsim.graph.graph import TrainingGraph
from poetsim.report.data import (
    CELL_COMPUTE,
    CELL_EMPTY,
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
from poetsim.schedule.ops import Action, Schedule
from poetsim.sim.report import SimReport
from poetsim.units import format_quantity

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["new_figure", "plot_power", "plot_ram", "plot_schedule_matrix", "plot_simulation",
           "plot_style", "save_figure"]

# Colours (colour-blind-safe Okabe-Ito hues; grey for the passive states).
_RAM_COLOUR = "#0072B2"
_BUDGET_COLOUR = "#D55E00"
_OVER_COLOUR = "#D55E00"
_RESIDENT_COLOUR = "#BBBBBB"
_COMPONENT_COLOURS = {"cpu": "#0072B2", "dma": "#009E73", "storage": "#E69F00",
                      "bus": "#CC79A7"}
_EXTRA_COLOURS = ("#56B4E9", "#CC79A7", "#F0E442", "#999999")
_CELL_COLOURS = {
    CELL_EMPTY: "#FFFFFF",
    CELL_RESIDENT: "#D9D9D9",
    CELL_COMPUTE: "#0072B2",
    CELL_RECOMPUTE: "#E69F00",
    CELL_PAGE_OUT: "#D55E00",
    CELL_PAGE_IN: "#009E73",
}
_CELL_LABELS = {
    CELL_RESIDENT: "kept in RAM",
    CELL_COMPUTE: "compute",
    CELL_RECOMPUTE: "recompute",
    CELL_PAGE_OUT: "page-out",
    CELL_PAGE_IN: "page-in",
}
_STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
}
_FORMATS = ("png", "svg", "pdf")


# ----------------------------------------------------------------------------- helpers

def _format_for(path: str | Path) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    fmt = suffix or "png"
    if fmt not in _FORMATS:
        raise InputError(f"plot file {str(path)!r}: unknown image format {suffix!r} "
                         f"(use {', '.join('.' + f for f in _FORMATS)})")
    return fmt


def new_figure(width_in: float, height_in: float) -> Figure:
    """A figure on the Agg canvas (no GUI backend, no global pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int) -> None:
    """Write ``fig`` atomically, in the format the suffix names, byte-for-byte reproducible."""
    fmt = _format_for(path)
    # No dates or versions in the file: the same figure gives the same bytes.
    metadata: dict[str, Any] = {
        "png": {"Software": None},
        "svg": {"Date": None, "Creator": None},
        "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    }[fmt]
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    atomic_write_bytes(path, buffer.getvalue())


def plot_style():
    """poetsim's matplotlib style, as a context manager."""
    import matplotlib

    return matplotlib.rc_context(_STYLE)


def _energy(joules: float) -> str:
    return format_quantity(joules, "J", digits=3)


def _bytes(nbytes: float) -> str:
    """Four significant digits in a binary unit: ``87.52 MiB``, ``232 KiB``."""
    unit, scale = byte_unit(nbytes)
    return f"{nbytes / scale:.4g} {unit}"


def _count(number: int, what: str) -> str:
    return f"{number} {what}" + ("" if number == 1 else "s")


def _seconds(seconds: float) -> str:
    return format_quantity(seconds, "s", digits=3)


def _component_colour(name: str, index: int) -> str:
    base = name.rstrip("0123456789")
    return _COMPONENT_COLOURS.get(name) or _COMPONENT_COLOURS.get(base) \
        or _EXTRA_COLOURS[index % len(_EXTRA_COLOURS)]


def _time_axis(ax: Axes, makespan_s: float) -> None:
    from matplotlib.ticker import FuncFormatter

    if makespan_s > 0:
        ax.set_xlim(0.0, makespan_s)
    # Plain decimals in seconds (0.0015, not a "1e-3" multiplier in the corner).
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.10g}"))
    ax.set_xlabel("time (s)")


def _check_pair(graph: TrainingGraph, schedule: Schedule) -> None:
    from poetsim.graph.io import graph_fingerprint

    if not isinstance(graph, TrainingGraph):
        raise InputError(f"expected a TrainingGraph, got {type(graph).__name__}")
    if not isinstance(schedule, Schedule):
        raise InputError(f"expected a Schedule, got {type(schedule).__name__}")
    if schedule.graph_fingerprint != graph_fingerprint(graph):
        raise InputError(f"the schedule was made for graph {schedule.graph_name!r}, not for "
                         f"graph {graph.name!r} (fingerprints differ)")
    if not schedule.steps:
        raise InputError(f"the schedule of {graph.name!r} has no steps: nothing to plot")


def _schedule_title(graph: TrainingGraph, schedule: Schedule) -> str:
    board = schedule.metadata.get("board")
    method = schedule.metadata.get("method")
    title = graph.name + (f" on {board}" if board else "")
    return title + (f" ({method} schedule)" if method else "")


# ----------------------------------------------------------------------------- panels

def _draw_ram(ax: Axes, report: SimReport, *, title: bool = True) -> None:
    times, values = ram_series(report)
    resident = report.resident_bytes
    budget = report.budget_bytes
    peak = int(values.max())
    # When the resident region dwarfs the activations, start the axis just below it so
    # the activations stay readable; a right-hand axis then reads activations directly.
    zoom = 0 < resident < peak and resident >= 0.5 * peak \
        and resident <= min(int(values.min()), budget)
    floor = resident if zoom else 0
    # A budget far above the peak would flatten the curve: leave it off the scale.
    budget_off = peak > floor and budget - floor > 3 * (peak - floor)
    top_bytes = peak if budget_off else max(peak, budget)
    unit, scale = byte_unit(top_bytes)
    y = values / scale
    res_y, budget_y, peak_y = resident / scale, budget / scale, peak / scale
    base = res_y if zoom else 0.0
    span = max(top_bytes / scale - base, 1e-12)
    if resident > 0:
        lower = base - 0.06 * span if zoom else 0.0
        ax.axhspan(lower, res_y, color=_RESIDENT_COLOUR, alpha=0.35, lw=0,
                   label=f"resident region {_bytes(resident)}")
    ax.fill_between(times, np.maximum(y, res_y), res_y, step="post", color=_RAM_COLOUR,
                    alpha=0.18, lw=0)
    ax.plot(times, y, drawstyle="steps-post", color=_RAM_COLOUR, lw=1.1, label="RAM in use")
    ax.axhline(budget_y, color=_BUDGET_COLOUR, ls="--", lw=1.2,
               label=f"budget {_bytes(budget)}" + (" (above the plot)" if budget_off else ""))
    over = y > budget_y
    if over.any():
        ax.fill_between(times, y, budget_y, where=over, step="post", color=_OVER_COLOUR,
                        alpha=0.35, lw=0, label="over budget")
    # The peak, marked and labelled on the side with more room.
    peak_t = float(report.peak_time_s)
    ax.plot([peak_t], [peak_y], marker="o", ms=6, mfc="white", mec="black", mew=1.2,
            ls="none", zorder=5)
    right_half = report.makespan_s > 0 and peak_t > 0.5 * report.makespan_s
    what = f"{report.peak_action} {report.peak_op}".strip()
    text = f"peak {_bytes(peak)}"
    if resident > 0:
        text += f" ({_bytes(peak - resident)} activations)"
    if what:
        text += f"\nat {what}"
    margin = budget - peak
    text += (f"\n{_bytes(margin)} below the budget" if margin > 0 else
             "\nat the budget" if margin == 0 else f"\n{_bytes(-margin)} over the budget")
    ax.annotate(text, xy=(peak_t, peak_y), xytext=(-14 if right_half else 14, 10),
                textcoords="offset points", ha="right" if right_half else "left", va="bottom",
                fontsize=8, zorder=6,
                bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "0.6", "alpha": 0.9},
                arrowprops={"arrowstyle": "-", "color": "0.3", "lw": 0.8})
    # Head room above the data for the peak label and the legend.
    ax.set_ylim(base - 0.06 * span if zoom else 0.0, base + 1.35 * span)
    _time_axis(ax, report.makespan_s)
    ax.set_ylabel(f"RAM in use ({unit})")
    if zoom:
        act_unit, act_scale = byte_unit(max(top_bytes - resident, 1))
        ratio = scale / act_scale
        ax.secondary_yaxis("right", functions=(lambda v: (v - res_y) * ratio,
                                                lambda v: v / ratio + res_y)) \
            .set_ylabel(f"activations ({act_unit}, above the resident region)")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncols=len(labels), frameon=False)
    if title:
        ax.set_title(f"RAM over time: {report.graph_name} on {report.board_name}", loc="left")


def _typical_power(times: np.ndarray, total: np.ndarray, share: float = 0.9) -> float:
    """The power not exceeded for ``share`` of the run (time-weighted quantile)."""
    dt = np.diff(times)
    if len(dt) == 0 or dt.sum() <= 0:
        return float(total.max()) if len(total) else 0.0
    values = total[:-1]
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(dt[order]) / dt.sum()
    return float(values[order][min(np.searchsorted(cumulative, share), len(order) - 1)])


def _split_scale(ax: Axes, knee: float, top: float, fraction: float = 0.6) -> None:
    """A y axis linear on ``[0, knee]`` (the lower ``fraction`` of the height) and, more
    compressed, on ``[knee, top]``: the baseline stays readable next to short spikes."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    upper = top - knee

    def forward(y):
        y = np.asarray(y, dtype=float)
        return np.where(y <= knee, y / knee * fraction,
                        fraction + (y - knee) / upper * (1 - fraction))

    def inverse(v):
        v = np.asarray(v, dtype=float)
        return np.where(v <= fraction, v / fraction * knee,
                        knee + (v - fraction) / (1 - fraction) * upper)

    ax.set_yscale("function", functions=(forward, inverse))
    ax.set_ylim(0.0, top)
    low = [v for v in MaxNLocator(nbins=4).tick_values(0.0, knee) if 0 <= v <= knee * 1.0001]
    high = [v for v in MaxNLocator(nbins=3).tick_values(knee, top)
            if knee + 0.2 * upper <= v <= top]
    ax.yaxis.set_major_locator(FixedLocator(low + high))
    ax.yaxis.set_minor_locator(FixedLocator([]))
    ax.axhspan(knee, top, color="0.5", alpha=0.07, lw=0, zorder=0)
    ax.axhline(knee, color="0.45", lw=0.8, ls=(0, (4, 3)), zorder=1)
    ax.text(0.995, fraction + 0.01, "compressed scale above", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=7, color="0.35")


def _label_levels(spans: list[tuple[float, float]]) -> list[int]:
    """A level for each label ``(left, right)`` (data units): the lowest one where it does
    not overlap a label already placed, so that close transfers stack their labels."""
    ends: list[float] = []  # per level, the right edge of its last label
    levels = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: spans[i][0]):
        left, right = spans[i]
        level = next((k for k, end in enumerate(ends) if end < left), len(ends))
        if level == len(ends):
            ends.append(right)
        ends[level] = right
        levels[i] = level
    return levels


def _label_transfers(ax: Axes, report: SimReport, times: np.ndarray, total: np.ndarray,
                     scale: float, limit: int = 6) -> None:
    """Name the page-ins / page-outs on their power spike when there are only a few,
    close ones stacked so that no two labels print over each other."""
    assert report.timeline is not None
    transfers = [s for s in report.timeline.slices
                 if s.name.startswith(("page_in", "page_out"))]
    if not transfers or len(transfers) > limit:
        return
    fontsize = 7
    fig = ax.figure
    # a label's width in seconds: its characters at ~0.6 em each, over the axes' width
    axes_pt = fig.get_figwidth() * 72 * ax.get_position().width
    seconds_per_pt = max(report.makespan_s, 1e-12) / max(axes_pt, 1.0)
    texts, spans, heights = [], [], []
    for s in transfers:
        lo = max(np.searchsorted(times, s.start_s, side="right") - 1, 0)
        hi = max(np.searchsorted(times, s.end_s, side="left"), lo + 1)
        heights.append(float(total[lo:hi].max()) / scale)
        kind, _, op = s.name.partition(" ")
        nbytes = s.args.get("bytes")
        text = kind.replace("_", "-") + (f" {op}" if op else "")
        if isinstance(nbytes, int):
            text += f"\n{_bytes(nbytes)}"
        half = 0.5 * 0.6 * fontsize * max(map(len, text.splitlines())) * seconds_per_pt
        middle = (s.start_s + s.end_s) / 2
        texts.append(text)
        spans.append((middle - half, middle + half))
    levels = _label_levels(spans)
    for i, (s, text, height, level) in enumerate(zip(transfers, texts, heights, levels)):
        # stacked labels start from the highest spike among those they overlap
        base = max(heights[j] for j, (left, right) in enumerate(spans)
                   if left <= spans[i][1] and spans[i][0] <= right)
        middle = (s.start_s + s.end_s) / 2
        rise_px = (ax.transData.transform((middle, base))[1]
                   - ax.transData.transform((middle, height))[1])
        ax.annotate(text, xy=(middle, height), textcoords="offset points",
                    xytext=(0, rise_px * 72 / fig.dpi + 4 + level * 2.6 * fontsize),
                    ha="center", va="bottom", fontsize=fontsize, color="0.2",
                    arrowprops=dict(arrowstyle="-", color="0.6", lw=0.5)
                    if level or base > height else None)


def _draw_power(ax: Axes, report: SimReport, *, title: bool = True) -> None:
    from matplotlib.ticker import MaxNLocator

    times, watts = power_series(report)
    if not watts:
        raise InputError(f"cannot plot power: the timeline of {report.graph_name!r} has no "
                         "power states")
    total = np.sum(list(watts.values()), axis=0)
    peak = float(total.max())
    unit, scale = watt_unit(peak)
    names = list(watts)
    energies = report.energy_by_component_j
    dt = np.diff(times)
    labels = []
    for name in names:
        joules = energies.get(name, float(np.sum(watts[name][:-1] * dt)))
        labels.append(f"{name}: {_energy(joules)}")
    colours = [_component_colour(name, i) for i, name in enumerate(names)]
    ax.stackplot(times, *[watts[name] / scale for name in names], step="post", labels=labels,
                 colors=colours, alpha=0.85, lw=0)
    ax.plot(times, total / scale, drawstyle="steps-post", color="black", lw=0.6,
            label="total")
    top = max(peak / scale, 1e-12) * 1.3
    typical = _typical_power(times, total) / scale
    if typical > 0 and peak / scale > 5 * typical:
        # The knee: a round value a little above the typical power.
        knee = next(v for v in MaxNLocator(nbins=4).tick_values(0.0, typical * 1.5)
                    if v >= typical * 1.5)
        _split_scale(ax, float(knee), top)
    else:
        ax.set_ylim(0.0, top)
    _label_transfers(ax, report, times, total, scale)
    _time_axis(ax, report.makespan_s)
    ax.set_ylabel(f"power ({unit})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=len(names) + 1,
              frameon=False, title=f"energy by component (total {_energy(report.energy_j)})",
              title_fontsize=8)
    if title:
        ax.set_title(f"Power over time: {report.graph_name} on {report.board_name}",
                     loc="left")


def _draw_matrix(ax: Axes, graph: TrainingGraph, schedule: Schedule, *, title: bool = True,
                 legend_below: bool = False) -> None:
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    matrix = schedule_matrix(graph, schedule)
    rows, n = matrix.shape
    codes = sorted(_CELL_COLOURS)
    cmap = ListedColormap([_CELL_COLOURS[c] for c in codes])
    norm = BoundaryNorm(np.arange(len(codes) + 1) - 0.5, len(codes))
    ax.imshow(matrix, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto",
              extent=(-0.5, n - 0.5, rows - 0.5, -0.5))
    ax.grid(False)
    # Transfers are few and the cells small: mark them so they stand out.
    if max(rows, n) > 40:
        for code, marker in ((CELL_PAGE_OUT, "v"), (CELL_PAGE_IN, "^")):
            r, c = np.nonzero(matrix == code)
            if len(r):
                ax.scatter(c, r, marker=marker, s=36, c=_CELL_COLOURS[code], edgecolors="black",
                           linewidths=0.6, zorder=4)
    boundary = backward_start(graph)
    if 0 < boundary < n:
        ax.axvline(boundary - 0.5, color="black", ls="--", lw=0.9)
        top = ax.secondary_xaxis("top")
        top.set_xticks([(boundary - 1) / 2, (boundary + n - 1) / 2],
                       labels=[f"forward + loss (ops 0-{boundary - 1})",
                               f"backward (ops {boundary}-{n - 1})"])
        top.tick_params(length=0, labelsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=10, integer=True))
    ax.set_xlabel("op index (tensor)")
    ax.set_ylabel("stage t (time step)")
    counts = schedule.counts()
    recomputes = schedule.recomputations()
    summary = ", ".join(_count(number, what) for number, what in (
        (counts[Action.COMPUTE] - recomputes, "compute"), (recomputes, "recompute"),
        (counts[Action.PAGE_OUT], "page-out"), (counts[Action.PAGE_IN], "page-in")))
    happened = {CELL_COMPUTE: counts[Action.COMPUTE] - recomputes, CELL_RECOMPUTE: recomputes,
                CELL_PAGE_OUT: counts[Action.PAGE_OUT], CELL_PAGE_IN: counts[Action.PAGE_IN],
                CELL_RESIDENT: int((matrix == CELL_RESIDENT).sum())}
    handles = []
    # Listed so that a 3-column legend (filled column by column) reads row by row.
    order = ((CELL_COMPUTE, CELL_PAGE_OUT, CELL_RECOMPUTE, CELL_PAGE_IN, CELL_RESIDENT)
             if legend_below else
             (CELL_COMPUTE, CELL_RECOMPUTE, CELL_PAGE_OUT, CELL_PAGE_IN, CELL_RESIDENT))
    for code in order:
        label = _CELL_LABELS[code] + ("" if happened[code] else " (none)")
        handles.append(Patch(facecolor=_CELL_COLOURS[code], edgecolor="0.4", lw=0.5,
                             label=label))
    if legend_below:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.06),
                  ncols=3, frameon=False)
    else:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  frameon=False, title="cell (highest wins)", title_fontsize=8,
                  alignment="left")
    if title:
        ax.set_title(f"Schedule matrix: {_schedule_title(graph, schedule)}\n{summary}",
                     loc="left")
    else:
        ax.set_title(summary, loc="left", fontsize=9)


# ----------------------------------------------------------------------------- public API

def plot_ram(report: SimReport, path: str | Path, *, dpi: int = 120) -> None:
    """RAM in use over time (step plot), with the budget and the peak (value, op).

    ``report`` must come from ``simulate(..., trace=True)`` (else
    :class:`~poetsim.errors.InputError`). The format follows the suffix of ``path``
    (``.png``, ``.svg``, ``.pdf``).
    """
    ram_series(report)  # fail early without a timeline
    _format_for(path)
    with plot_style():
        fig = new_figure(10, 4.5)
        _draw_ram(fig.add_subplot(), report)
        save_figure(fig, path, dpi)


def plot_power(report: SimReport, path: str | Path, *, dpi: int = 120) -> None:
    """Power over time stacked by component (piecewise constant), energies in the legend.

    ``report`` must come from ``simulate(..., trace=True)`` (else
    :class:`~poetsim.errors.InputError`).
    """
    power_series(report)
    _format_for(path)
    with plot_style():
        fig = new_figure(10, 4.5)
        _draw_power(fig.add_subplot(), report)
        save_figure(fig, path, dpi)


def plot_schedule_matrix(graph: TrainingGraph, schedule: Schedule, path: str | Path, *,
                         dpi: int = 120) -> None:
    """The schedule as a stage x op matrix coloured by what happens in each cell.

    Rows are stages (``step.stage``, top to bottom), columns op indices, with the
    boundary between the forward pass (and loss) and the backward pass dashed. Cells:
    compute, recompute, page-out, page-in, and tensors kept in RAM across the stage (see
    :func:`poetsim.report.data.schedule_matrix`).
    """
    _check_pair(graph, schedule)
    _format_for(path)
    with plot_style():
        fig = new_figure(10, 8)
        _draw_matrix(fig.add_subplot(), graph, schedule)
        save_figure(fig, path, dpi)


def plot_simulation(graph: TrainingGraph, schedule: Schedule, report: SimReport,
                    path: str | Path, *, verdict: str | None = None, dpi: int = 120) -> None:
    """One 12 x 9 in figure: RAM and power over time (left), the schedule matrix (right).

    ``verdict`` (``"PASS"`` / ``"FAIL"``, from :mod:`poetsim.verdict`) heads the facts line.
    """
    _check_pair(graph, schedule)
    ram_series(report)
    power_series(report)
    if report.graph_name != graph.name:
        raise InputError(f"the report is of graph {report.graph_name!r}, not of {graph.name!r}")
    _format_for(path)
    with plot_style():
        fig = new_figure(12, 9)
        grid = fig.add_gridspec(2, 2, width_ratios=(1.35, 1.0))
        ax_ram = fig.add_subplot(grid[0, 0])
        ax_power = fig.add_subplot(grid[1, 0], sharex=ax_ram)
        ax_matrix = fig.add_subplot(grid[:, 1])
        _draw_ram(ax_ram, report, title=False)
        ax_ram.set_title("RAM over time", loc="left")
        _draw_power(ax_power, report, title=False)
        ax_power.set_title("Power over time", loc="left")
        _draw_matrix(ax_matrix, graph, schedule, title=False, legend_below=True)
        method = schedule.metadata.get("method")
        head = f"{report.graph_name} on {report.board_name}"
        if method:
            head += f", {method} schedule"
        facts = ((f"{verdict}: " if verdict else "")
                 + f"energy {_energy(report.energy_j)}, makespan "
                 f"{_seconds(report.makespan_s)}, peak RAM {_bytes(report.peak_ram_bytes)}"
                 f" of {_bytes(report.budget_bytes)} limit")
        fig.suptitle(f"{head}\n{facts}", fontsize=11)
        save_figure(fig, path, dpi)
