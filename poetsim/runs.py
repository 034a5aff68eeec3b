"""One method at one request, simulated and judged: the loop every study shares.

:func:`run_method` runs a method (:mod:`poetsim.methods`) on a resolved
:class:`~poetsim.request.Request` and returns an :class:`Outcome` holding the method's
status, schedule and predicted figures; :func:`judge_outcome` simulates that schedule on
the board and adds the simulated figures and the :class:`~poetsim.verdict.Verdict`;
:func:`run_and_judge` does both. ``poetsim compare``, the demo, sweeps and the paper's
experiments are loops over :func:`run_and_judge`.

POET's orchestration lives here too: a MILP schedule that misses the planning deadline in
simulation (a page-in stalls its consumer, the storage wakes up) is solved again with the
solver's deadline shrunk by the overrun, at most :data:`MAX_DEADLINE_TIGHTENINGS` times;
and any method's schedule whose buffers do not lay out in the RAM it may use plans again
with less, or is compacted with MOVE steps (:mod:`poetsim.schedule.compaction`), whichever
passes with less simulated energy (:func:`_meet_the_board`).
The planning deadline is the user's deadline minus the request's margin (none by default:
the user's deadline), so a margin asked for is kept in simulation too. The request, and so
every schedule's metadata and verdict, keeps the user's deadline.

Solving is the expensive part, so a :class:`RunCache` keeps every unjudged
:class:`Outcome` (schedule included) under a SHA-256 of everything that decides it: the
graph's fingerprint, every number of the board, the resolved budget, deadline and
accounting, the method, the solver settings and poetsim's version. Names and sources of
the board do not enter the key, so an overridden copy of a board is a different point and
a renamed identical one is not. Entries are written atomically, one file each, so
concurrent writers never corrupt the cache and a killed process leaves no partial entry.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from poetsim import __version__, clock
from poetsim.boards.load import board_numbers
from poetsim.errors import OutOfTime
from poetsim.fileio import atomic_write_text
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.methods import METHODS, MethodStatus, Produced, SolverSettings, produce
from poetsim.request import Accounting, Request
from poetsim.schedule import plain_schedule
from poetsim.schedule.compaction import compact
from poetsim.schedule.io import DIGEST_FIELD, schedule_from_dict, schedule_to_dict
from poetsim.schedule.model import predict
from poetsim.schedule.ops import Action
from poetsim.schedule.replay import replay
from poetsim.sim import SimReport, simulate
from poetsim.units import energy_overhead, meets_deadline
from poetsim.verdict import CornerVerdict, Verdict, check_on_board, judge_corners

__all__ = ["CACHE_VERSION", "MAX_DEADLINE_TIGHTENINGS", "METHODS", "SOLVER_VERSION", "UNCHECKED",
           "Outcome",
           "RunCache", "corners_by", "judge_outcome", "reference_energy_by", "reference_energy_j",
           "run_all_and_judge", "run_and_judge", "run_key", "run_method", "with_overheads"]

#: The verdict column of a schedule the time limit left unchecked (never PASS or FAIL).
UNCHECKED = "unchecked"

#: Bumped whenever a change makes cached runs stale.
CACHE_VERSION = 10

#: How often a MILP method is re-solved with a tighter deadline when its schedule misses
#: the deadline in the simulation.
MAX_DEADLINE_TIGHTENINGS = 3
#: How often a method plans again with a lower activation budget when its schedule's
#: buffers do not lay out in the RAM it may use.
MAX_ARENA_REPLANS = 3
#: The least time a plan made again gets; with less of the run's time limit left, the
#: last schedule is kept (the limit holds for the whole run, retries included).
_MIN_RETRY_S = 0.5
#: The least time limit a method is run with when a command's share for it is smaller
#: (or gone): it then answers at once, most often that it ran out of its time.
_MIN_LIMIT_S = 0.01

#: Part of the key of the MILP methods' runs: bumped when the optimizer's search changes,
#: so that their cached runs go stale while the baselines' stay valid.
SOLVER_VERSION = 18

#: The fields of :class:`~poetsim.methods.Produced` a cache entry keeps (all but its
#: schedule, kept apart, and POET's whole result, which is not cached).
_PRODUCED_FIELDS = ("status", "reason", "predicted_energy_j", "predicted_time_s",
                    "predicted_peak_ram_bytes", "gap", "bound_j", "limits_hit")
#: The fields a cache entry keeps: everything an unjudged outcome holds but its schedule.
_RUN_FIELDS = ("method", "status", "reason", "accounting", "budget_bytes",
               "budget_activation_bytes", "resident_bytes", "deadline_s",
               "predicted_energy_j", "predicted_time_s", "predicted_peak_ram_bytes", "gap",
               "bound_j", "run_time_s", "solver_deadline_s", "tightenings", "limits_hit",
               "planned_activation_bytes")


@attrs.frozen
class Outcome:
    """What one method produced at one request, and (once judged) what the board did.

    ``status`` is the method's own answer; ``feasible`` is the verdict's (a schedule that
    passed the simulation on the board). ``deadline_s`` is the user's;
    ``solver_deadline_s`` the one the MILP methods were last given (tighter after
    ``tightenings`` re-solves). ``predicted_*`` come from the method's model of the op
    list; ``energy_j``, ``makespan_s`` and ``peak_total_bytes`` (everything resident,
    parameters included) are simulated. ``energy_overhead`` is ``energy_j / reference - 1``
    against every op once with unlimited RAM on the same board (:func:`with_overheads`).
    ``run_time_s`` is the wall time the method took when it ran (``cached``: it came from
    the cache).
    """

    method: str
    #: what the method made: its status, reason, schedule and predicted figures
    produced: Produced
    accounting: str
    budget_bytes: int
    budget_activation_bytes: int
    resident_bytes: int
    deadline_s: float | None
    run_time_s: float = 0.0
    solver_deadline_s: float | None = None
    tightenings: int = 0
    #: the activation budget the method last planned against, when lowered below the
    #: request's to leave room for the arena's fragmentation (None: the request's)
    planned_activation_bytes: int | None = None
    cached: bool = False
    report: SimReport | None = attrs.field(default=None, repr=False, eq=False)
    verdict: Verdict | None = None
    energy_overhead: float | None = None
    #: the schedule judged at every corner of the board's ranges, typical first, when
    #: asked for (:func:`poetsim.verdict.judge_corners`)
    corners: tuple[CornerVerdict, ...] = attrs.field(default=(), converter=tuple, eq=False)
    #: why the schedule has no verdict: the time limit ran out while it was checked on the
    #: board (one line naming the limit); "" when it was checked, or is yet to be
    unchecked: str = ""

    @property
    def feasible(self) -> bool:
        """The schedule passed on the board (never one that was not checked)."""
        return self.verdict is not None and self.verdict.passed

    @property
    def verdict_label(self) -> str | None:
        """PASS or FAIL, ``"unchecked"`` when the time limit ran out while the schedule was
        checked, None without a schedule to judge."""
        if self.verdict is not None:
            return self.verdict.label
        return UNCHECKED if self.unchecked else None

    # what the method made, read through: the record is the Produced one
    status = property(lambda self: self.produced.status)
    reason = property(lambda self: self.produced.reason)
    schedule = property(lambda self: self.produced.schedule)
    predicted_energy_j = property(lambda self: self.produced.predicted_energy_j)
    predicted_time_s = property(lambda self: self.produced.predicted_time_s)
    predicted_peak_ram_bytes = property(lambda self: self.produced.predicted_peak_ram_bytes)
    gap = property(lambda self: self.produced.gap)
    bound_j = property(lambda self: self.produced.bound_j)
    limits_hit = property(lambda self: self.produced.limits_hit)
    solve_result = property(lambda self: self.produced.solve_result)

    @property
    def energy_j(self) -> float | None:
        return None if self.report is None else self.report.energy_j

    @property
    def makespan_s(self) -> float | None:
        return None if self.report is None else self.report.makespan_s

    @property
    def peak_total_bytes(self) -> int | None:
        return None if self.report is None else self.report.peak_ram_bytes

    @property
    def why_not(self) -> str:
        """One line: why this outcome is not feasible ("" when it is)."""
        if self.feasible:
            return ""
        parts = [self.reason] if self.reason else []
        if self.unchecked:
            parts.append(f"not checked on the board: {self.unchecked}")
        if self.verdict is not None:
            parts += list(self.verdict.violations)
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures (no schedule steps), the verdict's flattened in."""
        out = {name: getattr(self, name) for name in _RUN_FIELDS}
        out["status"] = self.status.value
        schedule = self.schedule
        out.update(
            feasible=self.feasible, cached=self.cached, energy_j=self.energy_j,
            energy_overhead=self.energy_overhead, makespan_s=self.makespan_s,
            recomputations=schedule.recomputations() if schedule is not None else 0,
            page_outs=schedule.page_outs if schedule is not None else 0,
            page_ins=schedule.page_ins if schedule is not None else 0,
            why_not=self.why_not)
        if self.verdict is not None:
            out.update(self.verdict.as_dict())
        else:
            out.update(verdict=self.verdict_label, fits_board_ram=None, peak_total_bytes=None,
                       arena_bytes=None, board_ram_bytes=None, violations=[])
        if self.corners:
            out["corners"] = [c.as_dict() for c in self.corners]
        return out


