"""Running schedules end to end: energy conservation, determinism, verdicts (poetsim.sim)."""

from __future__ import annotations

import json
import math

import attrs
import pytest
from conftest import make_board, paper_request
from test_sim_support import PAGE_BOTH, PAGE_R, PAGE_X, hand

from poetsim.costs import op_costs
from poetsim.errors import InputError
from poetsim.schedule import Schedule, ScheduleError, Step, plain_schedule
from poetsim.sim import ideal_board, simulate
from poetsim.verdict import check_on_board

BOARDS = {
    "dma": lambda: make_board(),
    "no_dma": lambda: make_board(dma_channels=0),
    "nor": lambda: make_board(storage_kind="qspi_nor", block_bytes=256, max_command_bytes=256),
    "paper": lambda: make_board("paper"),
    "ideal": lambda: ideal_board(make_board()),
}
SCHEDULES = {"page_r": PAGE_R, "page_x": PAGE_X, "page_both": PAGE_BOTH}


@pytest.mark.parametrize("board_name", sorted(BOARDS))
@pytest.mark.parametrize("schedule_name", sorted(SCHEDULES))
def test_energy_is_conserved(residual, board_name, schedule_name):
    report = simulate(residual, BOARDS[board_name](), hand(residual, *SCHEDULES[schedule_name]),
                      trace=True)
    total = report.energy_j
    for breakdown in (report.energy_by_component_j, report.energy_by_state_j,
                      report.energy_by_kind_j):
        assert math.fsum(breakdown.values()) == pytest.approx(total, rel=1e-12)
    # Integrating the recorded power over time gives the same energy.
    assert report.timeline.energy_j() == pytest.approx(total, rel=1e-9)
    # Every component is accounted for over the whole makespan.
    for component, states in report.residency_s.items():
        assert math.fsum(states.values()) == pytest.approx(report.makespan_s), component


def test_ideal_energy_is_the_sum_of_op_and_transfer_costs(residual):
    board = ideal_board(make_board())
    costs = op_costs(residual, board)
    report = simulate(residual, board, hand(residual, *PAGE_R))
    r = residual.index("r")
    expected = (costs.compute_energy_j.sum() + costs.pagein_energy_j[r]
                + costs.pageout_energy_j[r])
    assert report.energy_j == pytest.approx(float(expected), rel=1e-12)
    assert set(report.energy_by_kind_j) == {"compute", "page_in", "page_out"}


def test_recomputations_are_their_own_kind(residual):
    # Drop r after s and recompute it (from fc1, kept) instead of paging it.
    lines = ["compute x 0", "compute fc1 1", "compute r 2", "compute fc2 3", "compute s 4",
             "free fc2 4", "free r 4", "compute loss 5", "compute loss/grad 6", "free s 6",
             "free loss 6", "compute s/grad 7", "free loss/grad 7", "compute r 8",
             "free fc1 8", "compute fc2/grad 8", "compute r/grad 9", "free r 9",
             "free s/grad 9", "free fc2/grad 9", "compute fc1/grad 10", "free x 10",
             "free r/grad 10", "free fc1/grad 10"]
    board = make_board()
    report = simulate(residual, board, hand(residual, *lines))
    costs = op_costs(residual, board)
    assert report.recomputes == 1
    assert report.energy_by_kind_j["recompute"] == pytest.approx(
        float(costs.compute_energy_j[residual.index("r")]))


def test_runs_are_deterministic(residual):
    board = make_board()
    schedule = hand(residual, *PAGE_BOTH)
    first = simulate(residual, board, schedule)
    second = simulate(residual, board, schedule)
    assert first == second
    assert json.dumps(first.as_dict(), sort_keys=True) == json.dumps(second.as_dict(),
                                                                     sort_keys=True)


