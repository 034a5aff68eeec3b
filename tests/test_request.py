"""poetsim.request: the user's budget and deadline, resolved once, in both accountings."""

from __future__ import annotations

import attrs
import pytest
from conftest import make_board

from poetsim.errors import InputError
from poetsim.graph.graph import resident_memory
from poetsim.graph.memory import plain_peak
from poetsim.request import (
    BOARD_RAM,
    MAX_BUDGET_BYTES,
    Accounting,
    parse_deadline,
    parse_deadline_margin,
    request_for_schedule,
    resolve_request,
)


@pytest.fixture
def board():
    return make_board()  # 1 MiB of RAM, 16 KiB reserved


def test_paper_budget_is_activations_only(residual, board):
    peak = plain_peak(residual).bytes
    request = resolve_request(residual, board, ram="50%", accounting="paper")
    assert request.accounting is Accounting.PAPER
    assert request.activation_budget_bytes == request.budget_bytes == peak // 2
    assert request.resident_bytes == resident_memory(residual).total_bytes
    assert request.ram_limit_bytes == peak // 2 + request.resident_bytes
    assert request.infeasible_reason is None
    sized = resolve_request(residual, board, ram="1KiB", accounting="paper")
    assert sized.activation_budget_bytes == 1024


def test_physical_budget_counts_everything_resident(residual, board):
    resident = resident_memory(residual).total_bytes
    peak = plain_peak(residual).bytes
    pct = resolve_request(residual, board, ram="50%")
    assert pct.accounting is Accounting.PHYSICAL
    assert pct.activation_budget_bytes == peak // 2
    assert pct.budget_bytes == peak // 2 + resident
    sized = resolve_request(residual, board, ram=resident + 100)
    assert sized.budget_bytes == resident + 100 and sized.activation_budget_bytes == 100
    whole = resolve_request(residual, board, ram="board")
    assert whole.budget_bytes == board.ram.usable_bytes
    assert whole.activation_budget_bytes == board.ram.usable_bytes - resident


def test_the_board_caps_a_physical_budget_and_paper_ram_board_is_all_of_it(residual, board):
    usable = board.ram.usable_bytes
    resident = resident_memory(residual).total_bytes
    big = resolve_request(residual, board, ram="1GiB")
    assert big.activation_budget_bytes == usable - resident
    paper = resolve_request(residual, board, ram="board", accounting="paper")
    assert paper.activation_budget_bytes == usable


def test_a_budget_below_the_resident_state_is_infeasible_never_negative(residual, board):
    resident = resident_memory(residual).total_bytes
    request = resolve_request(residual, board, ram=resident - 1)
    assert request.activation_budget_bytes == 0
    assert "alone need" in request.infeasible_reason and "RAM budget" in request.infeasible_reason
    assert resolve_request(residual, board, ram=resident - 1,
                           accounting="paper").infeasible_reason is None


def test_deadline_in_seconds_or_a_factor(residual, board):
    request = resolve_request(residual, board, deadline="1.5x")
    assert request.deadline_s == pytest.approx(1.5 * request.plain_time_s)
    assert request.deadline == "1.5x"
    assert parse_deadline("2.5s", 1.0) == parse_deadline("2.5", 7.0) == 2.5
    assert parse_deadline(None, 1.0) is None


@pytest.mark.parametrize("ram, message", [
    ("lots", "ram = 'lots'"), ("-5%", "ram = '-5%'"), ("0%", "positive percentage"),
    ("nan%", "positive percentage"), ("2000000GiB", "plausible maximum"),
    (str(MAX_BUDGET_BYTES + 1), "plausible maximum"), ("1e30", "plausible maximum")])
def test_bad_budgets_are_one_line_errors(residual, board, ram, message):
    with pytest.raises(InputError, match=message):
        resolve_request(residual, board, ram=ram)


