"""Reading a sweep's results store: a table, CSV and JSON export, and Pareto plots.

* :func:`read_results`: the stored points as dicts (sweep order), JSON columns decoded;
* :func:`format_table`: one line per point, with a summary line;
* :func:`write_csv`: every column of :data:`poetsim.sweep.store.COLUMNS`;
* :func:`plot_energy_vs_ram`, :func:`plot_energy_vs_deadline`: one panel per model and
  board variant, one line per method; only feasible points (a schedule whose simulation
  stays within the budget and the deadline) are drawn, and the panel says how many were
  not. Energy vs RAM shows, for each budget, the least energy over the sweep's deadlines
  (the Pareto front); energy vs deadline has one line per method and RAM budget.

Plots use matplotlib's Agg canvas and are written atomically (see
:mod:`poetsim.report.plots`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from poetsim.fileio import atomic_write_text
from poetsim.report.data import byte_unit
from poetsim.report.plots import new_figure, plot_style, save_figure
from poetsim.sweep.spec import SweepError
from poetsim.sweep.store import COLUMNS, ResultsStore
from poetsim.units import format_bytes, format_quantity, table_cell
from poetsim.verdict import FAIL, PASS

__all__ = ["plot_energy_vs_deadline", "plot_energy_vs_ram", "read_results", "format_table",
           "summary_counts", "write_csv", "write_plots"]

_JSON_COLUMNS = ("model_options", "overrides", "solver", "violations")
#: The figures that may be negative (an energy below the reference's); every other is >= 0.
_SIGNED_COLUMNS = ("energy_overhead",)
#: What a finished point's row records (:mod:`poetsim.sweep.worker`).
_STATUSES = ("done", "error")
#: The verdict columns and their words (None: not judged).
_VERDICT_COLUMNS = ("verdict", "slow_verdict", "costly_verdict")
#: What a judged point (one with a verdict) always has.
_JUDGED_FIGURES = ("energy_j", "makespan_s", "peak_total_bytes")

#: Okabe-Ito hues, one per method in order of first appearance.
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
            "#F0E442", "#999999", "#882255")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_STYLES = ("-", "--", ":", "-.")


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every point of the results store at ``path``, in sweep order; a damaged value (text
    that is no JSON where JSON is stored, a figure that is not a finite number, a verdict
    other than PASS or FAIL, a judged point without its figures, a point stored twice) is
    a one-line :class:`SweepError` naming the point and the column."""
    with ResultsStore(path, create=False) as store:
        rows = store.rows()
    seen: set[Any] = set()
    for row in rows:
        where = f"{path}: point {row.get('idx')!r} ({str(row.get('id'))[:12]})"
        if row.get("id") in seen:
            raise SweepError(f"{where}: id = {row.get('id')!r}: stored twice (a damaged "
                             "results store)")
        seen.add(row.get("id"))
        _check_judged(row, where)
        for column in _JSON_COLUMNS:
            if row.get(column):
                try:
                    row[column] = json.loads(row[column])
                except (TypeError, ValueError):
                    raise SweepError(f"{where}: {column} = {str(row[column])[:60]!r}: not "
                                     "JSON (a damaged results store)") from None
        for column, kind in COLUMNS.items():
            value = row.get(column)
            if kind in ("REAL", "INTEGER") and value is not None and (
                    isinstance(value, (str, bytes)) or not math.isfinite(value)):
                raise SweepError(f"{where}: {column} = {value!r}: not a finite number (a "
                                 "damaged results store)")
            if column not in _SIGNED_COLUMNS and kind in ("REAL", "INTEGER") and (
                    value is not None and value < 0):
                raise SweepError(f"{where}: {column} = {value!r}: must be >= 0 (a damaged "
                                 "results store)")
        if row.get("status") not in _STATUSES:
            raise SweepError(f"{where}: status = {row.get('status')!r}: must be one of "
                             f"{', '.join(_STATUSES)} (a damaged results store)")
        for column in ("feasible", "fits_board_ram", "within_budget", "deadline_met",
                       "cached"):
            if row.get(column) is not None:
                row[column] = bool(row[column])
    return rows