def test_structurally_invalid_schedules_are_refused(residual):
    bad = Schedule.for_graph(residual, [Step("compute", 1)])
    with pytest.raises(ScheduleError, match="input_not_resident"):
        simulate(residual, make_board(), bad)
    other = attrs.evolve(plain_schedule(residual), graph_fingerprint="0" * 64)
    with pytest.raises(ScheduleError, match="fingerprint_mismatch"):
        simulate(residual, make_board(), other)
    unfinished = Schedule.for_graph(residual, plain_schedule(residual).steps[:3])
    with pytest.raises(ScheduleError, match="never_computed"):
        simulate(residual, make_board(), unfinished)


@pytest.mark.parametrize("kwargs, message", [
    ({"budget_bytes": -1}, "budget_bytes"),
    ({"resident_bytes": 1.5}, "resident_bytes"),
    ({"seed": -1}, "seed"),
])
def test_bad_arguments(residual, kwargs, message):
    with pytest.raises(InputError, match=message):
        simulate(residual, make_board(), plain_schedule(residual), **kwargs)


def test_costs_for_another_graph_are_refused(residual):
    from poetsim.zoo import build_model

    other = op_costs(build_model("mlp", layers=2), make_board())
    with pytest.raises(InputError, match="costs cover"):
        simulate(residual, make_board(), plain_schedule(residual), costs=other)


def test_the_simulator_reports_and_does_not_judge_deadlines(residual):
    """A schedule file's own deadline is never taken, and the simulator takes none: it
    reports the makespan, the verdict judges it."""
    schedule = hand(residual, *PAGE_R, deadline_s=1e-6)
    report = simulate(residual, make_board(), schedule)
    assert not report.violations and report.makespan_s > 1e-6
    assert "deadline_met" not in report.as_dict() and "deadline_s" not in report.as_dict()
    with pytest.raises(TypeError):
        simulate(residual, make_board(), schedule, deadline_s=1e-6)


def test_the_verdict_judges_the_requests_deadline(residual):
    """check_on_board judges the request's deadline, whatever the schedule file says."""
    board = make_board()
    schedule = hand(residual, *PAGE_R, deadline_s=1e-6)
    makespan = simulate(residual, board, schedule).makespan_s
    loose = paper_request(residual, board, "100%", makespan * 1.01)
    report, verdict = check_on_board(loose, schedule)
    assert report.makespan_s == makespan
    assert verdict.passed and verdict.label == "PASS" and verdict.deadline_met
    tight = paper_request(residual, board, "100%", makespan / 2)
    report, verdict = check_on_board(tight, schedule)
    assert not report.violations
    assert not verdict.passed and verdict.label == "FAIL" and verdict.deadline_met is False
    assert any("exceeds the deadline" in v for v in verdict.violations)


def test_predictions_are_the_op_list_models_never_the_files(residual):
    from poetsim.schedule.model import predict

    # figures a file claims are not taken: the model is recomputed from the steps
    schedule = hand(residual, *PAGE_R, predicted_energy_j=1e-3, predicted_time_s=5e-3,
                    predicted_peak_ram_bytes=96)
    board = make_board()
    report = simulate(residual, board, schedule, resident_bytes=10)
    model = predict(residual, op_costs(residual, board), schedule)
    p = report.prediction
    assert p.simulated_energy_j == report.energy_j
    assert (p.predicted_energy_j, p.predicted_time_s) == (model.energy_j, model.time_s)
    assert p.energy_diff_pct == pytest.approx(
        (report.energy_j - model.energy_j) / model.energy_j * 100)
    assert p.simulated_peak_ram_bytes == 96 and p.peak_diff_pct == 0.0  # activations only
    plain = simulate(residual, board, plain_schedule(residual)).prediction
    assert plain.energy_diff_pct == pytest.approx(0.0, abs=1e-9)


def test_stall_and_tail_time(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R))
    assert report.stall_s == pytest.approx(sum(t.stall_s for t in report.transfers))
    assert report.tail_s == 0.0  # every transfer ended before the last op
    assert report.makespan_s == pytest.approx(report.compute_s + report.stall_s)


