"""One method at one point, and a content-addressed cache of its result.

A *point* is (graph, board, RAM budget, deadline); a *method* is ``"poet"`` (the MILP,
started from the fast baselines' schedules) or any baseline of
:data:`poetsim.baselines.BASELINES`. :func:`run_method` produces the method's schedule and
its predicted figures as one :class:`MethodRun`, whatever the method; :func:`simulate_run`
checks that schedule on the board. ``poetsim compare``, the sweeps and the paper's
experiments are loops over these two functions.

Solving is the expensive part, so a :class:`RunCache` keeps every :class:`MethodRun`
(schedule included) under a SHA-256 of everything that decides it: the graph's
fingerprint, every number of the board, the budget and deadline in bytes and seconds,
the method, the solver settings and poetsim's version. Names and sources of the board do
not enter the key, so an overridden copy of a board is a different point and a renamed
identical one is not. Entries are written atomically, one file each, so concurrent
writers never corrupt the cache and a killed process leaves no partial entry.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import attrs

from poetsim import __version__
from poetsim.boards.load import board_to_dict
from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, op_costs
from poetsim.errors import InputError
from poetsim.fileio import atomic_write_text
from poetsim.graph.graph import TrainingGraph, resident_memory
from poetsim.graph.io import graph_fingerprint
from poetsim.optimizer.solve import SolveStatus, parse_deadline, resolve_budget
from poetsim.schedule import Schedule
from poetsim.schedule.io import schedule_from_dict, schedule_to_dict
from poetsim.sim import SimReport, simulate

__all__ = ["CACHE_VERSION", "METHODS", "MethodRun", "RunCache", "method_names", "run_key",
           "run_method", "simulate_run"]

#: Bumped whenever a change makes cached runs stale.
CACHE_VERSION = 2

#: How often a MILP method is re-solved with a tighter deadline when its schedule misses
#: the deadline in the simulation.
MAX_DEADLINE_TIGHTENINGS = 3

#: Methods whose result depends on the solver settings (time limit, gap, seed).
SOLVER_METHODS = frozenset({"poet", "checkmate", "paging_only"})
#: Part of the key of the MILP methods' runs: bumped when the optimizer's search changes,
#: so that their cached runs go stale while the baselines' stay valid.
SOLVER_VERSION = 3


def method_names() -> tuple[str, ...]:
    """``"poet"`` first, then every baseline in :data:`poetsim.baselines.BASELINES` order."""
    from poetsim.baselines import BASELINES

    return ("poet", *BASELINES)


METHODS = method_names()


@attrs.frozen
class MethodRun:
    """What one method produced at one point, with its predicted figures.

    ``status`` is the method's own: ``optimal`` / ``feasible`` / ``infeasible`` /
    ``no_solution`` for POET, ``ok`` / ``infeasible`` / ``not_applicable`` for a baseline.
    ``energy_j``, ``time_s`` and ``peak_ram_bytes`` (activations, without the resident
    region) are predicted from the op list, not simulated. ``gap`` and ``bound_j`` are
    the solver's, for the MILP methods. ``run_time_s`` is the wall time the method took
    when it ran (a cached run keeps the original figure; ``cached`` says it came from the
    cache). ``solver_deadline_s`` is the deadline the MILP methods were last given: the
    user's, or tighter when the simulation found the schedule late (``tightenings``
    re-solves; see :func:`run_method`).
    """

    method: str
    status: str
    reason: str
    budget_activation_bytes: int
    resident_bytes: int
    deadline_s: float | None
    schedule: Schedule | None = attrs.field(default=None, repr=False, eq=False)
    energy_j: float | None = None
    time_s: float | None = None
    peak_ram_bytes: int | None = None
    gap: float | None = None
    bound_j: float | None = None
    run_time_s: float = 0.0
    solver_deadline_s: float | None = None
    tightenings: int = 0
    cached: bool = False

    @property
    def has_schedule(self) -> bool:
        return self.schedule is not None

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (no schedule steps)."""
        return {field.name: getattr(self, field.name) for field in attrs.fields(MethodRun)
                if field.name != "schedule"}


