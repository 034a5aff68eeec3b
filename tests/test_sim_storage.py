"""Transfer phases, storage states, wake-up and auto-sleep (poetsim.sim.storage)."""

from __future__ import annotations

import pytest
from conftest import make_board, paper_request
from test_sim_support import PAGE_R, hand

from poetsim.costs import transfer_cost
from poetsim.sim import simulate
from poetsim.sim.storage import transfer_timing
from poetsim.verdict import check_on_board


@pytest.mark.parametrize("write", [False, True])
@pytest.mark.parametrize("nbytes", [1, 512, 513, 4096, 10_000, 1 << 20])
@pytest.mark.parametrize("kind", ["physical", "paper", "nor", "no_dma"])
def test_phases_add_up_to_the_cost_model(kind, nbytes, write):
    if kind == "nor":
        board = make_board(storage_kind="qspi_nor", block_bytes=256, max_command_bytes=256)
    elif kind == "no_dma":
        board = make_board(dma_channels=0)
    else:
        board = make_board(kind)
    cost = transfer_cost(board, nbytes, write=write)
    t = transfer_timing(board, nbytes, write=write, time_s=cost.time_s, energy_j=cost.energy_j)
    assert t.command_s + t.erase_s + t.data_s == pytest.approx(cost.time_s, rel=1e-12)
    assert (t.storage_power_w + t.mover_power_w) * cost.time_s == pytest.approx(cost.energy_j)
    if kind == "paper":
        assert t.device_bytes == nbytes and t.mover_power_w == 0.0
    else:
        assert t.device_bytes % board.storage.block_bytes == 0
        assert t.data_s == pytest.approx(t.device_bytes / (
            board.storage.write_throughput_bytes_per_s if write
            else board.storage.read_throughput_bytes_per_s))
    assert (t.erase_s > 0) == (kind == "nor" and write)


def test_storage_and_mover_shares_follow_the_formula():
    board = make_board()  # write 0.2 W, DMA 0.002 W
    cost = transfer_cost(board, 512, write=True)
    t = transfer_timing(board, 512, write=True, time_s=cost.time_s, energy_j=cost.energy_j)
    assert t.storage_power_w == pytest.approx(0.2)
    assert t.mover_power_w == pytest.approx(0.002)
    no_dma = make_board(dma_channels=0)  # the CPU (0.01 W) moves the bytes
    cost = transfer_cost(no_dma, 512, write=False)
    t = transfer_timing(no_dma, 512, write=False, time_s=cost.time_s, energy_j=cost.energy_j)
    assert t.mover_power_w == pytest.approx(0.01)


def test_measured_time_scales_every_phase():
    board = make_board()
    cost = transfer_cost(board, 512, write=False)
    t = transfer_timing(board, 512, write=False, time_s=2 * cost.time_s, energy_j=cost.energy_j)
    assert t.command_s + t.data_s == pytest.approx(2 * cost.time_s)
    assert t.data_rate_bytes_per_s == pytest.approx(board.storage.read_throughput_bytes_per_s / 2)
    assert (t.storage_power_w + t.mover_power_w) * t.time_s == pytest.approx(cost.energy_j)


def test_zero_bytes_cost_nothing():
    t = transfer_timing(make_board(), 0, write=True, time_s=0.0, energy_j=0.0)
    assert t.time_s == t.data_s == t.command_s == 0.0 and t.storage_power_w == 0.0


def test_storage_starts_asleep_and_wakes_for_the_first_command(residual):
    board = make_board()
    report = simulate(residual, board, hand(residual, *PAGE_R))
    write = report.transfers[0]
    assert write.kind == "page_out"
    assert write.service_s - write.started_s == pytest.approx(board.storage.wakeup_latency_s)
    assert report.wakeups["storage"] == 1
    assert report.residency_s["storage"]["wake"] == pytest.approx(board.storage.wakeup_latency_s)
    assert report.energy_by_state_j["storage.wake"] == pytest.approx(
        board.storage.wakeup_energy_j)


def test_storage_wakes_again_after_auto_sleep(residual):
    # Without DMA the CPU computes between the write and the read (about 70 us):
    # longer than a 10 us auto-sleep timeout, shorter than the default 5 ms.
    schedule = hand(residual, *PAGE_R)
    stays_awake = simulate(residual, make_board(dma_channels=0), schedule)
    sleeps = simulate(residual, make_board(dma_channels=0, auto_sleep_timeout_s=1e-5), schedule)
    assert stays_awake.wakeups["storage"] == 1
    assert sleeps.wakeups["storage"] == 2
    # asleep between the write and the read, and again after the read before the run ends
    assert sleeps.transitions["storage"]["idle->sleep"] == 2
    assert sleeps.transitions["storage"]["sleep->wake"] == 2
    # The second wake-up delays the read by the wake-up latency.
    assert sleeps.makespan_s == pytest.approx(stays_awake.makespan_s + 1e-3)
    assert sleeps.energy_by_kind_j["wakeup"] == pytest.approx(2 * 1e-4)


def test_storage_falls_asleep_at_the_end_of_the_run(residual):
    board = make_board(auto_sleep_timeout_s=1e-5)
    report = simulate(residual, board, hand(residual, *PAGE_R))
    # The read follows the write at once; after it the CPU computes three more ops (136 us)
    # before the run ends: 10 us idle, then asleep.
    storage = report.residency_s["storage"]
    assert storage["idle"] == pytest.approx(1e-5)
    assert report.transitions["storage"]["idle->sleep"] == 1
    last_read_end = report.transfers[-1].ended_s
    assert storage["sleep"] == pytest.approx(
        report.transfers[0].started_s + (report.makespan_s - last_read_end - 1e-5))


def test_storage_space_over_capacity_is_a_violation_and_the_run_goes_on(residual):
    board = make_board(block_bytes=16, capacity_bytes=40)
    schedule = hand(residual, "compute x 0", "page_out x 0", "compute fc1 1", "page_out fc1 1",
                    *PAGE_R[2:])
    report = simulate(residual, board, schedule)
    assert report.violations
    full = [v for v in report.violations if v.rule == "storage_full"]
    assert [(v.step, v.op) for v in full] == [(3, "fc1"), (6, "r")]
    assert "over its capacity of 40 B" in full[0].message
    assert report.peak_storage_bytes == 64
    assert report.page_outs == 3 and report.bytes_paged_out == 64
    assert any("capacity" in reason for reason in [v.message for v in report.violations])
    # and the verdict fails on it
    _, verdict = check_on_board(paper_request(residual, board), schedule)
    assert not verdict.passed and verdict.label == "FAIL"
    assert any("capacity of 40 B" in v for v in verdict.violations)