# ----------------------------------------------------------------------------- weight holds

#: An MLP whose weights live on the card: trained ones updated in place (every backward op
#: that can hold also writes back), or frozen ones (no write-back: a held run leaves the
#: card alone).
STREAMED = {
    "trained": ({"inplace_update": 1}, {"trained": True}),
    "frozen": ({"bias_only": 1}, {"frozen": True}),
}


def _streamed_request(label: str):
    from poetsim.boards import get_board
    from poetsim.graph.streaming import WeightsOnStorage
    from poetsim.request import _resolve
    from poetsim.zoo import build_model

    options, placement = STREAMED[label]
    graph = build_model("mlp", layers=3, width=64, **options)
    # the weights would fit this board's RAM: put them on storage anyway
    return _resolve(graph, get_board("nrf52840"), ram="board", deadline=None,
                    accounting="physical", optimizer="sgd", deadline_margin=None,
                    placement=WeightsOnStorage(**placement))


def _paged(graph, steps, tensor: str) -> list[Step]:
    """``steps`` with ``tensor`` paged out after its last forward reader and back in
    before its first backward reader."""
    from poetsim.schedule import Action

    k = graph.index(tensor)
    readers = graph.successors(k)
    first_back = min(j for j in readers if graph.ops[j].phase.value == "backward")
    last_forward = max(j for j in readers if j < first_back)
    out = []
    for step in steps:
        if step.action is Action.COMPUTE and step.op == first_back:
            out.append(Step(Action.PAGE_IN, k, step.stage))
        out.append(step)
        if step.action is Action.COMPUTE and step.op == last_forward:
            out += [Step(Action.PAGE_OUT, k, step.stage), Step(Action.FREE, k, step.stage)]
    return out


@pytest.mark.parametrize("label", sorted(STREAMED))
def test_held_weights_are_not_read_again_and_the_run_is_cheaper(label):
    """A backward op whose weights its forward op's run loaded and kept runs for its held
    compute cost; the simulation passes, equals the op-list model and beats streaming."""
    from test_schedule_check import with_holds

    from poetsim.schedule import Action, check_schedule
    from poetsim.schedule.model import predict

    request = _streamed_request(label)
    graph, costs = request.graph, request.costs
    plain = plain_schedule(graph)
    held_ops = ["fc2/grad", "fc3/grad"]
    held = with_holds(graph, plain.steps, held_ops)
    assert check_schedule(graph, held).valid
    figures = {}
    for name, schedule in (("plain", plain), ("held", held)):
        report, verdict = check_on_board(request, schedule, trace=True)
        assert verdict.passed and verdict.label == "PASS", verdict.violations
        predicted = predict(graph, costs, schedule)
        assert report.energy_j == pytest.approx(predicted.energy_j, rel=1e-6)
        assert report.makespan_s == pytest.approx(predicted.time_s, rel=1e-6)
        assert report.peak_ram_bytes - report.resident_bytes == predicted.peak_ram_bytes \
            == check_schedule(graph, schedule).peak_ram_bytes
        figures[name] = report
    for name in ("fc1/grad", *held_ops):
        k = graph.index(name)
        runs = [s for s in figures["held"].timeline.slices
                if s.component == "cpu" and s.name == f"compute {name}"]
        assert len(runs) == 1
        expected = costs.held_compute_time_s[k] if name in held_ops else costs.compute_time_s[k]
        assert runs[0].end_s - runs[0].start_s == pytest.approx(float(expected), rel=1e-9)
        if name in held_ops:
            assert costs.held_compute_time_s[k] < costs.compute_time_s[k]
            assert costs.held_compute_energy_j[k] < costs.compute_energy_j[k]
    # the holds count in RAM: the held schedule peaks higher, and is cheaper
    assert figures["held"].peak_ram_bytes > figures["plain"].peak_ram_bytes
    assert figures["held"].energy_j < figures["plain"].energy_j
    assert figures["held"].makespan_s < figures["plain"].makespan_s
    # every hold released at its drop: RAM ends as the plain schedule's
    assert figures["held"].timeline.ram[-1][1] == figures["plain"].timeline.ram[-1][1]
    assert held.count(Action.DROP_WEIGHTS) == 2


