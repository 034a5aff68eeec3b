"""Transfers, DMA channels, the CPU as mover, and deferred frees (poetsim.sim.dma)."""

from __future__ import annotations

import pytest
from conftest import make_board
from test_sim_support import PAGE_R, PAGE_X, hand

from poetsim.costs import op_costs
from poetsim.schedule import Action, Schedule, Step, check_schedule, plain_schedule
from poetsim.sim import simulate


def test_without_dma_the_cpu_moves_the_bytes_and_the_makespan_is_the_sum(residual):
    board = make_board(dma_channels=0, wakeup_latency_s=0.0)
    schedule = hand(residual, *PAGE_R)
    costs = op_costs(residual, board)
    report = simulate(residual, board, schedule, trace=True)
    r = residual.index("r")
    compute = float(costs.compute_time_s.sum())
    transfers = float(costs.pageout_time_s[r] + costs.pagein_time_s[r])
    assert report.makespan_s == pytest.approx(compute + transfers)
    assert report.residency_s["cpu"]["transfer"] == pytest.approx(transfers)
    assert report.cpu_transfer_s == pytest.approx(transfers)
    assert report.stall_s == 0.0 and report.dma_busy_s == 0.0
    assert "dma" not in report.residency_s and "dma" not in report.energy_by_component_j
    # The CPU is the mover: its share of the transfer energy is booked on the CPU.
    assert report.energy_by_state_j["cpu.transfer"] == pytest.approx(0.01 * transfers)
    # CPU slices never overlap: it does one thing at a time.
    cpu = sorted((s.start_s, s.end_s) for s in report.timeline.slices if s.component == "cpu")
    assert all(a_end <= b_start + 1e-15 for (_, a_end), (b_start, _) in zip(cpu, cpu[1:]))


def test_with_dma_the_cpu_computes_while_the_write_runs(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R), trace=True)
    write = report.transfers[0]
    assert write.kind == "page_out" and write.channel == 0
    computes = [s for s in report.timeline.slices if s.name.startswith("compute")]
    overlapping = [s for s in computes if s.start_s < write.ended_s and s.end_s > write.started_s]
    assert {s.name for s in overlapping} >= {"compute fc2", "compute s", "compute loss"}
    assert report.residency_s["dma"]["active"] == pytest.approx(report.dma_busy_s)


def test_a_free_after_a_page_out_waits_for_the_write_before_releasing_ram(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R), trace=True)
    write = report.transfers[0]
    assert write.op == "r" and write.stall_s == 0.0  # the CPU did not wait for it
    # r's 16 B are released when the write ends, long after its FREE (step 8, ~1.6 ms).
    times = [t for t, _ in report.timeline.ram]
    i = times.index(write.ended_s)
    assert report.timeline.ram[i][1] == report.timeline.ram[i - 1][1] - 16


def test_the_cpu_waits_for_a_write_only_when_the_program_needs_the_ram(residual):
    schedule = hand(residual, *PAGE_X)
    check = check_schedule(residual, schedule)
    report = simulate(residual, make_board(), schedule, trace=True)
    write_x = report.transfers[0]
    assert (write_x.kind, write_x.op) == ("page_out", "x")
    assert write_x.stall_s > 0
    stalls = [s for s in report.timeline.slices if s.name == "stall"]
    assert stalls[0].args["waiting_for"] == "page_out x"
    assert stalls[0].args["step"] == residual_step(schedule, "compute", "s")
    # RAM never went over the schedule's own peak.
    assert report.peak_ram_bytes == check.peak_ram_bytes
    assert max(b for _, b in report.timeline.ram) == check.peak_ram_bytes
    # With a larger budget nothing changes: the limit is the schedule's own peak.
    roomy = simulate(residual, make_board(), schedule, budget_bytes=1 << 20)
    assert roomy.stall_s == report.stall_s


def residual_step(schedule, action, name):
    """Index of the step ``action name`` in ``schedule`` (the residual graph)."""
    from conftest import residual_graph

    k = residual_graph().index(name)
    return next(i for i, s in enumerate(schedule.steps) if s.action.value == action and s.op == k)


def test_a_page_in_waits_for_the_write_of_its_tensor(residual):
    report = simulate(residual, make_board(), hand(residual, *PAGE_R))
    write, read = report.transfers
    assert read.service_s >= write.ended_s


def test_a_free_of_a_page_in_not_started_cancels_it(residual):
    lines = list(PAGE_R)
    i = lines.index("page_in r 8")
    lines[i:i + 1] = ["page_in r 8", "free r 8", "page_in r 8"]  # read, drop, read again
    schedule = hand(residual, *lines)
    assert check_schedule(residual, schedule).valid
    report = simulate(residual, make_board(), schedule)
    first, second = [t for t in report.transfers if t.kind == "page_in"]
    assert first.ended_s < 0 and first.started_s < 0  # queued behind the write, cancelled
    assert second.ended_s > 0
    assert report.bytes_paged_in == 16  # only the second read ran


def test_a_zero_byte_transfer_costs_nothing_and_wakes_nothing(residual):
    plain = plain_schedule(residual)
    steps = list(plain.steps)
    k = residual.index("fc1/grad")  # 0 B output
    at = next(i for i, s in enumerate(steps) if s.action is Action.COMPUTE and s.op == k)
    steps.insert(at + 1, Step(Action.PAGE_OUT, k, steps[at].stage))
    report = simulate(residual, make_board(), Schedule.for_graph(residual, steps))
    reference = simulate(residual, make_board(), plain)
    assert report.wakeups["storage"] == 0
    assert report.energy_j == pytest.approx(reference.energy_j)
    assert report.makespan_s == pytest.approx(reference.makespan_s)
    (write,) = report.transfers
    assert write.ended_s == write.started_s and write.device_bytes == 0
