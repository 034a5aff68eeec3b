"""Sweep benchmark (pytest-benchmark): a 200-point what-if sweep on the local Dask cluster.

    ./run bench benchmarks/bench_sweep.py

Hypothetical nRF52840 boards: 5 SD read speeds x 2 RAM sizes x with and without DMA = 20
boards; on each, 5 RAM budgets (four fractions of the plain peak and "board", all of the
board's usable RAM) for POET (2 s time limit) and DTR: 200 points of a 6-layer MLP, run on
a local cluster of one single-threaded worker process per core. The budgets are the paper's
accounting (activations only): the MLP's 1.3 MB of parameters, gradients and optimizer
state do not fit either RAM size, so under the physical accounting every point would be
infeasible before any method runs, and nothing would be measured.

* ``test_sweep_200_points``: a fresh results store and an empty schedule cache; reports
  points per minute.
* ``test_sweep_200_points_cached``: the same sweep into a new results store with the
  first run's cache; reports the cache hit rate (every point should hit) and points per
  minute when nothing is solved.
"""

from __future__ import annotations

import os

import pytest

from poetsim.sweep import expand_points, parse_sweep, run_sweep

SWEEP = {
    "name": "bench_whatif",
    "models": [{"name": "mlp", "layers": 6, "width": 128}],
    "boards": ["nrf52840"],
    "ram": ["60%", "70%", "80%", "90%", "board"],
    "accounting": "paper",
    "deadlines": ["1.5x"],
    "methods": ["poet", "dtr"],
    "overrides": {
        # 16 MHz SPI carries 2 MB/s: up to 4x the measured 364 kB/s
        "storage.read_throughput_bytes_per_s": [1.82e5, 3.64e5, 7.28e5, 1.092e6, 1.456e6],
        "ram.bytes": [262144, 524288],
        "dma.channels": [0, 1],
    },
    "solver": {"time_limit_s": 2.0},
}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bench_sweep")


@pytest.fixture(scope="module")
def sweep():
    parsed = parse_sweep(SWEEP, origin="bench_sweep.py")
    assert len(expand_points(parsed)) == 200
    assert parsed.accounting.value == "paper"
    return parsed


def _run(benchmark, sweep, results, cache):
    return benchmark.pedantic(run_sweep, args=(sweep, results),
                              kwargs={"cache_dir": cache}, rounds=1, iterations=1)


def test_sweep_200_points(benchmark, sweep, sweep_dir, table_row):
    benchmark.group = "sweep"
    outcome = _run(benchmark, sweep, sweep_dir / "first.sqlite", sweep_dir / "cache")
    assert outcome.done + outcome.failed == 200 and outcome.failed == 0
    benchmark.extra_info.update(points_per_min=round(outcome.points_per_min, 1),
                                workers=outcome.workers, cache_hits=outcome.cache_hits)
    table_row(run="first (empty cache)", points=outcome.ran, workers=outcome.workers,
              cores=os.cpu_count(), wall_s=outcome.wall_s,
              points_per_min=outcome.points_per_min, cache_hit_rate=outcome.cache_hit_rate)
    print(f"\n200 points on {outcome.workers} workers in {outcome.wall_s:.1f} s: "
          f"{outcome.points_per_min:.1f} points/min, {outcome.cache_hits} cache hits")


def test_sweep_200_points_cached(benchmark, sweep, sweep_dir, table_row):
    benchmark.group = "sweep"
    if not (sweep_dir / "cache").is_dir():
        run_sweep(sweep, sweep_dir / "first.sqlite", cache_dir=sweep_dir / "cache")
    outcome = _run(benchmark, sweep, sweep_dir / "second.sqlite", sweep_dir / "cache")
    assert outcome.done == 200
    assert outcome.cache_hit_rate == 1.0
    benchmark.extra_info.update(points_per_min=round(outcome.points_per_min, 1),
                                cache_hit_rate=outcome.cache_hit_rate)
    table_row(run="second (same cache)", points=outcome.ran, workers=outcome.workers,
              cores=os.cpu_count(), wall_s=outcome.wall_s,
              points_per_min=outcome.points_per_min, cache_hit_rate=outcome.cache_hit_rate)
    print(f"\nsecond run: cache hit rate {outcome.cache_hit_rate:.0%}, "
          f"{outcome.points_per_min:.1f} points/min in {outcome.wall_s:.1f} s")
