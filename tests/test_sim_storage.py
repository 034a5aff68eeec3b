"""Transfer phases, storage states, wake-up and auto-sleep (poetsim.sim.storage)."""

from __future__ import annotations

import pytest
from conftest import make_board, paper_request
from test_sim_support import PAGE_BOTH, PAGE_R, hand

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


# ----------------------------------------------------------------------------- write busy


def _busy_board(busy=None, **kwargs):
    from poetsim.boards import WriteBusy

    busy = busy or WriteBusy(median_s=0.004, p99_s=0.004, block_stall_probability=0.0)
    return make_board(write_busy=busy, **kwargs)


def _without_seed(report) -> dict:
    out = report.as_dict()
    out.pop("seed")
    return out


def test_nominal_run_ignores_the_distribution_and_a_board_without_one_ignores_the_seed(
        residual):
    plain, busy = make_board(), _busy_board()
    schedule = hand(residual, *PAGE_BOTH)
    nominal = simulate(residual, plain, schedule)
    assert simulate(residual, busy, schedule) == nominal  # no seed: nominal
    seeded = simulate(residual, plain, schedule, seed=7)  # no distribution: nominal
    assert seeded.seed == 7 and seeded.write_busy_s == 0.0
    assert _without_seed(seeded) == _without_seed(nominal)


@pytest.mark.parametrize("busy_power_w", [None, 0.3])
def test_a_constant_busy_adds_exactly_its_time_and_energy_per_write(residual, busy_power_w):
    """No DMA: the CPU polls through each busy, so every page-out (one 512 B command
    here) lengthens the run by the busy time, at storage busy power + CPU mover power."""
    from poetsim.boards import WriteBusy

    busy = WriteBusy(median_s=0.004, p99_s=0.004, block_stall_probability=0.0,
                     power_w=busy_power_w)
    schedule = hand(residual, *PAGE_BOTH)  # two page-outs
    nominal = simulate(residual, make_board(dma_channels=0), schedule)
    board = _busy_board(busy, dma_channels=0)
    report = simulate(residual, board, schedule, seed=3)
    assert report.write_busy_s == pytest.approx(2 * 0.004, rel=1e-12)
    assert report.makespan_s - nominal.makespan_s == pytest.approx(2 * 0.004, rel=1e-9)
    storage_w = busy_power_w if busy_power_w is not None else 0.2  # else write_power_w
    cpu_w = board.cpu.active_power_w
    assert report.energy_j - nominal.energy_j == pytest.approx(2 * 0.004 * (storage_w + cpu_w),
                                                               rel=1e-9)
    assert report.energy_by_state_j["storage.busy"] == pytest.approx(2 * 0.004 * storage_w)
    assert report.residency_s["storage"]["busy"] == pytest.approx(2 * 0.004)


def test_a_certain_stall_adds_its_length_to_every_command(residual):
    from poetsim.boards import WriteBusy

    busy = WriteBusy(median_s=1e-4, p99_s=1e-4, block_stall_probability=1.0,
                     stall_min_s=0.05, stall_max_s=0.05)
    schedule = hand(residual, *PAGE_BOTH)
    nominal = simulate(residual, make_board(dma_channels=0), schedule)
    report = simulate(residual, _busy_board(busy, dma_channels=0), schedule, seed=0)
    assert report.makespan_s - nominal.makespan_s == pytest.approx(2 * 0.0501, rel=1e-9)


def test_busy_holds_the_device_against_the_next_command(residual):
    """Two DMA channels, queue depth 1: the second write is served only after the first
    one's busy ends."""
    from poetsim.boards import WriteBusy

    busy = WriteBusy(median_s=0.01, p99_s=0.01, block_stall_probability=0.0)
    board = _busy_board(busy, dma_channels=2)
    report = simulate(residual, board, hand(residual, *PAGE_BOTH), seed=1)
    first, second = [t for t in report.transfers if t.kind == "page_out"]
    assert first.ended_s - first.service_s == pytest.approx(3.024e-3 + 0.01)
    assert second.service_s >= first.ended_s


