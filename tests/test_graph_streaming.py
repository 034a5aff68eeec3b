"""Frozen weights streamed from storage (issue #15 items 1 and 4): slices, the streamed
graph, their cost, the request's decision, the verdict, and ResNet-18 on the nRF52840."""

from __future__ import annotations

import json

import attrs
import pytest

from poetsim.boards import get_board
from poetsim.costs import op_costs, transfer_cost, wait_power
from poetsim.graph.graph import inplace_gradient_bytes
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.graph.streaming import (
    STREAM_BUFFERS,
    WeightsOnStorage,
    frozen_weights_read,
    hold_owners,
    stream_commands,
    weight_slice_bytes,
)
from poetsim.request import resolve_request
from poetsim.schedule import plain_schedule
from poetsim.schedule.model import predict
from poetsim.verdict import check_on_board
from poetsim.zoo import build_model, zoo_options

#: ResNet-18 (CIFAR) in int8 with its classifier trained: 10.7 MiB of frozen weights.
RESNET = {"int8": 1, "train_last": 1}


@pytest.fixture(scope="module")
def resnet():
    return build_model("resnet18_cifar", **RESNET)


def test_a_slice_is_one_output_channel(resnet):
    conv = resnet.index("layer4.1.conv2")  # 3x3, 512 -> 512, int8
    assert weight_slice_bytes(resnet, conv) == 512 * 3 * 3
    assert frozen_weights_read(resnet, conv) == 512 * 512 * 3 * 3
    norm = resnet.index("layer4.1.bn2")  # a norm streams its few parameters whole
    assert weight_slice_bytes(resnet, norm) == resnet.ops[norm].frozen_param_bytes > 0
    fc = resnet.index("fc")  # trained: nothing frozen to stream
    assert frozen_weights_read(resnet, fc) == weight_slice_bytes(resnet, fc) == 0


def test_a_backward_op_reads_the_frozen_weights_of_its_forward_op():
    graph = build_model("mlp", layers=3, train_last=1)
    # fc2 is frozen, fc3 trained: fc3/grad passes the gradient on through fc3's weights
    # (trained, not streamed); no backward op reads fc2's weights (fc2 needs no gradient)
    assert frozen_weights_read(graph, graph.index("fc2")) == graph.op("fc2").param_bytes
    assert frozen_weights_read(graph, graph.index("fc3/grad")) == 0
    bias = build_model("mlp", layers=3, bias_only=1)
    k = bias.index("fc3/grad")  # fc3's weights are frozen, its bias trained
    assert frozen_weights_read(bias, k) == bias.op("fc3").frozen_param_bytes > 0
    assert weight_slice_bytes(bias, k) == 4 * 256  # one output row of fp32 weights


FROZEN = WeightsOnStorage(frozen=True)


def test_the_streamed_graph_holds_two_slices_where_weights_are_read(resnet):
    streamed = FROZEN.graph(resnet)
    assert streamed.metadata["weights_on_storage"] == "frozen"
    assert WeightsOnStorage.of(streamed) == FROZEN and not WeightsOnStorage.of(resnet)
    for k, (before, after) in enumerate(zip(resnet.ops, streamed.ops)):
        grown = after.workspace_bytes - before.workspace_bytes
        assert grown == STREAM_BUFFERS * weight_slice_bytes(resnet, k)
        assert attrs.evolve(after, workspace_bytes=before.workspace_bytes) == before
    # zoo_options still recognises the graph: streaming is the request's, not an option
    assert zoo_options(streamed) == zoo_options(resnet)


