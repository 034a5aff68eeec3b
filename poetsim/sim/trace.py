"""Chrome Trace Event / Perfetto JSON from a simulation's timeline.

Open the file in https://ui.perfetto.dev or ``chrome://tracing``. Layout (one process per
run):

* one thread per component for what it does: ``cpu`` (ops, stalls; transfers without DMA),
  ``dma0``, ``dma1``, ... (transfers), as complete (``"X"``) events whose ``args`` give the
  step, op and bytes;
* one thread per component for its power state (``cpu state``, ``dma state``,
  ``storage state``), each slice carrying the power in mW;
* counter (``"C"``) tracks ``power_mW`` (one series per component, stacked) and
  ``ram_bytes`` (with the budget as a second series);
* instant (``"i"``) events for RAM overflows and, when the caller gives one, the deadline
  the verdict judged against (drawn wherever it falls, met or missed).

Timestamps and durations are in microseconds, as the format requires (``ts`` may be
fractional). Slices on one thread never overlap (Perfetto requires strict nesting), which
holds because each component does one thing at a time and each DMA channel has its own
thread.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from poetsim.errors import InputError
from poetsim.fileio import atomic_write_text
from poetsim.sim.report import SimReport

__all__ = ["chrome_trace", "write_chrome_trace"]

_US = 1e6


def _order(name: str) -> tuple[int, str]:
    base = name.split(" ")[0]
    rank = {"cpu": 0, "storage": 2}.get(base, 1)
    return (rank, name)


def _span_us(start_s: float, end_s: float) -> tuple[float, float]:
    """A slice's ``ts`` and ``dur`` in microseconds with ``ts + dur`` never after the end:
    a slice that ends past the start of the next one on its thread (a rounding error of
    the subtraction) is dropped by trace viewers as badly nested."""
    ts, end = start_s * _US, end_s * _US
    dur = max(0.0, end - ts)
    while ts + dur > end and dur > 0.0:
        dur = math.nextafter(dur, 0.0)
    return ts, dur


def chrome_trace(report: SimReport, *, verdict: str | None = None,
                 deadline_s: float | None = None) -> dict[str, Any]:
    """The trace as a JSON-ready dict (needs a report made with ``trace=True``);
    ``verdict`` and ``deadline_s`` (from :mod:`poetsim.verdict`) are recorded with it when
    given."""
    timeline = report.timeline
    if timeline is None:
        raise InputError("the report has no timeline: simulate with trace=True")
    pid = 1
    threads: list[str] = []
    for s in timeline.slices:
        if s.component not in threads:
            threads.append(s.component)
    for st in timeline.states:
        name = f"{st.component} state"
        if name not in threads:
            threads.append(name)
    threads.sort(key=_order)
    tid = {name: i + 1 for i, name in enumerate(threads)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name",
         "args": {"name": f"{report.board_name}: {report.graph_name}"}},
    ]
    for name, t in tid.items():
        events.append({"ph": "M", "pid": pid, "tid": t, "name": "thread_name",
                       "args": {"name": name}})
        events.append({"ph": "M", "pid": pid, "tid": t, "name": "thread_sort_index",
                       "args": {"sort_index": t}})
    for s in timeline.slices:
        kind = s.name.split(" ")[0]
        ts, dur = _span_us(s.start_s, s.end_s)
        events.append({"ph": "X", "pid": pid, "tid": tid[s.component], "name": s.name,
                       "cat": kind, "ts": ts, "dur": dur, "args": dict(s.args)})
    for st in timeline.states:
        ts, dur = _span_us(st.start_s, st.end_s)
        events.append({"ph": "X", "pid": pid, "tid": tid[f"{st.component} state"],
                       "name": st.state, "cat": "power_state", "ts": ts, "dur": dur,
                       "args": {"power_mW": st.power_w * 1e3}})
    # Power counter: at every state change, the power of every component.
    changes = sorted((st.start_s, st.component, st.power_w) for st in timeline.states)
    current: dict[str, float] = {}
    for i, (t, component, power) in enumerate(changes):
        current[component] = power * 1e3
        if i + 1 < len(changes) and changes[i + 1][0] == t:
            continue
        events.append({"ph": "C", "pid": pid, "name": "power_mW", "ts": t * _US,
                       "args": dict(sorted(current.items()))})
    if changes:
        events.append({"ph": "C", "pid": pid, "name": "power_mW", "ts": report.makespan_s * _US,
                       "args": dict.fromkeys(sorted(current), 0.0)})
    for t, nbytes in timeline.ram:
        events.append({"ph": "C", "pid": pid, "name": "ram_bytes", "ts": t * _US,
                       "args": {"live": nbytes, "budget": report.budget_bytes}})
    instants = [(v.time_s, v.rule, v.message) for v in report.violations
                if v.time_s is not None]
    if deadline_s is not None:
        instants.append((deadline_s, "deadline", f"the deadline, {deadline_s:.6g} s; the "
                         f"makespan is {report.makespan_s:.6g} s"))
    for ts, name, message in instants:
        events.append({"ph": "I", "pid": pid, "tid": tid.get("cpu", 1), "s": "g",
                       "name": name, "ts": ts * _US, "args": {"message": message}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"graph": report.graph_name, "board": report.board_name,
                      "energy_j": report.energy_j, "makespan_s": report.makespan_s,
                      "peak_ram_bytes": report.peak_ram_bytes,
                      **({"verdict": verdict} if verdict else {})},
    }


def write_chrome_trace(report: SimReport, path: str | Path, *, verdict: str | None = None,
                       deadline_s: float | None = None) -> None:
    """Write :func:`chrome_trace` of ``report`` to ``path`` (atomically)."""
    atomic_write_text(path, json.dumps(chrome_trace(report, verdict=verdict,
                                                    deadline_s=deadline_s),
                                       separators=(",", ":")) + "\n")
