"""The just-in-time transfer planner (poetsim.sim.planner, POET Algorithm 2)."""

from __future__ import annotations

import pytest
from conftest import make_board
from test_sim_support import PAGE_BOTH, PAGE_R, PAGE_X, evolve, hand

from poetsim.costs import op_costs
from poetsim.schedule import Action, check_schedule, plain_schedule
from poetsim.schedule.replay import replay
from poetsim.sim import simulate
from poetsim.sim.planner import ProgramProfile, _Lane, plan_transfers, program_profile


def slow_cpu_board(**storage):
    """Ops take milliseconds (1 kFLOP/s), no contention: the estimate is exact."""
    return evolve(make_board(**storage), cpu={"flops_per_s": 1e3},
                  bus={"contention_model": "none"})


def test_lane_latest_fit_skips_busy_intervals():
    lane = _Lane()
    lane.add(5.0, 7.0)
    lane.add(8.0, 9.0)
    assert lane.latest_fit(9.5, 1.0) == 9.5  # free after the last one
    assert lane.latest_fit(8.5, 1.0) == 7.0  # [8.5, 9.5) hits [8, 9); [7, 8) is free
    assert lane.latest_fit(8.0, 2.0) == 3.0  # no 2 s gap before 8 but [3, 5)
    lane.add(6.5, 8.5)  # overlaps both: merged into [5, 9)
    assert (lane.starts, lane.ends) == ([5.0], [9.0])


def test_profile_reproduces_the_checker_peak_and_counts(residual):
    for lines in (PAGE_R, PAGE_X, PAGE_BOTH):
        schedule = hand(residual, *lines)
        check = check_schedule(residual, schedule, resident_bytes=7)
        costs = op_costs(residual, make_board())
        profile = program_profile(replay(residual, schedule), costs, resident_bytes=7,
                                  cpu_moves_bytes=False)
        assert profile.peak_bytes == check.peak_ram_bytes
        assert profile.counts[Action.PAGE_IN] == check.page_ins
        assert profile.recomputes == check.recomputes


def test_profile_times_include_transfers_only_when_the_cpu_moves_bytes(residual):
    schedule = hand(residual, *PAGE_R)
    costs = op_costs(residual, make_board())
    with_dma = program_profile(replay(residual, schedule), costs, resident_bytes=0,
                               cpu_moves_bytes=False)
    without = program_profile(replay(residual, schedule), costs, resident_bytes=0,
                              cpu_moves_bytes=True)
    r = residual.index("r")
    assert with_dma.end_s == pytest.approx(float(costs.compute_time_s.sum()))
    assert without.end_s == pytest.approx(
        with_dma.end_s + float(costs.pagein_time_s[r] + costs.pageout_time_s[r]))


def test_a_page_in_arrives_just_when_its_consumer_starts(residual):
    board = slow_cpu_board()
    report = simulate(residual, board, hand(residual, *PAGE_R), trace=True)
    read = report.transfers[1]
    assert read.kind == "page_in"
    consumer = next(s for s in report.timeline.slices if s.name == "compute fc2/grad")
    assert read.consumer_step == consumer.args["step"]
    # It arrives when fc2/grad starts (to rounding): no stall worth the name.
    assert read.ended_s == pytest.approx(consumer.start_s, abs=1e-12)
    assert read.stall_s == pytest.approx(0.0, abs=1e-12)
    assert read.needed_s == pytest.approx(consumer.start_s)
    # 1 ms wake-up + 1.512 ms read before fc2/grad: issued 9.5 ms into loss/grad (12 ms),
    # ahead of its PAGE_IN step (15) but no earlier than needed.
    assert schedule_step(read.trigger_step) == "compute 'loss/grad', stage 6"
    assert read.started_s == pytest.approx(read.planned_start_s)
    assert read.service_s - read.started_s == pytest.approx(1e-3)  # the storage slept


def schedule_step(i: int) -> str:
    from conftest import residual_graph

    graph = residual_graph()
    return hand(graph, *PAGE_R).steps[i].describe(graph)


def test_when_two_page_ins_would_contend_one_starts_earlier(residual):
    schedule = hand(residual, *PAGE_BOTH)
    costs = op_costs(residual, make_board())
    # A made-up timeline: every op 10 ms, but fc2/grad and r/grad 0.5 ms each, so the two
    # reads (1.512 ms each) are needed 1 ms apart.
    short = {residual.index("fc2/grad"), residual.index("r/grad")}
    start, t = [], 0.0
    for step in schedule.steps:
        start.append(t)
        if step.action is Action.COMPUTE:
            t += 0.5e-3 if step.op in short else 10e-3
    profile = ProgramProfile(start, [0] * len(start), 0, t, {}, 0)
    plan = plan_transfers(replay(residual, schedule), costs, profile, ram_limit_bytes=1 << 20,
                          dma=True)
    read_r, read_x = [p for p in plan if p.kind == "page_in"]
    duration = float(costs.pagein_time_s[residual.index("x")])
    # x (needed last) is placed just in time; r moves earlier so that they do not overlap.
    assert read_x.planned_start_s == pytest.approx(read_x.needed_s - duration)
    assert read_r.planned_start_s + read_r.duration_s == pytest.approx(read_x.planned_start_s)
    assert read_r.planned_start_s + read_r.duration_s < read_r.needed_s
    # Each trigger is the step running at the planned start, with the offset into it.
    for p in (read_r, read_x):
        assert start[p.trigger_step] <= p.planned_start_s
        assert p.planned_start_s == pytest.approx(start[p.trigger_step] + p.offset_s)


def test_a_prefetch_that_would_exceed_the_ram_limit_is_delayed(residual):
    # x (32 B) is needed by fc1/grad; just in time would mean during r/grad, the peak (64 B).
    schedule = hand(residual, *PAGE_X)
    report = simulate(residual, slow_cpu_board(), schedule)
    read_x = report.transfers[-1]
    assert read_x.kind == "page_in" and read_x.op == "x"
    assert read_x.ram_delayed
    # The first step with room for 32 B more: "free s/grad" (RAM 32 B after it; triggers
    # at a step that is not a COMPUTE fire after its action).
    assert schedule.steps[read_x.trigger_step].describe(residual) == "free 's/grad', stage 9"
    assert read_x.stall_s > 0  # accepted: it arrives late
    assert report.peak_ram_bytes == check_schedule(residual, schedule).peak_ram_bytes


def test_without_dma_transfers_run_at_their_own_step(residual):
    costs = op_costs(residual, make_board(dma_channels=0))
    schedule = hand(residual, *PAGE_R)
    profile = program_profile(replay(residual, schedule), costs, resident_bytes=0,
                              cpu_moves_bytes=True)
    plan = plan_transfers(replay(residual, schedule), costs, profile, ram_limit_bytes=1 << 20,
                          dma=False)
    assert [(p.kind, p.step, p.trigger_step) for p in plan] == [("page_out", 4, 4),
                                                               ("page_in", 15, 15)]


def test_a_schedule_without_transfers_has_an_empty_plan(residual):
    report = simulate(residual, make_board(), plain_schedule(residual))
    assert report.transfers == ()
