"""Bus contention: the fluid fair-share model and compute slowdown (poetsim.sim.bus)."""

from __future__ import annotations

import pytest
import simpy
from conftest import make_board
from test_sim_support import PAGE_R, evolve, hand

from poetsim.costs import op_costs
from poetsim.sim import simulate
from poetsim.sim.bus import FairShareBus, IdealBus


def run_flows(bus_factory, flows, computes=()):
    """Start ``(at_s, nbytes, cap)`` flows and ``(at_s, work_s)`` ops; return end times."""
    env = simpy.Environment()
    bus = bus_factory(env)
    ends: dict[str, float] = {}

    def flow(name, at, nbytes, cap):
        yield env.timeout(at)
        yield bus.transfer(nbytes, cap)
        ends[name] = env.now

    def op(name, at, work):
        yield env.timeout(at)
        yield from bus.compute(work)
        ends[name] = env.now

    for i, (at, nbytes, cap) in enumerate(flows):
        env.process(flow(f"f{i}", at, nbytes, cap))
    for i, (at, work) in enumerate(computes):
        env.process(op(f"c{i}", at, work))
    env.run()
    return ends, bus


def fair(bandwidth=1e6, slowdown=1.1):
    return lambda env: FairShareBus(env, bandwidth, slowdown)


def test_one_flow_runs_at_its_cap():
    ends, bus = run_flows(fair(), [(0.0, 1e6, 0.5e6)])
    assert ends["f0"] == pytest.approx(2.0)
    assert bus.busy_s == pytest.approx(2.0) and bus.bytes_moved == 1e6


def test_two_concurrent_flows_split_the_bandwidth():
    ends, _ = run_flows(fair(), [(0.0, 1e6, 1e6), (0.0, 1e6, 1e6)])
    assert ends == pytest.approx({"f0": 2.0, "f1": 2.0})


def test_rates_are_recomputed_when_a_flow_starts_and_ends():
    # f0 alone for 0.5 s (0.5 MB), shares with f1 until it is done, then f1 speeds up.
    ends, bus = run_flows(fair(), [(0.0, 1e6, 1e6), (0.5, 1e6, 1e6)])
    assert ends["f0"] == pytest.approx(1.5)
    assert ends["f1"] == pytest.approx(2.0)
    assert bus.busy_s == pytest.approx(2.0)


def test_max_min_fairness_gives_a_slow_flow_its_cap_and_the_rest_to_others():
    ends, _ = run_flows(fair(), [(0.0, 0.25e6, 0.25e6), (0.0, 1e6, 1e6)])
    assert ends["f0"] == pytest.approx(1.0)  # capped at 0.25 MB/s
    assert ends["f1"] == pytest.approx(1.0 + 0.25)  # 0.75 MB/s for 1 s, then 1 MB/s


def test_no_contention_ignores_the_bandwidth():
    ends, bus = run_flows(lambda env: IdealBus(env, 1e6), [(0.0, 1e6, 1e6), (0.0, 1e6, 1e6)])
    assert ends == pytest.approx({"f0": 1.0, "f1": 1.0})
    bus.finish(1.0)
    assert bus.busy_s == pytest.approx(1.0)  # the union of the two intervals


def test_compute_slows_down_only_while_a_flow_is_active():
    ends, _ = run_flows(fair(slowdown=1.1), [(0.0, 0.5e6, 1e6)], [(0.0, 1.0)])
    # 0.5 s at 1/1.1, then the rest at full speed
    assert ends["c0"] == pytest.approx(0.5 + (1.0 - 0.5 / 1.1))
    ends, _ = run_flows(fair(slowdown=1.1), [(0.0, 1e7, 1e6)], [(1.0, 1.0)])
    assert ends["c0"] == pytest.approx(2.1)
    ends, _ = run_flows(fair(slowdown=1.1), [], [(0.0, 1.0)])
    assert ends["c0"] == pytest.approx(1.0)
    # Two separate 0.1 s flows during one op: slowed twice, sped up twice.
    ends, _ = run_flows(fair(slowdown=1.1), [(0.1, 1e5, 1e6), (0.5, 1e5, 1e6)], [(0.0, 1.0)])
    assert ends["c0"] == pytest.approx(1.0 + 0.2 * (1 - 1 / 1.1))