def test_same_seed_same_report_other_seed_other_numbers(residual):
    from poetsim.boards import WriteBusy

    board = _busy_board(WriteBusy(median_s=1e-3, p99_s=2e-2, block_stall_probability=0.3,
                                  stall_min_s=0.01, stall_max_s=0.2))
    schedule = hand(residual, *PAGE_BOTH)
    runs = [simulate(residual, board, schedule, seed=seed) for seed in (11, 11, 12)]
    assert runs[0] == runs[1]
    assert runs[0].as_dict() == runs[1].as_dict()
    assert runs[0].write_busy_s != runs[2].write_busy_s
    assert runs[0].energy_j != runs[2].energy_j


def test_write_commands_follow_the_transfer_formula():
    from poetsim.sim.storage import write_commands

    board = make_board()  # 512 B blocks, 4096 B commands
    assert write_commands(board, 16) == [1]
    assert write_commands(board, 4096) == [8]
    assert write_commands(board, 4097 + 4096) == [8, 8, 1]
    assert write_commands(board, 0) == []
    assert write_commands(make_board("paper"), 10_000) == [20]  # one command per tensor


def test_draws_use_a_fixed_stream_whatever_the_parameters():
    """Three draws per command in a fixed order: changing a parameter never shifts the
    numbers a later command sees, and the body follows the log-normal."""
    import numpy as np

    from poetsim.boards import WriteBusy
    from poetsim.sim.storage import draw_write_busy

    body = WriteBusy(median_s=1e-3, p99_s=1e-2, block_stall_probability=0.0)
    stalls = WriteBusy(median_s=1e-3, p99_s=1e-2, block_stall_probability=1.0,
                       stall_min_s=0.1, stall_max_s=0.2)
    commands = [[1]] * 20_000
    a = np.array(draw_write_busy(body, np.random.default_rng(5), commands))
    b = np.array(draw_write_busy(stalls, np.random.default_rng(5), commands))
    assert np.all((b - a >= 0.1 - 1e-12) & (b - a <= 0.2 + 1e-12))  # same body draws
    assert np.median(a) == pytest.approx(1e-3, rel=0.05)
    assert np.quantile(a, 0.99) == pytest.approx(1e-2, rel=0.15)
    rng = np.random.default_rng(5)
    draw_write_busy(body, rng, [[1, 1], [1]])
    assert rng.bit_generator.state == _advanced(5, 3 * 3)


