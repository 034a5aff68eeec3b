"""Does a board calibrated on one workload predict another? (issue #29 item 5)

No public per-op measurements of these models on these boards exist, so the truth is a
synthetic one with known per-class compute factors (``[cpu.efficiency]``): depthwise kernels
well below the nominal rate and dense ones above it, as measured stacks behave (the
nominal rate itself is the board file's one figure). Each model's per-op forward times on
the truth board, moved by up to 2% (seeded), calibrate the nominal board
(:func:`poetsim.boards.calibrate.calibrate`); the calibrated board then predicts every
model's whole iteration, against the truth, beside the nominal board's prediction (the one
figure for every op kind). Writes ``benchmarks/results/calibration.md``::

    python -m benchmarks.experiments.calibration
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import attrs

from poetsim.boards import get_board
from poetsim.boards.calibrate import calibrate
from poetsim.boards.spec import CpuEfficiency
from poetsim.costs import op_costs
from poetsim.graph.ops import Phase
from poetsim.zoo import build_model

OUT = Path(__file__).resolve().parents[1] / "results" / "calibration.md"
BOARD = "nrf52840"
#: The synthetic truth: per-class factors of the board's int8 and fp32 rates.
TRUTH = {"conv_int8": 0.8, "depthwise_int8": 0.4, "dense_int8": 1.3,
         "elementwise_int8": 0.9, "pool_int8": 1.0,
         "conv_fp32": 0.85, "depthwise_fp32": 0.45, "dense_fp32": 1.2,
         "elementwise_fp32": 0.9, "norm_fp32": 0.7, "pool_fp32": 1.0}
#: (label, model, options)
WORKLOADS = (
    ("DS-CNN S, last 3 layers (fp32)", "ds_cnn_s", {"train_last": 3}),
    ("MobileNetV2 w0.35, sparse (int8)", "mobilenet_v2_w035",
     {"head": 0, "int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 10}),
    ("MCUNet-in1, sparse (int8)", "mcunet_in1",
     {"int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 102}),
)
NOISE = 0.02


def _op_times(graph, board, path: Path, seed: int, backward: bool) -> Path:
    costs = op_costs(graph, board)
    rng = random.Random(seed)
    rows = ["op,time_s"]
    timed = (Phase.FORWARD, Phase.BACKWARD) if backward else (Phase.FORWARD,)
    for k, op in enumerate(graph.ops):
        if op.phase in timed and op.flops and op.kind != "input":
            moved = float(costs.compute_time_s[k]) * (1 + rng.uniform(-NOISE, NOISE))
            rows.append(f"{op.name},{moved!r}")
    path.write_text("\n".join(rows) + "\n")
    return path


def table() -> str:
    started = time.perf_counter()
    nominal = get_board(BOARD)
    truth = attrs.evolve(nominal, cpu=attrs.evolve(nominal.cpu,
                                                   efficiency=CpuEfficiency(**TRUTH)))
    graphs = {label: build_model(model, **options) for label, model, options in WORKLOADS}
    true_s = {label: float(op_costs(g, truth).compute_time_s.sum())
              for label, g in graphs.items()}
    nominal_s = {label: float(op_costs(g, nominal).compute_time_s.sum())
                 for label, g in graphs.items()}
    lines = ["# Calibrated on one workload, predicting another",
             "", "Made by `python -m benchmarks.experiments.calibration`. Board "
             f"`{BOARD}`; a synthetic truth with per-class compute factors (no public "
             "per-op measurements of these models on this board exist): "
             + ", ".join(f"{k} {v:g}" for k, v in TRUTH.items())
             + f". Each row calibrates the nominal board on one model's per-op times on the "
             f"truth, of its forward ops or of every op (moved by up to {NOISE:.0%}, "
             "seeded), and predicts every "
             "model's whole training iteration (forward and backward compute). Error: "
             "predicted / truth - 1. The nominal board is the board file's one rate per "
             "width for every op kind.", "",
             "| calibrated on | " + " | ".join(f"predicts {label}" for label in graphs)
             + " |", "|---|" + "---|" * len(graphs),
             "| nominal board (no calibration) | " + " | ".join(
                 f"{nominal_s[label] / true_s[label] - 1:+.1%}" for label in graphs) + " |"]
    fits = []
    with tempfile.TemporaryDirectory() as folder:
        runs = [(label, backward) for backward in (False, True) for label, _, _ in WORKLOADS]
        for seed, (label, backward) in enumerate(runs):
            path = _op_times(graphs[label], truth, Path(folder) / "times.csv", seed, backward)
            board, calibration = calibrate(nominal, graph=graphs[label], op_times=path)
            cells = []
            for other, graph in graphs.items():
                predicted = float(op_costs(graph, board).compute_time_s.sum())
                cells.append(f"{predicted / true_s[other] - 1:+.1%}")
            what = f"{label}, {'every op' if backward else 'forward ops'}"
            lines.append(f"| {what} | " + " | ".join(cells) + " |")
            fits.append(f"- {what}: " + ", ".join(
                f"{f.key.removeprefix('cpu.efficiency.')} {f.value:.3f} "
                f"(truth {TRUTH[f.key.removeprefix('cpu.efficiency.')]:g})"
                for f in calibration.fitted) + f"; op times given back with a median error "
                f"of {calibration.median_error('op '):.2%}.")
    lines += ["", "What each calibration fitted (a class is fitted only where some timed op "
              "is of it: an int8 model's backward ops compute at fp32, so its forward ops "
              "alone leave those classes nominal, and its iteration, mostly backward, "
              "stays off by as much; timing the backward ops too fits them):", "", *fits,
              "",
              "The one-rate assumption: the board file's figures are the POET paper's "
              "measured nRF52840 fp32 rate (10% of the FPU's peak) and, for int8, the same "
              "share of the SIMD peak (an estimate); the nominal row shows what pricing "
              "every op kind at them costs against kernels that differ by kind.", "",
              f"Wall time: {time.perf_counter() - started:.0f} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(table(), encoding="utf-8")
    print(OUT.read_text(encoding="utf-8"))
