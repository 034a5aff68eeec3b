"""NOR flash wear counters and log-structured placement (poetsim.sim.flash)."""

from __future__ import annotations

import pytest
from conftest import make_board
from test_sim_support import PAGE_R, hand

from poetsim.sim import simulate
from poetsim.sim.flash import FlashWear


def test_each_write_erases_the_next_sectors():
    wear = FlashWear(capacity_bytes=4 * 4096, sector_bytes=4096, endurance_cycles=10)
    assert wear.write(256) == (0,)
    assert wear.write(4097) == (1, 2)
    assert wear.erases == 3 and wear.max_erase_count == 1 and wear.sectors_used == 3


def test_the_log_wraps_around_and_wears_sectors_evenly():
    wear = FlashWear(capacity_bytes=2 * 4096, sector_bytes=4096, endurance_cycles=10)
    for _ in range(5):
        wear.write(100)
    assert wear.counts == {0: 3, 1: 2}
    assert wear.max_erase_count == 3
    # 5 erases per iteration over 2 sectors: 10 * 2 / 5 iterations to the endurance
    assert wear.lifetime_iterations() == pytest.approx(4.0)


def test_nothing_written_means_no_wear():
    wear = FlashWear(4096, 4096, 100)
    assert wear.write(0) == () and wear.lifetime_iterations() is None and wear.max_erase_count == 0


def nor_board(**overrides):
    return make_board(storage_kind="qspi_nor", block_bytes=256, max_command_bytes=256,
                      **overrides)


def test_a_page_out_to_nor_increments_the_wear_counter(residual):
    report = simulate(residual, nor_board(), hand(residual, *PAGE_R))
    assert report.flash_erases == 1
    assert report.flash_max_erase_count == 1
    assert report.flash_sectors_used == 1
    assert report.flash_endurance_cycles == 100_000
    sectors = (1 << 30) // 4096
    assert report.flash_lifetime_iterations == pytest.approx(100_000 * sectors)
    # The erase shows as its own storage state, for erase_time_s.
    assert report.residency_s["storage"]["erase"] == pytest.approx(0.05)


def test_rewrites_on_a_one_sector_device_hit_the_same_sector(residual):
    schedule = hand(residual, "compute x 0", "page_out x 0", "compute fc1 1", "page_out fc1 1",
                    *PAGE_R[2:])
    report = simulate(residual, nor_board(capacity_bytes=4096), schedule)
    assert report.flash_erases == 3
    assert report.flash_max_erase_count == 3
    assert report.flash_sectors_used == 1


def test_sd_cards_report_no_flash_wear(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R))
    assert report.flash_erases == 0 and report.flash_endurance_cycles is None


def test_nor_wear_answers_through_the_storage_fields_too(residual):
    """One field for every board: on NOR flash the bytes worn are the erased sectors and
    the lifetime is the flash lifetime of the most-worn sector."""
    report = simulate(residual, nor_board(), hand(residual, *PAGE_R))
    assert report.storage_wear_bytes == 4096
    assert report.storage_lifetime_iterations == report.flash_lifetime_iterations
    assert report.as_dict()["storage_lifetime_iterations"] == pytest.approx(
        100_000 * ((1 << 30) // 4096))
