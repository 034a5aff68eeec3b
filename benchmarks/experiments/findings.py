"""Simulator-only findings, computed from the experiments' CSV files (no solving).

Run: ``python -m benchmarks.experiments.findings [--out benchmarks/results]`` after the
experiments (``run_all`` calls it). Writes ``<out>/findings.md``:

1. where the energy of schedules that page goes: the share spent waiting (CPU stalled on a
   page-in or a write, components idle between commands, wake-ups), per board and method;
2. how far the optimizer's predicted energy is from the simulated one, per board and method.

The POET paper priced a page as (latency + bytes / throughput) x storage power, with the CPU
free meanwhile; the simulator charges the CPU's own idle or sleep power while it waits and the
storage's wake-ups, which only a simulation of the board can show.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.experiments.common import (
    METHOD_LABEL,
    RESULTS_DIR,
    fmt,
    log,
    markdown_table,
    read_csv,
    write_text,
)

EXPERIMENTS = ("fig3_energy_vs_ram", "fig4_deadlines", "fig5_capuchin", "table3_pofo")


def _f(value: str) -> float | None:
    return None if value in ("", None) else float(value)


def load(out: Path) -> list[dict]:
    rows = []
    seen = set()
    for name in EXPERIMENTS:
        path = out / name / "data.csv"
        if not path.is_file():
            continue
        for r in read_csv(path):
            # the same run appears in several experiments (Fig. 5 shares Fig. 3's points)
            key = (r["model"], r["model_options"], r["board"], r["ram"], r["deadline"],
                   r["method"], r["time_limit_s"])
            if key in seen or r["feasible"] != "True":
                continue
            seen.add(key)
            rows.append(r)
    return rows


def waiting_table(rows: list[dict]) -> str:
    body = []
    boards = sorted({r["board"] for r in rows}, key=lambda b: (not b.startswith("poet_"), b))
    for board in boards:
        for method in ("poet", "paging_only", "capuchin", "pofo"):
            paged = [r for r in rows if r["board"] == board and r["method"] == method
                     and int(r["page_outs"] or 0) > 0]
            if not paged:
                continue
            shares = [_f(r["waiting_energy_share"]) for r in paged]
            stall = [_f(r["stall_energy_j"]) / _f(r["energy_j"]) for r in paged]
            page = [(_f(r["page_in_energy_j"]) + _f(r["page_out_energy_j"])) / _f(r["energy_j"])
                    for r in paged]
            cpu_wait = [_f(r["cpu_waiting_energy_j"]) / _f(r["energy_j"]) for r in paged]
            worst = max(paged, key=lambda r: _f(r["waiting_energy_share"]))
            body.append([board, METHOD_LABEL[method], len(paged),
                         fmt(statistics.median(page), "pct"),
                         fmt(statistics.median(shares), "pct"), fmt(max(shares), "pct"),
                         fmt(statistics.median(stall), "pct"),
                         fmt(statistics.median(cpu_wait), "pct"),
                         f"{worst['model']} {worst['ram']} {worst['deadline']}"])
    return markdown_table(
        ["board", "method", "schedules that page", "paging energy (median share)",
         "waiting energy (median share)", "waiting (max)", "CPU stall (median)",
         "CPU not active (median)", "worst point"], body)


def prediction_table(rows: list[dict]) -> str:
    body = []
    boards = sorted({r["board"] for r in rows}, key=lambda b: (not b.startswith("poet_"), b))
    for board in boards:
        for method in ("poet", "checkmate", "paging_only", "capuchin", "dtr"):
            sel = [r for r in rows if r["board"] == board and r["method"] == method
                   and r["energy_sim_vs_pred_pct"] not in ("", None)]
            if not sel:
                continue
            diffs = [_f(r["energy_sim_vs_pred_pct"]) for r in sel]
            worst = max(sel, key=lambda r: abs(_f(r["energy_sim_vs_pred_pct"])))
            body.append([board, METHOD_LABEL[method], len(sel),
                         f"{statistics.median(diffs):+.2f}%", f"{min(diffs):+.2f}%",
                         f"{max(diffs):+.2f}%",
                         f"{worst['model']} {worst['ram']} {worst['deadline']}"])
    return markdown_table(
        ["board", "method", "schedules", "simulated vs predicted energy (median)", "min",
         "max", "largest deviation at"], body)


def gap_table(rows_all: list[dict]) -> str:
    body = []
    for name in sorted({r["experiment"] for r in rows_all}):
        for method in ("poet", "checkmate", "paging_only"):
            sel = [r for r in rows_all if r["experiment"] == name and r["method"] == method
                   and r["gap"] not in ("", None)]
            if not sel:
                continue
            limited = [r for r in sel if r["gap_limited"] == "True"]
            gaps = [_f(r["gap"]) for r in limited]
            body.append([name, METHOD_LABEL[method], len(sel), len(limited),
                         fmt(statistics.median(gaps), "pct") if gaps else "-",
                         fmt(max(gaps), "pct") if gaps else "-"])
    return markdown_table(["experiment", "method", "solves with a schedule",
                           "gap-limited (time limit hit above the gap limit)",
                           "median gap of those", "max gap"], body)


def findings(out: Path) -> str:
    rows = load(out)
    rows_all = [r for name in EXPERIMENTS if (out / name / "data.csv").is_file()
                for r in read_csv(out / name / "data.csv")]
    return "\n".join([
        "# Simulator-only findings",
        "",
        ("Computed by `benchmarks/experiments/findings.py` from the experiments' CSV files "
        "(feasible schedules, each distinct run once)."),
        "",
        "## Where the energy of paging schedules goes",
        "",
        ("`waiting` = energy of kind `idle` + `stall` + `wakeup` in the simulator's "
        "breakdown: the CPU waiting for a page-in or a write, storage idle between commands "
        "and wake-ups. `CPU not active` = the CPU's energy in every state but `active` "
        "(idle, sleep, wake) as a share of the total."),
        "",
        waiting_table(rows),
        "",
        "## Predicted (optimizer) vs simulated energy",
        "",
        prediction_table(rows),
        "",
        "## Gap-limited solves",
        "",
        gap_table(rows_all),
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    path = write_text(args.out / "findings.md", findings(args.out))
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