def _check_judged(row: dict[str, Any], where: str) -> None:
    """A verdict column holds PASS, FAIL or nothing; a judged point has its figures."""
    for column in _VERDICT_COLUMNS:
        if row.get(column) not in (None, PASS, FAIL):
            raise SweepError(f"{where}: {column} = {row.get(column)!r}: must be {PASS} or "
                             f"{FAIL} (a damaged results store)")
    if row.get("verdict") is not None:
        for column in _JUDGED_FIGURES:
            if row.get(column) is None:
                raise SweepError(f"{where}: {column} is NULL, but the point has a verdict: "
                                 "a judged point has its figures (a damaged results store)")


def summary_counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {"points": len(rows),
            "done": sum(r["status"] == "done" for r in rows),
            "error": sum(r["status"] == "error" for r in rows),
            "feasible": sum(bool(r.get("feasible")) for r in rows),
            "cached": sum(bool(r.get("cached")) for r in rows)}


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A plain-text table, one line per point, then a summary line."""
    corners = any(r.get("slow_verdict") for r in rows)
    header = (f"{'#':>4} {'model':<16} {'ram':>7} {'deadline':>8} {'method':<14} "
              f"{'status':<13} {'feas':>4} {'energy':>10} {'overhead':>9} "
              f"{'makespan':>10} {'peak':>10} {'gap':>7} {'cached':>6} {'wall':>7}  "
              + (f"{'slow/costly':>11}  " if corners else "") + "variant  [reason]")
    lines = [header]
    for r in rows:
        at_corners = (f"{r['slow_verdict']}/{r['costly_verdict']}" if r.get("slow_verdict")
                      else "-")
        status = r["method_status"] if r["status"] == "done" else "ERROR"
        overhead = (None if r.get("energy_overhead") is None
                    else f"{100 * r['energy_overhead']:+.1f}%")
        gap = None if r.get("gap") is None else f"{100 * r['gap']:.1f}%"
        note = r.get("error") or (r.get("reason") if not r.get("feasible") else "")
        lines.append(
            f"{r['idx']:>4} {r['model']:<16} {r['ram']:>7} {r['deadline']:>8} "
            f"{r['method']:<14} {status or '-':<13} {table_cell(r.get('feasible'), 4)} "
            f"{table_cell(r.get('energy_j'), 10, lambda v: format_quantity(v, 'J'))} "
            f"{table_cell(overhead, 9)} "
            f"{table_cell(r.get('makespan_s'), 10, lambda v: format_quantity(v, 's'))} "
            f"{table_cell(r.get('peak_total_bytes'), 10, format_bytes)} "
            f"{table_cell(gap, 7)} {table_cell(r.get('cached'), 6)} "
            f"{table_cell(r.get('wall_s'), 7, lambda v: f'{v:.2f} s')}  "
            + (f"{at_corners:>11}  " if corners else "") + f"{r['variant']}"
            + (f"  [{note}]" if note else ""))
    c = summary_counts(rows)
    lines.append(f"{c['points']} points: {c['done']} done ({c['feasible']} feasible, "
                 f"{c['cached']} from the cache), {c['error']} failed")
    return "\n".join(lines)


def write_csv(rows: Iterable[dict[str, Any]], path: str | Path) -> None:
    """Every column, one row per point (JSON columns as JSON text), written atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (json.dumps(v) if isinstance(v, (dict, list)) else v)
                         for k, v in row.items()})
    atomic_write_text(path, buffer.getvalue())


# ----------------------------------------------------------------------------- plots

def _model_label(row: dict[str, Any]) -> str:
    options = row.get("model_options") or {}
    return row["model"] + (f" ({', '.join(f'{k}={v}' for k, v in options.items())})"
                           if options else "")


def _panel_title(row: dict[str, Any], *, common: bool) -> str:
    """The panel's model, board and overrides (model and board left out when ``common``)."""
    overrides = row.get("overrides") or {}
    head = "" if common else f"{_model_label(row)} on {row['board']}"
    if not overrides:
        return head or row["board"]
    parts = [f"{key}={_short(key, value)}" for key, value in overrides.items()]
    body = textwrap.fill(", ".join(parts), width=48)
    return f"{head}\n{body}" if head else body