def _solver_settings(method: str, time_limit_s: float, gap_limit: float,
                     seed: int) -> dict[str, Any]:
    if method not in SOLVER_METHODS:
        return {}
    return {"time_limit_s": time_limit_s, "gap_limit": gap_limit, "seed": seed,
            "solver_version": SOLVER_VERSION}


def _board_numbers(board: Board) -> dict[str, Any]:
    """The board's document without what does not change a result (names, sources)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            if "value" in value and "source" in value:
                return strip(value["value"])
            return {k: strip(v) for k, v in value.items()
                    if k not in ("name", "title", "notes", "source", "ref")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(board_to_dict(board))


def run_key(graph: TrainingGraph, board: Board, method: str, budget_activation_bytes: int,
            deadline_s: float | None, solver_settings: dict[str, Any]) -> str:
    """SHA-256 (hex) of everything that decides a run's result."""
    document = {
        "cache_version": CACHE_VERSION, "poetsim": __version__, "method": method,
        "graph_fingerprint": graph_fingerprint(graph), "board": _board_numbers(board),
        "budget_activation_bytes": budget_activation_bytes,
        # repr keeps every bit of the float, so 1.5x of a slightly different board differs
        "deadline_s": None if deadline_s is None else repr(float(deadline_s)),
        "solver": solver_settings,
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RunCache:
    """A folder of cached :class:`MethodRun` results, one JSON file per key."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str, graph: TrainingGraph) -> MethodRun | None:
        """The cached run, or None (a missing or unreadable entry is a miss)."""
        path = self._path(key)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            fields = dict(doc["run"])
            raw = doc.get("schedule")
            schedule = None if raw is None else schedule_from_dict(raw, graph,
                                                                   source=str(path))
            run = MethodRun(**fields, schedule=schedule, cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.hits += 1
        return run

    def put(self, key: str, run: MethodRun, graph: TrainingGraph) -> None:
        fields = run.summary()
        fields.pop("cached")
        doc = {"format": "poetsim-run", "version": CACHE_VERSION, "key": key, "run": fields,
               "schedule": None if run.schedule is None else schedule_to_dict(run.schedule,
                                                                              graph)}
        atomic_write_text(self._path(key), json.dumps(doc, separators=(",", ":")))


def _poet(graph: TrainingGraph, board: Board, ram: int, deadline_s: float | None,
          time_limit_s: float, gap_limit: float, seed: int) -> dict[str, Any]:
    from poetsim.baselines.seeded import seeded_solve

    result = seeded_solve(graph, board, ram=ram, deadline=deadline_s,
                          time_limit_s=time_limit_s, gap_limit=gap_limit, seed=seed)
    m = result.metrics
    reason = "" if result.status is SolveStatus.OPTIMAL else result.message
    return {"status": result.status.value, "reason": reason, "schedule": result.schedule,
            "energy_j": m.energy_j if m else None, "time_s": m.time_s if m else None,
            "peak_ram_bytes": m.peak_ram_bytes if m else None, "gap": result.gap,
            "bound_j": result.bound_j}


def _baseline(method: str, graph: TrainingGraph, board: Board, costs: OpCosts, ram: int,
              deadline_s: float | None, time_limit_s: float, gap_limit: float,
              seed: int) -> dict[str, Any]:
    from poetsim.baselines import BASELINES

    extra = ({"time_limit_s": time_limit_s, "gap_limit": gap_limit, "seed": seed}
             if method in SOLVER_METHODS else {})
    result = BASELINES[method](graph, board, costs, ram, deadline_s=deadline_s, **extra)
    return {"status": result.status, "reason": result.reason, "schedule": result.schedule,
            "energy_j": result.energy_j, "time_s": result.time_s,
            "peak_ram_bytes": result.peak_ram_bytes, "gap": result.details.get("gap"),
            "bound_j": result.details.get("bound_j")}


def run_method(graph: TrainingGraph, board: Board, method: str, *, ram: str | int,
               deadline: str | float | None = None, time_limit_s: float = 30.0,
               gap_limit: float = 0.0, seed: int = 0, costs: OpCosts | None = None,
               cache: RunCache | None = None) -> MethodRun:
    """Run ``method`` at (``graph``, ``board``, ``ram``, ``deadline``), or fetch it from ``cache``.

    ``ram`` and ``deadline`` as for :func:`poetsim.optimizer.solve` (``"50%"`` of the plain
    peak, bytes, ``"256KiB"``; ``"1.5x"`` of the plain compute time, seconds).
    ``time_limit_s``, ``gap_limit`` and ``seed`` apply to the MILP methods (``poet``,
    ``checkmate``, ``paging_only``).
    """
    if method not in METHODS:
        raise InputError(f"method = {method!r}: must be one of {', '.join(METHODS)}")
    costs = op_costs(graph, board) if costs is None else costs
    budget = resolve_budget(graph, ram)
    deadline_s = parse_deadline(deadline, float(costs.compute_time_s.sum()))
    settings = _solver_settings(method, time_limit_s, gap_limit, seed)
    key = run_key(graph, board, method, budget.activation_bytes, deadline_s, settings)
    if cache is not None:
        found = cache.get(key, graph)
        if found is not None:
            return found
    started = time.perf_counter()

    def produce(solver_deadline_s: float | None, tightenings: int) -> MethodRun:
        if method == "poet":
            produced = _poet(graph, board, budget.activation_bytes, solver_deadline_s,
                             time_limit_s, gap_limit, seed)
        else:
            produced = _baseline(method, graph, board, costs, budget.activation_bytes,
                                 solver_deadline_s, time_limit_s, gap_limit, seed)
        return MethodRun(method=method, budget_activation_bytes=budget.activation_bytes,
                         resident_bytes=budget.resident_bytes, deadline_s=deadline_s,
                         solver_deadline_s=solver_deadline_s, tightenings=tightenings,
                         run_time_s=time.perf_counter() - started, **produced)

    run = produce(deadline_s, 0)
    if method in SOLVER_METHODS and deadline_s is not None:
        run = _meet_simulated_deadline(graph, board, run, costs, produce)
    if cache is not None:
        cache.put(key, run, graph)
    return run


def _meet_simulated_deadline(graph: TrainingGraph, board: Board, run: MethodRun,
                             costs: OpCosts, produce: Any) -> MethodRun:
    """Re-solve with a tighter deadline while the simulation finds the schedule late.

    The MILP counts a stage's transfers as overlapped with its compute; on a real board a
    page-in can stall its consumer, the storage wakes up, the bus is shared. When the
    simulated makespan misses the deadline, the solver's deadline shrinks by the overrun
    ratio and the method runs again, at most :data:`MAX_DEADLINE_TIGHTENINGS` times. The
    first schedule that meets the deadline in simulation is kept; if none does, the last
    one (whose report then says the deadline was missed).
    """
    assert run.deadline_s is not None
    for tightenings in range(1, MAX_DEADLINE_TIGHTENINGS + 1):
        report = simulate_run(graph, board, run, costs=costs)
        if report is None or report.makespan_s <= run.deadline_s:
            return run
        solver_deadline = run.solver_deadline_s * run.deadline_s / report.makespan_s
        retry = produce(solver_deadline, tightenings)
        if retry.schedule is None:
            return run  # tighter than any schedule can run: keep the late one
        run = retry
    return run


def simulate_run(graph: TrainingGraph, board: Board, run: MethodRun, *,
                 costs: OpCosts | None = None) -> SimReport | None:
    """Simulate ``run``'s schedule on ``board`` at its budget (plus the resident region)
    and deadline; None when the run has no schedule."""
    if run.schedule is None:
        return None
    resident = resident_memory(graph).total_bytes
    if resident != run.resident_bytes:
        raise InputError(f"run of {run.method!r} was made for {run.resident_bytes} resident "
                         f"bytes, graph {graph.name!r} has {resident}")
    return simulate(graph, board, run.schedule,
                    budget_bytes=run.budget_activation_bytes + run.resident_bytes,
                    resident_bytes=run.resident_bytes, deadline_s=run.deadline_s, costs=costs)
