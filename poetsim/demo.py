"""The end-to-end demo: one model on one board, solved, verified, compared, written out.

:func:`run_demo` builds the default model (ResNet-18 for CIFAR) for the default board
(the nRF52840 with a microSD card), finds POET's least-energy schedule at a tight RAM
budget (50 % of the plain schedule's peak) and a 1.5x deadline, simulates it on the
board, compares it with two baselines (DTR, which recomputes, and Capuchin, which pages
and recomputes), all through :func:`poetsim.runs.run_method` /
:func:`poetsim.runs.simulate_run`, and writes into a new folder:

* ``summary.md`` (for people) and ``summary.json`` (for programs);
* ``costs.json``: the model's cost summary on the board;
* ``schedule.json`` and ``schedule.bin``: POET's schedule (JSON, and the compact binary
  form for the device);
* ``trace.json``: the simulation's Chrome / Perfetto trace (open in ui.perfetto.dev);
* ``simulation.png``: RAM and power over time and the schedule matrix;
* ``comparison.png``: energy and peak RAM of POET and the baselines.

The folder is filled under a temporary name beside it and renamed when complete, so a
failed or interrupted demo leaves no partial output folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim.boards import DEFAULT_BOARD, get_board
from poetsim.boards.spec import Board
from poetsim.compare import (
    ComparisonRow,
    comparison_row,
    reference_energy_j,
    with_overheads,
)
from poetsim.costs import op_costs
from poetsim.errors import InputError
from poetsim.fileio import atomic_write_text
from poetsim.graph.graph import TrainingGraph
from poetsim.runs import MethodRun, run_method, simulate_run
from poetsim.sim import SimReport, simulate
from poetsim.summary import cost_summary
from poetsim.units import format_bytes, format_quantity

__all__ = ["DEMO_BASELINES", "DemoResult", "default_out_dir", "run_demo"]

#: The baselines the demo compares POET with: one that recomputes, one that pages.
DEMO_BASELINES = ("dtr", "capuchin")


@attrs.frozen
class DemoResult:
    """What the demo produced. ``passed``: POET's schedule ran within budget and deadline."""

    out_dir: Path
    graph_name: str
    board_name: str
    poet: MethodRun = attrs.field(repr=False)
    report: SimReport | None = attrs.field(repr=False)
    rows: tuple[ComparisonRow, ...] = attrs.field(repr=False)
    files: tuple[str, ...]
    wall_s: float
    summary: dict[str, Any] = attrs.field(repr=False)

    @property
    def passed(self) -> bool:
        return self.report is not None and self.report.passed


def default_out_dir(base: str | Path = ".") -> Path:
    """``poetsim-demo-YYYYmmdd-HHMMSS`` in ``base`` (with a suffix if that exists)."""
    stem = Path(base) / f"poetsim-demo-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = stem, 1
    while path.exists():
        n += 1
        path = stem.with_name(f"{stem.name}-{n}")
    return path