@pytest.mark.parametrize("deadline, message", [
    ("soon", "deadline = 'soon'"), ("0x", "must be a positive, finite time"),
    ("1e400x", "finite"), ("1e12s", "plausible maximum")])
def test_bad_deadlines_are_one_line_errors(residual, board, deadline, message):
    with pytest.raises(InputError, match=message):
        resolve_request(residual, board, deadline=deadline)


def test_bad_accounting(residual, board):
    with pytest.raises(InputError, match="accounting = 'mu'"):
        resolve_request(residual, board, accounting="mu")


def test_metadata_records_the_request(residual, board):
    meta = resolve_request(residual, board, ram="50%", deadline="2x").metadata()
    assert meta["accounting"] == "physical" and meta["ram"] == "50%"
    assert meta["deadline"] == "2x" and meta["board"] == board.name
    assert meta["budget_bytes"] == meta["budget_activation_bytes"] + meta["resident_bytes"]


# ----------------------------------------------------------------------------- deadline margin


def test_deadline_margin_as_a_share_or_seconds(residual, board):
    plain = resolve_request(residual, board, deadline="2x")
    share = resolve_request(residual, board, deadline="2x", deadline_margin="10%")
    assert share.deadline_s == plain.deadline_s  # the user's deadline is kept
    assert share.deadline_margin_s == pytest.approx(0.1 * plain.deadline_s)
    assert share.planning_deadline_s == pytest.approx(0.9 * plain.deadline_s)
    assert share.deadline_margin == "10%"
    seconds = resolve_request(residual, board, deadline=2.0, deadline_margin="0.25s")
    assert seconds.planning_deadline_s == 1.75
    assert parse_deadline_margin("0.25", 2.0) == parse_deadline_margin("0.25s", 2.0) == 0.25
    assert parse_deadline_margin(None, 2.0) == 0.0


def test_without_a_margin_the_planning_deadline_is_the_deadline_and_metadata_is_unchanged(
        residual, board):
    request = resolve_request(residual, board, deadline="2x")
    assert request.planning_deadline_s == request.deadline_s
    assert "deadline_margin" not in request.metadata()
    assert "planning_deadline_s" not in request.metadata()
    assert resolve_request(residual, board).planning_deadline_s is None
    meta = resolve_request(residual, board, deadline="2x", deadline_margin="5%").metadata()
    assert meta["deadline_margin"] == "5%"
    assert meta["planning_deadline_s"] == pytest.approx(0.95 * meta["deadline_s"])


@pytest.mark.parametrize("deadline, margin, message", [
    ("2x", "100%", r"share must be in \[0%, 100%\)"), ("2x", "150%", "share must be in"),
    (1.0, "1s", "less than the deadline of 1 s"), (1.0, "2", "less than the deadline"),
    ("2x", "lots", "deadline_margin = 'lots': expected"), ("2x", "-5%", "expected"),
    (None, "10%", "needs a deadline")])
def test_bad_deadline_margins_are_one_line_errors(residual, board, deadline, margin, message):
    with pytest.raises(InputError, match=message):
        resolve_request(residual, board, deadline=deadline, deadline_margin=margin)


# ----------------------------------------------------------------------------- flash


def _flash_board(board, usable: int | None):
    """``board`` with memory-mapped flash of ``usable`` bytes for weights (None: none)."""
    from poetsim.boards import Flash

    flash = None if usable is None else Flash(bytes=usable + 4096, reserved_bytes=4096)
    return attrs.evolve(board, flash=flash)


