"""Figure 5 of the POET paper: Capuchin vs POET, ResNet-18 (CIFAR) on the Raspberry Pi 4.

Run: ``python -m benchmarks.experiments.fig5_capuchin [--smoke|--full] [--jobs N]``. Writes
``benchmarks/results/fig5_capuchin/{data.csv, plot.png, table.md}``.

Energy overhead (simulated) vs checkpoint-all with unlimited RAM, as the RAM budget shrinks,
for Capuchin (page first, recompute only when a swap cannot be hidden) and POET, on the
Raspberry Pi 4 paper profile (``poet_rpi4``) and the physical ``rpi4``. Deadline 1.5x the
plain compute time; the solver settings match Fig. 3, so shared points come from the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.experiments.common import (
    BOARD_LABEL,
    METHOD_LABEL,
    METHOD_STYLE,
    Point,
    experiment_main,
    fmt,
    markdown_table,
    pyplot,
    status_cell,
    write_outputs,
)
from benchmarks.experiments.fig3_energy_vs_ram import FULL as FIG3_FULL

NAME = "fig5_capuchin"
METHODS = ("capuchin", "poet", "checkpoint_all")
DEADLINE = "1.5x"
FULL = {"model": "resnet18_cifar", "boards": ["poet_rpi4", "rpi4"],
        "budgets": ["90%", "80%", "70%", "60%", "50%", "40%", "30%", "25%"],
        "time_limit_s": FIG3_FULL["time_limit_s"]}
SMOKE = {"model": "mlp", "boards": ["poet_rpi4", "rpi4"], "budgets": ["70%", "40%"],
         "time_limit_s": 0.5}


def points(mode: str) -> list[Point]:
    cfg = SMOKE if mode == "smoke" else FULL
    return [Point(NAME, cfg["model"], board, ram, DEADLINE, METHODS, cfg["time_limit_s"])
            for board in cfg["boards"] for ram in cfg["budgets"]]


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    boards = list(dict.fromkeys(r["board"] for r in rows))
    fig, axes = plt.subplots(1, len(boards), squeeze=False, figsize=(5.0 * len(boards), 3.9))
    for ax, board in zip(axes[0], boards, strict=True):
        cell = [r for r in rows if r["board"] == board]
        shown = [100 * r["energy_overhead"] for r in cell
                 if r["method"] in ("capuchin", "poet") and r["energy_j"] is not None
                 and r["budget_ok"]]
        # all overheads below 1%: a linear axis with enough decimals, else symlog
        tiny = max(shown, default=0.0) < 1.0
        digits = 3 if tiny else 1
        # each value's label goes on its own side of the other method's curve: above for
        # the higher of the two at a budget, below for the lower (no overlapping labels)
        value = {(r["method"], r["ram_pct"]): r["energy_overhead"] for r in cell
                 if r["energy_j"] is not None and r["budget_ok"]}

        def above(method: str, ram_pct: float, value: dict = value) -> bool:
            other = "poet" if method == "capuchin" else "capuchin"
            mine, theirs = value[(method, ram_pct)], value.get((other, ram_pct))
            if theirs is None or mine != theirs:
                return theirs is None or mine > theirs
            return method == "capuchin"

        for method in ("capuchin", "poet"):
            pts = sorted((r for r in cell if r["method"] == method and r["energy_j"] is not None
                          and r["budget_ok"]), key=lambda r: -r["ram_pct"])
            color, marker = METHOD_STYLE[method]
            ax.plot([r["ram_pct"] for r in pts], [100 * r["energy_overhead"] for r in pts],
                    color=color, marker=marker, lw=2, label=METHOD_LABEL[method])
            for r in pts:
                ax.annotate(f"{100 * r['energy_overhead']:.{digits}f}%",
                            (r["ram_pct"], 100 * r["energy_overhead"]), fontsize=7,
                            textcoords="offset points",
                            xytext=(0, 6 if above(method, r["ram_pct"]) else -11),
                            ha="center", color=color)
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        if tiny:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}%"))
        else:
            ax.set_yscale("symlog", linthresh=1.0)
            ax.yaxis.set_major_locator(FixedLocator([0, 0.5, 1, 3, 10, 30, 100, 300, 1000]))
            ax.yaxis.set_minor_locator(NullLocator())
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.margins(x=0.06, y=0.14)  # room for the value labels at the ends
        ax.invert_xaxis()
        ax.set_xticks(sorted({r["ram_pct"] for r in cell}))
        ax.grid(True, which="both", alpha=0.3)
        profile = "paper profile" if cell[0]["profile"] == "paper" else "physical"
        ax.set_title(f"{BOARD_LABEL.get(board, board)} [{board}, {profile}]")
        ax.set_xlabel("RAM budget (% of plain activation peak)")
        ax.set_ylabel("energy overhead vs checkpoint-all,\nunlimited RAM"
                      + ("" if tiny else " (symlog scale)"))
        ax.legend(loc="upper left")
    fig.suptitle(f"Fig. 5: Capuchin vs POET, {rows[0]['model']}, deadline {DEADLINE} "
                 "(simulated)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def table(rows: list[dict[str, Any]]) -> str:
    parts = [f"# Fig. 5: Capuchin vs POET, {rows[0]['model']} (deadline {DEADLINE})", "",
             ("Simulated energy overhead vs checkpoint-all with unlimited RAM; pages out / "
              "recomputations of each schedule."), ""]
    body = []
    for board in dict.fromkeys(r["board"] for r in rows):
        for ram in dict.fromkeys(r["ram"] for r in rows if r["board"] == board):
            cell = {r["method"]: r for r in rows if r["board"] == board and r["ram"] == ram}
            cap, poet = cell["capuchin"], cell["poet"]

            def ops(r):
                return "-" if r["energy_j"] is None else f"{r['page_outs']} / {r['recomputes']}"

            body.append([board, ram, status_cell(cap), ops(cap), status_cell(poet), ops(poet),
                         fmt(cap["energy_j"], "j"), fmt(poet["energy_j"], "j"),
                         fmt(poet["predicted_energy_j"], "j")])
    parts.append(markdown_table(
        ["board", "RAM", "Capuchin overhead", "Capuchin out/remat", "POET overhead",
         "POET out/remat", "Capuchin J", "POET J (sim)", "POET J (predicted)"], body))
    return "\n".join(parts)


def outputs(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    return write_outputs(rows, out / NAME, plot, table)


def main(argv: list[str] | None = None) -> int:
    return experiment_main(__doc__, points, outputs, argv)


if __name__ == "__main__":
    raise SystemExit(main())