def _check_target(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise InputError(f"--out {str(out_dir)!r}: exists and is not an empty folder; "
                         "choose a new path")


def run_demo(graph: TrainingGraph | None = None, board: Board | None = None, *,
             ram: str | int = "50%", deadline: str | float | None = "1.5x",
             time_limit_s: float = 20.0, seed: int = 0,
             baselines: Sequence[str] = DEMO_BASELINES, out_dir: str | Path | None = None,
             echo: Callable[[str], None] | None = None) -> DemoResult:
    """Run the demo (see the module doc) and write its folder; returns what it made.

    ``graph`` / ``board`` default to the zoo's default model and the default board.
    ``out_dir`` must not exist or be empty (default: :func:`default_out_dir`). ``echo``
    receives one line per stage as the demo goes.
    """
    from poetsim.zoo import DEFAULT_MODEL, build_model

    started = time.perf_counter()
    say = echo or (lambda _line: None)
    graph = build_model(DEFAULT_MODEL) if graph is None else graph
    board = get_board(DEFAULT_BOARD) if board is None else board
    final = Path(out_dir) if out_dir is not None else default_out_dir()
    _check_target(final)
    costs = op_costs(graph, board)

    say(f"solving POET: {graph.name} on {board.name}, RAM {ram} of the plain peak, deadline "
        f"{deadline}, time limit {time_limit_s:g} s")
    poet = run_method(graph, board, "poet", ram=ram, deadline=deadline,
                      time_limit_s=time_limit_s, seed=seed, costs=costs)
    say(f"  {poet.status}" + (f", energy {format_quantity(poet.energy_j, 'J')}"
                              if poet.energy_j is not None else f": {poet.reason}")
        + (f", gap {poet.gap:.2%}" if poet.gap is not None else "")
        + f" ({poet.run_time_s:.1f} s)")
    report = None
    if poet.schedule is not None:
        say("simulating the schedule on the board")
        report = simulate(graph, board, poet.schedule,
                          budget_bytes=poet.budget_activation_bytes + poet.resident_bytes,
                          resident_bytes=poet.resident_bytes, deadline_s=poet.deadline_s,
                          costs=costs, trace=True)
    rows = [comparison_row(poet, report)]
    runs = {"poet": poet}
    for name in baselines:
        say(f"running baseline {name}")
        run = run_method(graph, board, name, ram=ram, deadline=deadline,
                         time_limit_s=time_limit_s, seed=seed, costs=costs)
        runs[name] = run
        rows.append(comparison_row(run, simulate_run(graph, board, run, costs=costs)))
    reference = reference_energy_j(graph, board, costs)
    rows = with_overheads(rows, reference)

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        files = _write_outputs(tmp, graph, board, costs, poet, report, rows, reference,
                               ram=ram, deadline=deadline, time_limit_s=time_limit_s,
                               say=say)
        summary = _summary(graph, board, poet, report, rows, reference, files, ram=ram,
                           deadline=deadline, time_limit_s=time_limit_s,
                           wall_s=time.perf_counter() - started)
        atomic_write_text(tmp / "summary.json", json.dumps(summary, indent=2, default=str))
        atomic_write_text(tmp / "summary.md", _markdown(summary))
        if final.is_dir():
            final.rmdir()  # checked empty above
        # mkdtemp makes the folder private; give it the mode a plain mkdir would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return DemoResult(out_dir=final, graph_name=graph.name, board_name=board.name, poet=poet,
                      report=report, rows=tuple(rows), files=tuple(summary["files"]),
                      wall_s=time.perf_counter() - started, summary=summary)


# ----------------------------------------------------------------------------- outputs

def _write_outputs(folder: Path, graph: TrainingGraph, board: Board, costs: Any,
                   poet: MethodRun, report: SimReport | None, rows: list[ComparisonRow],
                   reference: float, *, ram: Any, deadline: Any, time_limit_s: float,
                   say: Callable[[str], None]) -> list[str]:
    from poetsim.report import plot_simulation
    from poetsim.schedule import write_schedule, write_schedule_binary
    from poetsim.sim.trace import write_chrome_trace

    files = ["summary.md", "summary.json", "costs.json"]
    atomic_write_text(folder / "costs.json",
                      json.dumps(cost_summary(graph, board, costs).as_dict(), indent=2,
                                 default=str))
    if poet.schedule is not None and report is not None:
        say("writing the schedule, trace and plots")
        write_schedule(poet.schedule, graph, folder / "schedule.json")
        write_schedule_binary(poet.schedule, folder / "schedule.bin", graph)
        write_chrome_trace(report, folder / "trace.json")
        plot_simulation(graph, poet.schedule, report, folder / "simulation.png")
        files += ["schedule.json", "schedule.bin", "trace.json", "simulation.png"]
    _plot_comparison(rows, reference, poet, graph, board, folder / "comparison.png")
    files.append("comparison.png")
    return files


