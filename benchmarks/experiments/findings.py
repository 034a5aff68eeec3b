"""Simulator-only findings, computed from the experiments' CSV files (no solving).

Run: ``python -m benchmarks.experiments.findings [--out benchmarks/results]`` after the
experiments (``run_all`` calls it). Writes ``<out>/findings.md``:

1. where the energy of schedules that page goes: the share spent waiting (CPU stalled on a
   page-in or a write, components idle between commands, wake-ups), per board and method;
2. how far the optimizer's predicted energy is from the simulated one, per board and method;
3. issue #14's two Fig. 3 targets: at how many points POET's simulated energy is the lowest
   of all feasible methods (within 0.5%), and POET's predicted vs simulated energy at every
   physical-board point. These two tables also replace the ``generated:`` blocks of
   ``benchmarks/RESULTS.md`` when the results are the full ones (``--out`` the default).

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


#: Issue #14's targets: POET lowest within this share of the best feasible method, and its
#: predicted energy within this share of the simulated one on the physical boards.
LOWEST_TOLERANCE = 0.005
PREDICTION_TOLERANCE_PCT = 1.0
FIG3 = "fig3_energy_vs_ram"


def _fig3_points(rows_all: list[dict]) -> list[list[dict]]:
    rows = [r for r in rows_all if r["experiment"] == FIG3]
    keys = list(dict.fromkeys((r["model"], r["model_options"], r["board"], r["ram"])
                              for r in rows))
    return [[r for r in rows if (r["model"], r["model_options"], r["board"], r["ram"]) == k]
            for k in keys]


def _gap_text(r: dict) -> str:
    if r["gap"] in ("", None):
        return "-"
    limited = "gap-limited" if r["gap_limited"] == "True" else "within the gap limit"
    return f"{100 * _f(r['gap']):.2f}% ({limited})"


def lowest_summary(rows_all: list[dict]) -> tuple[int, int, int, int, list[dict]]:
    """Fig. 3 points where POET's simulated energy is the lowest of all feasible methods
    within :data:`LOWEST_TOLERANCE`: (count, points, count among POET solves within the gap
    limit, those solves, the other points with POET, the best method and the excess)."""
    points = _fig3_points(rows_all)
    lowest = within_gap = lowest_within_gap = 0
    misses = []
    for cell in points:
        poet = next(r for r in cell if r["method"] == "poet")
        others = [r for r in cell if r["method"] != "poet" and r["feasible"] == "True"]
        best = min(others, key=lambda r: _f(r["energy_j"])) if others else None
        ok_gap = poet["feasible"] == "True" and poet["gap_limited"] != "True"
        within_gap += ok_gap
        if poet["feasible"] == "True" and (
                best is None or _f(poet["energy_j"]) <= (1 + LOWEST_TOLERANCE)
                * _f(best["energy_j"])):
            lowest += 1
            lowest_within_gap += ok_gap
        else:
            misses.append({"poet": poet, "best": best})
    return lowest, len(points), lowest_within_gap, within_gap, misses


def lowest_table(rows_all: list[dict]) -> str:
    lowest, total, lowest_gap, within_gap, misses = lowest_summary(rows_all)
    lines = [(f"POET's simulated energy is the lowest of all feasible methods (within "
              f"{100 * LOWEST_TOLERANCE:g}%) at **{lowest} of {total}** Fig. 3 points; at "
              f"{lowest_gap} of the {within_gap} points where its solve finished within the "
              f"gap limit. Where it is not:"), ""]
    body = []
    for m in misses:
        poet, best = m["poet"], m["best"]
        title = poet["model"] + (f" ({poet['model_options']})" if poet["model_options"] else "")
        if poet["feasible"] != "True":
            excess = f"POET {poet['status']}"
        else:
            excess = f"{100 * (_f(poet['energy_j']) / _f(best['energy_j']) - 1):+.2f}%"
        body.append([title, poet["board"], poet["ram"], fmt(_f(poet["energy_j"]), "j"),
                     fmt(_f(poet["predicted_energy_j"]), "j"),
                     "-" if best is None else METHOD_LABEL[best["method"]],
                     "-" if best is None else fmt(_f(best["energy_j"]), "j"),
                     excess, _gap_text(poet)])
    lines.append(markdown_table(
        ["model", "board", "RAM", "POET simulated J", "POET predicted J", "best method",
         "its simulated J", "POET above it", "POET's gap"], body) if body else "(none)")
    return "\n".join(lines)


def poet_prediction_summary(rows_all: list[dict]) -> tuple[list[float], list[dict]]:
    """POET's simulated-vs-predicted energy (percent) at every physical-board Fig. 3 point
    with a feasible schedule, and those rows."""
    sel = [r for r in rows_all if r["experiment"] == FIG3 and r["method"] == "poet"
           and r["profile"] == "physical" and r["energy_sim_vs_pred_pct"] not in ("", None)]
    return [_f(r["energy_sim_vs_pred_pct"]) for r in sel], sel


def poet_prediction_table(rows_all: list[dict]) -> str:
    diffs, sel = poet_prediction_summary(rows_all)
    if not diffs:
        return "(no physical-board POET schedule)"
    absd = [abs(d) for d in diffs]
    over = [r for r in sel if abs(_f(r["energy_sim_vs_pred_pct"])) > PREDICTION_TOLERANCE_PCT]
    lines = [(f"{len(sel)} physical-board Fig. 3 points with a POET schedule: |simulated / "
              f"predicted - 1| median **{statistics.median(absd):.2f}%**, max "
              f"**{max(absd):.2f}%** (signed: median {statistics.median(diffs):+.2f}%, "
              f"min {min(diffs):+.2f}%, max {max(diffs):+.2f}%); "
              f"**{len(sel) - len(over)} of {len(sel)}** within "
              f"{PREDICTION_TOLERANCE_PCT:g}%."), ""]
    body = []
    for board in dict.fromkeys(r["board"] for r in sel):
        d = [abs(_f(r["energy_sim_vs_pred_pct"])) for r in sel if r["board"] == board]
        body.append([board, len(d), f"{statistics.median(d):.2f}%", f"{max(d):.2f}%",
                     sum(x > PREDICTION_TOLERANCE_PCT for x in d)])
    lines += [markdown_table(["board", "points", "median |diff|", "max |diff|",
                              f"above {PREDICTION_TOLERANCE_PCT:g}%"], body), ""]
    if over:
        lines += [f"Points above {PREDICTION_TOLERANCE_PCT:g}%:", ""]
        body = []
        for r in sorted(over, key=lambda r: -abs(_f(r["energy_sim_vs_pred_pct"]))):
            title = r["model"] + (f" ({r['model_options']})" if r["model_options"] else "")
            body.append([title, r["board"], r["ram"], fmt(_f(r["predicted_energy_j"]), "j"),
                         fmt(_f(r["energy_j"]), "j"), f"{_f(r['energy_sim_vs_pred_pct']):+.2f}%",
                         r["page_outs"], r["recomputes"], fmt(_f(r["stall_s"]), "s"),
                         fmt(_f(r["predicted_time_s"]), "s"), fmt(_f(r["makespan_s"]), "s")])
        lines.append(markdown_table(
            ["model", "board", "RAM", "predicted J", "simulated J", "simulated vs predicted",
             "page-outs", "recomputes", "stall", "predicted time", "simulated time"], body))
    return "\n".join(lines)


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
        "## Issue #14 target: POET the least-energy method at every Fig. 3 point",
        "",
        lowest_table(rows_all),
        "",
        "## Issue #14 target: POET's predicted energy within 1% of simulated (physical "
        "boards, Fig. 3)",
        "",
        poet_prediction_table(rows_all),
        "",
        "## Predicted (optimizer) vs simulated energy",
        "",
        prediction_table(rows),
        "",
        "## Gap-limited solves",
        "",
        gap_table(rows_all),
    ])


#: ``benchmarks/RESULTS.md``: its generated blocks are rewritten from the full results.
RESULTS_MD = RESULTS_DIR.parent / "RESULTS.md"


def generated_blocks(out: Path) -> dict[str, str]:
    """The parts of RESULTS.md that are computed from the CSVs, by block name."""
    rows_all = [r for name in EXPERIMENTS if (out / name / "data.csv").is_file()
                for r in read_csv(out / name / "data.csv")]
    return {"targets-lowest": lowest_table(rows_all),
            "targets-prediction": poet_prediction_table(rows_all)}


def update_results_md(out: Path, path: Path = RESULTS_MD) -> bool:
    """Rewrite every ``<!-- BEGIN generated:NAME -->`` ... ``<!-- END generated:NAME -->``
    block of ``path`` from the CSVs under ``out``; whether the file changed."""
    if not path.is_file():
        return False
    text = original = path.read_text(encoding="utf-8")
    for name, body in generated_blocks(out).items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        i, j = text.find(begin), text.find(end)
        if i < 0 or j < i:
            continue
        text = text[:i + len(begin)] + "\n" + body.rstrip() + "\n" + text[j:]
    if text != original:
        path.write_text(text, encoding="utf-8")
    return text != original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    path = write_text(args.out / "findings.md", findings(args.out))
    log(f"wrote {path}")
    # only the full results (the default folder) are RESULTS.md's source, never a smoke run
    if args.out.resolve() == RESULTS_DIR.resolve() and update_results_md(args.out):
        log(f"updated the generated blocks of {RESULTS_MD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
