"""What-if sweep of the SD card's speed on an nRF52840, for the hardware designer.

Would a faster SD interface (an SDIO host, a better card, a higher SPI clock) save energy
on a board that trains on device, and how slow a card can the job live with? This script
writes a sweep file that overrides the nRF52840's SD read and write throughput
(``[overrides]``, see :mod:`poetsim.sweep.spec`), runs it with :func:`poetsim.run_sweep`
for a small MLP whose RAM budget and deadline force tensors out to the card, planned by
POET and by the Capuchin baseline, reads the results store back
(:func:`poetsim.sweep.report.read_results`) and plots the simulated energy per iteration
against the SD write throughput, one line per method and read throughput::

    python examples/sd_speed_sweep.py --out build/sd   # writes build/sd/energy_vs_sd_speed.png

The sweep's store (``sd_speed.sqlite``) is resumable: run the script again and only the
points it lacks are solved. Needs Dask: ``pip install 'poetsim[sweep]'``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import poetsim
from poetsim.sweep.report import read_results
from poetsim.units import format_quantity

#: The nRF52840's SD-over-SPI card as its board file gives it (364 kB/s read, 186.5 kB/s
#: write), with slower cards (down to the 46 kB/s the board's range gives) and a faster
#: interface.
READ_BYTES_PER_S = (3.64e5,)
WRITE_BYTES_PER_S = (4.6e4, 9.3e4, 1.865e5, 3.73e5, 7.46e5)
METHODS = ("poet", "capuchin")

SWEEP = """\
name = "sd_speed"
models = [{{ name = "mlp", layers = 4, width = 64, input_dim = 64, batch_size = 64 }}]
boards = ["nrf52840"]
ram = ["60%"]            # of the plain schedule's activation peak, plus the resident state
deadlines = ["1.2x"]     # of the plain compute time: too tight to recompute everything
methods = [{methods}]

[overrides]
"storage.read_throughput_bytes_per_s" = [{reads}]
"storage.write_throughput_bytes_per_s" = [{writes}]
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the sweep file, its results store and the plot "
                        "(default: a new temporary folder)")
    p.add_argument("--workers", type=int, default=2,
                   help="Dask worker processes (default: 2)")
    return p


def write_sweep(folder: Path) -> Path:
    """The sweep file: POET and a baseline over a grid of SD read x write throughputs."""
    path = folder / "sd_speed.toml"
    path.write_text(SWEEP.format(methods=", ".join(f'"{m}"' for m in METHODS),
                                 reads=", ".join(f"{v:g}" for v in READ_BYTES_PER_S),
                                 writes=", ".join(f"{v:g}" for v in WRITE_BYTES_PER_S)))
    return path


def plot(rows: list[dict], path: Path) -> int:
    """Energy per iteration vs SD write throughput, one line per method and read
    throughput: every simulated schedule, filled where it PASSes, a cross where it FAILs;
    the number of PASS points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    colours = {"poet": "#0072B2", "capuchin": "#D55E00"}
    # POET drawn wide and hollow under the baseline's small squares: tied points stay visible
    size = {"poet": 10, "capuchin": 5}
    dashes = ("-", "--", ":")
    passed = 0
    no_schedule: list[str] = []
    for method in METHODS:
        colour = colours.get(method, "#555555")
        for i, read in enumerate(READ_BYTES_PER_S):
            points = sorted((r["overrides"]["storage.write_throughput_bytes_per_s"] / 1e3,
                             r["energy_j"] * 1e3, r["verdict"] == "PASS") for r in rows
                            if r["method"] == method and r.get("energy_j") is not None
                            and r["overrides"]["storage.read_throughput_bytes_per_s"] == read)
            no_schedule += [f"{w / 1e3:g}" for w in WRITE_BYTES_PER_S
                            if method == "poet" and w / 1e3 not in {x for x, _, _ in points}]
            if not points:
                continue
            label = method + (f", read {read / 1e3:g} kB/s" if len(READ_BYTES_PER_S) > 1
                              else "")
            ax.plot([x for x, _, _ in points], [e for _, e, _ in points], color=colour,
                    linestyle=dashes[i % len(dashes)], linewidth=2.2 if method == "poet"
                    else 1.2, label=label, zorder=2)
            for x, e, ok in points:
                passed += ok
                ax.plot([x], [e], linestyle="none", color=colour, zorder=3,
                        marker="o" if ok else "X", markersize=size.get(method, 6),
                        markerfacecolor="none" if method == "poet" and ok else colour)
    board_write = 186.5
    ax.axvline(board_write, color="#999999", linewidth=0.8, linestyle=":")
    ax.text(board_write, 0.12, " board file's card", transform=ax.get_xaxis_transform(),
            fontsize=8, color="#555555", va="bottom")
    ax.set_xscale("log")
    ax.set_xticks([w / 1e3 for w in WRITE_BYTES_PER_S],
                  [f"{w / 1e3:g}" for w in WRITE_BYTES_PER_S])
    ax.minorticks_off()
    ax.set_xlabel("SD write throughput (kB/s, log scale)"
                  + (f"; read {READ_BYTES_PER_S[0] / 1e3:g} kB/s"
                     if len(READ_BYTES_PER_S) == 1 else ""))
    ax.set_ylabel("energy per training iteration (mJ, simulated)")
    ax.set_ylim(bottom=0)
    ax.grid(True, color="#e5e5e5")
    ax.set_title("MLP 4x64 (batch 64) trained on the nRF52840: RAM 60%, deadline 1.2x",
                 fontsize=10)
    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], linestyle="none", marker="o", color="#333333",
                       markerfacecolor="none", markersize=8, label="PASS"),
                Line2D([], [], linestyle="none", marker="X", color="#333333",
                       markersize=7, label="FAIL (simulated: late)")]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    if no_schedule:
        ax.text(0.01, 0.02, "poet: no schedule meets RAM and deadline at "
                f"{', '.join(no_schedule)} kB/s write", transform=ax.transAxes,
                fontsize=8, color="#555555", va="bottom")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return passed


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="sd-sweep-"))
    out.mkdir(parents=True, exist_ok=True)

    sweep = write_sweep(out)
    results = out / "sd_speed.sqlite"
    swept = poetsim.run_sweep(sweep, results, workers=args.workers)
    print(f"sweep: {swept.total} points, {swept.done} done, {swept.failed} failed, "
          f"{swept.skipped} already stored, in {swept.wall_s:.1f} s")

    rows = read_results(results)
    print(f"{'method':<9} {'read kB/s':>9} {'write kB/s':>10} {'energy/iter':>12} "
          f"{'time/iter':>10}  verdict")
    for r in rows:
        over = r["overrides"]
        energy = "-" if r.get("energy_j") is None else format_quantity(r["energy_j"], "J")
        time_s = "-" if r.get("makespan_s") is None else format_quantity(r["makespan_s"], "s")
        verdict = r.get("verdict") or (r.get("reason") or r.get("error") or "-")[:60]
        print(f"{r['method']:<9} {over['storage.read_throughput_bytes_per_s'] / 1e3:>9g} "
              f"{over['storage.write_throughput_bytes_per_s'] / 1e3:>10g} {energy:>12} "
              f"{time_s:>10}  {verdict}")

    png = out / "energy_vs_sd_speed.png"
    passed = plot(rows, png)
    print(f"plot: {png} ({passed} PASS points)")
    return 0 if swept.failed == 0 and passed else 1


if __name__ == "__main__":
    sys.exit(main())
