"""How every command prints and writes: JSON, labelled rows, all-or-nothing files, and
the simulation's figures (shared by ``simulate`` and ``demo``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from poetsim.errors import InputError
from poetsim.request import Accounting
from poetsim.sim.report import SimReport
from poetsim.summary import GraphSummary
from poetsim.units import format_bytes, format_quantity
from poetsim.verdict import Verdict


def emit_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    print(json.dumps(data, indent=2, default=str))


#: Columns of a printed line: longer ones wrap (:func:`wrapped`).
WIDTH = 100


def wrapped(line: str, indent: int) -> str:
    """``line`` wrapped to :data:`WIDTH` columns, its continuation lines indented by
    ``indent`` spaces (words are never broken: a path or reference stays whole)."""
    return textwrap.fill(line, width=WIDTH, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False)


def row(label: str, value: str) -> str:
    """One labelled line of a command's report."""
    return f"  {label:<34} {value}"


def print_graph_summary(summary: GraphSummary) -> None:
    """A training graph's size, work and memory, each figure with its unit (``models
    show`` and ``import``)."""
    print(row("ops (forward+loss / backward)",
               f"{summary.ops} ({summary.forward_ops} / {summary.backward_ops})"))
    print(row("parameters", f"{summary.parameters:,} ({format_bytes(summary.param_bytes)})"))
    print(row("forward MACs", format_quantity(summary.forward_macs, "MAC")))
    print(row("forward FLOPs", format_quantity(summary.forward_flops, "FLOP")))
    print(row("training FLOPs (one iteration)", format_quantity(summary.training_flops, "FLOP")))
    print(row("activation bytes (all forward)", format_bytes(summary.activation_bytes)))
    print(row("plain-schedule peak (activations)",
               f"{format_bytes(summary.plain_peak_bytes)} at {summary.plain_peak_op}"))


def check_outputs(outputs: Mapping[str, str | None], inputs: Mapping[str, str | None]
                  ) -> None:
    """Refuse, before any work, an output path (``{flag: path}``) that is another output's
    or an input's of the same command: one would overwrite the other (the user's own
    graph, or the JSON by the binary). Paths are compared resolved (links followed); an
    input that is no file (a board's name) is none."""
    seen: dict[Path, str] = {}
    inputs = {flag: path for flag, path in inputs.items() if path and Path(path).is_file()}
    for flag, path in [*inputs.items(), *outputs.items()]:
        if not path:
            continue
        key = Path(path).expanduser().resolve()
        if key in seen:
            other = seen[key]
            what = "input" if other in inputs else "output"
            raise InputError(f"{flag} {path!r}: the same file as the {what} {other}; an "
                             "output must be a file of its own")
        seen[key] = flag


def write_all_or_nothing(written: list[str],
                         outputs: Sequence[tuple[str | None, Callable[[str], Any]]]) -> None:
    """Write each requested output (path, writer), appending its path to ``written``; if
    one fails, remove those already written and re-raise: a failing command leaves none."""
    try:
        for path, write in outputs:
            if path:
                write(path)
                written.append(path)
    except BaseException:
        for path in written:
            Path(path).unlink(missing_ok=True)
        raise


def print_simulation(r: SimReport, verdict: Verdict) -> None:
    """A simulation's figures and its verdict, one labelled line each."""
    print(f"{r.graph_name} on {r.board_name}: {verdict.line()}")
    for note in verdict.notes:
        print(row("note", note))
    deadline = (f" (deadline {format_quantity(verdict.deadline_s, 's')}, "
                f"{'met' if verdict.deadline_met else 'missed'})"
                if verdict.deadline_s is not None else "")
    print(row("makespan", format_quantity(r.makespan_s, "s") + deadline))
    print(row("  compute / stall", f"{format_quantity(r.compute_s, 's')} / "
                                    f"{format_quantity(r.stall_s, 's')}"))
    print(row("peak RAM", f"{format_bytes(verdict.peak_total_bytes)} of "
                           f"{format_bytes(verdict.board_ram_bytes)} usable at step "
                           f"{r.peak_step} ({r.peak_action} {r.peak_op})"))
    whose = "the schedule's own layout" if r.layout_from_schedule else "a layout planned now"
    print(row("arena", f"{format_bytes(verdict.arena_bytes)} ({r.fragmentation_bytes} B of "
                        f"fragmentation: every buffer at an offset of one static region, "
                        f"{whose})"))
    budget_kind = ("in all" if verdict.accounting is Accounting.PHYSICAL
                   else "of activations")
    print(row("budget", f"{format_bytes(verdict.budget_bytes)} {budget_kind}: "
                         + ("kept" if verdict.within_budget else "exceeded")))
    print(row("energy", format_quantity(r.energy_j, "J")))
    for title, table in (("  by component", r.energy_by_component_j),
                         ("  by kind", r.energy_by_kind_j)):
        parts = ", ".join(f"{k} {format_quantity(v, 'J')}" for k, v in table.items() if v)
        print(row(title, parts))
    print(row("paged out / in", f"{format_bytes(r.bytes_paged_out)} / "
                                 f"{format_bytes(r.bytes_paged_in)}"))
    print(row("bus busy", f"{r.bus_utilisation:.1%} of the makespan"))
    wakeups = ", ".join(f"{k} {v}" for k, v in r.wakeups.items() if v)
    if wakeups:
        print(row("wake-ups", wakeups))
    if r.flash_erases:
        print(row("flash erases (max per sector)",
                   f"{r.flash_erases} ({r.flash_max_erase_count})"))
    if r.storage_wear_bytes:
        worn = format_bytes(r.storage_wear_bytes)
        life = r.storage_lifetime_iterations
        if life is None:
            print(row("storage wear", f"{worn} worn per iteration (the board file gives no "
                                       "endurance)"))
        else:
            if r.flash_endurance_cycles is not None:
                rating = f"{r.flash_endurance_cycles:,} erase cycles per sector"
                worn += " erased"
            else:
                rating = f"{life * r.storage_wear_bytes / 1e12:.3g} TB written rating"
                worn += " worn"
            count = f"{life:.3g}".replace("e+0", "e").replace("e+", "e")
            print(row("storage lifetime", f"{count} iterations ({rating}, {worn} per "
                                           "iteration)"))
    p = r.prediction  # the op-list model's figures, recomputed
    for label, diff in (("energy", p.energy_diff_pct), ("time", p.time_diff_pct),
                        ("peak RAM", p.peak_diff_pct)):
        if diff is not None:
            print(row(f"simulated vs predicted {label}", f"{diff:+.2f}%"))
