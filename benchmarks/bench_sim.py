"""Simulator benchmarks (pytest-benchmark). Not part of the test suite; run on demand::

    .venv/bin/python -m pytest benchmarks/bench_sim.py --benchmark-only -q

* ``test_events_per_second``: a paging-heavy iteration (MobileNetV2, the greedy paging-only
  plan at the smallest RAM it manages, on the rpi4 board with its fair-share bus).
  Throughput is SimPy events over the wall time of the whole :func:`~poetsim.sim.simulate`
  call (validation, planning and the report included) and over the event loop alone; the
  target is 200,000 events/s. The event count is asserted, as SimPy's own benchmarks do, so
  that a change in event volume is noticed: update it deliberately when the model changes.
* ``test_resnet18_iteration``: one training iteration of ResNet-18 (CIFAR) on the default
  board with the optimizer's schedule at 50 % RAM (of activations: the paper's accounting),
  simulated in under 0.5 s.
* ``test_arena_plan``: laying out every buffer of a schedule in one static arena
  (:func:`~poetsim.schedule.arena.plan_arena`) with no fit goal, so the local search runs
  until the byte peak or its counted moves: DTR's ResNet-50 schedule and a 2,001-op
  chain's plain schedule (targets: under 2 s for a 1,000-op schedule), and a MobileNetV2
  w0.35 schedule paging on the STM32F746 (TTE's recipe), the case the search exists for.
"""

from __future__ import annotations

import pytest

from poetsim.boards import DEFAULT_BOARD, get_board
from poetsim.costs import op_costs
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.optimizer import greedy_plan, lower_plan, solve
from poetsim.request import resolve_request
from poetsim.sim import simulate
from poetsim.zoo import build_model

#: SimPy events of the paging-heavy workload (see the module docstring).
EXPECTED_EVENTS = 912
TARGET_EVENTS_PER_S = 200_000


@pytest.fixture(scope="module")
def paging_heavy():
    graph = build_model("mobilenet_v2")
    board = get_board("rpi4")
    costs = op_costs(graph, board)
    smallest, _ = minimum_ram_bytes(graph)
    plan = greedy_plan(graph, costs, smallest, remat=False, paging=True)
    assert plan is not None
    return graph, board, lower_plan(graph, plan), costs


def test_events_per_second(benchmark, paging_heavy):
    graph, board, schedule, costs = paging_heavy
    benchmark.group = "simulation"
    report = benchmark(simulate, graph, board, schedule, costs=costs)
    assert report.events == EXPECTED_EVENTS
    assert not report.violations and report.page_ins == 61
    loop_s = min(simulate(graph, board, schedule, costs=costs).wall_s for _ in range(20))
    whole_rate = report.events / benchmark.stats.stats.min
    loop_rate = report.events / loop_s
    benchmark.extra_info.update(events=report.events, steps=len(schedule),
                                events_per_s=round(whole_rate),
                                event_loop_events_per_s=round(loop_rate),
                                target_events_per_s=TARGET_EVENTS_PER_S)
    print(f"\n{report.events} events, {len(schedule)} steps: {whole_rate:,.0f} events/s "
          f"(whole simulate call, best round), {loop_rate:,.0f} events/s (event loop only); "
          f"target {TARGET_EVENTS_PER_S:,}")


def test_resnet18_iteration(benchmark):
    graph = build_model("resnet18_cifar")
    board = get_board(DEFAULT_BOARD)
    request = resolve_request(graph, board, ram="50%", accounting="paper")
    result = solve(request, time_limit_s=10)
    assert result.schedule is not None, result.message
    benchmark.group = "simulation"
    report = benchmark(simulate, graph, board, result.schedule,
                       budget_bytes=request.activation_budget_bytes, costs=request.costs)
    assert not report.violations, [v.message for v in report.violations]
    # Event volume: one event per op, at most a dozen per transfer (trigger timer, channel
    # wake-up, storage wake-up, command phase, data flow and its completion, the running
    # op's timer re-armed when the flow starts and ends plus an interrupt, the CPU's wait
    # and wake-up), and the processes' own start and end.
    transfers = report.page_ins + report.page_outs
    assert report.events <= report.computes + 12 * transfers + 8, report.events
    assert benchmark.stats.stats.mean < 0.5
    benchmark.extra_info.update(events=report.events, steps=len(result.schedule),
                                transfers=transfers, status=result.status.value,
                                simulated_makespan_s=report.makespan_s,
                                simulated_energy_j=report.energy_j)
    print(f"\nresnet18_cifar on {board.name}, 50% RAM ({result.status.value}): "
          f"{len(result.schedule)} steps, {report.events} events, "
          f"mean {benchmark.stats.stats.mean * 1e3:.2f} ms per simulated iteration")


def _arena_case(name: str):
    from poetsim.baselines import dtr
    from poetsim.schedule import plain_schedule

    if name == "resnet50_dtr":
        graph = build_model("resnet50")
        request = resolve_request(graph, get_board("rpi4"), ram="50%", accounting="paper")
        result = dtr(graph, request.board, request.costs, request.activation_budget_bytes)
        assert result.schedule is not None
        return graph, result.schedule
    if name == "mlp_2001_plain":
        graph = build_model("mlp", layers=500)
        return graph, plain_schedule(graph)
    graph = build_model("mobilenet_v2_w035", head=0, int8=1, sparse_update=1,
                        inplace_update=1, classes=10, row_bands=4)
    request = resolve_request(graph, get_board("stm32f746"), ram="144384",
                              accounting="physical")
    plan = greedy_plan(request.graph, request.costs, request.activation_budget_bytes,
                       remat=True, paging=True)
    assert plan is not None
    return request.graph, lower_plan(request.graph, plan)


@pytest.mark.parametrize("name", ["resnet50_dtr", "mlp_2001_plain", "mbv2_w035_stm32f746"])
def test_arena_plan(benchmark, name):
    from poetsim.schedule.arena import plan_arena
    from poetsim.schedule.replay import Replay

    graph, schedule = _arena_case(name)
    benchmark.group = "arena"

    def plan():  # a fresh replay each round: plans are memoized per schedule
        return plan_arena(Replay(graph, list(schedule.steps)).run())

    arena = benchmark.pedantic(plan, rounds=3, iterations=1)
    benchmark.extra_info.update(ops=len(graph), steps=len(schedule),
                                arena_bytes=arena.arena_bytes, peak_bytes=arena.peak_bytes,
                                order=arena.order)
    print(f"\n{name}: {len(graph)} ops, {len(schedule)} steps: arena {arena.arena_bytes:,} B, "
          f"byte peak {arena.peak_bytes:,} B ({arena.order}); "
          f"min {benchmark.stats.stats.min:.3f} s")