def _common(panels: dict[Any, list[dict[str, Any]]]) -> str | None:
    """'model on board' when every panel shows the same model and base board."""
    heads = {f"{_model_label(p[0])} on {p[0]['board']}" for p in panels.values()}
    return heads.pop() if len(heads) == 1 else None


def _short(key: str, value: Any) -> str:
    """An override value in the unit its key names: ``728 kB/s``, ``512 KiB``, ``0``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if key.endswith("_bytes_per_s"):
        return format_quantity(value, "B/s", digits=3)
    if key.endswith("bytes"):
        return format_bytes(value)
    if key.endswith("_hz"):
        return format_quantity(value, "Hz", digits=3)
    return f"{value:g}"


def _panels(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] != "done":
            continue
        key = (f"{row['model']}{json.dumps(row.get('model_options') or {}, sort_keys=True)}",
               row["variant"])
        panels.setdefault(key, []).append(row)
    return panels


def _grid(count: int, *, width_in: float = 4.4, height_in: float = 3.3):
    cols = min(3 if count != 4 else 2, count)
    rows = math.ceil(count / cols)
    fig = new_figure(width_in * cols, height_in * rows + 0.7)
    # one energy scale for every panel, so variants compare at a glance
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    return fig, list(axes.flat[:count])


def _energy_axis(ax: Any, energies: Sequence[float]) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_quantity(v, "J", digits=3)))
    if energies:
        ax.set_ylim(0, max(max(energies) * 1.12, ax.get_ylim()[1]))
    ax.tick_params(labelleft=True)
    ax.set_ylabel("energy / iteration (simulated)")


def _method_colours(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    methods: list[str] = []
    for row in rows:
        if row["method"] not in methods:
            methods.append(row["method"])
    return {m: _COLOURS[i % len(_COLOURS)] for i, m in enumerate(methods)}


def _infeasible_note(ax: Any, panel: Sequence[dict[str, Any]]) -> None:
    missing: dict[str, int] = defaultdict(int)
    for row in panel:
        if not row.get("feasible"):
            missing[row["method"]] += 1
    if missing:
        text = "infeasible (not drawn): " + ", ".join(f"{m} x{n}" for m, n in missing.items())
        ax.text(0.01, 0.01, textwrap.fill(text, 60), transform=ax.transAxes, fontsize=7,
                color="#555555", va="bottom", ha="left")


def plot_energy_vs_ram(rows: Sequence[dict[str, Any]], path: str | Path, *,
                       dpi: int = 120) -> bool:
    """Energy vs activation RAM budget; False (nothing written) without finished points."""
    panels = _panels(rows)
    if not panels:
        return False
    colours = _method_colours(rows)
    everything = [r["budget_activation_bytes"] for p in panels.values() for r in p
                  if r.get("budget_activation_bytes")]
    unit, scale = byte_unit(max(everything) if everything else 1)
    log_x = bool(everything) and max(everything) > 20 * min(everything)
    common = _common(panels)
    with plot_style():
        fig, axes = _grid(len(panels))
        for ax, (_key, panel) in zip(axes, panels.items(), strict=True):
            best: dict[str, dict[int, float]] = defaultdict(dict)
            for row in panel:
                if row.get("feasible") and row.get("energy_j") is not None:
                    budget = row["budget_activation_bytes"]
                    line = best[row["method"]]
                    line[budget] = min(line.get(budget, math.inf), row["energy_j"])
            energies = []
            for method, line in best.items():
                xs = sorted(line)
                ys = [line[x] for x in xs]
                energies += ys
                i = list(colours).index(method)
                ax.plot([x / scale for x in xs], ys, marker=_MARKERS[i % len(_MARKERS)],
                        color=colours[method], label=method, **_tie_visible(i))
            if not energies:
                ax.text(0.5, 0.5, "no feasible point", transform=ax.transAxes,
                        ha="center", va="center", color="#555555")
            ax.set_title(_panel_title(panel[0], common=common is not None), fontsize=8.5)
            ax.set_xlabel(f"RAM budget for activations ({unit}"
                          + (", log scale)" if log_x else ")"))
            _energy_axis(ax, energies)
            if log_x:
                from matplotlib.ticker import FuncFormatter

                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
            else:
                ax.set_xlim(left=0)
            _infeasible_note(ax, panel)
        _legend(fig, colours)
        deadlines = sorted({r["deadline"] for r in rows})
        fig.suptitle("Energy vs RAM budget" + (f": {common}" if common else "")
                     + (" (least energy over deadlines " f"{', '.join(deadlines)})"
                        if len(deadlines) > 1 else f" (deadline {deadlines[0]})"),
                     fontsize=11)
        save_figure(fig, path, dpi)
    return True


def _tie_visible(rank: int) -> dict[str, float]:
    """Line width, marker size and stacking of the ``rank``-th method's line: the first
    (POET) on top and thinnest, each later one wider beneath it, so that methods with the
    same figures show as a line and markers outlined by the others' instead of hiding
    them."""
    return {"linewidth": 1.2 + 1.3 * rank, "markersize": 4.0 + 2.5 * rank,
            "zorder": 10 - rank}


def plot_energy_vs_deadline(rows: Sequence[dict[str, Any]], path: str | Path, *,
                            dpi: int = 120) -> bool:
    """Energy vs deadline (seconds); False (nothing written) with fewer than two deadlines."""
    timed = [r for r in rows if r.get("deadline") not in (None, "none")]
    if len({r["deadline"] for r in timed}) < 2:
        return False
    panels = _panels(timed)
    if not panels:
        return False
    colours = _method_colours(timed)
    budgets = sorted({r["ram"] for r in timed})
    common = _common(panels)
    with plot_style():
        fig, axes = _grid(len(panels))
        for ax, (_key, panel) in zip(axes, panels.items(), strict=True):
            lines: dict[tuple[str, str], dict[float, float]] = defaultdict(dict)
            for row in panel:
                if row.get("feasible") and row.get("energy_j") is not None:
                    lines[(row["method"], row["ram"])][row["deadline_s"]] = row["energy_j"]
            energies = []
            for (method, ram), line in lines.items():
                xs = sorted(line)
                ys = [line[x] for x in xs]
                energies += ys
                style = _STYLES[budgets.index(ram) % len(_STYLES)]
                marker = _MARKERS[budgets.index(ram) % len(_MARKERS)]
                ax.plot(xs, ys, linestyle=style, marker=marker, color=colours[method],
                        **_tie_visible(list(colours).index(method)))
            if not energies:
                ax.text(0.5, 0.5, "no feasible point", transform=ax.transAxes,
                        ha="center", va="center", color="#555555")
            ax.set_title(_panel_title(panel[0], common=common is not None), fontsize=8.5)
            ax.set_xlabel("deadline (s per iteration)")
            _energy_axis(ax, energies)
            _infeasible_note(ax, panel)
        _legend(fig, colours, budgets if len(budgets) > 1 else ())
        fig.suptitle("Energy vs deadline" + (f": {common}" if common else ""), fontsize=11)
        save_figure(fig, path, dpi)
    return True


def _legend(fig: Any, colours: dict[str, str], budgets: Sequence[str] = ()) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, marker=_MARKERS[i % len(_MARKERS)] if not budgets
                      else None, linewidth=2, label=m) for i, (m, c) in enumerate(colours.items())]
    handles += [Line2D([], [], color="#333333", linestyle=_STYLES[i % len(_STYLES)],
                       marker=_MARKERS[i % len(_MARKERS)], label=f"RAM {b}")
                for i, b in enumerate(budgets)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6),
               frameon=False)


def write_plots(rows: Sequence[dict[str, Any]], directory: str | Path) -> list[Path]:
    """Both plots (those that have data) into ``directory``; the files written."""
    directory = Path(directory)
    written = []
    for name, draw in (("energy_vs_ram.png", plot_energy_vs_ram),
                       ("energy_vs_deadline.png", plot_energy_vs_deadline)):
        if draw(rows, directory / name):
            written.append(directory / name)
    return written
