"""The end-to-end demo: one model on one board, solved, verified, compared, written out.

:func:`run_demo` takes a resolved request (by default :data:`DEMO_MODEL`, a keyword-spotting
DS-CNN, fine-tuning its last three layers, on :data:`DEMO_BOARD`, the nRF52840 with its
microSD card, within all of the board's usable RAM and a 2x deadline, physical
accounting), finds POET's least-energy schedule, simulates and judges it on the board,
compares it with two baselines (DTR, which recomputes, and Capuchin, which pages and
recomputes), all through :func:`poetsim.runs.run_all_and_judge`, and writes into a new
folder:

* ``summary.md`` (for people) and ``summary.json`` (for programs);
* ``costs.json``: the model's cost summary on the board;
* ``schedule.json`` and ``schedule.bin``: POET's schedule (JSON, and the compact binary
  form for the device);
* ``trace.json``: the simulation's Chrome / Perfetto trace (open in ui.perfetto.dev);
* ``simulation.png``: RAM and power over time and the schedule matrix;
* ``comparison.png``: energy and peak RAM of POET and the baselines.

Why this job: it is training that physically fits a microcontroller. Everything resident
(the weights of the three trained layers and their gradients) and every activation must
fit the nRF52840's 256 KiB, while the frozen weights stay in its 1 MB flash and are read in
place, as real MCU training does (the request places them,
:func:`poetsim.request.resolve_request`); the plain schedule's activations do not fit
beside the resident state, so the schedule must recompute and page. (Two trained layers
would now fit without either: flash takes their 71 KiB of frozen weights.) The paper's
ResNet-18 does not fit any MCU board at all (its fp32 weights alone are 42.6 MiB; run the
demo with ``--model resnet18_cifar`` to see the one-line reason).

The folder is filled under a temporary name beside it and renamed when complete, so a
failed or interrupted demo leaves no partial output folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim import clock
from poetsim.compare import format_table
from poetsim.errors import InputError
from poetsim.fileio import atomic_write_text, check_new_folder, new_folder
from poetsim.methods import SolverSettings
from poetsim.request import Request
from poetsim.runs import (
    Outcome,
    corners_by,
    reference_energy_by,
    run_all_and_judge,
    with_overheads,
)
from poetsim.summary import cost_summary
from poetsim.units import format_bytes, format_quantity
from poetsim.verdict import CornerVerdict

__all__ = ["DEMO_BASELINES", "DEMO_BOARD", "DEMO_DEADLINE", "DEMO_MODEL", "DEMO_MODEL_OPTIONS",
           "DEMO_RAM", "DemoResult", "default_out_dir", "run_demo"]

#: The baselines the demo compares POET with: one that recomputes, one that pages.
DEMO_BASELINES = ("dtr", "capuchin")
#: The demo's job (see the module docstring): model, its options, board, RAM, deadline.
DEMO_MODEL = "ds_cnn_s"
DEMO_MODEL_OPTIONS = {"train_last": 3}
DEMO_BOARD = "nrf52840"
DEMO_RAM = "board"
DEMO_DEADLINE = "2x"
#: The demo's solver settings unless given: the default deterministic effort (it proves
#: the demo's job optimal), so that every run gives the same schedule and numbers on any
#: machine, with the time limit only a safety cap.
DEMO_SETTINGS = SolverSettings(time_limit_s=60.0)
#: What the demo keeps of its time limit for its files after the methods: loading
#: matplotlib and drawing two figures take about 1.5 s of CPU (3 s beside two busy
#: processes on two cores), but never more than this share of the limit.
_OUTPUT_S, _OUTPUT_SHARE = 3.0, 0.3
#: The CPU a figure takes at most (matplotlib loaded for the first): one that would end
#: past the time limit is not drawn.
_PLOT_CPU_S = 1.0


@attrs.frozen
class DemoResult:
    """What the demo produced. ``passed``: POET's schedule got a PASS verdict."""

    out_dir: Path
    request: Request = attrs.field(repr=False)
    outcomes: tuple[Outcome, ...] = attrs.field(repr=False)
    #: None when the time limit ran out before it was simulated
    reference_energy_j: float | None
    files: tuple[str, ...]
    wall_s: float
    summary: dict[str, Any] = attrs.field(repr=False)

    @property
    def poet(self) -> Outcome:
        return self.outcomes[0]

    @property
    def passed(self) -> bool:
        return self.poet.feasible


