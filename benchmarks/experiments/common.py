"""Shared driver of the paper experiments (issue #4): points, CSV, markdown, plots.

A *point* is one (model, board, RAM budget, deadline) with the methods to run there,
resolved once into a :class:`~poetsim.request.Request` under the paper's accounting (the
budget covers activations, POET's mu_RAM). For every method :func:`run_point` calls
:func:`poetsim.runs.run_and_judge` (through a :class:`~poetsim.runs.RunCache`, so a re-run
only simulates): **every energy figure in the outputs is simulated**, every row carries
the verdict and whether the whole training state physically fits the board
(``fits_board_ram``); the optimizer's prediction sits beside it as
``predicted_energy_j``. The energy overhead is against
:func:`poetsim.runs.reference_energy_j` (every op once with unlimited RAM, simulated on
the same board).

Points run in a process pool (``jobs``); the cache is safe for concurrent writers.
Outputs of an experiment go to ``<out>/<experiment>/{data.csv, plot.png, table.md}``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "benchmarks" / "results"
CACHE_DIR = RESULTS_DIR / "cache"
#: Smoke runs write here by default (``out/`` is git-ignored), never over the full results.
SMOKE_DIR = REPO / "out" / "experiments-smoke"


def default_out(smoke: bool) -> Path:
    return SMOKE_DIR if smoke else RESULTS_DIR

#: The POET paper's four boards with their physically consistent twins.
PAPER_BOARDS = ("poet_mkr1000", "poet_nrf52840", "poet_rpi4", "poet_jetson_tx2")
PHYSICAL_TWIN = {"poet_mkr1000": "mkr1000", "poet_nrf52840": "nrf52840",
                 "poet_rpi4": "rpi4", "poet_jetson_tx2": "jetson_tx2"}
BOARD_LABEL = {"poet_mkr1000": "MKR1000 (M0)", "poet_nrf52840": "nRF52840 (M4F)",
               "poet_rpi4": "RPi 4 (A72)", "poet_jetson_tx2": "Jetson TX2",
               "mkr1000": "MKR1000 (M0)", "nrf52840": "nRF52840 (M4F)",
               "rpi4": "RPi 4 (A72)", "jetson_tx2": "Jetson TX2"}

METHOD_LABEL = {"poet": "POET", "checkpoint_all": "checkpoint-all", "chen_sqrt_n": "Chen sqrt(n)",
                "chen_greedy": "Chen greedy", "revolve": "Revolve",
                "checkmate": "Checkmate (remat only)", "paging_only": "paging only",
                "capuchin": "Capuchin", "dtr": "DTR", "pofo": "POFO"}
METHOD_STYLE = {"poet": ("tab:green", "o"), "checkpoint_all": ("black", "x"),
                "chen_sqrt_n": ("tab:gray", "v"), "chen_greedy": ("tab:brown", "^"),
                "revolve": ("tab:pink", "P"), "checkmate": ("tab:orange", "s"),
                "paging_only": ("tab:blue", "D"), "capuchin": ("tab:red", "*"),
                "dtr": ("tab:purple", "<"), "pofo": ("tab:olive", ">")}

#: The energy kinds of :class:`poetsim.sim.SimReport.energy_by_kind_j`.
ENERGY_KINDS = ("compute", "recompute", "page_in", "page_out", "idle", "stall", "wakeup")
COMPONENTS = ("cpu", "dma", "storage")

COLUMNS = (
    "experiment", "model", "model_options", "board", "profile", "method", "accounting", "ram",
    "ram_pct", "budget_activation_bytes", "deadline", "deadline_s", "status", "feasible",
    "verdict", "budget_ok", "deadline_ok", "fits_board_ram", "board_ram_bytes", "reason",
    "energy_j", "predicted_energy_j", "energy_sim_vs_pred_pct",
    "ref_energy_j", "energy_overhead", "makespan_s", "predicted_time_s", "throughput_per_s",
    "peak_ram_bytes", "peak_activation_bytes", "predicted_peak_activation_bytes",
    "stall_s",
    *(f"{k}_energy_j" for k in ENERGY_KINDS),
    *(f"{c}_energy_j" for c in COMPONENTS),
    "cpu_waiting_energy_j", "storage_sleep_energy_j", "waiting_energy_share",
    "recomputes", "page_ins", "page_outs", "bytes_paged_out", "wakeups",
    "gap", "bound_j", "gap_limited", "run_time_s", "cached", "time_limit_s", "gap_limit",
)

@attrs.frozen
class Point:
    """One (model, board, budget, deadline) and the methods to run there."""

    experiment: str
    model: str
    board: str
    ram: str
    deadline: str | None
    methods: tuple[str, ...]
    time_limit_s: float
    gap_limit: float = 0.005
    model_options: tuple[tuple[str, int], ...] = ()
    #: The paper's experiments count activations only (its mu_RAM); every row still says
    #: whether the whole state fits the board (``fits_board_ram``).
    accounting: str = "paper"

    @property
    def options_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.model_options)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@functools.cache
def _graph(model: str, options: tuple[tuple[str, int], ...]):
    from poetsim.zoo import build_model

    return build_model(model, **dict(options))


@functools.cache
def _board(name: str):
    from poetsim.boards import get_board

    return get_board(name)


@functools.cache
def _request(model: str, options: tuple[tuple[str, int], ...], board: str, ram: str,
             deadline: str | None, accounting: str):
    from poetsim.request import resolve_request

    return resolve_request(_graph(model, options), _board(board), ram=ram, deadline=deadline,
                           accounting=accounting)


def _point_request(point: Point):
    return _request(point.model, point.model_options, point.board, point.ram, point.deadline,
                    point.accounting)


@functools.cache
def reference_energy(model: str, options: tuple[tuple[str, int], ...], board: str) -> float:
    """Simulated every op once with unlimited RAM (the overhead reference), joules."""
    from poetsim.runs import reference_energy_j

    return reference_energy_j(_request(model, options, board, "100%", None, "paper"))


def _pct(ram: str) -> float | None:
    return float(ram[:-1]) if ram.endswith("%") else None


def _row(point: Point, outcome, ref_j: float) -> dict[str, Any]:
    from poetsim.units import energy_overhead

    board = _board(point.board)
    row: dict[str, Any] = {c: None for c in COLUMNS}
    status = outcome.status.value
    row.update(
        experiment=point.experiment, model=point.model, model_options=point.options_text,
        board=point.board, profile=board.profile.value, method=outcome.method,
        accounting=outcome.accounting, ram=point.ram, ram_pct=_pct(point.ram),
        budget_activation_bytes=outcome.budget_activation_bytes,
        deadline=point.deadline or "", deadline_s=outcome.deadline_s, status=status,
        reason=outcome.why_not, predicted_energy_j=outcome.predicted_energy_j,
        predicted_time_s=outcome.predicted_time_s,
        predicted_peak_activation_bytes=outcome.predicted_peak_ram_bytes, ref_energy_j=ref_j,
        gap=outcome.gap, bound_j=outcome.bound_j, run_time_s=outcome.run_time_s,
        cached=outcome.cached, time_limit_s=point.time_limit_s, gap_limit=point.gap_limit,
        board_ram_bytes=board.ram.usable_bytes)
    # a MILP answer counts as gap-limited when it is not proven within the gap limit
    row["gap_limited"] = (outcome.gap is not None and status in ("feasible", "ok")
                          and outcome.gap > point.gap_limit + 1e-9)
    report, verdict = outcome.report, outcome.verdict
    if report is None or verdict is None:
        row["feasible"] = False
        return row
    kinds = report.energy_by_kind_j
    comps = report.energy_by_component_j
    states = report.energy_by_state_j
    cpu_waiting = sum(v for k, v in states.items()
                      if k.startswith("cpu.") and k != "cpu.active")
    waiting = kinds.get("idle", 0.0) + kinds.get("stall", 0.0) + kinds.get("wakeup", 0.0)
    predicted = outcome.predicted_energy_j
    row.update(
        feasible=verdict.passed, verdict=verdict.label, budget_ok=verdict.within_budget,
        deadline_ok=verdict.deadline_met is not False, fits_board_ram=verdict.fits_board_ram,
        energy_j=report.energy_j,
        energy_sim_vs_pred_pct=(None if not predicted else
                                100.0 * (report.energy_j / predicted - 1)),
        energy_overhead=energy_overhead(report.energy_j, ref_j),
        makespan_s=report.makespan_s,
        throughput_per_s=1.0 / report.makespan_s if report.makespan_s > 0 else None,
        peak_ram_bytes=verdict.peak_total_bytes,
        peak_activation_bytes=verdict.peak_activation_bytes, stall_s=report.stall_s,
        cpu_waiting_energy_j=cpu_waiting,
        storage_sleep_energy_j=states.get("storage.sleep", 0.0),
        waiting_energy_share=waiting / report.energy_j if report.energy_j > 0 else None,
        recomputes=report.recomputes, page_ins=report.page_ins, page_outs=report.page_outs,
        bytes_paged_out=report.bytes_paged_out, wakeups=sum(report.wakeups.values()))
    for k in ENERGY_KINDS:
        row[f"{k}_energy_j"] = kinds.get(k, 0.0)
    for c in COMPONENTS:
        row[f"{c}_energy_j"] = comps.get(c, 0.0)
    return row


def run_point(point: Point, cache_dir: str | os.PathLike | None = CACHE_DIR
              ) -> list[dict[str, Any]]:
    """Run, simulate and judge every method of ``point``; one CSV row per method."""
    from poetsim.methods import SolverSettings
    from poetsim.runs import RunCache, run_and_judge

    request = _point_request(point)
    ref_j = reference_energy(point.model, point.model_options, point.board)
    cache = None if cache_dir is None else RunCache(cache_dir)
    settings = SolverSettings(time_limit_s=point.time_limit_s, gap_limit=point.gap_limit)
    return [_row(point, run_and_judge(request, method, settings, cache=cache), ref_j)
            for method in point.methods]


def _run_point_logged(args: tuple[Point, Any]) -> tuple[list[dict[str, Any]], float]:
    point, cache_dir = args
    started = time.perf_counter()
    rows = run_point(point, cache_dir)
    return rows, time.perf_counter() - started


def run_points(points: Sequence[Point], *, cache_dir: str | os.PathLike | None = CACHE_DIR,
               jobs: int = 1) -> list[dict[str, Any]]:
    """Every point's rows, in the order of ``points``; ``jobs`` worker processes."""
    started = time.perf_counter()
    results: list[list[dict[str, Any]]] = []
    args = [(p, cache_dir) for p in points]

    def report(i: int, rows, seconds: float) -> None:
        p = points[i]
        best = [r for r in rows if r["method"] == "poet"]
        poet = best[0] if best else None
        poet_text = ("" if poet is None else
                     f" poet={poet['status']}"
                     + (f" E={poet['energy_j']:.4g}J" if poet["energy_j"] is not None else ""))
        log(f"[{p.experiment}] {i + 1}/{len(points)} {p.model} {p.options_text} {p.board} "
            f"ram={p.ram} deadline={p.deadline} {seconds:.1f}s{poet_text} "
            f"(elapsed {time.perf_counter() - started:.0f}s)")

    if jobs <= 1 or len(points) <= 1:
        for i, a in enumerate(args):
            rows, seconds = _run_point_logged(a)
            report(i, rows, seconds)
            results.append(rows)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for i, (rows, seconds) in enumerate(pool.map(_run_point_logged, args)):
                report(i, rows, seconds)
                results.append(rows)
    return [row for rows in results for row in rows]


