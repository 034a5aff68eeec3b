"""Shared fixtures: small hand-checked graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from poetsim.graph import ForwardGraph, TrainingGraph

if TYPE_CHECKING:
    from poetsim.boards import Board


def residual_graph(training=None) -> TrainingGraph:
    """x -> fc1 -> r -> fc2 -> s = fc2 + r -> loss: a diamond, 4-element tensors, trained
    as ``training`` (:class:`~poetsim.graph.training.Training`; default: everything).

    Forward sizes (float32): x 32 B, fc1 / r / fc2 / s 16 B each, loss 4 B.
    """
    fg = ForwardGraph("residual", training=training)
    x = fg.input("x", 8)
    a = fg.op("fc1", "linear", [x], output_elements=4, flops=64, param_count=36)
    r = fg.op("r", "relu", [a], output_elements=4, flops=4)
    b = fg.op("fc2", "linear", [r], output_elements=4, flops=32, param_count=20)
    s = fg.op("s", "add", [b, r], output_elements=4, flops=4)
    fg.loss("loss", s)
    return fg.build()


@pytest.fixture
def residual() -> TrainingGraph:
    return residual_graph()


def make_board(profile: str = "physical", *, dma_channels: int = 1, storage_kind: str = "sd_spi",
               **storage_overrides) -> Board:
    """A small, round-numbered board for cost and simulator tests."""
    from poetsim.boards import Board, Bus, Cpu, Dma, Ram, Storage

    storage = dict(
        kind=storage_kind, bus_clock_hz=16e6, bus_width_bits=1, double_data_rate=False,
        read_throughput_bytes_per_s=1e6, write_throughput_bytes_per_s=0.5e6,
        read_latency_s=1e-3, write_latency_s=2e-3, block_bytes=512, max_command_bytes=4096,
        read_power_w=0.1, write_power_w=0.2, idle_power_w=0.001, sleep_power_w=0.0001,
        wakeup_latency_s=1e-3, wakeup_energy_j=1e-4, auto_sleep_timeout_s=5e-3,
        capacity_bytes=1 << 30,
    )
    if storage_kind == "qspi_nor":
        storage.update(erase_sector_bytes=4096, erase_time_s=0.05, erase_power_w=0.08,
                       endurance_cycles=100_000)
    storage.update(storage_overrides)
    return Board(
        name="testboard", title="test board", profile=profile,
        cpu=Cpu(core="test", clock_hz=64e6, flops_per_s=1e6, active_power_w=0.01,
                idle_power_w=0.005, sleep_power_w=1e-5, wakeup_latency_s=1e-5,
                wakeup_energy_j=1e-7, flops_per_j=1e8 if profile == "paper" else None),
        ram=Ram(bytes=1 << 20, reserved_bytes=1 << 14, bandwidth_bytes_per_s=1e7),
        dma=Dma(channels=dma_channels, active_power_w=0.002, idle_power_w=0.0),
        storage=Storage(**storage),
        bus=Bus(bandwidth_bytes_per_s=1e8, contention_model="fair_share", compute_slowdown=1.1),
    )


def op_list_energy(schedule, costs) -> float:
    """Energy of an op list from its steps alone, independent of the optimizer's accounting
    (a COMPUTE without its READ_WEIGHTS runs on held weights, or reads none)."""
    from poetsim.schedule import Action

    per_action = {Action.COMPUTE: costs.compute_energy_j, Action.PAGE_IN: costs.pagein_energy_j,
                  Action.PAGE_OUT: costs.pageout_energy_j}
    total, before = 0.0, None
    for step in schedule.steps:
        if step.action is Action.COMPUTE and before != (Action.READ_WEIGHTS, step.op):
            total += float(costs.held_compute_energy_j[step.op])  # no read: held, or none
        elif step.action in per_action:
            total += float(per_action[step.action][step.op])
        before = (step.action, step.op)
    return total


def paper_request(graph: TrainingGraph, board: Board, ram: str | int = "100%",
                  deadline: str | float | None = None, **options):
    """A request under the paper's accounting: ``ram`` is the activation budget (POET's
    mu_RAM), the semantics most optimizer and simulator tests are written in."""
    from poetsim.request import resolve_request

    return resolve_request(graph, board, ram=ram, deadline=deadline, accounting="paper",
                           **options)


def dtr_lifted_resnet18():
    """ResNet-18 (CIFAR) on the nRF52840 at 50% (paper accounting): the graph, its costs,
    the budget, DTR's op list and that list lifted into a stage plan (which, kept as DTR's
    mid-stage evictions are, needs more than the budget)."""
    from poetsim.baselines import dtr
    from poetsim.boards import get_board
    from poetsim.costs import op_costs
    from poetsim.optimizer.lowering import plan_from_schedule
    from poetsim.zoo import build_model

    graph, board = build_model("resnet18_cifar"), get_board("nrf52840")
    costs = op_costs(graph, board)
    budget = paper_request(graph, board, "50%").activation_budget_bytes
    listed = dtr(graph, board, costs, budget)
    return graph, costs, budget, listed, plan_from_schedule(graph, listed.schedule)