def _plot_comparison(rows: Sequence[ComparisonRow], reference: float, poet: MethodRun,
                     graph: TrainingGraph, board: Board, path: Path) -> None:
    """Two bar panels: simulated energy (with the unlimited-RAM reference) and peak RAM."""
    from matplotlib.ticker import FuncFormatter

    from poetsim.report.data import byte_unit
    from poetsim.report.plots import new_figure, save_figure, plot_style

    labels = [r.method for r in rows]
    budget = poet.budget_activation_bytes
    feasible_colour, other_colour = "#0072B2", "#BBBBBB"
    with plot_style():
        fig = new_figure(10, 0.55 * len(rows) + 2.2)
        ax_e, ax_m = fig.subplots(1, 2)
        ys = list(range(len(rows)))[::-1]
        energies = [r.energy_j or 0.0 for r in rows]
        top = max(energies + [reference]) * 1.35
        ax_e.barh(ys, energies, color=[feasible_colour if r.feasible else other_colour
                                       for r in rows], height=0.6)
        ax_e.axvline(reference, color="#D55E00", linestyle="--", linewidth=1.2)
        for y, r in zip(ys, rows, strict=True):
            if r.energy_j is None:
                text = f"  {r.status}"
                x = 0
            else:
                over = (f" ({r.energy_overhead:+.1%})" if r.energy_overhead is not None else "")
                text = f"  {format_quantity(r.energy_j, 'J', 3)}{over}" + (
                    "" if r.feasible else " - fails")
                x = r.energy_j
            ax_e.text(x, y, text, va="center", fontsize=8)
        ax_e.set_xlim(0, top)
        ax_e.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_quantity(v, "J", 3)))
        ax_e.set_yticks(ys, labels)
        ax_e.set_xlabel("energy per training iteration (simulated)")
        ax_e.set_title("Energy, lower is better\n(dashed: every op once with unlimited RAM, "
                       f"{format_quantity(reference, 'J', 3)})")

        # activations only: the resident parameters and gradients are the same for all
        peaks = [max(0, (r.peak_ram_bytes or 0) - poet.resident_bytes) for r in rows]
        unit, scale = byte_unit(max(peaks + [budget]))
        ax_m.barh(ys, [p / scale for p in peaks],
                  color=[feasible_colour if r.budget_ok else other_colour for r in rows],
                  height=0.6)
        ax_m.axvline(budget / scale, color="#D55E00", linestyle="--", linewidth=1.2)
        for y, p in zip(ys, peaks, strict=True):
            if p:
                ax_m.text(p / scale, y, f"  {format_bytes(p)}", va="center", fontsize=8)
        ax_m.set_xlim(0, max(peaks + [budget]) / scale * 1.3)
        ax_m.set_yticks(ys, labels)
        ax_m.set_xlabel(f"peak activation RAM (simulated, {unit})")
        ax_m.set_title(f"Peak RAM for activations\n(dashed: the budget, {format_bytes(budget)}; "
                       f"plus {format_bytes(poet.resident_bytes)} resident)")
        fig.suptitle(f"{graph.name} on {board.name}: POET vs baselines at "
                     f"{format_bytes(poet.budget_activation_bytes)} of activation RAM"
                     + (f", deadline {format_quantity(poet.deadline_s, 's', 3)}"
                        if poet.deadline_s is not None else ""), fontsize=11)
        save_figure(fig, path, 120)


def _summary(graph: TrainingGraph, board: Board, poet: MethodRun, report: SimReport | None,
             rows: Sequence[ComparisonRow], reference: float, files: list[str], *, ram: Any,
             deadline: Any, time_limit_s: float, wall_s: float) -> dict[str, Any]:
    return {
        "model": graph.name, "board": board.name, "board_title": board.title,
        "ram": str(ram), "deadline": None if deadline is None else str(deadline),
        "time_limit_s": time_limit_s,
        "budget_activation_bytes": poet.budget_activation_bytes,
        "resident_bytes": poet.resident_bytes, "deadline_s": poet.deadline_s,
        "reference_energy_j": reference,
        "poet": poet.summary(),
        "simulation": None if report is None else report.as_dict(transfers=False),
        "verified": report is not None and report.passed,
        "comparison": [r.as_dict() for r in rows],
        "files": files, "wall_s": wall_s,
    }


