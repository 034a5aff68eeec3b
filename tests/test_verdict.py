"""poetsim.verdict: every rule of PASS, in both accountings."""

from __future__ import annotations

import attrs
import pytest
from conftest import make_board

from poetsim.errors import PoetsimError
from poetsim.graph.graph import resident_memory
from poetsim.graph.memory import plain_peak
from poetsim.request import resolve_request
from poetsim.schedule import plain_schedule
from poetsim.sim.report import SimViolation
from poetsim.verdict import FAIL, PASS, check_on_board, judge


def _board_with_ram(total_bytes: int):
    board = make_board()
    return attrs.evolve(board, ram=attrs.evolve(board.ram, bytes=total_bytes,
                                                reserved_bytes=0))


def _need(graph) -> int:
    return plain_peak(graph).bytes + resident_memory(graph).total_bytes


def test_pass_when_everything_fits(residual):
    request = resolve_request(residual, make_board(), ram="board", deadline="2x")
    report, verdict = check_on_board(request, plain_schedule(residual))
    assert verdict.passed and verdict.label == PASS and not verdict.violations
    assert verdict.fits_board_ram and verdict.within_budget and verdict.deadline_met
    assert verdict.peak_total_bytes == report.peak_ram_bytes == _need(residual)
    doc = verdict.as_dict()
    assert doc["verdict"] == "PASS" and doc["accounting"] == "physical"
    assert {"fits_board_ram", "peak_total_bytes", "board_ram_bytes", "violations"} <= set(doc)


def test_physical_fail_when_the_whole_state_is_over_the_board(residual):
    board = _board_with_ram(_need(residual) - 1)
    request = resolve_request(residual, board, ram="100%", accounting="paper")
    _, paper = check_on_board(request, plain_schedule(residual))
    # the paper's accounting: activations fit their budget; the truth is still told
    assert paper.passed and not paper.fits_board_ram
    assert any("physically" in note for note in paper.notes)
    assert "does not fit the board" in paper.line()
    _, physical = check_on_board(resolve_request(residual, board, ram="100%"),
                                 plain_schedule(residual))
    assert not physical.passed and physical.label == FAIL and not physical.fits_board_ram
    assert "over the board's usable RAM" in physical.violations[0]


def test_physical_fail_over_the_users_budget_within_the_board(residual):
    resident = resident_memory(residual).total_bytes
    request = resolve_request(residual, make_board(), ram=_need(residual) - 1)
    _, verdict = check_on_board(request, plain_schedule(residual))
    assert not verdict.passed and verdict.fits_board_ram and not verdict.within_budget
    assert "over the budget" in verdict.violations[0]
    assert verdict.budget_bytes == _need(residual) - 1
    assert verdict.peak_total_bytes - verdict.peak_activation_bytes == resident


def test_paper_fail_over_the_activation_budget(residual):
    request = resolve_request(residual, make_board(), ram="50%", accounting="paper")
    _, verdict = check_on_board(request, plain_schedule(residual))
    assert not verdict.passed and verdict.fits_board_ram and not verdict.within_budget
    assert "activation budget" in verdict.violations[0]


def test_the_users_deadline_decides(residual):
    request = resolve_request(residual, make_board(), deadline="0.5x")
    _, verdict = check_on_board(request, plain_schedule(residual))
    assert not verdict.passed and verdict.deadline_met is False
    assert "exceeds the deadline" in verdict.violations[0] and "(0.5x)" in verdict.violations[0]


@pytest.mark.parametrize("accounting", ["physical", "paper"])
def test_storage_capacity_and_flash_endurance_decide_in_both_accountings(residual, accounting):
    request = resolve_request(residual, make_board(), accounting=accounting)
    report, verdict = check_on_board(request, plain_schedule(residual))
    assert verdict.passed
    full = attrs.evolve(report, peak_storage_bytes=report.storage_capacity_bytes + 1)
    assert "over its capacity" in judge(request, full).violations[0]
    worn = attrs.evolve(report, flash_endurance_cycles=10, flash_max_erase_count=11)
    assert "endurance" in judge(request, worn).violations[0]
    other = attrs.evolve(report, violations=(SimViolation("bus_error", "the bus broke"),))
    assert judge(request, other).violations == ("the bus broke",)
    # what the simulator recorded against its own limits is judged here, not copied
    noise = attrs.evolve(report, violations=(SimViolation("ram_overflow", "over"),))
    assert judge(request, noise).passed