@pytest.mark.parametrize("label", sorted(STREAMED))
def test_a_held_run_holds_the_storage_only_to_write_back(label, monkeypatch):
    """The DMA engine is held by the COMPUTEs with READ_WEIGHTS right before them or
    WRITE_WEIGHTS right after them: a held run of an op that writes back holds it, one
    that does not leaves the card to the page transfers (relu1's page-in runs beside
    it)."""
    from test_schedule_check import with_holds

    from poetsim.schedule import Action
    from poetsim.schedule.model import predict
    from poetsim.sim.dma import DmaEngine

    request = _streamed_request(label)
    graph = request.graph
    steps = _paged(graph, plain_schedule(graph).steps, "relu1")
    schedule = with_holds(graph, steps, ["fc2/grad", "fc3/grad"])
    assert schedule.page_ins == 1
    pairs = [(s.action, s.op) for s in schedule.steps]
    occupying = [
        graph.ops[k].name for i, (action, k) in enumerate(pairs) if action is Action.COMPUTE
        and ((Action.READ_WEIGHTS, k) == pairs[i - 1]
             or (i + 1 < len(pairs) and pairs[i + 1] == (Action.WRITE_WEIGHTS, k)))]
    held = []
    original = DmaEngine.hold

    def hold(self):
        held.append(self.env.now)
        return original(self)

    monkeypatch.setattr(DmaEngine, "hold", hold)
    report, verdict = check_on_board(request, schedule, trace=True)
    assert verdict.passed, verdict.violations
    assert len(held) == len(occupying)
    assert ("fc2/grad" in occupying) is (label == "trained")
    (page_in,) = [t for t in report.transfers if t.kind == "page_in"]
    runs = {s.name.split(" ", 1)[1]: s for s in report.timeline.slices
            if s.component == "cpu" and s.name.startswith("compute ")}
    beside = [name for name, run in runs.items()
              if min(run.end_s, page_in.ended_s) > max(run.start_s, page_in.service_s)]
    assert not set(beside) & set(occupying)
    if label == "frozen":  # prefetched while the held backward ops run
        assert page_in.trigger_step < page_in.step and "fc2/grad" in beside
    # the op-list model starts a page-in at its step, the simulator may prefetch it: they
    # agree closely, not exactly
    predicted = predict(graph, request.costs, schedule)
    assert report.energy_j == pytest.approx(predicted.energy_j, rel=1e-3)
    assert report.makespan_s == pytest.approx(predicted.time_s, rel=1e-3)
    assert report.makespan_s <= predicted.time_s * (1 + 1e-9)


@pytest.mark.parametrize("label", sorted(STREAMED))
def test_a_streamed_run_books_the_storage_its_share_and_counts_the_bytes_it_reads(label):
    """What an op streams through the card is the card's energy and the card's bytes: the
    storage's share of each streamed run (the cost model's) is booked on the storage, the
    DMA engine's on the DMA, the rest on the CPU, so the total is unchanged; bytes_read
    counts the weight reads as bytes_written counts the write-backs."""
    from poetsim.costs import transfer_phases
    from poetsim.graph.streaming import WeightsOnStorage, stream_commands

    request = _streamed_request(label)
    graph, costs = request.graph, request.costs
    schedule = plain_schedule(graph)
    report = simulate(graph, request.board, schedule, costs=costs,
                      resident_bytes=request.resident_bytes)
    streamed = [k for k in range(len(graph.ops)) if costs.storage_energy_j[k] > 0]
    assert streamed
    shares = float(sum(costs.storage_energy_j[k] for k in streamed))
    assert report.energy_by_state_j["storage.stream"] == pytest.approx(shares, rel=1e-9)
    assert report.energy_by_state_j["dma.stream"] == pytest.approx(
        float(sum(costs.dma_energy_j[k] for k in streamed)), rel=1e-9)
    assert report.energy_by_component_j["storage"] > shares
    assert sum(report.energy_by_component_j.values()) == pytest.approx(report.energy_j)
    on_storage = WeightsOnStorage.of(graph)
    read = sum(count * transfer_phases(request.board, size, write=False).device_bytes
               for k in range(len(graph.ops))
               for size, count in stream_commands(graph, k, on_storage.bytes_read(graph, k)))
    assert read > 0 and report.bytes_read == read  # nothing is paged in the plain schedule


