"""Side-by-side comparison: POET and every baseline on one request, all simulated and judged.

Every method runs on the same resolved :class:`~poetsim.request.Request`; every schedule
is simulated on the board and judged by :mod:`poetsim.verdict` (through
:func:`poetsim.runs.run_and_judge`). The reference for the energy overhead is every op
once with unlimited RAM on the same board (:func:`poetsim.runs.reference_energy_j`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from poetsim.errors import InputError
from poetsim.fileio import atomic_write_text, new_folder
from poetsim.methods import METHODS, SolverSettings
from poetsim.request import Request
from poetsim.runs import (
    Outcome,
    RunCache,
    corners_by,
    reference_energy_by,
    run_all_and_judge,
    with_overheads,
)
from poetsim.units import format_bytes, format_quantity, table_cell

__all__ = ["Progress", "compare", "format_table", "write_outcomes"]


#: Called after each method with its position (from 1), the number of methods and its
#: outcome, so that a long comparison shows how far it is.
Progress = Callable[[int, int, Outcome], None]


def compare(request: Request, *, settings: SolverSettings = SolverSettings(),
            methods: Iterable[str] | None = None,
            cache: RunCache | None = None, corners: bool = False,
            progress: Progress | None = None, started: float | None = None) -> list[Outcome]:
    """Run POET and the baselines (all of :data:`~poetsim.methods.METHODS`, or ``methods``
    after POET), simulate and judge each; one outcome per method, POET's first. With
    ``corners``, every schedule is judged at the board's corners too
    (:func:`~poetsim.verdict.judge_corners`); ``progress`` hears of each method as it
    ends.

    With ``started`` (a :func:`time.perf_counter` instant: the command's start),
    ``settings.time_limit_s`` holds for all of them together, reference included
    (:func:`~poetsim.runs.run_all_and_judge`: POET, first, the largest share); without it,
    for each method."""
    names = list(METHODS) if methods is None else ["poet", *(m for m in methods
                                                            if m != "poet")]
    twice = sorted({m for m in names if names.count(m) > 1})
    if twice:  # each would run and be reported twice
        raise InputError(f"methods: {', '.join(twice)} given more than once")
    ended: list[Outcome] = []

    def each(_name: str, outcome: Outcome | None) -> None:
        if outcome is not None and progress is not None:
            ended.append(outcome)
            progress(len(ended), len(names), outcome)

    outcomes = run_all_and_judge(request, names, settings, cache=cache, started=started,
                                 each=each)
    end = None if started is None else started + settings.time_limit_s
    if corners:
        outcomes = [attrs.evolve(o, corners=corners_by(request, o, end)) for o in outcomes]
    return with_overheads(outcomes, reference_energy_by(request, end))



def write_outcomes(outcomes: Iterable[Outcome], request: Request, out_dir: str | Path
                   ) -> list[Path]:
    """Write every outcome's schedule (``<method>.json``, with the request and the method in
    its metadata, ready for ``poetsim simulate`` or a golden) and ``comparison.json`` (the
    outcomes' figures) into ``out_dir``, which must not exist or be empty. The folder is
    filled under a temporary name beside it and renamed when complete: all or nothing."""
    from poetsim.schedule import write_schedule

    names = []
    with new_folder(out_dir, InputError) as tmp:
        rows = []
        for outcome in outcomes:
            rows.append(outcome.as_dict())
            if outcome.schedule is not None:
                write_schedule(outcome.schedule, request.graph, tmp / f"{outcome.method}.json")
                names.append(f"{outcome.method}.json")
        atomic_write_text(tmp / "comparison.json",
                          json.dumps({"request": request.metadata(), "outcomes": rows},
                                     indent=2, default=str))
        names.append("comparison.json")
    return [Path(out_dir) / name for name in names]


def format_table(outcomes: Iterable[Outcome]) -> str:
    """A plain-text table of the outcomes, one line each, every figure with its unit: the
    energy and makespan of one simulated iteration, the overhead over every op once, the
    MILP methods' proven gap, the byte peak and the arena it lays out in."""

    cell = table_cell  # the one renderer of a printed table's cells (units.table_cell)

    def share(value: float) -> str:
        return f"{100 * value:.2f}%"

    outcomes = list(outcomes)
    with_corners = any(len(o.corners) > 1 for o in outcomes)
    header = (f"{'method':<15} {'verdict':>9} {'status':<14} {'energy':>11} "
              f"{'overhead':>9} {'gap':>7} {'makespan':>11} {'peak':>10} {'arena':>10} "
              f"{'fits RAM':>8} "
              + (f"{'typ/slow/costly':>15} " if with_corners else "")
              + f"{'remat':>5} {'out':>4} {'in':>4}  why not")
    lines = [header]
    for o in outcomes:
        corner_cell = ("/".join(c.verdict.label for c in o.corners) if o.corners else "-")
        schedule = o.schedule
        counts = ((schedule.recomputations(), schedule.page_outs, schedule.page_ins)
                  if schedule is not None else (0, 0, 0))
        lines.append(
            f"{o.method:<15} {cell(o.verdict_label, 9)} "
            f"{o.status.value:<14} {cell(o.energy_j, 11, lambda v: format_quantity(v, 'J'))} "
            f"{cell(o.energy_overhead, 9, share)} {cell(o.gap, 7, share)} "
            f"{cell(o.makespan_s, 11, lambda v: format_quantity(v, 's'))} "
            f"{cell(o.peak_total_bytes, 10, format_bytes)} "
            f"{cell(o.verdict.arena_bytes if o.verdict else None, 10, format_bytes)} "
            f"{cell(o.verdict.fits_board_ram if o.verdict else None, 8)} "
            + (f"{corner_cell:>15} " if with_corners else "")
            + f"{counts[0]:>5} {counts[1]:>4} {counts[2]:>4}  {o.why_not}")
    return "\n".join(lines)