def test_an_op_without_concurrent_transfers_costs_one_event():
    env = simpy.Environment()
    bus = FairShareBus(env, 1e6, 1.1)

    def op():
        yield from bus.compute(1.0)

    env.process(op())
    env.run()
    # process start + one timeout + process end
    assert next(env._eid) == 3


def paging_board(contention: str, queue_depth: int | None = 2):
    """Two DMA channels, a storage serving ``queue_depth`` commands at once; reads, writes
    and the bus all at 1 MB/s."""
    return evolve(make_board(write_throughput_bytes_per_s=1e6, queue_depth=queue_depth),
                  dma={"channels": 2},
                  bus={"bandwidth_bytes_per_s": 1e6, "contention_model": contention})


WRITE_TWO = ("compute x 0", "compute fc1 1", "page_out x 1", "page_out fc1 1", "compute r 2",
             "free fc1 2", *PAGE_R[4:])


def test_fair_share_slows_two_concurrent_page_outs(residual):
    schedule = hand(residual, *WRITE_TWO)
    alone = simulate(residual, paging_board("none"), schedule)
    shared = simulate(residual, paging_board("fair_share"), schedule)
    for report in (alone, shared):
        x, fc1 = report.transfers[:2]
        assert (x.op, fc1.op) == ("x", "fc1")
        assert x.service_s == fc1.service_s  # both wait for the same storage wake-up
    # 2 ms command + 512 B at 1 MB/s alone, at 0.5 MB/s each when sharing the bus
    for t in alone.transfers[:2]:
        assert t.ended_s - t.service_s == pytest.approx(2e-3 + 0.512e-3)
    for t in shared.transfers[:2]:
        assert t.ended_s - t.service_s == pytest.approx(2e-3 + 1.024e-3)
    # Longer transfers draw their power for longer.
    assert shared.energy_by_kind_j["page_out"] > alone.energy_by_kind_j["page_out"]
    # x and fc1 together, then r alone (both channels were busy when it was issued), then
    # the read of r: 0.512 ms of data each
    assert shared.bus_busy_s == pytest.approx(1.024e-3 + 0.512e-3 + 0.512e-3, rel=1e-6)


def test_compute_overlapping_dma_takes_longer_on_a_fair_share_bus(residual):
    # A slow CPU: fc2 (32 FLOP) runs 32 ms, across the whole write of r (1 ms wake-up,
    # 2 ms command, then 1.024 ms of data on the bus); the read of r (0.512 ms of data)
    # also runs under an op.
    slow = evolve(make_board(), cpu={"flops_per_s": 1e3})
    schedule = hand(residual, *PAGE_R)
    none = simulate(residual, evolve(slow, bus={"contention_model": "none"}), schedule)
    shared = simulate(residual, slow, schedule)  # compute_slowdown 1.1
    costs = op_costs(residual, slow)
    assert none.compute_s == pytest.approx(float(costs.compute_time_s.sum()))
    # During a data phase of d seconds an op progresses d / 1.1: it ends d (1 - 1/1.1) later.
    data_s = 1.024e-3 + 0.512e-3
    assert shared.compute_s - none.compute_s == pytest.approx(data_s * (1 - 1 / 1.1), rel=1e-6)
    # The op's power is drawn for longer: more compute energy.
    assert shared.energy_by_kind_j["compute"] > none.energy_by_kind_j["compute"]


def test_dma_channels_do_not_multiply_a_single_queue_storage(residual):
    """An SD card over SPI serves one command at a time: a second channel waits."""
    schedule = hand(residual, *WRITE_TWO)
    report = simulate(residual, paging_board("none", queue_depth=None), schedule)
    x, fc1 = report.transfers[:2]
    assert fc1.started_s >= x.ended_s
    assert x.ended_s - x.service_s == pytest.approx(2e-3 + 0.512e-3)