# ----------------------------------------------------------------------------- outputs
def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else format(value, ".8g")
    return value


def write_csv(rows: Iterable[dict[str, Any]], path: Path,
              columns: Sequence[str] = COLUMNS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c)) for c in columns})
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def fmt(value: Any, kind: str = "g") -> str:
    """A markdown cell: ``-`` for missing, percentages, engineering-ish numbers."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "pct":
        return f"{100 * float(value):.1f}%"
    if kind == "pct_signed":
        return f"{100 * float(value):+.1f}%"
    if kind == "bytes":
        v = float(value)
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if v >= size:
                return f"{v / size:.2f} {unit}"
        return f"{int(v)} B"
    if kind == "s":
        v = float(value)
        return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.4g} s"
    if kind == "j":
        return f"{float(value):.4g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def markdown_table(header: Sequence[str], body: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip() + "\n", encoding="utf-8")
    return path


def status_cell(row: dict[str, Any]) -> str:
    """Energy overhead of a feasible row, else why it is absent."""
    if row.get("status") == "not_applicable":
        return "n/a"
    if row.get("energy_j") is None:
        return "infeasible" if row.get("status") in ("infeasible", "no_solution") else str(
            row.get("status"))
    text = fmt(row["energy_overhead"], "pct_signed")
    if not row.get("budget_ok"):
        text += " (over budget)"
    elif not row.get("deadline_ok"):
        text += " (late)"
    if row.get("gap_limited"):
        text += f" [gap {100 * row['gap']:.1f}%]"
    return text


# ----------------------------------------------------------------------------- plots
def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
                         "legend.fontsize": 8, "figure.dpi": 100})
    return plt


def plot_method_series(ax, rows: Sequence[dict[str, Any]], *, x: str, y: str,
                       methods: Sequence[str], y_transform: Callable[[float], float] = float,
                       jitter: float = 0.0) -> None:
    """One line per method; hollow markers for schedules that miss the deadline,
    nothing for infeasible / not-applicable ones."""
    for m_index, method in enumerate(methods):
        pts = [r for r in rows if r["method"] == method and r.get("energy_j") is not None
               and r.get("budget_ok")]
        if not pts:
            continue
        pts.sort(key=lambda r: float(r[x]))
        color, marker = METHOD_STYLE.get(method, ("k", "."))
        offset = (m_index - len(methods) / 2) * jitter
        xs = [float(r[x]) + offset for r in pts]
        ys = [y_transform(float(r[y])) for r in pts]
        ax.plot(xs, ys, color=color, lw=1.2 if method != "poet" else 2.0, alpha=0.85,
                label=METHOD_LABEL.get(method, method), zorder=3 if method == "poet" else 2)
        for xv, yv, r in zip(xs, ys, pts, strict=True):
            hollow = not r.get("deadline_ok")
            ax.plot([xv], [yv], marker=marker, color=color, ms=6 if method == "poet" else 5,
                    mfc="white" if hollow else color, zorder=4 if method == "poet" else 3)


def ratio_axis(ax, values: Sequence[float], cap: float = 3.0) -> None:
    """Linear y axis of energy ratios labelled ``1.2x``, cut at ``cap`` (off-scale values
    are named in a note on the axes)."""
    from matplotlib.ticker import FuncFormatter

    values = [v for v in values if v is not None and v > 0]
    if values:
        top = min(max(values), cap)
        span = max(top - min(values), 0.02)
        ax.set_ylim(min(values) - 0.06 * span, top + 0.08 * span)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}x"))


def write_outputs(rows: list[dict[str, Any]], folder: Path,
                  plot: Callable[[list[dict[str, Any]], Path], Path],
                  table: Callable[[list[dict[str, Any]]], str]) -> list[Path]:
    """An experiment's usual files: ``data.csv``, ``plot.png`` and ``table.md``."""
    return [write_csv(rows, folder / "data.csv"), plot(rows, folder / "plot.png"),
            write_text(folder / "table.md", table(rows))]


def experiment_parser(doc: str | None) -> argparse.ArgumentParser:
    """Options of every experiment command: --smoke / --full, --out, --cache, --jobs."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--smoke", action="store_true", help="tiny version (seconds)")
    group.add_argument("--full", action="store_true", help="the full experiment (default)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default benchmarks/results, or "
                        "out/experiments-smoke with --smoke)")
    parser.add_argument("--cache", type=Path, default=CACHE_DIR)
    parser.add_argument("--jobs", type=int, default=2)
    return parser


def experiment_main(doc: str | None, points: Callable[[str], Sequence[Point]],
                    outputs: Callable[[list[dict[str, Any]], Path], list[Path]],
                    argv: list[str] | None = None) -> int:
    """The command line every experiment script shares: run its points, write its files."""
    args = experiment_parser(doc).parse_args(argv)
    rows = run_points(points("smoke" if args.smoke else "full"), cache_dir=args.cache,
                      jobs=args.jobs)
    for f in outputs(rows, args.out or default_out(args.smoke)):
        log(f"wrote {f}")
    return 0