def _advanced(seed: int, draws: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    rng.standard_normal(draws // 3)
    rng.random(draws // 3)
    rng.random(draws // 3)
    return rng.bit_generator.state


def test_the_stall_chance_grows_with_the_blocks_of_a_command():
    import numpy as np

    from poetsim.boards import WriteBusy
    from poetsim.sim.storage import draw_write_busy

    busy = WriteBusy(median_s=1e-7, p99_s=1e-7, block_stall_probability=0.01,
                     stall_min_s=1.0, stall_max_s=1.0)
    n = 20_000
    small = np.array(draw_write_busy(busy, np.random.default_rng(1), [[1]] * n))
    large = np.array(draw_write_busy(busy, np.random.default_rng(1), [[100]] * n))
    assert (small > 0.5).mean() == pytest.approx(0.01, abs=0.003)
    assert (large > 0.5).mean() == pytest.approx(1 - 0.99 ** 100, abs=0.02)


def test_bad_seed_is_an_input_error(residual):
    from poetsim.errors import InputError

    for seed in (-1, 1.5, True, "3"):
        with pytest.raises(InputError, match="seed"):
            simulate(residual, make_board(), hand(residual, *PAGE_BOTH), seed=seed)


# ----------------------------------------------------------------------------- wear

#: PAGE_R with r kept in RAM: nothing is written.
NO_PAGING = tuple(line for line in PAGE_R
                  if line not in ("page_out r 2", "free r 4", "page_in r 8"))

def test_worn_bytes_round_every_write_command_up_to_whole_pages():
    from poetsim.sim.storage import worn_bytes

    storage = make_board(wear_page_bytes=1024).storage  # 512 B blocks, 4096 B commands
    assert worn_bytes(storage, 0) == 0
    assert worn_bytes(storage, 512) == 1024
    assert worn_bytes(storage, 4096) == 4096
    # 8704 device bytes: commands of 4096, 4096 and 512 -> 4096 + 4096 + 1024
    assert worn_bytes(storage, 2 * 4096 + 512) == 9216
    # a page larger than a command: every command wears a whole page
    assert worn_bytes(make_board(wear_page_bytes=16384).storage, 2 * 4096 + 512) == 3 * 16384
    # no page given: the block is the unit, so the device bytes themselves
    assert worn_bytes(make_board().storage, 2 * 4096 + 512) == 2 * 4096 + 512


def test_sd_lifetime_is_the_endurance_over_the_page_rounded_writes(residual):
    """x (32 B) and r (16 B) are written once each: one 512 B command apiece, each wearing
    a whole 16 KiB page, so 32 KiB per iteration against 1 TB."""
    board = make_board(wear_page_bytes=16384, endurance_bytes_written=10**12)
    report = simulate(residual, board, hand(residual, *PAGE_BOTH))
    assert report.bytes_written == 2 * 512
    assert report.storage_wear_bytes == 2 * 16384
    assert report.storage_lifetime_iterations == 10**12 / 32768 == 30_517_578.125
    data = report.as_dict()
    assert data["storage_wear_bytes"] == 32768
    assert data["storage_lifetime_iterations"] == 30_517_578.125
    assert report.flash_lifetime_iterations is None


def test_no_endurance_or_no_writes_means_no_lifetime(residual):
    # wear is counted, but the board gives no rating
    report = simulate(residual, make_board(), hand(residual, *PAGE_BOTH))
    assert report.storage_wear_bytes == 1024 and report.storage_lifetime_iterations is None
    # a rating, but nothing is written
    board = make_board(wear_page_bytes=16384, endurance_bytes_written=10**12)
    report = simulate(residual, board, hand(residual, *NO_PAGING))
    assert report.storage_wear_bytes == 0 and report.storage_lifetime_iterations is None


def test_wear_accounting_changes_no_time_and_no_energy(residual):
    schedule = hand(residual, *PAGE_BOTH)
    plain = simulate(residual, make_board(), schedule)
    rated = simulate(residual, make_board(wear_page_bytes=16384,
                                          endurance_bytes_written=10**12), schedule)
    assert rated.storage_wear_bytes != plain.storage_wear_bytes
    strip = ("storage_wear_bytes", "storage_lifetime_iterations")
    same = {k: v for k, v in plain.as_dict().items() if k not in strip}
    assert same == {k: v for k, v in rated.as_dict().items() if k not in strip}


def test_paper_profile_wears_one_command_per_tensor(residual):
    """POET's accounting has one command per tensor of the tensor's own bytes."""
    board = make_board("paper", block_bytes=1, max_command_bytes=1 << 30,
                       wear_page_bytes=64, endurance_bytes_written=10**9)
    report = simulate(residual, board, hand(residual, *PAGE_BOTH))
    assert report.storage_wear_bytes == 64 + 64  # 32 B and 16 B, a 64 B page each
    assert report.storage_lifetime_iterations == pytest.approx(10**9 / 128)


@pytest.mark.parametrize("name", ["nrf52840", "esp32s3"])
def test_sd_boards_report_a_lifetime_from_their_card(residual, name):
    from poetsim.boards import get_board

    board = get_board(name)
    report = simulate(residual, board, hand(residual, *PAGE_BOTH))
    assert report.storage_wear_bytes == 2 * 16384
    assert report.storage_lifetime_iterations == pytest.approx(31.91e12 / 32768)