def test_frozen_weights_live_in_flash_when_they_fit():
    from poetsim.boards import get_board
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=2)
    frozen = graph.param_bytes - graph.trained_param_bytes
    assert frozen > 0
    board = get_board("nrf52840")
    in_ram = resolve_request(graph, _flash_board(board, None), ram="board")
    in_flash = resolve_request(graph, board, ram="board")
    assert in_ram.flash_weight_bytes == 0
    assert in_ram.resident_bytes == resident_memory(graph).total_bytes
    assert in_flash.flash_weight_bytes == frozen == in_flash.frozen_weight_bytes
    assert in_flash.resident_bytes == in_ram.resident_bytes - frozen
    assert in_flash.activation_budget_bytes == in_ram.activation_budget_bytes + frozen
    assert in_flash.metadata()["flash_weight_bytes"] == frozen
    assert in_ram.metadata()["flash_weight_bytes"] == 0
    assert "frozen weights read in place from flash" in in_flash.describe_budget()
    assert "flash" not in in_ram.describe_budget()
    # a percentage budget is of activations: the whole is smaller by the frozen bytes
    assert (resolve_request(graph, board, ram="50%").budget_bytes
            == resolve_request(graph, _flash_board(board, None), ram="50%").budget_bytes
            - frozen)


def test_frozen_weights_that_do_not_fit_the_flash_stay_in_ram():
    from poetsim.boards import get_board
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=2)
    frozen = graph.param_bytes - graph.trained_param_bytes
    board = get_board("nrf52840")
    exact = resolve_request(graph, _flash_board(board, frozen), ram="board")
    assert exact.flash_weight_bytes == frozen  # all of the usable flash is enough
    small = resolve_request(graph, _flash_board(board, frozen - 1), ram="board")
    assert small.flash_weight_bytes == 0
    assert small.resident_bytes == resident_memory(graph).total_bytes
    assert "frozen weights stay in RAM: over the" in small.describe_budget()


def test_fully_trained_weights_and_paper_accounting_never_use_flash():
    from poetsim.boards import get_board
    from poetsim.zoo import build_model

    board = get_board("nrf52840")
    full = build_model("ds_cnn_s")
    request = resolve_request(full, board, ram="board", optimizer="momentum")
    assert request.flash_weight_bytes == 0  # every weight is written: all stay in RAM
    assert request.resident_bytes == resident_memory(full, optimizer="momentum").total_bytes
    last = build_model("ds_cnn_s", train_last=2)
    paper = resolve_request(last, board, ram="board", accounting="paper")
    assert paper.flash_weight_bytes == 0
    assert paper.resident_bytes == resident_memory(last).total_bytes
    assert paper.metadata()["flash_weight_bytes"] == 0
    assert "flash" not in paper.describe_budget()


@pytest.mark.parametrize("board_name, sums", [("esp32s3", 0), ("nrf52840", 8)])
def test_gradient_sums_are_turned_on_only_when_one_op_would_not_fit(board_name, sums):
    """ResNet-18 (int8, int8 gradients, in place) fits the ESP32-S3 as derived; on the
    nRF52840 one ReLU's backward (four 64 KiB tensors) would not, so the request sums
    each twice-read block output's gradient in an op of its own and says so."""
    from poetsim.boards import get_board
    from poetsim.graph.memory import minimum_ram_bytes
    from poetsim.zoo import build_model

    request = resolve_request(build_model("resnet18_cifar", int8=1, gradient_bytes=1,
                                          inplace_update=1), get_board(board_name),
                              ram=BOARD_RAM, deadline="2x")
    assert sum(op.gradient_sum_of is not None for op in request.graph.ops) == sums
    assert ("8 gradients summed by ops of their own (gradient_sums=1)"
            in request.describe_budget()) == bool(sums)
    assert minimum_ram_bytes(request.graph)[0] <= request.activation_budget_bytes
    assert (request.model_options or {}).get("gradient_sums", 0) == (1 if sums else 0)


# ----------------------------------------------------------------------------- from a file

def _solved(model, board, **words):
    from poetsim.boards import get_board
    from poetsim.methods import produce
    from poetsim.zoo import build_model

    request = resolve_request(build_model(model), get_board(board), **words)
    produced = produce(request, "checkpoint_all")
    return request, produced.schedule.with_metadata(**request.metadata())


