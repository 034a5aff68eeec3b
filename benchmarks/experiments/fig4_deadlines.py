"""Figure 4 of the POET paper: VGG16 (CIFAR) across deadlines, paging-only vs remat-only vs POET.

Run: ``python -m benchmarks.experiments.fig4_deadlines [--smoke|--full] [--jobs N]``. Writes
``benchmarks/results/fig4_deadlines/{data.csv, plot.png, table.md}``.

A fixed RAM budget (70% of the plain activation peak: VGG16-CIFAR's largest single op needs
61.5%, so 50% is infeasible for every method) and deadlines from 1.0x to 2.0x the plain
compute time, on the nRF52840 paper profile and its physical twin. Methods: the POET
MILP with paging only, with rematerialization only (Checkmate), and integrated (POET).

At 70% VGG16-CIFAR needs recomputation worth only ~0.2% of the plain compute time, so the
deadlines go down to 1.001x: the paper's Fig. 4 shows remat-only becoming infeasible at its
tightest deadlines, and here that happens between 1.0x and 1.005x. The plot spaces the
deadlines evenly (categorical axis) so that the tight ones can be told apart; the table
ends with, per board and method, the deadlines at which the method has no feasible
schedule in simulation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.experiments.common import (
    BOARD_LABEL,
    METHOD_LABEL,
    Point,
    experiment_main,
    fmt,
    markdown_table,
    plot_method_series,
    pyplot,
    status_cell,
    write_outputs,
)

NAME = "fig4_deadlines"
METHODS = ("paging_only", "checkmate", "poet")
FULL = {"model": "vgg16_cifar", "options": (), "ram": "70%",
        "boards": ["poet_nrf52840", "nrf52840"],
        "deadlines": ["1.0x", "1.001x", "1.002x", "1.005x", "1.01x", "1.02x", "1.05x",
                      "1.1x", "1.2x", "1.5x", "2.0x"],
        "time_limit_s": 15.0}
SMOKE = {"model": "mlp", "options": (), "ram": "50%", "boards": ["poet_nrf52840", "nrf52840"],
         "deadlines": ["1.2x", "2.0x"], "time_limit_s": 0.5}


def points(mode: str) -> list[Point]:
    cfg = SMOKE if mode == "smoke" else FULL
    return [Point(NAME, cfg["model"], board, cfg["ram"], d, METHODS, cfg["time_limit_s"],
                  model_options=cfg["options"])
            for board in cfg["boards"] for d in cfg["deadlines"]]


def _factor(row: dict[str, Any]) -> float:
    return float(str(row["deadline"]).rstrip("x"))


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    # evenly spaced deadlines (1.001x and 1.002x would sit on top of 1.0x on a linear axis)
    factors = sorted({_factor(r) for r in rows})
    position = {f: i for i, f in enumerate(factors)}
    for r in rows:
        r["deadline_x"] = position[_factor(r)]
    boards = list(dict.fromkeys(r["board"] for r in rows))
    fig, axes = plt.subplots(1, len(boards), squeeze=False, figsize=(5.6 * len(boards), 4.4))
    for ax, board in zip(axes[0], boards, strict=True):
        cell = [r for r in rows if r["board"] == board]
        plot_method_series(ax, cell, x="deadline_x", y="energy_j", methods=METHODS,
                           jitter=0.08)
        ax.set_xticks(range(len(factors)))
        ax.set_xlim(-0.5, len(factors) - 0.5)
        ax.set_xticklabels([f"{f:g}x" for f in factors], rotation=45)
        ref = cell[0]["ref_energy_j"]
        ax.axhline(ref, color="k", ls=":", lw=1, label="checkpoint-all, unlimited RAM")
        for method in METHODS:
            missing = [f"{_factor(r):g}x" + (" (late)" if r["energy_j"] is not None else "")
                       for r in sorted(cell, key=_factor)
                       if r["method"] == method and not r["feasible"]]
            if missing:
                ax.plot([], [], " ", label=f"{METHOD_LABEL[method]}: not feasible at "
                        + ", ".join(missing))
        same = {(r["deadline"], r["energy_j"]) for r in cell if r["method"] == "checkmate"} == \
            {(r["deadline"], r["energy_j"]) for r in cell if r["method"] == "poet"}
        if same:
            ax.text(0.02, 0.5, "remat only (Checkmate) = POET at every deadline",
                    transform=ax.transAxes, fontsize=8, color="tab:orange")
        profile = "paper profile" if cell[0]["profile"] == "paper" else "physical"
        ax.set_title(f"{BOARD_LABEL.get(board, board)} [{board}, {profile}]")
        ax.set_xlabel("deadline (x plain compute time; evenly spaced, not to scale)")
        ax.set_ylabel("simulated energy per iteration (J)")
        ax.grid(True, alpha=0.3)
        # between the paging-only curve (top) and the others (bottom)
        ax.legend(loc="center right", fontsize=7)
    r0 = rows[0]
    fig.suptitle(f"Fig. 4: {r0['model']} at {r0['ram']} RAM: paging only vs remat only vs "
                 "POET (hollow = simulated makespan over the deadline; markers offset "
                 "sideways by method)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def table(rows: list[dict[str, Any]]) -> str:
    r0 = rows[0]
    parts = [f"# Fig. 4: {r0['model']} at {r0['ram']} RAM across deadlines", "",
             ("Simulated energy (J) and overhead vs checkpoint-all with unlimited RAM. "
              "`saving` = POET's energy below the other method's. `[gap x%]` = the "
              "MILP stopped at its time limit with that gap."), ""]
    body = []
    for board in dict.fromkeys(r["board"] for r in rows):
        for d in dict.fromkeys(r["deadline"] for r in rows if r["board"] == board):
            cell = {r["method"]: r for r in rows if r["board"] == board and r["deadline"] == d}
            poet = cell["poet"]
            others = [cell[m] for m in ("paging_only", "checkmate") if cell[m]["feasible"]]
            vs = {m: (fmt(1 - poet["energy_j"] / cell[m]["energy_j"], "pct_signed")
                      if poet["feasible"] and cell[m]["feasible"] else "-")
                  for m in ("paging_only", "checkmate")}
            best = (fmt(1 - poet["energy_j"] / min(o["energy_j"] for o in others), "pct_signed")
                    if poet["feasible"] and others else "-")
            body.append([board, d, fmt(poet["deadline_s"], "s")]
                        + [f"{fmt(cell[m]['energy_j'], 'j')} ({status_cell(cell[m])})"
                           if cell[m]["energy_j"] is not None else status_cell(cell[m])
                           for m in METHODS]
                        + [vs["paging_only"], vs["checkmate"], best])
    parts.append(markdown_table(
        ["board", "deadline", "deadline (s)", "paging only J", "remat only (Checkmate) J",
         "POET J", "POET saving vs paging only", "vs remat only", "vs better of the two"],
        body))
    parts += ["", "## Where each method has no feasible schedule", "",
              ("Deadlines at which the method's schedule is absent (the MILP is infeasible "
               "or found none in its time limit) or fails in simulation (late, over budget); "
               "`feasible from` = the tightest deadline from which on every looser one is "
               "feasible."), ""]
    body = []
    for board in dict.fromkeys(r["board"] for r in rows):
        for method in METHODS:
            sel = sorted((r for r in rows if r["board"] == board and r["method"] == method),
                         key=_factor)
            bad = [r for r in sel if not r["feasible"]]
            ok_from = None
            for r in reversed(sel):
                if not r["feasible"]:
                    break
                ok_from = r
            body.append([board, METHOD_LABEL[method],
                         ", ".join(f"{r['deadline']} ({_why(r)})" for r in bad) or "none",
                         ok_from["deadline"] if ok_from is not None else "never"])
    parts.append(markdown_table(["board", "method", "not feasible at", "feasible from"],
                                body))
    return "\n".join(parts)


def _why(row: dict[str, Any]) -> str:
    if row["energy_j"] is None:
        return str(row["status"]).replace("_", " ")
    if not row["budget_ok"]:
        return "over budget"
    if not row["deadline_ok"]:
        return f"late: {fmt(row['makespan_s'], 's')}"
    return str(row["verdict"])


def outputs(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    return write_outputs(rows, out / NAME, plot, table)


def main(argv: list[str] | None = None) -> int:
    return experiment_main(__doc__, points, outputs, argv)


if __name__ == "__main__":
    raise SystemExit(main())
