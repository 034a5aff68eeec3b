"""Which zoo model physically fits which board: the whole training state against RAM.

For every zoo model (default options: every parameter trained) and every built-in board:
the resident state (parameters + gradients of the trained ones, SGD) and the smallest
activation working set of any schedule (the largest single op's inputs, output and
workspace), against the board's usable RAM. A cell is physically possible only when their
sum fits; otherwise every method's schedule FAILs the physical verdict, whatever the
paper's accounting (activations only) says. The MCU models are also listed under the
training modes that shrink the state (last layer only, bias-only, Lin et al.'s sparse
update, int8, in-place update). Each cell is the request poetsim makes of the board
(:func:`poetsim.request.resolve_request`, which reshapes a model one op of which does not fit):
frozen weights read in place from the board's flash when they fit it, weights streamed
from storage when neither flash nor RAM holds them, the frozen front in row bands when
one op alone would not fit. Writes
``benchmarks/results/physical_fit.md``; runs in seconds::

    python -m benchmarks.experiments.physical_fit
"""

from __future__ import annotations

from pathlib import Path

from poetsim.boards import get_board
from poetsim.boards.registry import builtin_board_names
from poetsim.graph.graph import resident_memory
from poetsim.graph.memory import minimum_ram_bytes, plain_peak
from poetsim.request import resolve_request
from poetsim.units import format_bytes
from poetsim.zoo import build_model, model_names

OUT = Path(__file__).resolve().parents[1] / "results" / "physical_fit.md"


#: Training-mode rows: (model, options) beside every model's full training.
MODE_ROWS: tuple[tuple[str, dict[str, int]], ...] = (
    ("mcunet_in1", {"sparse_update": 1}),
    ("mcunet_in1", {"bias_only": 1}),
    ("mcunet_in1", {"train_last": 1}),
    ("mobilenet_v2_w035", {"bias_only": 1}),
    ("mobilenet_v2_w035", {"train_last": 1}),
    ("ds_cnn_s", {"bias_only": 1}),
    ("ds_cnn_s", {"train_last": 1}),
    ("ds_cnn_m", {"bias_only": 1}),
    ("mlp", {"train_last": 1}),
    ("mcunet_in1", {"int8": 1, "sparse_update": 1, "inplace_update": 1, "classes": 102}),
    ("mobilenet_v2_w035", {"head": 0, "int8": 1, "sparse_update": 1, "inplace_update": 1,
                           "classes": 10}),
    ("resnet18_cifar", {"int8": 1, "train_last": 1}),
    ("resnet18_cifar", {"int8": 1, "gradient_bytes": 1, "inplace_update": 1}),
)


def _label(name: str, options: dict[str, int]) -> str:
    return name + "".join(f" {k}={v}" for k, v in options.items())


def table() -> str:
    boards = [get_board(name) for name in builtin_board_names()]
    lines = ["# Which zoo model physically fits which board", "",
             "Made by `python -m benchmarks.experiments.physical_fit`. Each cell: the smallest "
             "RAM any schedule needs in all (the resident state + the largest single op's "
             "working set) against the board's usable RAM: **fits** or the factor it is "
             "over. `plain` marks where even the plain schedule (no remat, no paging) fits. "
             "The resident state is what the board keeps in RAM: frozen weights are read in "
             "place from its flash when they fit it; `streamed` marks weights that live on "
             "the storage device and are streamed by the ops that read them (neither flash "
             "nor RAM holds them); `bands` marks a frozen front run in row bands because "
             "one op alone would not fit. Under the physical verdict "
             "(poetsim's default) a cell that does not fit FAILs for every method; the "
             "paper's accounting leaves the resident state out and so passes MCU points "
             "that cannot run. Rows with options train only part of the model (`--set "
             "...`). The first columns are the graph's own figures (everything in RAM).", "",
             "| model | resident | min. activations | plain peak | "
             + " | ".join(f"{b.name} ({format_bytes(b.ram.usable_bytes)})" for b in boards)
             + " |", "|---" * (4 + len(boards)) + "|"]
    rows = [(name, {}) for name in model_names()] + list(MODE_ROWS)
    for name, options in rows:
        graph = build_model(name, **options)
        resident = resident_memory(graph).total_bytes
        smallest = minimum_ram_bytes(graph)[0]
        plain = plain_peak(graph).bytes
        cells = []
        for board in boards:
            request = resolve_request(graph, board, ram="board")
            usable = board.ram.usable_bytes
            need = request.resident_bytes + minimum_ram_bytes(request.graph)[0]
            bands = (", bands" if request.graph.metadata.get("row_bands") else "") + (
                ", streamed" if request.streamed_weight_bytes else "")
            if need > usable:
                cells.append(f"{need / usable:.3g}x over")
            elif request.resident_bytes + plain_peak(request.graph).bytes <= usable:
                cells.append("fits, plain" + bands)
            else:
                cells.append("fits" + bands)
        lines.append(f"| {_label(name, options)} | {format_bytes(resident)} | "
                     f"{format_bytes(smallest)} | {format_bytes(plain)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    OUT.write_text(table())
    print(OUT)


if __name__ == "__main__":
    main()
