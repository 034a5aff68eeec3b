"""Training that physically fits a microcontroller: model x MCU board (issue #15).

For each training job (a zoo model with the options that make it an MCU job: a training
mode, int8, in-place update) and each MCU board of ``device_models/``, the request is
the whole usable RAM and a 2x deadline under physical accounting: frozen weights read in
place from flash when they fit it, weights streamed from storage when neither flash nor
RAM holds them, the frozen front in row bands when one op alone would not fit (as the
CLI does), then POET (effort 100) and the simulator's physical verdict.
A cell gives the energy and time per iteration, the peak RAM and the storage lifetime,
or the one-line reason no schedule fits. ResNet-18 (CIFAR) full fine-tuning, the POET
paper's claim, is also run under the paper's accounting (activations only) on the
nRF52840, beside its physical verdict. Writes ``benchmarks/results/mcu_training.md``::

    python -m benchmarks.experiments.mcu_training
"""

from __future__ import annotations

import time
from pathlib import Path

from poetsim.boards import get_board
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.methods import SolverSettings
from poetsim.request import Request, resolve_request
from poetsim.runs import Outcome, run_and_judge
from poetsim.units import format_bytes, format_quantity
from poetsim.verdict import judge_corners
from poetsim.zoo import build_model

OUT = Path(__file__).resolve().parents[1] / "results" / "mcu_training.md"

#: The MCU boards (those with a memory-mapped flash section).
BOARDS = ("nrf52840", "nrf52840_qspi_nor", "rp2040", "esp32s3", "stm32h743", "mkr1000")