def _markdown(s: dict[str, Any]) -> str:
    poet, sim = s["poet"], s["simulation"]
    lines = [f"# poetsim demo: {s['model']} on {s['board']}", "",
             f"{s['board_title']}.", "",
             f"- RAM budget: {s['ram']} of the plain schedule's peak = "
             f"{format_bytes(s['budget_activation_bytes'])} of activations (+ "
             f"{format_bytes(s['resident_bytes'])} of parameters and gradients)",
             "- deadline: " + (f"{s['deadline']} = {format_quantity(s['deadline_s'], 's', 4)}"
                               if s["deadline_s"] is not None else "none"),
             f"- solver: SCIP, time limit {s['time_limit_s']:g} s", "",
             "## POET", "",
             f"- status: **{poet['status']}**"
             + (f" ({poet['reason'].removeprefix(poet['status'] + ', ')})"
                if poet["reason"] else "")]
    if sim is not None:
        lines += [
            f"- simulated on the board: **{'PASS' if sim['passed'] else 'FAIL'}**"
            + ("" if sim["passed"] else f" ({'; '.join(sim['reasons'])})"),
            f"- energy {format_quantity(sim['energy_j'], 'J', 4)} per iteration "
            f"({sim['energy_j'] / s['reference_energy_j'] - 1:+.2%} vs every op once with "
            f"unlimited RAM), makespan {format_quantity(sim['makespan_s'], 's', 4)}, "
            f"peak activation RAM {format_bytes(sim['peak_ram_bytes'] - s['resident_bytes'])} "
            f"of {format_bytes(s['budget_activation_bytes'])}",
            f"- {_poet_counts(s)}"]
    lines += ["", "## Against the baselines (all simulated on the board)", "",
              "| method | feasible | energy | overhead | makespan | peak activation RAM | note |",
              "|---|---|---|---|---|---|---|"]
    for r in s["comparison"]:
        lines.append(
            f"| {r['method']} | {'yes' if r['feasible'] else 'no'} | "
            + (format_quantity(r["energy_j"], "J", 4) if r["energy_j"] is not None else "-")
            + " | " + (f"{r['energy_overhead']:+.2%}" if r["energy_overhead"] is not None
                       else "-")
            + " | " + (format_quantity(r["makespan_s"], "s", 4) if r["makespan_s"] is not None
                       else "-")
            + " | " + (format_bytes(r["peak_ram_bytes"] - s["resident_bytes"])
                       if r["peak_ram_bytes"] is not None else "-")
            + f" | {r['reason'] or ''} |")
    lines += ["", "## Files", ""]
    notes = {"summary.json": "these figures for programs",
             "costs.json": "per-iteration compute and paging costs of the model on the board",
             "schedule.json": "POET's schedule (poetsim simulate schedule.json ...)",
             "schedule.bin": "the same schedule in the compact binary form for the device",
             "trace.json": "the simulation's trace: open it in https://ui.perfetto.dev",
             "simulation.png": "RAM and power over time, and the schedule matrix",
             "comparison.png": "energy and peak RAM of POET and the baselines"}
    lines += [f"- `{f}`: {notes[f]}" for f in s["files"] if f in notes]
    lines += ["", f"Made in {s['wall_s']:.1f} s.", ""]
    return "\n".join(lines)


def _poet_counts(s: dict[str, Any]) -> str:
    row = s["comparison"][0]
    return (f"{row['recomputations']} recomputations, {row['page_outs']} page-outs, "
            f"{row['page_ins']} page-ins")
