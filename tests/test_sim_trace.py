"""The recorded timeline and the Chrome / Perfetto trace (poetsim.sim.timeline, .trace)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from conftest import make_board
from test_sim_support import PAGE_BOTH, hand

from poetsim.errors import InputError
from poetsim.sim import simulate
from poetsim.sim.trace import chrome_trace, write_chrome_trace


@pytest.fixture
def report(residual):
    return simulate(residual, make_board(), hand(residual, *PAGE_BOTH), trace=True)


def test_without_trace_there_is_no_timeline(residual):
    plain = simulate(residual, make_board(), hand(residual, *PAGE_BOTH))
    assert plain.timeline is None
    with pytest.raises(InputError, match="trace=True"):
        chrome_trace(plain)


def test_timeline_states_cover_the_run_per_component(report):
    by_component = defaultdict(list)
    for st in report.timeline.states:
        by_component[st.component].append(st)
    assert set(by_component) == {"cpu", "dma", "storage"}
    for states in by_component.values():
        states.sort(key=lambda s: s.start_s)
        assert states[0].start_s == 0.0
        assert states[-1].end_s == pytest.approx(report.makespan_s)
        for a, b in zip(states, states[1:]):
            assert a.end_s == pytest.approx(b.start_s)


def test_chrome_trace_layout(report, tmp_path):
    trace = chrome_trace(report, deadline_s=1e-3)
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"cpu", "dma0", "cpu state", "dma state", "storage state"}
    slices = [e for e in events if e["ph"] == "X"]
    compute = next(e for e in slices if e["name"] == "compute fc1")
    cpu_slice = next(s for s in report.timeline.slices if s.name == "compute fc1")
    assert compute["ts"] == pytest.approx(cpu_slice.start_s * 1e6)  # microseconds
    assert compute["dur"] == pytest.approx(cpu_slice.duration_s * 1e6)
    # Slices on one thread never overlap, not even by a rounding error (viewers need strict
    # nesting: Chrome's trace engine drops a slice that ends after the next one starts).
    by_tid = defaultdict(list)
    for e in slices:
        by_tid[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_tid.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"power_mW", "ram_bytes"}
    deadline = [e for e in events if e["ph"] == "I" and e["name"] == "deadline"]
    assert [e["ts"] for e in deadline] == [pytest.approx(1e3)]  # 1 ms in microseconds
    assert not any(e["ph"] == "I" for e in chrome_trace(report)["traceEvents"])
    path = tmp_path / "run.json"
    write_chrome_trace(report, path)
    assert json.loads(path.read_text())["otherData"]["energy_j"] == report.energy_j


def test_power_counter_integrates_to_the_energy(report):
    events = chrome_trace(report)["traceEvents"]
    samples = [(e["ts"] / 1e6, sum(e["args"].values())) for e in events
               if e["ph"] == "C" and e["name"] == "power_mW"]
    energy = sum(p / 1e3 * (t2 - t1) for (t1, p), (t2, _) in zip(samples, samples[1:]))
    assert energy == pytest.approx(report.energy_j, rel=1e-9)