def default_out_dir(base: str | Path = ".") -> Path:
    """``poetsim-demo-YYYYmmdd-HHMMSS`` in ``base`` (with a suffix if that exists)."""
    stem = Path(base) / f"poetsim-demo-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = stem, 1
    while path.exists():
        n += 1
        path = stem.with_name(f"{stem.name}-{n}")
    return path


def run_demo(request: Request, settings: SolverSettings = DEMO_SETTINGS, *,
             baselines: Sequence[str] = DEMO_BASELINES, out_dir: str | Path | None = None,
             echo: Callable[[str], None] | None = None,
             started_at: float | None = None) -> DemoResult:
    """Run the demo (see the module doc) for ``request`` and write its folder.

    ``out_dir`` must not exist or be empty (default: :func:`default_out_dir`). ``echo``
    receives one line per stage as the demo goes. With ``started_at`` (a
    :func:`time.perf_counter` instant: the command's start), ``settings.time_limit_s``
    holds for the whole demo, its methods sharing it (a figure that would end past it is
    not drawn); without it, for each method.
    """
    started = time.perf_counter()
    say = echo or (lambda _line: None)
    graph, board = request.graph, request.board
    final = Path(out_dir) if out_dir is not None else default_out_dir()
    check_new_folder(final, InputError)

    say(f"solving POET: {graph.name} on {board.name}, RAM {request.ram} "
        f"({request.describe_budget()}), deadline {request.deadline}, "
        + (f"effort {settings.effort} nodes (time cap {settings.time_limit_s:g} s)"
           if settings.effort is not None else f"time limit {settings.time_limit_s:g} s"))

    def each(name: str, outcome: Outcome | None) -> None:
        if outcome is None and name != "poet":
            say(f"running baseline {name}")
        elif outcome is not None and name == "poet":
            say(f"  {outcome.status.value}"
                + (f", predicted {format_quantity(outcome.predicted_energy_j, 'J')}"
                   if outcome.predicted_energy_j is not None else f": {outcome.reason}")
                + (f", gap {outcome.gap:.2%}" if outcome.gap is not None else "")
                + f" ({outcome.run_time_s:.1f} s)"
                + (f"; simulated on the board: {outcome.verdict.label}"
                   if outcome.verdict is not None else "")
                + (f"; not checked on the board: {outcome.unchecked}"
                   if outcome.unchecked else ""))

    # with ``started_at``, the time limit holds for the whole demo: the methods share it
    reserve_s = min(_OUTPUT_S, _OUTPUT_SHARE * settings.time_limit_s)
    with clock.command(started_at, settings.time_limit_s):
        outcomes = run_all_and_judge(request, ("poet", *baselines), settings,
                                     trace=("poet",), started=started_at, each=each,
                                     reserve_s=reserve_s)
        poet = outcomes[0]
        corners = corners_by(request, poet, None if started_at is None else
                             started_at + settings.time_limit_s - reserve_s)
        if len(corners) > 1:
            say("  at the board's corners: " + "; ".join(c.phrase() for c in corners))
        # within the limit too, its files' share kept (None: the overheads go unshown)
        reference = reference_energy_by(request, None if started_at is None else
                                        started_at + settings.time_limit_s - reserve_s)
        outcomes = with_overheads(outcomes, reference)

        with new_folder(final, InputError) as tmp:
            files = _write_outputs(tmp, request, outcomes, reference, say=say)
            summary = _summary(request, settings, outcomes, reference, files, corners,
                               wall_s=time.perf_counter() - started)
            atomic_write_text(tmp / "summary.json", json.dumps(summary, indent=2,
                                                               default=str))
            atomic_write_text(tmp / "summary.md", _markdown(summary, outcomes))
    return DemoResult(out_dir=final, request=request, outcomes=tuple(outcomes),
                      reference_energy_j=reference, files=tuple(summary["files"]),
                      wall_s=time.perf_counter() - started, summary=summary)


# ----------------------------------------------------------------------------- outputs