def test_each_run_reads_its_frozen_weights_from_storage(resnet):
    board = get_board("nrf52840")
    plain, streamed = op_costs(resnet, board), op_costs(FROZEN.graph(resnet), board)
    conv = resnet.index("layer1.0.conv1")  # 64 slices of 64 x 3 x 3 int8 weights
    assert stream_commands(resnet, conv, frozen_weights_read(resnet, conv)) == [(576, 64)]
    read = transfer_cost(board, 576, write=False)  # one command each, block-rounded
    # With DMA the next slice is read while one is computed: only the first read is not
    # hidden, and the CPU stalls (at its idle power) for it. ~46 ms of computing a slice
    # leaves the card idle over its 5 ms auto-sleep: each slice wakes it (66 uJ, 1 ms
    # with the CPU idle, then 5 ms awake)
    wait = wait_power(board)
    per_slice = plain.compute_time_s[conv] / 64
    assert per_slice - read.time_s > wait.awake_s and board.dma.present
    wake_s, wake_j = 64 * wait.wakeup_s, 64 * wait.wake_j + 64 * wait.wakeup_s * wait.cpu_wait_w
    assert streamed.compute_time_s[conv] == pytest.approx(plain.compute_time_s[conv]
                                                         + read.time_s + wake_s)
    # the waiting power's rest (card asleep, DMA idle) is charged over the whole run: the
    # reads and wake-ups, which draw their own power, take it out again
    rest_j = (board.storage.sleep_power_w * (64 * read.time_s + wake_s)
              + board.dma.idle_power_w * 64 * read.time_s)
    assert streamed.compute_energy_j[conv] == pytest.approx(
        plain.compute_energy_j[conv] + 64 * read.energy_j
        + read.time_s * board.cpu.idle_power_w + wake_j - rest_j)
    fc = resnet.index("fc")
    assert streamed.compute_time_s[fc] == plain.compute_time_s[fc]


def test_the_request_streams_only_when_ram_and_flash_cannot_hold_them(resnet):
    nrf = resolve_request(resnet, get_board("nrf52840"), ram="board")
    frozen = resnet.param_bytes - resnet.trained_param_bytes
    assert nrf.streamed_weight_bytes == frozen and nrf.flash_weight_bytes == 0
    assert WeightsOnStorage.of(nrf.graph) == FROZEN
    assert nrf.resident_bytes < 32 * 1024
    assert nrf.metadata()["streamed_weight_bytes"] == frozen
    assert "streamed by the ops that read them" in nrf.describe_budget()
    rpi = resolve_request(resnet, get_board("rpi4"), ram="board")  # RAM holds them
    assert rpi.streamed_weight_bytes == 0 and rpi.graph is resnet
    ds = resolve_request(build_model("ds_cnn_s", train_last=3), get_board("nrf52840"),
                         ram="board")  # flash holds them
    assert ds.streamed_weight_bytes == 0 and ds.flash_weight_bytes > 0
    paper = resolve_request(resnet, get_board("nrf52840"), ram="board", accounting="paper")
    assert paper.streamed_weight_bytes == 0


def test_the_verdict_counts_streamed_weights_on_storage(resnet):
    board = get_board("nrf52840")
    small = attrs.evolve(board, storage=attrs.evolve(board.storage, capacity_bytes=1 << 20))
    request = resolve_request(resnet, small, ram="board")
    assert request.infeasible_reason.startswith(  # refused before any method runs
        f"the 10.7 MiB ({request.streamed_weight_bytes} B) of weights that must live on sd_spi "
        "storage exceed its capacity of 1.0 MiB (1048576 B) on nrf52840")
    _, verdict = check_on_board(request, plain_schedule(request.graph))
    assert not verdict.passed  # and any schedule is judged so
    assert any("weights and state that live there" in v and "over its capacity" in v
               for v in verdict.violations)


