"""The least RAM in which Lin et al.'s MCU training jobs PASS on their own board (issue #28).

For MCUNet-in1 and MobileNetV2-w0.35 with the recipes of Lin et al.'s Tiny Training Engine
(int8, sparse update, in-place update; the same jobs as ``mcu_training.py``) on the
``stm32f746`` (the STM32F746G-DISCO of their measurements), with no deadline and with
deadlines of 1.2x and 2x the plain compute time: the least RAM budget found (everything
resident: trained weights, the arena of activations) at which POET's schedule PASSes
on the simulated board, every buffer laid out in one static arena within the budget
(:func:`least_pass`: a walk down, not a proof that nothing lower passes).
The frozen front runs in row bands when that lowers the floor (the band count with the
least working set of one op); in-place depthwise convolutions and residual additions are
the zoo's int8 kernels. Each row gives the least passing budget found, the arena and
byte peak of that PASS, and its simulated time and energy per iteration, beside TTE's
peak measured on the board. Writes
``benchmarks/results/least_ram.md``::

    python -m benchmarks.experiments.least_ram
"""

from __future__ import annotations

import time
from pathlib import Path

from poetsim.boards import get_board
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.methods import SolverSettings
from poetsim.request import Request, resolve_request
from poetsim.runs import Outcome, run_and_judge
from poetsim.units import format_bytes, format_quantity
from poetsim.zoo import build_model


def _bytes(nbytes: int) -> str:
    return f"{nbytes:,} B ({format_bytes(nbytes)})"


