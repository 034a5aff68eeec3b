"""Monte Carlo of a schedule under the board's write-busy variance (poetsim.sim.montecarlo)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_board, paper_request
from test_sim_support import PAGE_BOTH, hand

from poetsim.boards import WriteBusy
from poetsim.errors import InputError
from poetsim.schedule import Action
from poetsim.sim import simulate
from poetsim.sim.montecarlo import MAX_RUNS, monte_carlo
from poetsim.verdict import deadline_met_runs

TAIL = WriteBusy(median_s=1e-3, p99_s=2e-2, block_stall_probability=0.2, stall_min_s=0.01,
                 stall_max_s=0.25)


def _board(busy=TAIL, **kwargs):
    return make_board(write_busy=busy, **kwargs)


def test_same_seed_same_result_other_seed_other_result(residual):
    schedule = hand(residual, *PAGE_BOTH)
    a = monte_carlo(residual, _board(), schedule, runs=30, seed=4)
    b = monte_carlo(residual, _board(), schedule, runs=30, seed=4)
    c = monte_carlo(residual, _board(), schedule, runs=30, seed=5)
    assert a == b and a.as_dict(samples=True) | {"wall_s": 0} == \
        b.as_dict(samples=True) | {"wall_s": 0}
    assert a.varies and a.makespans_s != c.makespans_s
    # seeds are consecutive: c's runs are a's shifted by one
    assert c.makespans_s[:-1] == a.makespans_s[1:]


def test_run_i_is_the_single_simulation_with_seed_plus_i(residual):
    schedule = hand(residual, *PAGE_BOTH)
    result = monte_carlo(residual, _board(), schedule, runs=5, seed=100)
    for i in range(5):
        alone = simulate(residual, _board(), schedule, seed=100 + i)
        assert result.makespans_s[i] == alone.makespan_s
        assert result.energies_j[i] == alone.energy_j
    worst = int(np.argmax(result.makespans_s))
    assert result.worst_seed == 100 + worst


def test_percentiles_and_deadline_share_are_those_of_the_runs(residual):
    schedule = hand(residual, *PAGE_BOTH)
    nominal = simulate(residual, _board(), schedule)
    result = monte_carlo(residual, _board(), schedule, runs=200, seed=0)
    deadline = float(np.median(result.makespans_s))
    makespans = np.array(result.makespans_s)
    assert result.makespan_s.p50 == pytest.approx(np.percentile(makespans, 50))
    assert result.makespan_s.p99 == pytest.approx(np.percentile(makespans, 99))
    assert result.makespan_s.mean == pytest.approx(makespans.mean())
    assert result.makespan_s.max == makespans.max()
    assert result.energy_j.p99 == pytest.approx(np.percentile(result.energies_j, 99))
    met = deadline_met_runs(paper_request(residual, _board(), "100%", deadline),
                            result.makespans_s)
    assert met == int((makespans <= deadline).sum())
    assert 80 < met < 140
    # busy only adds time: nominal is the floor, and the tail shows at p99
    assert result.makespan_s.min >= nominal.makespan_s - 1e-12
    assert result.makespan_s.p99 > result.makespan_s.p50 > nominal.makespan_s
    assert result.energy_j.p50 > nominal.energy_j


def test_a_constant_busy_gives_identical_runs_shifted_by_hand(residual):
    """No DMA, 2 page-outs of one command each, 5 ms extra busy: every run is nominal
    + 10 ms."""
    busy = WriteBusy(median_s=0.005, p99_s=0.005, block_stall_probability=0.0)
    schedule = hand(residual, *PAGE_BOTH)
    nominal = simulate(residual, make_board(dma_channels=0), schedule)
    result = monte_carlo(residual, _board(busy, dma_channels=0), schedule, runs=7, seed=3)
    assert result.varies
    assert result.makespan_s.min == pytest.approx(nominal.makespan_s + 0.010, rel=1e-9)
    assert result.makespan_s.max == pytest.approx(result.makespan_s.min, rel=1e-12)
    late = paper_request(residual, make_board(), "100%", nominal.makespan_s + 0.005)
    assert deadline_met_runs(late, result.makespans_s) == 0


def test_without_a_distribution_every_run_is_the_nominal_run(residual):
    schedule = hand(residual, *PAGE_BOTH)
    nominal = simulate(residual, make_board(), schedule)
    result = monte_carlo(residual, make_board(), schedule, runs=1000, seed=9)
    assert not result.varies and "no storage.write_busy" in result.identical_reason
    assert set(result.makespans_s) == {nominal.makespan_s}
    assert result.energy_j.p99 == result.energy_j.p50 == nominal.energy_j
    assert len(result.energies_j) == 1000
    loose = paper_request(residual, make_board(), "100%", 1.0)
    assert deadline_met_runs(loose, result.makespans_s) == 1000


def test_a_schedule_that_writes_nothing_does_not_vary(residual):
    from poetsim.schedule import plain_schedule

    result = monte_carlo(residual, _board(), plain_schedule(residual), runs=3)
    assert not result.varies and "writes nothing" in result.identical_reason
    no_deadline = paper_request(residual, _board(), "100%", None)
    assert deadline_met_runs(no_deadline, result.makespans_s) is None


@pytest.mark.parametrize(("runs", "seed", "fragment"), [
    (0, 0, "runs = 0"), (MAX_RUNS + 1, 0, "runs = 100001"), (1.5, 0, "runs = 1.5"),
    (True, 0, "runs = True"), (3, -1, "seed = -1"), (3, "1", "seed = '1'"),
])
def test_bad_runs_or_seed(residual, runs, seed, fragment):
    with pytest.raises(InputError, match=fragment.replace("+", r"\+")):
        monte_carlo(residual, _board(), hand(residual, *PAGE_BOTH), runs=runs, seed=seed)


def test_weight_write_backs_draw_their_write_busy_time_too():
    """#32: a seeded run lengthens the runs that write weights back by the card's drawn
    busy time (they stall), and books its energy on the storage; energy still adds up."""
    import math
    from pathlib import Path

    from poetsim.regress import _golden

    request, schedule = _golden(Path(__file__).parents[1] / "schedules"
                                / "poet-resnet18_cifar_full_int8-nrf52840-board.json")
    assert schedule.counts()[Action.WRITE_WEIGHTS] > 0
    options = {"resident_bytes": request.resident_bytes, "trace": True}
    nominal = simulate(request.graph, request.board, schedule, **options)
    drawn = simulate(request.graph, request.board, schedule, seed=3, **options)

    def waits(report) -> list[float]:
        return [s.duration_s for s in report.timeline.slices if s.name == "stall"
                and s.args.get("waiting_for") == "storage (weights written back)"]

    assert nominal.write_busy_s == 0 and waits(nominal) == []
    assert len(waits(drawn)) == schedule.counts()[Action.WRITE_WEIGHTS]
    assert 0 < math.fsum(waits(drawn)) <= drawn.write_busy_s
    assert drawn.makespan_s > nominal.makespan_s and drawn.stall_s > nominal.stall_s
    assert drawn.energy_by_component_j["storage"] > nominal.energy_by_component_j["storage"]
    assert math.fsum(drawn.energy_by_component_j.values()) == pytest.approx(drawn.energy_j)
    again = simulate(request.graph, request.board, schedule, seed=3, **options)
    assert again.makespan_s == drawn.makespan_s  # the draws are the seed's
