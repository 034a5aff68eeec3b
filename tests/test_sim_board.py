"""The ideal variant of a board (poetsim.sim.board)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_board

from poetsim.boards import ContentionModel, Profile, builtin_board_names, get_board
from poetsim.costs import op_costs
from poetsim.sim import ideal_board


@pytest.mark.parametrize("name", builtin_board_names())
def test_ideal_boards_are_valid_and_keep_every_cost(name, residual):
    board = get_board(name)
    ideal = ideal_board(board)
    assert ideal.name == f"{name}_ideal"
    assert ideal.cpu.idle_power_w == ideal.cpu.sleep_power_w == 0.0
    assert ideal.cpu.wakeup_latency_s == ideal.cpu.wakeup_energy_j == 0.0
    assert ideal.storage.idle_power_w == ideal.storage.sleep_power_w == 0.0
    assert ideal.storage.wakeup_latency_s == ideal.storage.wakeup_energy_j == 0.0
    assert ideal.dma.idle_power_w == 0.0
    assert ideal.bus.contention_model is ContentionModel.NONE
    assert ideal.bus.compute_slowdown == 1.0
    # Active powers, throughputs and latencies are untouched: the per-op costs are equal,
    # but for the data input op's energy, which loses the CPU's wait for the DMA.
    ideal_costs, costs = op_costs(residual, ideal), op_costs(residual, board)
    for field in ("compute_time_s", "pagein_time_s", "pagein_energy_j",
                  "pageout_time_s", "pageout_energy_j"):
        assert np.array_equal(getattr(ideal_costs, field), getattr(costs, field)), field
    x = residual.index("x")
    physical = board.profile is Profile.PHYSICAL and board.dma.present
    wait_j = board.cpu.idle_power_w * costs.compute_time_s[x] if physical else 0.0
    assert ideal_costs.compute_energy_j[x] == pytest.approx(costs.compute_energy_j[x] - wait_j)
    rest = np.arange(len(residual)) != x
    assert np.array_equal(ideal_costs.compute_energy_j[rest], costs.compute_energy_j[rest])


def test_ideal_board_is_idempotent_apart_from_the_name():
    once = ideal_board(make_board())
    twice = ideal_board(once)
    assert twice.cpu == once.cpu and twice.storage == once.storage and twice.bus == once.bus
