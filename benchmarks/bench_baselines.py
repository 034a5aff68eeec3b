"""The fast baselines against a deadline on long chains (pytest-benchmark); run on demand:

    ./run bench benchmarks/bench_baselines.py      # or: .venv/bin/python -m pytest \
        benchmarks/bench_baselines.py --benchmark-only -p no:cacheprovider

Each of :data:`poetsim.methods.FAST_BASELINES` (POET's warm starts) runs once on the MLP
chain of the zoo (16 wide) with 2,500 and 12,500 layers (10,001 and 50,001 ops), on the
Raspberry Pi 4 at 50 % RAM and a 1.5x deadline, with ``stop_at`` two seconds after its
start, as :func:`poetsim.methods.seeded_solve` gives its warm starts 20 % of the time limit.
The graph and its costs are made beforehand and not timed. A row per run: method, ops,
status, seconds, overshoot past ``stop_at``, predicted energy. The run fails when a
baseline raises or gives an invalid schedule, and when one overshoots its deadline by more
than :data:`MAX_OVERSHOOT_S` (finishing a 50,000-op schedule, checking and predicting it,
takes about a second by itself; see ``FINISH_COST`` in :mod:`poetsim.baselines.base`).
Set POETSIM_BENCH_STOP_S to change the two seconds.
"""

from __future__ import annotations

import os
import time

import pytest

from poetsim.boards import get_board
from poetsim.methods import FAST_BASELINES
from poetsim.request import resolve_request
from poetsim.schedule import check_schedule
from poetsim.zoo import build_model

STOP_S = float(os.environ.get("POETSIM_BENCH_STOP_S", "2"))
MAX_OVERSHOOT_S = 1.0
#: MLP layers -> ops: 4 per layer (linear, ReLU and their backward ops) and the loss.
LAYERS = {10_001: 2_500, 50_001: 12_500}


@pytest.fixture(scope="module", params=sorted(LAYERS), ids=lambda ops: f"{ops}ops")
def chain(request):
    graph = build_model("mlp", layers=LAYERS[request.param], width=16)
    assert len(graph) == request.param
    return resolve_request(graph, get_board("rpi4"), ram="50%", deadline="1.5x")


@pytest.mark.parametrize("method", FAST_BASELINES, ids=lambda m: m.__name__)
def test_warm_start_against_a_deadline(benchmark, table_row, chain, method):
    benchmark.group = f"baselines, {len(chain.graph)} ops, stop at +{STOP_S:g} s"
    stops: list[float] = []

    def setup():
        stops.append(time.perf_counter() + STOP_S)
        return (chain.graph, chain.board, chain.costs, chain.activation_budget_bytes), {
            "deadline_s": chain.planning_deadline_s, "stop_at": stops[-1]}

    result = benchmark.pedantic(method, setup=setup, rounds=1, iterations=1)
    ended = time.perf_counter()
    seconds = benchmark.stats.stats.max
    overshoot = max(0.0, ended - stops[-1])
    if result.schedule is not None:
        check = check_schedule(chain.graph, result.schedule,
                               budget_bytes=chain.activation_budget_bytes)
        assert check.valid, check.violation
    benchmark.extra_info.update(status=result.status, overshoot_s=round(overshoot, 3),
                                energy_j=result.energy_j, reason=result.reason)
    table_row(method=method.__name__, ops=len(chain.graph), status=result.status,
              seconds=seconds, overshoot_s=overshoot,
              energy_j=result.energy_j if result.energy_j is not None else "-")
    assert overshoot <= MAX_OVERSHOOT_S, (
        f"{method.__name__} returned {overshoot:.2f} s after its stop_at")