def _write_outputs(folder: Path, request: Request, outcomes: Sequence[Outcome],
                   reference: float | None, *, say: Callable[[str], None]) -> list[str]:
    from poetsim.report import plot_simulation
    from poetsim.schedule import write_schedule, write_schedule_binary
    from poetsim.sim.trace import write_chrome_trace

    graph, board = request.graph, request.board
    poet = outcomes[0]
    files = ["summary.md", "summary.json", "costs.json"]
    atomic_write_text(folder / "costs.json",
                      json.dumps(cost_summary(graph, board, request.costs,
                                              optimizer=request.optimizer,
                                              request=request).as_dict(), indent=2,
                                 default=str))
    if poet.schedule is not None and poet.report is not None and poet.verdict is not None:
        say("writing the schedule, trace and plots")
        write_schedule(poet.schedule, graph, folder / "schedule.json")
        write_schedule_binary(poet.schedule, folder / "schedule.bin", graph)
        files += ["schedule.json", "schedule.bin"]
        if poet.report.timeline is None:  # the limit ran out before the traced run ended
            say("  trace.json and simulation.png not made: "
                + clock.ran_out("before the traced simulation ended", then="makes them"))
        else:
            write_chrome_trace(poet.report, folder / "trace.json", verdict=poet.verdict.label,
                               deadline_s=poet.verdict.deadline_s)
            files.append("trace.json")
            if _time_to_plot("simulation.png", say):
                plot_simulation(graph, poet.schedule, poet.report, folder / "simulation.png",
                                verdict=poet.verdict.label)
                files.append("simulation.png")
    if _time_to_plot("comparison.png", say):
        _plot_comparison(request, outcomes, reference, folder / "comparison.png")
        files.append("comparison.png")
    return files


def _time_to_plot(name: str, say: Callable[[str], None]) -> bool:
    """Whether the time limit leaves the time to draw figure ``name``: drawing cannot be
    cut short, so a figure that would end past the limit is not begun (and the line
    says so)."""
    if clock.time_for(_PLOT_CPU_S):
        return True
    say(f"  {name} not drawn: " + clock.ran_out("before it was drawn", then="draws it"))
    return False


def _plot_comparison(request: Request, outcomes: Sequence[Outcome], reference: float | None,
                     path: Path) -> None:
    """Two bar panels: simulated energy (with the unlimited-RAM reference) and peak RAM
    in all, against the board's usable RAM."""
    from matplotlib.ticker import FuncFormatter

    from poetsim.report.data import byte_unit
    from poetsim.report.plots import new_figure, plot_style, save_figure

    labels = [o.method for o in outcomes]
    board_ram = request.board_ram_bytes
    feasible_colour, other_colour = "#0072B2", "#BBBBBB"
    with plot_style():
        fig = new_figure(10, 0.55 * len(outcomes) + 2.2)
        ax_e, ax_m = fig.subplots(1, 2)
        ys = list(range(len(outcomes)))[::-1]
        energies = [o.energy_j or 0.0 for o in outcomes]
        top = max([*energies, reference or 0.0]) * 1.35 or 1.0
        ax_e.barh(ys, energies, color=[feasible_colour if o.feasible else other_colour
                                       for o in outcomes], height=0.6)
        if reference is not None:
            ax_e.axvline(reference, color="#D55E00", linestyle="--", linewidth=1.2)
        for y, o in zip(ys, outcomes, strict=True):
            if o.energy_j is None:
                text, x = f"  {o.status.value}", 0.0
            else:
                over = (f" ({o.energy_overhead:+.1%})" if o.energy_overhead is not None else "")
                text = f"  {format_quantity(o.energy_j, 'J', 3)}{over}" + (
                    "" if o.feasible else " - FAIL")
                x = o.energy_j
            ax_e.text(x, y, text, va="center", fontsize=8)
        ax_e.set_xlim(0, top)
        ax_e.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_quantity(v, "J", 3)))
        ax_e.set_yticks(ys, labels)
        ax_e.set_xlabel("energy per training iteration (simulated)")
        ax_e.set_title("Energy, lower is better" + (
            "" if reference is None else "\n(dashed: every op once with unlimited RAM, "
            f"{format_quantity(reference, 'J', 3)})"))

        peaks = [o.peak_total_bytes or 0 for o in outcomes]
        limit = min(request.ram_limit_bytes, board_ram)
        unit, scale = byte_unit(max([*peaks, limit]))
        ax_m.barh(ys, [p / scale for p in peaks],
                  color=[feasible_colour if o.feasible else other_colour for o in outcomes],
                  height=0.6)
        ax_m.axvline(limit / scale, color="#D55E00", linestyle="--", linewidth=1.2)
        for y, p in zip(ys, peaks, strict=True):
            if p:
                ax_m.text(p / scale, y, f"  {format_bytes(p)}", va="center", fontsize=8)
        ax_m.set_xlim(0, max([*peaks, limit]) / scale * 1.3)
        ax_m.set_yticks(ys, labels)
        ax_m.set_xlabel(f"peak RAM in all (simulated, {unit})")
        ax_m.set_title(f"Peak RAM, resident state included\n(dashed: the limit, "
                       f"{format_bytes(limit)}; {format_bytes(request.resident_bytes)} "
                       "resident)")
        fig.suptitle(f"{request.graph.name} on {request.board.name}: POET vs baselines, "
                     f"RAM {request.ram} ({request.accounting.value} accounting)"
                     + (f", deadline {format_quantity(request.deadline_s, 's', 3)}"
                        if request.deadline_s is not None else ""), fontsize=11)
        save_figure(fig, path, 120)