def run_key(request: Request, method: str, solver_settings: dict[str, Any]) -> str:
    """SHA-256 (hex) of everything that decides a run's result."""
    document = {
        "cache_version": CACHE_VERSION, "poetsim": __version__, "method": method,
        "graph_fingerprint": graph_fingerprint(request.graph),
        "board": board_numbers(request.board), "accounting": request.accounting.value,
        "budget_bytes": request.budget_bytes,
        "budget_activation_bytes": request.activation_budget_bytes,
        "resident_bytes": request.resident_bytes,
        # repr keeps every bit of the float, so 1.5x of a slightly different board differs
        "deadline_s": None if request.deadline_s is None else repr(float(request.deadline_s)),
        # only when a margin is asked for, so that the keys of runs without one stay put
        **({"deadline_margin_s": repr(float(request.deadline_margin_s))}
           if request.deadline_margin_s else {}),
        "solver": {**solver_settings, "solver_version": SOLVER_VERSION} if solver_settings
        else {},
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RunCache:
    """A folder of cached unjudged :class:`Outcome` results, one JSON file per key."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str, request: Request) -> Outcome | None:
        """The cached outcome, or None (a missing or unreadable entry is a miss)."""
        path = self._path(key)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            fields = {name: doc["run"][name] for name in _RUN_FIELDS}
            raw = doc.get("schedule")
            schedule = None if raw is None else schedule_from_dict(raw, request.graph,
                                                                   source=str(path))
            made = {name: fields.pop(name) for name in _PRODUCED_FIELDS}
            produced = Produced(**{**made, "status": MethodStatus(made["status"]),
                                   "limits_hit": tuple(made["limits_hit"])},
                                schedule=schedule)
            outcome = Outcome(**fields, produced=produced, cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.hits += 1
        return outcome

    def put(self, key: str, outcome: Outcome, request: Request) -> None:
        fields = {name: getattr(outcome, name) for name in _RUN_FIELDS}
        fields["status"] = outcome.status.value
        schedule = None
        if outcome.schedule is not None:
            # the entry is found by the key of what made it, so the file's digest is left
            # out: a cached run gives the schedule a fresh run gives
            schedule = schedule_to_dict(outcome.schedule, request.graph)
            schedule["metadata"].pop(DIGEST_FIELD)
        doc = {"format": "poetsim-run", "version": CACHE_VERSION, "key": key, "run": fields,
               "schedule": schedule}
        atomic_write_text(self._path(key), json.dumps(doc, separators=(",", ":")))


def run_method(request: Request, method: str, settings: SolverSettings = SolverSettings(), *,
               cache: RunCache | None = None,
               solve_options: dict[str, Any] | None = None,
               stop_at: float | None = None) -> Outcome:
    """Run ``method`` on ``request``, or fetch it from ``cache``; the outcome is judged
    when a schedule was simulated to check it, else unjudged.

    A MILP method whose schedule misses the user's deadline in simulation is solved again
    with a tighter solver deadline, and any method whose buffers do not lay out plans
    again with less RAM (see the module docstring). ``solve_options`` go to POET's solver
    (:func:`~poetsim.methods.produce`; not part of the cache key: no cache with them).
    The run keeps within ``settings.time_limit_s``, and ends by ``stop_at`` (a
    :func:`time.perf_counter` instant: a command's share for it) when that is sooner.
    """
    solver_settings = settings.for_method(method)
    key = run_key(request, method, solver_settings)
    if cache is not None:
        found = cache.get(key, request)
        if found is not None:
            return found
    started = time.perf_counter()
    if stop_at is not None and stop_at - started < settings.time_limit_s:
        settings = attrs.evolve(settings, time_limit_s=max(stop_at - started, _MIN_LIMIT_S))

    def time_left_s() -> float:
        return settings.time_limit_s - (time.perf_counter() - started)

    made_last: list[Produced | None] = [None]  # what the method made last, for its figures

    def attempt(solver_deadline_s: float | None, tightenings: int,
                budget_bytes: int | None = None) -> Outcome:
        # the time limit holds for the whole run: a plan made again gets what is left
        left = time_left_s() if budget_bytes is not None or tightenings else None
        with clock.doing(f"{method} was searching"):
            made = made_last[0] = produce(
                request, method, settings if left is None
                else attrs.evolve(settings, time_limit_s=max(left, _MIN_RETRY_S)),
                deadline_s=solver_deadline_s, budget_bytes=budget_bytes,
                solve_options=solve_options)
        return Outcome(
            method=method, produced=made, accounting=request.accounting.value,
            budget_bytes=request.budget_bytes,
            budget_activation_bytes=request.activation_budget_bytes,
            resident_bytes=request.resident_bytes, deadline_s=request.deadline_s,
            run_time_s=time.perf_counter() - started, solver_deadline_s=solver_deadline_s,
            tightenings=tightenings, planned_activation_bytes=budget_bytes)

    try:
        # the work far below that grows faster than the graph reads this limit too
        with clock.limit(started + settings.time_limit_s):
            outcome = _meet_the_board(
                request, attempt(request.planning_deadline_s, 0), attempt,
                retime=bool(solver_settings) and request.deadline_s is not None,
                time_left_s=time_left_s, limit_s=settings.time_limit_s)
    except OutOfTime as err:
        outcome = _out_of_time(request, method, settings.time_limit_s,
                               time.perf_counter() - started, made_last[0], err.when)
    # a run the limit cut short is kept only under a key that records the limit it had
    cut_short = "time" in outcome.limits_hit or time_left_s() <= 0
    if cache is not None and not (cut_short and (not solver_settings
                                                 or settings.time_limit_s
                                                 != solver_settings["time_limit_s"])):
        cache.put(key, outcome, request)
    return outcome


#: What a command keeps of its time limit for what follows its methods (the reference
#: simulation, judging at corners, writing files), and each method's weight in sharing
#: the rest: a MILP search is the one that uses what it is given, and POET's is the one
#: the command is about.
_COMMAND_RESERVE = 0.1
_POET_WEIGHT, _MILP_WEIGHT, _BASELINE_WEIGHT = 2.0, 1.0, 0.25


def _weight(method: str, settings: SolverSettings) -> float:
    if method == "poet":
        return _POET_WEIGHT
    return _MILP_WEIGHT if settings.for_method(method) else _BASELINE_WEIGHT


def run_all_and_judge(request: Request, methods: Iterable[str],
                      settings: SolverSettings = SolverSettings(), *,
                      cache: RunCache | None = None, trace: Iterable[str] = (),
                      started: float | None = None, reserve_s: float = 0.0,
                      each: Callable[[str, Outcome | None], None] | None = None
                      ) -> list[Outcome]:
    """:func:`run_and_judge` of every one of ``methods``, in that order.

    With ``started`` (a :func:`time.perf_counter` instant: a command's start), all of them
    keep within one ``settings.time_limit_s`` counted from it: each method gets a share of
    what the ones before it left, weighed by :func:`_weight`, so a method that finishes
    early leaves its time to the next (all but :data:`_COMMAND_RESERVE` of the limit, and
    ``reserve_s`` for what the command does after them); without it, each has the whole
    limit. ``trace``: the
    methods whose simulation keeps its trace. ``each(name, None)`` is called before a
    method runs and ``each(name, outcome)`` after."""
    names = list(methods)
    trace = frozenset(trace)
    stop_at = (None if started is None
               else started + (1 - _COMMAND_RESERVE) * settings.time_limit_s - reserve_s)
    weights = [_weight(n, settings) for n in names]
    outcomes = []
    with clock.command(started, settings.time_limit_s):  # what runs out names it
        for i, name in enumerate(names):
            share_at = None
            if stop_at is not None:
                now = time.perf_counter()
                share_at = now + max(0.0, stop_at - now) * weights[i] / sum(weights[i:])
            if each is not None:
                each(name, None)
            if share_at is not None and share_at <= time.perf_counter():
                # nothing left: even a method's set-up (its plain schedule, say) would overrun
                outcome = _out_of_time(request, name, None, 0.0, None,
                                       f"before {name} could start")
            else:
                outcome = run_method(request, name, settings, cache=cache, stop_at=share_at)
                with clock.limit(share_at):  # judged within the method's share
                    outcome = judge_outcome(request, outcome, trace=name in trace)
            if each is not None:
                each(name, outcome)
            outcomes.append(outcome)
    return outcomes


def _out_of_time(request: Request, method: str, time_limit_s: float | None,
                 run_time_s: float, made: Produced | None, when: str = "") -> Outcome:
    """The run's outcome when its limit (``time_limit_s``, its share of the command's)
    ran out ``when`` (default: while it searched): no schedule, and what to raise; a MILP
    method's result (``made``'s) says the same, its search figures kept."""
    reason = clock.ran_out(when or f"while {method} was searching", time_limit_s, method)
    solved = None if made is None else made.solve_result
    if solved is not None:
        solved = attrs.evolve(solved, status=MethodStatus.NO_SOLUTION, message=reason,
                              schedule=None, plan=None, metrics=None, objective_j=None,
                              gap=None, limits_hit=tuple(sorted({*solved.limits_hit, "time"})))
    produced = Produced(MethodStatus.NO_SOLUTION, reason, limits_hit=("time",),
                        solve_result=solved)
    return Outcome(method=method, produced=produced, accounting=request.accounting.value,
                   budget_bytes=request.budget_bytes,
                   budget_activation_bytes=request.activation_budget_bytes,
                   resident_bytes=request.resident_bytes, deadline_s=request.deadline_s,
                   run_time_s=run_time_s)


def _judged(outcome: Outcome, report: SimReport, verdict: Verdict) -> Outcome:
    """``outcome`` with its simulation and verdict, its schedule carrying the layout the
    run used (what a schedule file then records)."""
    schedule = outcome.schedule
    if schedule is not None and report.layout is not None:
        schedule = attrs.evolve(schedule, layout=report.layout)
    return attrs.evolve(outcome, produced=attrs.evolve(outcome.produced, schedule=schedule),
                        report=report, verdict=verdict)


def _meet_the_board(request: Request, outcome: Outcome, attempt: Any, *,
                    retime: bool, time_left_s: Callable[[], float] | None = None,
                    limit_s: float | None = None) -> Outcome:
    """:func:`_replan`, and, when a schedule's buffers did not lay out, the first such
    schedule compacted instead (:func:`~poetsim.schedule.compaction.compact`: MOVE steps
    that close the gaps): whichever of the two passes with less simulated energy; the
    chosen schedule's metadata says which and both energies (``arena_fit``)."""
    compacted: list[Outcome | None] = []

    def compact_first(over: Outcome) -> None:
        if not compacted:
            try:
                compacted.append(_compacted(request, over))
            except OutOfTime:  # the run's limit: replanning's schedules stand alone
                compacted.append(None)

    replanned = _replan(request, outcome, attempt, retime=retime, time_left_s=time_left_s,
                        on_over=compact_first, limit_s=limit_s)
    return _less_energy(replanned, compacted[0] if compacted else None)


def _compacted(request: Request, outcome: Outcome) -> Outcome | None:
    """``outcome``'s schedule with MOVE steps that lay it out within the RAM it may use,
    predicted, simulated and judged; None when compaction finds no room either."""
    graph, schedule = request.graph, outcome.schedule
    walk = replay(graph, schedule, storage_capacity_bytes=request.paging_capacity_bytes)
    moved = compact(walk, room_bytes=request.ram_limit_bytes - request.resident_bytes,
                    resident_bytes=request.resident_bytes)
    if moved is None:
        return None
    figures = predict(graph, request.costs, moved)
    moved = moved.with_metadata(predicted_energy_j=figures.energy_j,
                                predicted_time_s=figures.time_s)
    produced = attrs.evolve(outcome.produced, schedule=moved,
                            predicted_energy_j=figures.energy_j,
                            predicted_time_s=figures.time_s)
    report, verdict = _checked(request, attrs.evolve(outcome, produced=produced))
    return _judged(attrs.evolve(outcome, produced=produced), report, verdict)


def _checked(request: Request, outcome: Outcome, *, trace: bool = False,
             notes: Iterable[str] = ()) -> tuple[SimReport, Verdict]:
    """``outcome``'s schedule simulated on the board and judged: the one check of every
    outcome (:func:`~poetsim.verdict.check_on_board`); a time limit that runs out in it
    says so."""
    with clock.doing(f"checking {outcome.method}'s schedule on the board"):
        return check_on_board(request, outcome.schedule, trace=trace, notes=notes)


def _unchecked(outcome: Outcome, err: OutOfTime, limit_s: float | None = None) -> Outcome:
    """``outcome`` with its schedule kept but unjudged, saying that the time limit ran out
    while it was checked (``limit_s``: the run's share of it): no verdict, so never PASS,
    and never dropped as though none had been found."""
    return attrs.evolve(outcome, unchecked=clock.ran_out(
        err.when or f"while checking {outcome.method}'s schedule on the board", limit_s,
        outcome.method, then="checks it"))


def _less_energy(replanned: Outcome, compacted: Outcome | None) -> Outcome:
    """Of a replanned outcome and a compacted one, the one that passes with less
    simulated energy (the replanned one when neither passes), its schedule saying so."""
    if compacted is None:
        return replanned
    use_moves = compacted.feasible and (not replanned.feasible
                                        or compacted.energy_j < replanned.energy_j)
    chosen = compacted if use_moves else replanned
    moves = compacted.schedule.count(Action.MOVE)

    def energy(o: Outcome) -> str:
        return f"{o.energy_j:.6g} J" + ("" if o.feasible else " (does not pass)")

    note = (f"{'compaction' if use_moves else 'replanning'} chosen: compaction with {moves} "
            f"MOVE steps {energy(compacted)}, replanning with a lower budget "
            f"{energy(replanned)}")
    schedule = chosen.schedule.with_metadata(arena_fit=note)
    return attrs.evolve(chosen, produced=attrs.evolve(chosen.produced, schedule=schedule))


def _replan(request: Request, outcome: Outcome, attempt: Any, *, retime: bool,
            time_left_s: Callable[[], float] | None,
            on_over: Callable[[Outcome], None], limit_s: float | None = None) -> Outcome:
    """Plan again while the simulation finds the schedule late (``retime``: the MILP
    methods) or, under physical accounting, its buffers laid out over the RAM it may use.

    The MILP's timeline is the stage model's; on a real board the bus is shared and the
    transfers are planned step by step, so a schedule can still run late: it is solved
    again with the solver's deadline shrunk by the overrun, at most
    :data:`MAX_DEADLINE_TIGHTENINGS` times. Every method plans bytes; a runtime places
    buffers in a static arena, where fragmentation can take more
    (:mod:`poetsim.schedule.arena`): the method plans again with its activation budget
    lowered by the excess, at most :data:`MAX_ARENA_REPLANS` times. The first schedule that
    meets both is kept; if none does, the last one (whose verdict says what it missed).
    No plan is made again once ``time_left_s()`` (the run's time limit less what it took) is
    below :data:`_MIN_RETRY_S`, and when the limit (``limit_s``, the run's) runs out while
    a plan made again is checked, the last one judged is kept; when it runs out while the
    first is checked, that one is kept unchecked (:func:`_unchecked`). ``on_over`` sees
    each schedule that does not lay out.
    """
    target = request.planning_deadline_s
    arena_room = (request.ram_limit_bytes if request.accounting is Accounting.PHYSICAL
                  else None)
    if not retime and arena_room is None:
        return outcome  # nothing the board could ask for again: judged by the caller
    tightenings = replans = 0
    last: Outcome | None = None  # the last schedule judged, kept if a retry runs out
    while outcome.schedule is not None:
        try:
            report, verdict = _checked(request, outcome)
        except OutOfTime as err:
            return last if last is not None else _unchecked(outcome, err, limit_s)
        last = _judged(outcome, report, verdict)
        late = retime and target is not None and not meets_deadline(report.makespan_s, target)
        over = arena_room is not None and report.arena_bytes > arena_room
        if over:
            on_over(outcome)
        out_of_time = time_left_s is not None and time_left_s() < _MIN_RETRY_S
        if out_of_time or not (late and tightenings < MAX_DEADLINE_TIGHTENINGS
                               or over and replans < MAX_ARENA_REPLANS):
            # judged already: judge_outcome need not simulate it again
            return _judged(outcome, report, verdict)
        deadline = outcome.solver_deadline_s
        budget = outcome.planned_activation_bytes
        if late and tightenings < MAX_DEADLINE_TIGHTENINGS:
            tightenings += 1
            deadline = deadline * target / report.makespan_s
        if over and replans < MAX_ARENA_REPLANS:
            # the layout took this much more than the bytes: plan that much fewer bytes,
            # but never fewer than the largest op needs (no schedule has fewer)
            replans += 1
            planned = request.activation_budget_bytes if budget is None else budget
            lowered = max(minimum_ram_bytes(request.graph)[0],
                          min(planned, report.peak_activation_bytes)
                          - (report.arena_bytes - arena_room))
            if lowered == budget and not late:  # as low as it goes: the same plan again
                return _judged(outcome, report, verdict)
            budget = lowered
        retry = attempt(deadline, tightenings, budget)
        if retry.schedule is None:  # tighter than any schedule can be: keep the last one
            return _judged(outcome, report, verdict)
        outcome = retry
    return outcome


def judge_outcome(request: Request, outcome: Outcome, *, trace: bool = False,
                  notes: Iterable[str] = ()) -> Outcome:
    """``outcome`` with its schedule simulated on the board and judged (unchanged when it
    has no schedule, was judged already and no trace or notes are asked for, or the time
    limit left it unchecked; kept unchecked when the limit of the command under way,
    :func:`poetsim.clock.stop_at`, runs out while it is judged)."""
    if outcome.schedule is None or outcome.unchecked or (
            outcome.verdict is not None and not trace and not notes):
        return outcome
    try:
        report, verdict = _checked(request, outcome, trace=trace, notes=notes)
    except OutOfTime as err:  # judged before: without the trace; else kept unchecked
        return outcome if outcome.verdict is not None else _unchecked(outcome, err)
    return _judged(outcome, report, verdict)


def run_and_judge(request: Request, method: str, settings: SolverSettings = SolverSettings(),
                  *, cache: RunCache | None = None, trace: bool = False) -> Outcome:
    """:func:`run_method`, then :func:`judge_outcome`: the loop of every study."""
    return judge_outcome(request, run_method(request, method, settings, cache=cache),
                         trace=trace)


def reference_energy_j(request: Request) -> float:
    """Simulated energy of every op once with unlimited RAM on the request's board: the
    reference of energy overheads."""
    graph = request.graph
    return simulate(graph, request.board, plain_schedule(graph),
                    budget_bytes=2**62, resident_bytes=request.resident_bytes,
                    costs=request.costs).energy_j


def reference_energy_by(request: Request, stop_at: float | None) -> float | None:
    """:func:`reference_energy_j`, or None when the clock passes ``stop_at`` (a
    :func:`time.perf_counter` instant; None: never) first: laying out every op's output of
    a long chain at once takes longer than the graph grows (the overheads then go
    unshown)."""
    try:
        with clock.limit(stop_at):
            return reference_energy_j(request)
    except OutOfTime:
        return None


def corners_by(request: Request, outcome: Outcome, stop_at: float | None
               ) -> list[CornerVerdict]:
    """``outcome``'s judged schedule judged at every corner of the board
    (:func:`~poetsim.verdict.judge_corners`), or none when it has none or the clock passes
    ``stop_at`` (a :func:`time.perf_counter` instant; None: never) first."""
    if outcome.schedule is None or outcome.verdict is None:
        return []
    try:
        with clock.limit(stop_at):
            return judge_corners(request, outcome.schedule, outcome.verdict)
    except OutOfTime:
        return []


def with_overheads(outcomes: Iterable[Outcome], reference_j: float | None
                   ) -> list[Outcome]:
    """``outcomes`` with ``energy_overhead = energy_j / reference_j - 1`` filled in."""
    return [attrs.evolve(o, energy_overhead=energy_overhead(o.energy_j, reference_j))
            for o in outcomes]