def test_a_simulation_with_another_resident_state_is_refused(residual):
    request = resolve_request(residual, make_board())
    report, _ = check_on_board(request, plain_schedule(residual))
    with pytest.raises(PoetsimError, match="resident"):
        judge(request, attrs.evolve(report, resident_bytes=0))


def test_energy_does_not_decide_but_a_gap_to_the_model_is_noted(residual):
    request = resolve_request(residual, make_board())
    report, verdict = check_on_board(request, plain_schedule(residual))
    assert verdict.energy_j == report.energy_j and verdict.model_energy_j > 0
    off = judge(request, report, predicted_energy_j=report.energy_j / 1.5)
    assert off.passed and any("+50.0% off the optimizer's op-list model" in n for n in off.notes)
    assert not any("optimizer's model" in n
                   for n in judge(request, report, predicted_energy_j=report.energy_j).notes)


# ----------------------------------------------------------------------------- flash


def test_frozen_weights_in_flash_solve_and_simulate_with_less_resident_ram():
    """ds_cnn_s fine-tuning its last two layers on the nRF52840: the frozen weights are
    read in place from flash, the resident RAM drops by exactly their bytes, and the
    solver's schedule still PASSes on the board."""
    from poetsim.boards import get_board
    from poetsim.methods import SolverSettings, seeded_solve
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=2)
    frozen = graph.param_bytes - graph.trained_param_bytes
    board = get_board("nrf52840")
    before = resolve_request(graph, attrs.evolve(board, flash=None), ram="board")
    request = resolve_request(graph, board, ram="board")
    assert request.resident_bytes == before.resident_bytes - frozen
    assert request.flash_weight_bytes == frozen > 0
    result = seeded_solve(request, SolverSettings(time_limit_s=20))
    assert result.schedule is not None
    report, verdict = check_on_board(request, result.schedule)
    assert verdict.passed, verdict.line()
    assert report.resident_bytes == verdict.resident_bytes == request.resident_bytes
    doc = verdict.as_dict()
    assert doc["flash_weight_bytes"] == frozen
    assert doc["board_flash_bytes"] == board.flash.usable_bytes
    assert "frozen weights in flash" in verdict.line()


def test_frozen_weights_placed_in_more_flash_than_the_board_has_fail():
    """The verdict judges the request's placement (never re-makes it)."""
    from poetsim.boards import get_board
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=2)
    board = get_board("nrf52840")
    request = resolve_request(graph, board, ram="board")
    report, verdict = check_on_board(request, plain_schedule(graph))
    assert not any("flash" in v for v in verdict.violations)
    over = attrs.evolve(request, flash_weight_bytes=board.flash.usable_bytes + 1)
    verdict = judge(over, report)
    assert not verdict.passed
    [reason] = [v for v in verdict.violations if "flash" in v]
    assert "\n" not in reason and "over the board's usable flash" in reason
    none = attrs.evolve(over, board=attrs.evolve(board, flash=None))
    assert any("has no memory-mapped flash" in v for v in judge(none, report).violations)
    assert judge(request, report).as_dict()["flash_weight_bytes"] == request.flash_weight_bytes


def test_paper_accounting_keeps_every_weight_in_the_resident_state():
    from poetsim.boards import get_board
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=2)
    request = resolve_request(graph, get_board("nrf52840"), ram="board", accounting="paper")
    _, verdict = check_on_board(request, plain_schedule(graph))
    assert verdict.resident_bytes == resident_memory(graph).total_bytes
    assert verdict.flash_weight_bytes == 0