def _summary(request: Request, settings: SolverSettings, outcomes: Sequence[Outcome],
             reference: float | None, files: list[str], corners: Sequence[CornerVerdict], *,
             wall_s: float) -> dict[str, Any]:
    poet = outcomes[0]
    verdict = poet.verdict
    return {
        "model": request.graph.name, "board": request.board.name,
        "board_title": request.board.title, "request": request.metadata(),
        "budget": request.describe_budget(), "time_limit_s": settings.time_limit_s,
        "effort": settings.effort,
        "reference_energy_j": reference,
        "unfit_reason": request.infeasible_reason,
        "verdict": poet.verdict_label,
        "fits_board_ram": verdict.fits_board_ram if verdict else None,
        "peak_total_bytes": verdict.peak_total_bytes if verdict else None,
        "arena_bytes": verdict.arena_bytes if verdict else None,
        "board_ram_bytes": request.board_ram_bytes,
        "violations": list(verdict.violations) if verdict else [poet.why_not],
        "corners": [c.as_dict() for c in corners],
        "corners_line": "; ".join(c.phrase() for c in corners),
        "energy_per_iteration_j": None if poet.report is None else poet.report.energy_j,
        "time_per_iteration_s": None if poet.report is None else poet.report.makespan_s,
        "storage_lifetime_iterations": _lifetime(poet),
        "poet": poet.as_dict(),
        "simulation": None if poet.report is None else poet.report.as_dict(transfers=False),
        "comparison": [o.as_dict() for o in outcomes],
        "files": files, "wall_s": wall_s,
    }


def _lifetime(outcome: Outcome) -> float | None:
    """Training iterations until the storage's rated endurance is written (None: the board
    gives none, or nothing is written)."""
    return getattr(outcome.report, "storage_lifetime_iterations", None)


def _markdown(s: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    poet, sim, request = s["poet"], s["simulation"], s["request"]
    lines = [f"# poetsim demo: {s['model']} on {s['board']}", "",
             f"{s['board_title']}.", "",
             f"- RAM budget: {request['ram']} = {s['budget']}",
             "- deadline: " + (f"{request['deadline']} = "
                               f"{format_quantity(request['deadline_s'], 's', 4)}"
                               if request["deadline_s"] is not None else "none"),
             "- solver: SCIP, " + (f"deterministic effort of {s['effort']} nodes (time "
                                   f"limit {s['time_limit_s']:g} s as a safety cap)"
                                   if s["effort"] is not None
                                   else f"time limit {s['time_limit_s']:g} s"), "",
             "## POET", "",
             f"- status: **{poet['status']}**"
             + (f" ({poet['reason'].removeprefix(poet['status'] + ', ')})"
                if poet["reason"] else "")]
    if sim is not None:
        lines += [
            f"- verdict on the board: **{s['verdict']}** "
            f"({request['accounting']} accounting): peak {format_bytes(s['peak_total_bytes'])} "
            f"in all, laid out in an arena of {format_bytes(s['arena_bytes'])}, of "
            f"{format_bytes(s['board_ram_bytes'])} usable RAM"
            + ("" if not s["violations"] else f"; {'; '.join(s['violations'])}"),
            *([f"- at the board's measured corners: {s['corners_line']}"]
              if len(s["corners"]) > 1 else []),
            f"- energy {format_quantity(sim['energy_j'], 'J', 4)} per iteration"
            + ("" if outcomes[0].energy_overhead is None else
               f" ({outcomes[0].energy_overhead:+.2%} vs every op once with unlimited RAM)")
            + f", makespan {format_quantity(sim['makespan_s'], 's', 4)}",
            f"- {poet['recomputations']} recomputations, {poet['page_outs']} page-outs, "
            f"{poet['page_ins']} page-ins",
            "- storage lifetime: " + (
                f"{s['storage_lifetime_iterations']:.3g} training iterations before the "
                "storage's rated endurance is written"
                if s["storage_lifetime_iterations"] is not None
                else "nothing written, or no endurance rating in the board file")]
    lines += ["", "## Against the baselines (all simulated on the board)", "",
              "```", format_table(outcomes), "```"]
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