def test_resnet18_int8_last_layer_trains_on_the_nrf52840(tmp_path, capsys):
    """ResNet-18 (CIFAR) in int8 with its classifier trained: 10.7 MiB of frozen weights
    fit neither the nRF52840's RAM nor its flash; streamed from the SD card by every
    convolution, the rest fits 232 KiB and the schedule PASSes physically."""
    from poetsim.cli.main import main

    out = tmp_path / "resnet.json"
    sets = [a for k, v in RESNET.items() for a in ("--set", f"{k}={v}")]
    assert main(["solve", "--model", "resnet18_cifar", *sets, "--board", "nrf52840",
                 "--deadline", "1.5x", "--effort", "10", "--out", str(out)]) == 0
    assert "streamed by the ops that read them" in capsys.readouterr().out
    assert json.loads(out.read_text())["metadata"]["streamed_weight_bytes"] > 10 << 20
    assert main(["simulate", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "PASS" and report["fits_board_ram"]
    assert report["streamed_weight_bytes"] > 10 << 20


#: ResNet-18 (CIFAR) trained in full, int8 with int8 gradients, updated in place.
FULL = {"int8": 1, "gradient_bytes": 1, "inplace_update": 1}


def test_trained_weights_on_storage_are_read_updated_and_written_back():
    graph = build_model("mlp", layers=3, width=64, inplace_update=1)
    both = WeightsOnStorage(trained=True)
    fc2, grad = graph.index("fc2"), graph.index("fc2/grad")
    trained = graph.op("fc2").trained_param_bytes
    assert both.bytes_read(graph, fc2) == both.bytes_read(graph, grad) == trained
    assert both.bytes_written(graph, grad) == trained and both.bytes_written(graph, fc2) == 0
    streamed = both.graph(graph)
    # the in-place update's gradient buffer is one output row and its bias, streamed or
    # not; streaming adds two slices of weights
    row = 64 * 4
    assert inplace_gradient_bytes(graph, grad) == row + 4
    assert streamed.ops[grad].workspace_bytes == (graph.ops[grad].workspace_bytes
                                                  + STREAM_BUFFERS * row)
    board = get_board("nrf52840")
    costs = op_costs(streamed, board)
    assert costs.writeback_bytes[grad] == trained and costs.writeback_bytes[fc2] == 0
    # 64 rows of weights and the bias row: 65 slices of 256 B, read and written back
    assert stream_commands(graph, grad, trained) == [(row, 65)]
    back = transfer_cost(board, row, write=True)
    read = transfer_cost(board, row, write=False)
    plain = op_costs(graph, board)
    # With DMA, a slice's read and the previous one's write run while a slice computes;
    # here the transfers take longer than the computing (40 us a slice), so the card
    # never idles: it wakes once, and the CPU stalls for all but its first slice's work
    wait = wait_power(board)
    per_slice, per_io = plain.compute_time_s[grad] / 65, read.time_s + back.time_s
    assert per_slice < per_io and board.dma.present
    streamed_s = per_slice + 65 * per_io
    assert costs.compute_time_s[grad] == pytest.approx(streamed_s + wait.wakeup_s)
    rest_j = (board.storage.sleep_power_w * (65 * per_io + wait.wakeup_s)
              + board.dma.idle_power_w * 65 * per_io)
    assert costs.compute_energy_j[grad] == pytest.approx(
        plain.compute_energy_j[grad] + 65 * (read.energy_j + back.energy_j) + wait.wake_j
        + (streamed_s - plain.compute_time_s[grad]) * board.cpu.idle_power_w
        + wait.wakeup_s * wait.cpu_wait_w - rest_j)
    # without DMA the CPU moves each slice itself, between its computing: 130 commands
    # 20 us of computing apart keep the card awake
    no_dma = attrs.evolve(board, dma=attrs.evolve(board.dma, channels=0))
    gap = plain.compute_time_s[grad] / 130
    assert gap < wait.awake_s and not no_dma.dma.present
    moved = [transfer_cost(no_dma, 256, write=write) for write in (False, True)]
    assert op_costs(streamed, no_dma).compute_time_s[grad] == pytest.approx(
        plain.compute_time_s[grad] + 65 * (moved[0].time_s + moved[1].time_s)
        + wait.wakeup_s)


def test_optimizer_state_on_storage_is_read_and_written_back_by_the_update_alone():
    """Adam's two state copies (fp32, like the gradients) live beside the trained fp32
    weights: the in-place update of fc2 reads and writes its weights and both copies,
    one output row of each at a time; the forward op reads the weights alone."""
    graph = build_model("mlp", layers=3, width=64, inplace_update=1)
    adam = WeightsOnStorage(trained=True, state_copies=2)
    fc2, grad = graph.index("fc2"), graph.index("fc2/grad")
    trained = graph.op("fc2").trained_param_bytes
    assert adam.state_bytes(graph, trained) == 2 * trained
    assert adam.bytes_read(graph, fc2) == trained
    assert adam.bytes_read(graph, grad) == adam.bytes_written(graph, grad) == 3 * trained
    assert adam.bytes_written(graph, fc2) == 0
    assert adam.total_bytes(graph) == 3 * graph.trained_param_bytes
    streamed = adam.graph(graph)
    assert WeightsOnStorage.of(streamed) == adam
    assert streamed.metadata["optimizer_state_on_storage"] == 2
    row = 64 * 4
    assert weight_slice_bytes(streamed, grad, 3 * trained) == 3 * row  # a row of each
    assert weight_slice_bytes(streamed, fc2, trained) == row
    assert stream_commands(streamed, grad, 3 * trained) == [(3 * row, 65)]
    assert streamed.ops[grad].workspace_bytes == (
        WeightsOnStorage(trained=True).graph(graph).ops[grad].workspace_bytes
        + STREAM_BUFFERS * 2 * row)
    # no hold: the forward op reads less than the update needs
    assert hold_owners(streamed)[grad] == -1
    with pytest.raises(ValueError, match="state_copies = 1: the optimizer state lives on "
                                         "storage only with the trained weights"):
        WeightsOnStorage(frozen=True, state_copies=1)
    with pytest.raises(ValueError, match="state_copies = 3: must be 0, 1 .momentum. or 2"):
        WeightsOnStorage(trained=True, state_copies=3)


@pytest.mark.parametrize("optimizer, copies", [("sgd", 0), ("momentum", 1), ("adam", 2)])
def test_the_request_moves_the_optimizer_state_with_the_trained_weights(optimizer, copies):
    """ResNet-18 trained in full on the nRF52840: its momentum or Adam state (int8
    gradients: one byte per weight per copy) goes to the card with the weights, so the
    resident state stays 0 and the verdict counts the state against the card."""
    board = get_board("nrf52840")
    request = resolve_request(build_model("resnet18_cifar", **FULL), board, ram="board",
                              optimizer=optimizer)
    weights = build_model("resnet18_cifar", **FULL).trained_param_bytes
    assert WeightsOnStorage.of(request.graph).state_copies == copies
    assert request.streamed_weight_bytes == (1 + copies) * weights
    assert request.resident_bytes == 0
    assert (f"and their {optimizer} state on sd_spi storage" in request.describe_budget()) \
        == bool(copies)
    assert request.metadata()["optimizer"] == optimizer


def test_trained_weights_go_to_storage_only_when_updated_in_place():
    board = get_board("nrf52840")
    full = resolve_request(build_model("resnet18_cifar", **FULL), board, ram="board")
    graph = full.graph
    assert WeightsOnStorage.of(graph) == WeightsOnStorage(trained=True)
    assert full.streamed_weight_bytes == graph.trained_param_bytes
    assert full.resident_bytes == 0
    assert "written back by their in-place updates" in full.describe_budget()
    resident_grads = resolve_request(build_model("resnet18_cifar", int8=1), board, ram="board")
    assert resident_grads.streamed_weight_bytes == 0
    assert resident_grads.infeasible_reason is not None


def test_write_backs_wear_the_card(tmp_path):
    """The in-place updates write the trained weights back every iteration: the
    simulator books their wear, and the lifetime follows."""
    board = get_board("nrf52840")
    graph = build_model("mlp", layers=3, width=64, inplace_update=1)
    request = resolve_request(graph, board, ram="board")
    streamed = WeightsOnStorage(trained=True).graph(graph)
    forced = attrs.evolve(request, graph=streamed, costs=op_costs(streamed, board))
    report, verdict = check_on_board(forced, plain_schedule(streamed))
    assert verdict.passed
    written = int(forced.costs.writeback_bytes.sum())
    assert report.bytes_written >= written > 0
    # each 256 B row is its own write command and wears a whole 16 KiB NAND page
    rows = sum(count for k in range(len(streamed))
               for _, count in stream_commands(streamed, k,
                                               int(forced.costs.writeback_bytes[k])))
    assert report.storage_wear_bytes == rows * board.storage.wear_page_bytes
    assert report.storage_lifetime_iterations == pytest.approx(
        board.storage.endurance_bytes_written / report.storage_wear_bytes)


def test_resnet18_full_fine_tuning_streams_every_weight(tmp_path, capsys):
    """The POET paper's claim, physically: ResNet-18 (CIFAR) trained in full (int8, int8
    gradients, updates in place) with all 11.2 M weights on the SD card, read by every op
    and written back by every update, within the nRF52840's 256 KiB. One op,
    ``layer1.1.relu2/grad``, would hold its output and two incoming gradients (256 KiB):
    the request sums each such gradient in an op of its own, and then every op fits and
    the schedule PASSes; simulate rebuilds that graph from the file's model options."""
    from poetsim.cli.main import main

    sets = [a for k, v in FULL.items() for a in ("--set", f"{k}={v}")]
    out = tmp_path / "full.json"
    assert main(["solve", "--model", "resnet18_cifar", *sets, "--board", "nrf52840",
                 "--deadline", "1.5x", "--effort", "10", "--out", str(out)]) == 0
    assert "8 gradients summed by ops of their own (gradient_sums=1)" in capsys.readouterr().out
    assert main(["simulate", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "PASS" and report["resident_bytes"] == 0
    assert report["peak_ram_bytes"] <= get_board("nrf52840").ram.usable_bytes
    weights = build_model("resnet18_cifar", **FULL).param_bytes
    assert report["streamed_weight_bytes"] == weights
    assert report["storage_wear_bytes"] >= weights  # every weight written back
    assert report["storage_lifetime_iterations"] < 32e12 / weights
    unsummed = build_model("resnet18_cifar", **FULL)
    need = minimum_ram_bytes(WeightsOnStorage(trained=True).graph(unsummed))
    assert need == (262144, "layer1.1.relu2/grad")


def test_every_row_band_streams_the_weights_it_reads():
    """A frozen front in row bands: band 0 owns a layer's weights, and every band reads
    them, so every band streams them from storage."""
    graph = build_model("mobilenet_v2_w035", head=0, int8=1, sparse_update=1, classes=10,
                        row_bands=2)
    band0, band1 = graph.index("stem.conv.band0"), graph.index("stem.conv.band1")
    assert graph.ops[band1].param_bytes == 0
    assert frozen_weights_read(graph, band1) == frozen_weights_read(graph, band0) > 0
    assert weight_slice_bytes(graph, band1) == weight_slice_bytes(graph, band0) == 3 * 3 * 3


def _paging(graph, tensor):
    """The plain schedule with ``tensor`` paged out after its last forward reader and back
    in before its first backward reader."""
    from poetsim.graph.streaming import weight_steps
    from poetsim.schedule import Action, Schedule, Step
    from poetsim.schedule.ops import with_weight_steps

    k = graph.index(tensor)
    readers = graph.successors(k)
    first_back = min(j for j in readers if graph.ops[j].phase.value == "backward")
    last_forward = max(j for j in readers if j < first_back)
    steps = []
    for step in plain_schedule(graph).steps:
        if step.action is Action.COMPUTE and step.op == first_back:
            steps.append(Step(Action.PAGE_IN, k, step.stage))
        steps.append(step)
        if step.action is Action.COMPUTE and step.op == last_forward:
            steps += [Step(Action.PAGE_OUT, k, step.stage), Step(Action.FREE, k, step.stage)]
    return Schedule.for_graph(graph, with_weight_steps(steps, *weight_steps(graph)),
                              {"method": "hand"})


def test_page_transfers_wait_for_the_ops_that_stream_weights_from_the_same_card(monkeypatch):
    """An op that streams weights occupies the storage device: no page transfer runs while
    it does (the DMA engine is held), and the CPU waits for the transfers running before
    it starts one; the op-list model agrees. Without the hold the same transfers would run
    beside those ops."""
    from poetsim.sim.dma import DmaEngine

    board = get_board("nrf52840")
    graph = build_model("mlp", layers=3, width=64, inplace_update=1)
    streamed = WeightsOnStorage(trained=True).graph(graph)
    request = attrs.evolve(resolve_request(graph, board, ram="board"), graph=streamed,
                           costs=op_costs(streamed, board),
                           streamed_weight_bytes=graph.trained_param_bytes)
    on_storage = WeightsOnStorage.of(streamed)
    streaming = {op.name for k, op in enumerate(streamed.ops)
                 if on_storage.bytes_read(streamed, k) or on_storage.bytes_written(streamed, k)}

    def overlap_s():
        """Seconds during which a page transfer runs beside one of the streaming ops."""
        report, verdict = check_on_board(request, _paging(streamed, "relu1"), trace=True)
        assert verdict.passed, verdict.violations
        ops = [s for s in report.timeline.slices if s.component == "cpu"
               and s.name.split(" ", 1)[-1] in streaming]
        moves = [t for t in report.transfers if t.service_s >= 0.0]
        assert ops and moves
        return report, sum(max(0.0, min(o.end_s, t.ended_s) - max(o.start_s, t.service_s))
                           for o in ops for t in moves)

    held, shared_s = overlap_s()
    assert shared_s == 0.0
    # the op-list model makes the same ops wait for the transfers before them
    predicted = predict(streamed, request.costs, _paging(streamed, "relu1"))
    assert predicted.time_s == pytest.approx(held.makespan_s, rel=1e-5)
    assert predicted.energy_j == pytest.approx(held.energy_j, rel=1e-5)
    monkeypatch.setattr(DmaEngine, "hold", lambda self: None)  # the device shared freely
    unheld, unheld_s = overlap_s()
    assert unheld_s > 0.0 and held.makespan_s > unheld.makespan_s


def test_the_simulator_refuses_a_streaming_op_without_its_weight_steps():
    """The op list must say where weights are read and written back: without the step the
    simulator cannot execute it (the same rule as the checker's)."""
    from poetsim.schedule import Action, ScheduleError
    from poetsim.sim import simulate

    board = get_board("nrf52840")
    streamed = WeightsOnStorage(trained=True).graph(
        build_model("mlp", layers=3, width=64, inplace_update=1))
    plain = plain_schedule(streamed)
    simulate(streamed, board, plain)  # with them it runs
    for action, rule in ((Action.READ_WEIGHTS, "weights_not_read"),
                         (Action.WRITE_WEIGHTS, "weights_not_written")):
        stripped = attrs.evolve(plain, steps=[s for s in plain.steps if s.action is not action])
        with pytest.raises(ScheduleError, match=rf"cannot simulate: .*\[{rule}\]"):
            simulate(streamed, board, stripped)


def test_a_momentum_schedule_is_solved_and_simulated_with_its_state_on_storage(tmp_path,
                                                                             capsys):
    """The MKR1000's 24 KiB cannot hold this MLP's weights: they and their momentum go
    to the SD card. simulate takes the optimizer from the file; asked for another one, the
    graph differs (no state streams) and the schedule is refused by name."""
    from poetsim.cli.main import main

    sets = ["--set", "input_dim=196", "--set", "layers=3", "--set", "width=64",
            "--set", "inplace_update=1"]
    out = tmp_path / "momentum.json"
    assert main(["solve", "--model", "mlp", *sets, "--board", "mkr1000", "--deadline", "2x",
                 "--effort", "10", "--optimizer", "momentum", "--out", str(out)]) == 0
    assert "of trained weights and their momentum state on sd_spi storage" \
        in capsys.readouterr().out
    assert main(["simulate", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    weights = build_model("mlp", input_dim=196, layers=3, width=64).param_bytes
    assert report["verdict"] == "PASS" and report["streamed_state"]
    assert report["streamed_weight_bytes"] == 2 * weights
    assert report["bytes_written"] >= 2 * weights  # the weights and their state written back
    assert main(["simulate", str(out), "--optimizer", "sgd"]) == 2
    assert "[fingerprint_mismatch]" in capsys.readouterr().err


def test_weights_and_state_over_the_storage_capacity_are_refused_before_any_method():
    """The QSPI NOR board's 16 MiB hold ResNet-18's 10.7 MiB of int8 weights, and leave
    the rest for paging; with momentum's copy they are 21.3 MiB, and nothing can fit."""
    board = get_board("nrf52840_qspi_nor")
    graph = build_model("resnet18_cifar", **FULL)
    sgd = resolve_request(graph, board, ram="board")
    assert sgd.infeasible_reason is None
    assert sgd.paging_capacity_bytes == 16 * 2**20 - graph.trained_param_bytes
    momentum = resolve_request(graph, board, ram="board", optimizer="momentum")
    need = 2 * graph.trained_param_bytes
    assert momentum.infeasible_reason == (
        f"the 21.3 MiB ({need} B) of weights and optimizer state that must live on qspi_nor "
        "storage exceed its capacity of 16.0 MiB (16777216 B) on nrf52840_qspi_nor: no "
        "schedule can help (physical accounting)")
