"""Optimizer speed (issue targets), measured with pytest-benchmark; run on demand:

    ./run bench -k solve            # or: .venv/bin/python -m pytest benchmarks/bench_solve.py

The solves are the CLI's: POET seeded with the fast baselines
(:func:`poetsim.methods.seeded_solve`). Budgets are 70%, 50% and 35% of the plain
schedule's activation peak under the paper's accounting (activations only, POET's mu_RAM),
deadlines 1.5x and 1.2x the plain compute time, on the nRF52840 and Raspberry Pi 4 boards.
Targets: a first feasible schedule in under 10 s for every zoo model; proven optimal or
within 1% gap in under 60 s for the MLP, VGG16 (CIFAR) and ResNet-18 (CIFAR), and in under
600 s for BERT-base (``-k bert_gap``). Each row prints model, ops, binaries after
reduction, status, objective, bound, gap and seconds. Set POETSIM_BENCH_LIMIT_S to change
the 60 s. The searches run under the CLI's default deterministic effort; set
POETSIM_BENCH_EFFORT to another effort, or to 0 to let the time limit alone bound them.
"""

from __future__ import annotations

import os
import time

import pytest

from poetsim.boards import get_board
from poetsim.methods import DEFAULT_EFFORT, SolverSettings, seeded_solve
from poetsim.request import resolve_request
from poetsim.zoo import build_model, model_names

BOARDS = ["nrf52840", "rpi4"]
BUDGETS = ["70%", "50%", "35%"]
DEADLINES = ["1.5x", "1.2x"]
LIMIT_S = float(os.environ.get("POETSIM_BENCH_LIMIT_S", "60"))
BERT_LIMIT_S = float(os.environ.get("POETSIM_BENCH_BERT_LIMIT_S", "600"))
EFFORT = int(os.environ.get("POETSIM_BENCH_EFFORT", str(DEFAULT_EFFORT)))


def solve(graph, board, *, ram, deadline, time_limit_s, gap_limit=0.0):
    """POET seeded with the fast baselines, on a request under the paper's accounting."""
    request = resolve_request(graph, board, ram=ram, deadline=deadline, accounting="paper")
    return seeded_solve(request, SolverSettings(time_limit_s=time_limit_s, gap_limit=gap_limit,
                                                effort=EFFORT))


def _row(result, graph, seconds):
    return dict(model=graph.name, board=result.request.board.name, ram=result.request.ram,
                deadline_s=result.deadline_s or 0.0, ops=len(graph), binaries=result.binaries,
                status=result.status.value,
                objective_j=result.objective_j if result.objective_j is not None else float("nan"),
                bound_j=result.bound_j if result.bound_j is not None else float("nan"),
                gap=result.gap if result.gap is not None else float("nan"),
                seconds=seconds, warm_start=result.warm_start or "-")


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", model_names())
def test_first_feasible(benchmark, table_row, model, board):
    """Time until a schedule is in hand (greedy + model build + a 1 s solve)."""
    graph = build_model(model)
    target = get_board(board)

    def run():
        start = time.perf_counter()
        result = solve(graph, target, ram="50%", deadline="1.5x", time_limit_s=1.0)
        return result, time.perf_counter() - start

    result, seconds = benchmark.pedantic(run, rounds=1, iterations=1)
    table_row(**_row(result, graph, seconds))
    assert result.status.value in ("optimal", "feasible", "infeasible")


@pytest.mark.parametrize("deadline", DEADLINES)
@pytest.mark.parametrize("ram", BUDGETS)
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", ["mlp", "vgg16_cifar", "resnet18_cifar"])
def test_gap_within_limit(benchmark, table_row, model, board, ram, deadline):
    _gap_case(benchmark, table_row, model, board, ram, deadline, LIMIT_S)


@pytest.mark.parametrize("deadline", DEADLINES)
@pytest.mark.parametrize("ram", BUDGETS)
@pytest.mark.parametrize("board", BOARDS)
def test_bert_gap_within_limit(benchmark, table_row, board, ram, deadline):
    """BERT-base, whose target is 600 s (POETSIM_BENCH_BERT_LIMIT_S changes it)."""
    _gap_case(benchmark, table_row, "bert", board, ram, deadline, BERT_LIMIT_S)


def _gap_case(benchmark, table_row, model, board, ram, deadline, limit_s):
    graph = build_model(model)
    target = get_board(board)

    def run():
        start = time.perf_counter()
        result = solve(graph, target, ram=ram, deadline=deadline, time_limit_s=limit_s,
                       gap_limit=0.01)
        return result, time.perf_counter() - start

    result, seconds = benchmark.pedantic(run, rounds=1, iterations=1)
    table_row(**_row(result, graph, seconds))