def test_a_file_request_is_the_request_it_was_made_for():
    request, schedule = _solved("mlp", "rpi4", ram="100%", deadline="2x", accounting="paper")
    again = request_for_schedule(schedule)
    assert again.metadata() == request.metadata()
    assert again.graph == request.graph and again.board.name == "rpi4"
    # each part may be overridden
    other = request_for_schedule(schedule, "nrf52840", ram="70%", deadline="3x")
    assert (other.board.name, other.ram, other.deadline) == ("nrf52840", "70%", "3x")
    assert other.accounting is Accounting.PAPER


def test_a_paper_file_judged_physically_keeps_its_graph_and_fails_for_the_board():
    """The whole state of ResNet-18 does not fit the nRF52840: the physical request of
    the user's words would stream the weights (another graph); the file's request keeps
    the graph the schedule was made for, and the verdict is FAIL, not a mismatch."""
    from poetsim.graph.io import graph_fingerprint
    from poetsim.verdict import check_on_board

    request, schedule = _solved("resnet18_cifar", "nrf52840", ram="100%", accounting="paper")
    physical = request_for_schedule(schedule, accounting="physical")
    assert graph_fingerprint(physical.graph) == schedule.graph_fingerprint
    assert physical.accounting is Accounting.PHYSICAL and physical.infeasible_reason
    _, verdict = check_on_board(physical, schedule)
    assert not verdict.passed and not verdict.fits_board_ram


def test_a_file_from_a_graph_file_finds_it_and_says_when_it_cannot(tmp_path):
    import json

    import attrs

    from poetsim.boards import get_board
    from poetsim.errors import InputError
    from poetsim.graph import read_graph, write_graph
    from poetsim.methods import produce
    from poetsim.zoo import build_model

    graph = build_model("mlp")
    op = graph.ops[1]
    odd = attrs.evolve(graph, name="make",
                       ops=[*graph.ops[:1], attrs.evolve(op, flops=op.flops + 1000),
                            *graph.ops[2:]], metadata={})
    path = tmp_path / "g.json"
    write_graph(odd, path)
    assert "graph_file" not in json.loads(path.read_text())["metadata"]
    request = resolve_request(read_graph(path), get_board("rpi4"), ram="100%")
    assert request.metadata()["graph_file"] == str(path.resolve())
    schedule = produce(request, "checkpoint_all").schedule.with_metadata(**request.metadata())
    assert request_for_schedule(schedule).graph == request.graph
    path.unlink()
    with pytest.raises(InputError, match="graph file .* which is not there: pass it with "
                                         "--graph FILE"):
        request_for_schedule(schedule)
    anonymous = schedule.with_metadata(graph_file=None)
    with pytest.raises(InputError, match="made for graph 'make', which is no zoo model"):
        request_for_schedule(anonymous)


def test_the_budget_line_adds_up():
    """#31 item 5: the parts of the physical budget line add up to its whole, also when
    the budget asked for is over the board's RAM or under the resident state."""
    import re

    from poetsim.boards import get_board
    from poetsim.request import resolve_request
    from poetsim.zoo import build_model

    def kib(text: str) -> float:
        value, unit = text.split()
        return float(value) * {"B": 1 / 1024, "KiB": 1.0, "MiB": 1024.0}[unit]

    graph = build_model("ds_cnn_s", train_last=3)
    for ram, note in (("512KiB", "asked for is more than the board's"), ("board", None),
                      ("50%", None), ("30KiB", "less than the resident state alone")):
        line = resolve_request(graph, get_board("nrf52840"), ram=ram).describe_budget()
        whole, resident, activations = re.match(
            r"([\d.]+ \w+) in all .*?: ([\d.]+ \w+) resident state \+ ([\d.]+ \w+) for", line
        ).groups()
        assert note is None or note in line
        if ram != "30KiB":  # under the resident state alone nothing is left to add up
            assert kib(whole) == pytest.approx(kib(resident) + kib(activations), abs=0.11)
