"""The Chrome trace (poetsim.sim.trace), read by a real client: Chrome DevTools' own trace
engine, the npm package ``@paulirish/trace_engine`` (the Performance panel's model).

A small paging schedule (MLP, rpi4, Capuchin at 60 % RAM, a deadline marked) is simulated
with a trace; ``tests/trace_engine_check.mjs`` parses the file with the engine and prints
what it made of it. The engine is installed once into ``.trace_engine/`` (git-ignored) at the
pinned version below and reused by later runs; the tests skip only where ``node`` or ``npm``
is missing.

Found by this test and fixed in the trace writer: a slice whose ``ts + dur`` ended a
rounding error after the next slice of its thread started was left out of the flame chart
(``dur`` is now rounded down so that it never overlaps); instant events are phase ``"I"``
(the engine dropped ``"i"``). What the engine still does not take (an
``xfail(strict=True)`` below, so that a fix shows up as an unexpected pass):

* ``ts == 0`` means "no timestamp" to the engine, so the trace window starts at the first
  later event and cuts off the first slice of every thread.

Counters (``"C"``): no handler of the engine models generic counters (the Performance panel
draws only its own memory counters), so they are checked among the events the engine holds
after parsing.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from poetsim.boards import get_board
from poetsim.methods import produce
from poetsim.request import resolve_request
from poetsim.sim import simulate
from poetsim.sim.trace import write_chrome_trace
from poetsim.zoo import build_model

ENGINE_PACKAGE = "@paulirish/trace_engine"
ENGINE_VERSION = "0.0.65"
# The engine declares these dependencies as "latest"; pinned so that a run is repeatable.
ENGINE_OVERRIDES = {"third-party-web": "0.30.0", "legacy-javascript": "0.0.1"}

ROOT = Path(__file__).resolve().parent.parent
ENGINE_PREFIX = ROOT / ".trace_engine"
CHECK_SCRIPT = Path(__file__).with_name("trace_engine_check.mjs")


def _engine_manifest() -> dict:
    return {"name": "poetsim-trace-engine", "private": True,
            "description": "Chrome DevTools' trace engine for tests/test_trace_engine.py",
            "dependencies": {ENGINE_PACKAGE: ENGINE_VERSION},
            "overrides": ENGINE_OVERRIDES}


def _installed(prefix: Path) -> bool:
    try:
        manifest = json.loads((prefix / "package.json").read_text())
        engine = json.loads(
            (prefix / "node_modules" / ENGINE_PACKAGE / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return manifest == _engine_manifest() and engine.get("version") == ENGINE_VERSION


@pytest.fixture(scope="session")
def trace_engine() -> Path:
    """The folder the engine is installed in (``npm install --prefix``), installing it on
    first use."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not on PATH: cannot run Chrome's trace engine")
    ENGINE_PREFIX.mkdir(exist_ok=True)
    with open(ENGINE_PREFIX / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time
        if not _installed(ENGINE_PREFIX):
            (ENGINE_PREFIX / "package.json").write_text(
                json.dumps(_engine_manifest(), indent=2) + "\n")
            done = subprocess.run(
                ["npm", "install", "--prefix", str(ENGINE_PREFIX), "--no-audit", "--no-fund",
                 "--loglevel=error"],
                capture_output=True, text=True, timeout=300, check=False)
            if done.returncode != 0 or not _installed(ENGINE_PREFIX):
                pytest.fail(f"npm could not install {ENGINE_PACKAGE}@{ENGINE_VERSION} into "
                            f"{ENGINE_PREFIX}:\n{done.stdout}\n{done.stderr}")
    return ENGINE_PREFIX


@pytest.fixture(scope="module")
def traced(trace_engine, tmp_path_factory):
    """(the trace as written, the report, what the engine made of the trace)."""
    graph = build_model("mlp", layers=6)
    board = get_board("rpi4")
    request = resolve_request(graph, board, ram="60%", accounting="paper")
    produced = produce(request, "capuchin")
    assert produced.schedule is not None, produced.reason

    report = simulate(graph, board, produced.schedule, budget_bytes=request.ram_limit_bytes,
                      resident_bytes=request.resident_bytes, costs=request.costs, trace=True)
    assert report.page_outs > 0 and report.page_ins > 0, "want DMA and storage traffic"
    path = tmp_path_factory.mktemp("trace_engine") / "run.json"
    # A deadline of half the run, so that the trace also has an instant event.
    write_chrome_trace(report, path, deadline_s=report.makespan_s / 2)
    done = subprocess.run(["node", str(CHECK_SCRIPT), str(trace_engine), str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(path.read_text()), report, json.loads(done.stdout)


def _events(trace, phase):
    return [e for e in trace["traceEvents"] if e["ph"] == phase]


def _declared_threads(trace):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in _events(trace, "M")
            if e["name"] == "thread_name"}


def _engine_threads(facts):
    return {(t["pid"], t["tid"]): t for t in facts["threads"]}


def test_engine_reads_the_trace_without_errors_or_warnings(traced):
    _, _, facts = traced
    assert facts["engine_version"] == ENGINE_VERSION
    assert facts["parse_error"] is None
    assert facts["logged"] == []  # the engine logs what it cannot make sense of
    assert facts["warnings"] == {}
    assert facts["trace_is_generic"]  # not a browser recording: no page, no navigation


def test_one_engine_thread_per_declared_thread(traced):
    trace, _, facts = traced
    declared = _declared_threads(trace)
    assert {"cpu", "dma0", "cpu state", "dma state", "storage state"} <= set(declared.values())
    assert {tuple(int(x) for x in key.split(":")): name
            for key, name in facts["thread_names"].items()} == declared
    drawn = {key: t["name"] for key, t in _engine_threads(facts).items()}
    assert drawn == declared


def test_every_complete_event_is_an_entry_of_its_thread(traced):
    trace, _, facts = traced
    threads = _engine_threads(facts)
    written = defaultdict(Counter)
    for e in _events(trace, "X"):
        written[(e["pid"], e["tid"])][(e["name"], e["cat"], e["ts"], e["dur"])] += 1
    assert set(written) == set(threads)
    for key, slices in written.items():
        entries = Counter((e["name"], e["cat"], e["ts"], e["dur"])
                          for e in threads[key]["entries"] if e["ph"] == "X")
        assert entries == slices, f"thread {threads[key]['name']!r}"
    assert facts["event_phases"]["X"] == len(_events(trace, "X"))


def test_every_complete_event_is_drawn(traced):
    _, _, facts = traced
    left_out = {}
    for t in facts["threads"]:
        entries = sorted((e for e in t["entries"] if e["ph"] == "X"), key=lambda e: e["ts"])
        missing = [e for e in entries if not e["in_tree"]]
        if missing:
            overlaps = [f"{a['name']} ends {a['ts'] + a['dur'] - b['ts']:.3g} us after "
                        f"{b['name']} starts" for a, b in zip(entries, entries[1:])
                        if a["ts"] + a["dur"] > b["ts"]]
            left_out[t["name"]] = ([e["name"] for e in missing], overlaps)
    assert not left_out, f"slices the engine leaves out of the flame chart: {left_out}"


def test_every_counter_sample_arrives(traced):
    trace, _, facts = traced
    written = Counter((e["pid"], e["name"], e["ts"], tuple(sorted(e["args"])))
                      for e in _events(trace, "C"))
    held = Counter((c["pid"], c["name"], c["ts"], tuple(c["series"]))
                   for c in facts["counters"])
    assert held == written
    series = {name: keys for (_, name, _, keys) in held}
    assert series["power_mW"] == ("cpu", "dma", "storage")
    assert series["ram_bytes"] == ("budget", "live")


def test_instant_events_arrive_on_their_thread(traced):
    trace, _, facts = traced
    threads = _engine_threads(facts)
    instants = _events(trace, "I")
    assert [e["name"] for e in instants] == ["deadline"]
    for e in instants:
        entries = threads[(e["pid"], e["tid"])]["entries"]
        assert any(x["name"] == e["name"] and x["ts"] == e["ts"] for x in entries)


def test_trace_window_ends_with_the_run(traced):
    _, report, facts = traced
    assert facts["trace_bounds"]["max"] == pytest.approx(report.makespan_s * 1e6)


@pytest.mark.xfail(strict=True, reason=(
    "the engine takes ts == 0 as 'no timestamp' (MetaHandler ignores such events for the "
    "trace bounds), so the window starts at the first later event and the first slice of "
    "every thread falls before it"))
def test_trace_window_starts_with_the_run(traced):
    _, _, facts = traced
    assert facts["trace_bounds"]["min"] == 0.0
