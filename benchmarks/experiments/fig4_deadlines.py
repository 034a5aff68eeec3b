"""Figure 4 of the POET paper: VGG16 (CIFAR) across deadlines, paging-only vs remat-only vs POET.

Run: ``python -m benchmarks.experiments.fig4_deadlines [--smoke|--full] [--jobs N]``. Writes
``benchmarks/results/fig4_deadlines/{data.csv, plot.png, table.md}``.

A fixed RAM budget (70% of the plain activation peak: VGG16-CIFAR's largest single op needs
61.5%, so 50% is infeasible for every method) and deadlines from 1.0x to 2.0x the plain
compute time, on the nRF52840 paper profile and its physical twin. Methods: the POET
MILP with paging only, with rematerialization only (Checkmate), and integrated (POET).
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
        "deadlines": ["1.0x", "1.02x", "1.05x", "1.1x", "1.2x", "1.5x", "2.0x"],
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
    for r in rows:
        r["deadline_x"] = _factor(r)
    boards = list(dict.fromkeys(r["board"] for r in rows))
    fig, axes = plt.subplots(1, len(boards), squeeze=False, figsize=(5.2 * len(boards), 4.0))
    for ax, board in zip(axes[0], boards, strict=True):
        cell = [r for r in rows if r["board"] == board]
        plot_method_series(ax, cell, x="deadline_x", y="energy_j", methods=METHODS)
        ref = cell[0]["ref_energy_j"]
        ax.axhline(ref, color="k", ls=":", lw=1, label="checkpoint-all, unlimited RAM")
        for method in METHODS:
            missing = [f"{_factor(r):g}x" for r in cell
                       if r["method"] == method and not r["feasible"]]
            if missing:
                ax.plot([], [], " ", label=f"{METHOD_LABEL[method]}: none at "
                        + ", ".join(missing))
        same = {(r["deadline"], r["energy_j"]) for r in cell if r["method"] == "checkmate"} == \
            {(r["deadline"], r["energy_j"]) for r in cell if r["method"] == "poet"}
        if same:
            ax.text(0.02, 0.5, "remat only (Checkmate) = POET at every deadline",
                    transform=ax.transAxes, fontsize=8, color="tab:orange")
        profile = "paper profile" if cell[0]["profile"] == "paper" else "physical"
        ax.set_title(f"{BOARD_LABEL.get(board, board)} [{board}, {profile}]")
        ax.set_xlabel("deadline (x plain compute time)")
        ax.set_ylabel("simulated energy per iteration (J)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")
    r0 = rows[0]
    fig.suptitle(f"Fig. 4: {r0['model']} at {r0['ram']} RAM: paging only vs remat only vs "
                 "POET (hollow = simulated makespan over the deadline)", fontsize=10)
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
    return "\n".join(parts)


def outputs(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    return write_outputs(rows, out / NAME, plot, table)


def main(argv: list[str] | None = None) -> int:
    return experiment_main(__doc__, points, outputs, argv)


if __name__ == "__main__":
    raise SystemExit(main())