#: (label, model, options) of each training job, trained with SGD.
JOBS: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("DS-CNN-S, last 3 layers (the demo)", "ds_cnn_s", {"train_last": 3}),
    ("DS-CNN-S int8, last 3 layers, in place", "ds_cnn_s",
     {"int8": 1, "train_last": 3, "inplace_update": 1}),
    ("MCUNet-in1 int8, Flowers-102, 100KB sparse update, in place (Lin et al.)", "mcunet_in1",
     {"int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 102}),
    ("MobileNetV2 w0.35 int8, headless, 99kb sparse update, in place (Lin et al.)",
     "mobilenet_v2_w035",
     {"head": 0, "int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 10}),
    ("MLP 14x14 int8, last layer", "mlp",
     {"input_dim": 196, "layers": 3, "width": 32, "int8": 1, "train_last": 1}),
    ("ResNet-18 CIFAR, full fine-tuning (the paper's claim)", "resnet18_cifar", {}),
    ("ResNet-18 CIFAR int8, last layer", "resnet18_cifar", {"int8": 1, "train_last": 1}),
    ("ResNet-18 CIFAR, full fine-tuning, int8 with int8 gradients, in place", "resnet18_cifar",
     {"int8": 1, "gradient_bytes": 1, "inplace_update": 1}),
)

#: Jobs trained with another optimizer: (label, model, options, optimizer).
OPTIMIZER_JOBS: tuple[tuple[str, str, dict[str, int], str], ...] = (
    ("the same with momentum (its state on storage beside the weights)", "resnet18_cifar",
     {"int8": 1, "gradient_bytes": 1, "inplace_update": 1}, "momentum"),
    ("the same with Adam (two state copies)", "resnet18_cifar",
     {"int8": 1, "gradient_bytes": 1, "inplace_update": 1}, "adam"),
)

SETTINGS = SolverSettings(effort=100, time_limit_s=120)


def request_for(model: str, options: dict[str, int], board: str,
                accounting: str = "physical", optimizer: str = "sgd") -> Request:
    return resolve_request(build_model(model, **options), get_board(board), ram="board",
                           deadline="2x", accounting=accounting, optimizer=optimizer)


def _cell(request: Request, outcome: Outcome) -> str:
    if not outcome.feasible:
        return f"no: {outcome.why_not or outcome.reason}"
    report = outcome.report
    assert report is not None and outcome.energy_j is not None
    life = report.storage_lifetime_iterations
    bands = request.graph.metadata.get("row_bands")
    streamed = request.streamed_weight_bytes
    return (f"**PASS** {format_quantity(outcome.energy_j, 'J')}, "
            f"{format_quantity(report.makespan_s, 's')}, peak "
            f"{format_bytes(report.peak_ram_bytes)} in an arena of "
            f"{format_bytes(report.arena_bytes)}"
            + (f", {bands} row bands" if bands else "")
            + (f", {format_bytes(streamed)} of weights"
               + (" and optimizer state" if WeightsOnStorage.of(request.graph).state_copies
                  else "")
               + " streamed" if streamed else "")
            + (f", storage lifetime {life:.3g} iterations" if life is not None
               else ", no storage writes")
            + _slow_corner(request, outcome))


def _slow_corner(request: Request, outcome: Outcome) -> str:
    """The verdict at the board's slow corner, when its file gives ranges."""
    if not request.board.ranges or outcome.schedule is None:
        return ""
    slow = judge_corners(request, outcome.schedule, outcome.verdict)[1].verdict
    if slow.passed:
        return (f"; slow corner: PASS, {format_quantity(slow.energy_j, 'J')}, "
                f"{format_quantity(slow.makespan_s, 's')}")
    return f"; slow corner: **FAIL**, {slow.violations[0]}"


def table() -> str:
    lines = ["# Training that physically fits a microcontroller", "",
             "Made by `python -m benchmarks.experiments.mcu_training`. Whole usable RAM, "
             "deadline 2x the plain compute time, physical accounting (everything "
             "resident within the board's RAM; frozen weights read in place from flash "
             "when they fit it; weights streamed from the storage device when neither "
             "flash nor RAM holds them; gradient sums in ops of their own, then the frozen "
             "front in row bands, when one op alone would not fit), SGD unless the job "
             "says otherwise, POET at effort 100, each schedule simulated and judged, "
             "every buffer laid out in one static arena (planned again with fewer bytes "
             "when the layout does not fit). A cell: energy and time per iteration, peak "
             "RAM in all and the arena that holds it, storage lifetime, or why no "
             "schedule fits; on a board whose file gives measured ranges (the nRF52840's "
             "SD card, the RP2040's SD writes), the verdict at its slow corner too (every "
             "range at the end that costs time; `poetsim simulate --corners`).", "",
             "| job | " + " | ".join(BOARDS) + " |",
             "|---|" + "---|" * len(BOARDS)]
    started = time.perf_counter()
    jobs = [(*job, "sgd") for job in JOBS] + list(OPTIMIZER_JOBS)
    for label, model, options, optimizer in jobs:
        cells = []
        for board in BOARDS:
            request = request_for(model, options, board, optimizer=optimizer)
            cells.append(_cell(request, run_and_judge(request, "poet", SETTINGS)))
        lines.append(f"| {label} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    paper = request_for("resnet18_cifar", {}, "nrf52840", accounting="paper")
    outcome = run_and_judge(paper, "poet", SETTINGS)
    physical = outcome.verdict
    lines += ["", "ResNet-18 (CIFAR) full fine-tuning on the nRF52840 under the paper's "
              "accounting (the budget covers activations only, parameters and gradients "
              "left out, as POET's mu_RAM): POET's schedule "
              + (f"spends {format_quantity(outcome.energy_j, 'J')} and "
                 f"{format_quantity(outcome.makespan_s, 's')} per iteration, with a peak of "
                 f"{format_bytes(outcome.peak_total_bytes)} in all against the board's "
                 f"{format_bytes(get_board('nrf52840').ram.usable_bytes)}: physically "
                 + ("fits" if physical is not None and physical.fits_board_ram
                    else "does not fit the board")
                 if outcome.energy_j is not None and outcome.peak_total_bytes is not None
                 else f"does not exist ({outcome.why_not or outcome.reason})") + ".",
              "", f"Wall time: {time.perf_counter() - started:.0f} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(table(), encoding="utf-8")
    print(OUT.read_text(encoding="utf-8"))