OUT = Path(__file__).resolve().parents[1] / "results" / "least_ram.md"
BOARD = "stm32f746"
#: (label, model, options, TTE's measured peak in bytes: mcu-training.md, from
#: mit-han-lab/tiny-training's figure "latency_peakmem_comparison", sparse update)
JOBS = (
    ("MCUNet-in1 int8, Flowers-102, 100KB sparse update, in place", "mcunet_in1",
     {"int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 102}, 173 * 1024),
    ("MobileNetV2 w0.35 int8, headless, 99kb sparse update, in place", "mobilenet_v2_w035",
     {"head": 0, "int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 10},
     141 * 1024),
)
DEADLINES = (None, "1.2x", "2x")
BANDS = (0, 2, 3, 4)
STEP_BYTES = 1024
BISECT_BYTES = 4096
TRIES = 3
SETTINGS = SolverSettings(effort=100, time_limit_s=60)


def _request(model: str, options: dict[str, int], bands: int, ram: int,
             deadline: str | None) -> Request:
    graph = build_model(model, **options, **({"row_bands": bands} if bands else {}))
    return resolve_request(graph, get_board(BOARD), ram=str(ram), deadline=deadline,
                           accounting="physical")


def _floor(model: str, options: dict[str, int]) -> tuple[int, int, int, str]:
    """The band count whose graph has the least floor (resident state plus the largest
    working set of one op), that floor, the resident state and the op that sets it."""
    best: tuple[int, int, int, str] | None = None
    for bands in BANDS:
        graph = build_model(model, **options, **({"row_bands": bands} if bands else {}))
        usable = get_board(BOARD).ram.usable_bytes
        request = resolve_request(graph, get_board(BOARD), ram=str(usable),
                                  accounting="physical")
        need, op = minimum_ram_bytes(request.graph)
        floor = request.resident_bytes + need
        if best is None or floor < best[1]:
            best = (bands, floor, request.resident_bytes, op)
    assert best is not None
    return best


def least_pass(model: str, options: dict[str, int], bands: int, floor: int,
               deadline: str | None) -> tuple[int, Outcome] | None:
    """The least budget found at which the job PASSes, and that outcome; None when it does
    not PASS even with the whole usable RAM.

    A PASS is not monotone in the budget (another budget gives another plan and another
    layout), so this is a search, not a proof: it bisects between the floor and the least
    PASS until they are ``BISECT_BYTES`` apart, then walks down: from each PASS it tries
    ``STEP_BYTES`` below its arena, and after a FAIL the budgets halfway to the floor and
    to the last PASS, giving up after ``TRIES`` FAILs in a row.
    """
    def passes(ram: int) -> Outcome | None:
        outcome = run_and_judge(_request(model, options, bands, ram, deadline), "poet",
                                SETTINGS)
        return outcome if outcome.verdict is not None and outcome.verdict.passed else None

    budget = get_board(BOARD).ram.usable_bytes
    best = passes(budget)
    if best is None:
        return None
    low = floor - 1  # no schedule below the floor
    while best.report is not None and min(budget, best.report.arena_bytes) - low > BISECT_BYTES:
        middle = (low + min(budget, best.report.arena_bytes)) // 2
        outcome = passes(middle)
        if outcome is None:
            low = middle
        else:
            budget, best = middle, outcome
    failed, probe = 0, 0
    while failed < TRIES:
        assert best.report is not None
        top = min(budget, best.report.arena_bytes)
        probe = top - STEP_BYTES if failed == 0 else (floor + probe) // 2
        if probe < floor:
            break
        outcome = passes(probe)
        if outcome is None:
            failed += 1
            continue
        failed, budget, best = 0, probe, outcome
    return budget, best


def table() -> str:
    board = get_board(BOARD)
    lines = ["# The least RAM of a PASS: Lin et al.'s MCU training jobs on the STM32F746",
             "", "Made by `python -m benchmarks.experiments.least_ram`. Board `stm32f746` "
             f"({format_bytes(board.ram.usable_bytes)} usable), physical accounting (trained "
             "weights resident, frozen weights read in place from flash), SGD with the update "
             "applied in place, POET at effort 100, each schedule simulated and judged with "
             "every buffer at an offset of one static arena. Budget: the least RAM in all "
             f"found (bisecting between the floor and a PASS to {BISECT_BYTES} B, then walking "
             f"down: {STEP_BYTES} B below each PASS's arena, after a FAIL halfway "
             f"to the floor, {TRIES} FAILs in a row end it) at which the schedule "
             "PASSes; the arena of that "
             "PASS holds every buffer (resident state included) and the byte peak is its "
             "lower bound. TTE: the peak Lin et al. measured on the board (sparse update, "
             "operator reordering; mcu-training.md).", "",
             "| job | deadline | row bands | floor | least PASS budget | arena | byte peak "
             "| time / iteration | energy / iteration | TTE measured | vs TTE |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    started = time.perf_counter()
    floors = []
    for label, model, options, tte in JOBS:
        bands, floor, resident, op = _floor(model, options)
        floors.append(f"- {label}: {_bytes(floor)} = {_bytes(resident)} resident (the "
                      f"trained weights) + {_bytes(floor - resident)}, the working set of "
                      f"`{op}` (its inputs, output and workspace).")
        for deadline in DEADLINES:
            found = least_pass(model, options, bands, floor, deadline)
            words = deadline or "none"
            if found is None:
                lines.append(f"| {label} | {words} | {bands or '-'} | {_bytes(floor)} "
                             f"| no PASS within {format_bytes(board.ram.usable_bytes)} "
                             f"| | | | | {_bytes(tte)} | |")
                continue
            budget, outcome = found
            report = outcome.report
            assert report is not None and outcome.energy_j is not None
            lines.append(
                f"| {label} | {words} | {bands or '-'} | {_bytes(floor)} "
                f"| {_bytes(budget)} | {_bytes(report.arena_bytes)} "
                f"| {_bytes(outcome.peak_total_bytes or 0)} "
                f"| {format_quantity(report.makespan_s, 's')} "
                f"| {format_quantity(outcome.energy_j, 'J')} | {_bytes(tte)} "
                f"| {100 * (report.arena_bytes - tte) / tte:+.1f}% |")
    lines += ["", "Floor: the resident state plus the largest working set of one op (its "
              "inputs, output and workspace; an in-place op's output in its input's "
              "buffer), below which no schedule exists:", "", *floors, "",
              "What the comparison assumes (sources: mit-han-lab/tinyengine and "
              "mit-han-lab/tiny-training, read for this table):", "",
              "- Each arena above holds the trained weights (resident). TinyEngine's memory "
              "scheduler reports a peak without the trainable parameters (their term is "
              "left out of `GeneralMemoryScheduler`'s peak); if Lin et al.'s 173 / 141 KB "
              "are that report, the like-for-like poetsim figure is the arena minus the "
              "resident state given under Floor.",
              "- The in-place update holds one output channel's weight gradient at a time "
              "(fp32); TinyEngine's fused kernels hold a tile of 16 output x 4 input "
              "channels (`INPLACE_SGD`).",
              "- A fused convolution's backward reads its int8 output for the activation's "
              "mask; TinyEngine keeps a 1-bit mask per element (`USE_BIT_MASK`), which "
              "poetsim does not model: its figures are the larger.",
              "- Activation gradients are fp32, as in TTE's compiled backward graph.", "",
              f"Wall time: {time.perf_counter() - started:.0f} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(table(), encoding="utf-8")
    print(OUT.read_text(encoding="utf-8"))