@pytest.mark.parametrize("dma_channels", [1, 0])
def test_a_compacted_schedule_runs_in_its_arena_and_its_moves_cost_what_the_model_says(
        dma_channels):
    """#28 item 4: the fragmented schedule with its MOVE steps runs within its byte peak's
    arena; each copy is priced as the cost model's memory copy (on the DMA engine, the CPU
    waiting, or on the CPU), the op-list model's difference is the simulator's, energy is
    conserved and the trace shows every copy."""
    from test_sim_support import fragmented_graph, fragmented_schedule

    from poetsim.schedule import Action
    from poetsim.schedule.compaction import compact
    from poetsim.schedule.model import predict
    from poetsim.schedule.replay import replay

    graph = fragmented_graph()
    board = make_board(dma_channels=dma_channels)
    costs = op_costs(graph, board)
    resident = 64
    plain = fragmented_schedule(graph)
    moved = compact(replay(graph, plain), room_bytes=264, resident_bytes=resident)
    moves = [s for s in moved.steps if s.action is Action.MOVE]
    before = simulate(graph, board, plain, budget_bytes=resident + 264, resident_bytes=resident,
                      costs=costs)
    after = simulate(graph, board, moved, budget_bytes=resident + 264, resident_bytes=resident,
                     costs=costs, trace=True)
    assert before.arena_bytes > resident + 264 >= after.arena_bytes
    assert not after.violations and after.peak_ram_bytes <= resident + 264
    copy_j = sum(float(costs.move_energy_j[s.op]) for s in moves)
    copy_s = sum(float(costs.move_time_s[s.op]) for s in moves)
    assert copy_j > 0 and after.energy_by_kind_j["move"] > copy_j * (1 - 1e-9)
    mover = "dma" if dma_channels else "cpu"
    assert after.energy_by_state_j[f"{mover}.active"] >= copy_j * (1 - 1e-9)
    assert after.makespan_s - before.makespan_s == pytest.approx(copy_s, rel=1e-6)
    model = predict(graph, costs, moved)
    assert model.move_energy_j == pytest.approx(copy_j)
    assert (after.energy_j - before.energy_j) == pytest.approx(
        model.energy_j - predict(graph, costs, plain).energy_j, rel=1e-6)
    assert math.fsum(after.energy_by_kind_j.values()) == pytest.approx(after.energy_j, rel=1e-12)
    assert after.timeline.energy_j() == pytest.approx(after.energy_j, rel=1e-9)
    copies = [s for s in after.timeline.slices if s.name.startswith("move ")]
    assert len(copies) == len(moves)


def test_a_spent_time_limit_stops_a_long_simulation():
    """#32: the event loop reads the command's limit, its arena laid out before it."""
    import time

    from poetsim import clock
    from poetsim.errors import OutOfTime
    from poetsim.schedule.replay import replay
    from poetsim.sim.engine import Simulation
    from poetsim.zoo import build_model

    graph = build_model("mlp", layers=600, width=4)
    board = make_board()
    costs = op_costs(graph, board)
    run = Simulation(replay(graph, plain_schedule(graph)), board, costs,
                     budget_bytes=board.ram.usable_bytes, resident_bytes=0, trace=False)
    with clock.command(time.perf_counter() - 1e9, 1.0), pytest.raises(OutOfTime):
        run.run()
