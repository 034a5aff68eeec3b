"""POET's least-energy schedule for one request: :func:`plan` (what ``poetsim solve`` runs)
and its result, :class:`Plan`.

:func:`plan` resolves the user's words into a :class:`~poetsim.request.Request`
(:func:`poetsim.request.resolve_request`) and runs POET through the method path every
study takes (:func:`poetsim.runs.run_method`: seeded by the fast baselines, solved again
when the simulation finds the schedule late or its buffers do not lay out), so the same
words give the same schedule here, on the command line, in ``compare`` and in the demo.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim import clock
from poetsim.api.arguments import (
    Model,
    accounting_of,
    board_of,
    budget_word,
    deadline_word,
    expect,
    expect_flag,
    graph_of,
    optimizer_of,
)
from poetsim.api.checking import Check, check_schedule
from poetsim.boards import DEFAULT_BOARD, Board
from poetsim.boards.corners import CORNERS, corner_board
from poetsim.costs import op_costs
from poetsim.errors import ArgumentTypeError, InputError, InternalError
from poetsim.methods import DEFAULT_EFFORT, DEFAULT_TIME_LIMIT_S, SolverSettings
from poetsim.optimizer import SolveResult
from poetsim.request import Accounting, Request, resolve_request
from poetsim.runs import Outcome, run_method
from poetsim.schedule import Schedule, write_schedule, write_schedule_binary
from poetsim.status import Status
from poetsim.verdict import Verdict

__all__ = ["Plan", "Search", "plan"]


def _typed(expected: str, *types: type) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, attribute: Any, value: Any) -> None:
        expect(attribute.name, value, types, expected)
    return check


def _flag(_instance: Any, attribute: Any, value: Any) -> None:
    expect_flag(attribute.name, value)


def _corner(_instance: Any, attribute: Any, value: Any) -> None:
    expect(attribute.name, value, str, f"one of {', '.join(CORNERS)} (str)")
    if value not in CORNERS:
        raise InputError(f"{attribute.name} = {value!r}: must be one of {', '.join(CORNERS)}")


def _callable(_instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"{attribute.name} = {value!r}: expected a function of a dict "
                                f"(callable) or None, not {type(value).__name__}")


@attrs.frozen(kw_only=True)
class Search:
    """How :func:`plan` searches, beyond the budget, the deadline and the effort: the rest
    of ``poetsim solve``'s flags, with the same defaults.

    ``deadline_margin`` (``"10%"`` of the deadline, or seconds) is kept free below the
    deadline for the board's timing variance; ``gap_limit`` stops at that relative gap (0:
    prove optimality); ``seed`` and ``threads`` are SCIP's; ``remat=False`` or
    ``paging=False`` are the paper's ablations; ``restricted`` the faster restricted
    formulation; ``plan_for`` a corner of the board's ranges (``typical``, ``slow``,
    ``costly``); ``progress`` is called with the search's incumbent, bound and gap.
    """

    deadline_margin: str | float | None = attrs.field(
        default=None, validator=_typed("a margin such as '10%' or '0.5s' (str) or seconds "
                                       "(float)", str, int, float))
    gap_limit: float = attrs.field(default=0.0, validator=_typed("a share (float)", int,
                                                                 float))
    seed: int = attrs.field(default=0, validator=_typed("a whole number (int)", int))
    threads: int = attrs.field(default=1, validator=_typed("a whole number (int)", int))
    remat: bool = attrs.field(default=True, validator=_flag)
    paging: bool = attrs.field(default=True, validator=_flag)
    restricted: bool = attrs.field(default=False, validator=_flag)
    plan_for: str = attrs.field(default="typical", validator=_corner)
    progress: Callable[[dict[str, float]], None] | None = attrs.field(
        default=None, validator=_callable, eq=False)

    def __attrs_post_init__(self) -> None:
        if not (self.remat or self.paging):
            raise InputError("remat = False and paging = False: one of them must stay on")


@attrs.frozen(repr=False)
class Plan:
    """What :func:`plan` found: POET's schedule for the request, with the solver's word on it.

    ``status`` is ``optimal`` only when proven (else ``feasible`` with a ``gap`` to the
    lower bound ``bound_j``, or no schedule: ``message`` says why); ``energy_j`` is the
    optimizer's model of one iteration's energy. :meth:`check` simulates the schedule on
    the board and judges it; :meth:`save`, :meth:`plot` and :meth:`trace` write it out.
    """

    request: Request
    outcome: Outcome
    schedule: Schedule | None
    plan_for: str = "typical"

    def __repr__(self) -> str:
        return f"<Plan {self.request.graph.name} on {self.request.board.name}: {self.message}>"

    @property
    def result(self) -> SolveResult:
        """POET's whole result: the model's figures and the search's statistics."""
        if self.outcome.solve_result is None:  # POET answers with one, cached or not
            raise InternalError("a POET outcome without its solve result")
        return self.outcome.solve_result

    @property
    def status(self) -> Status:
        return self.result.status

    @property
    def message(self) -> str:
        """One line: the status and why (and that the schedule is not checked on the board,
        when the time limit ran out while it was)."""
        unchecked = self.outcome.unchecked
        return self.result.message + (f"; not checked on the board: {unchecked}"
                                      if unchecked else "")

    @property
    def energy_j(self) -> float | None:
        """The optimizer's energy of one iteration (None without a schedule)."""
        metrics = self.result.metrics
        return None if metrics is None else metrics.energy_j

    @property
    def bound_j(self) -> float | None:
        """A proven lower bound on the energy of any stage plan for the request."""
        return self.result.bound_j

    @property
    def gap(self) -> float | None:
        """``energy_j`` over ``bound_j``, less 1 (0 when proven optimal)."""
        return self.result.gap

    @property
    def verdict(self) -> Verdict | None:
        """The verdict the method path judged the schedule by (None when it simulated
        none: :meth:`check` does)."""
        return self.outcome.verdict

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures: what ``poetsim solve --json`` prints (without the files)."""
        o = self.outcome
        schedule = o.schedule
        return {**self.result.summary(), "message": self.message,
                "verdict": o.verdict_label, "unchecked": o.unchecked,
                "arena_bytes": o.verdict.arena_bytes if o.verdict else None,
                "planned_activation_bytes": o.planned_activation_bytes,
                "tightenings": o.tightenings, "plan_for": self.plan_for,
                # when the buffers did not lay out: MOVE steps (compaction) or replanning
                "moves": schedule.count("move") if schedule is not None else 0,
                "arena_fit": schedule.metadata.get("arena_fit") if schedule is not None
                else None}

    def _schedule(self) -> Schedule:
        if self.schedule is None:
            raise InputError(f"no schedule: {self.message}")
        return self.schedule

    def check(self, *, trace: bool = False) -> Check:
        """The schedule simulated on the request's board and judged (``trace``: with the
        timeline recorded)."""
        return check_schedule(self.request, self._schedule(), trace=expect_flag("trace",
                                                                                trace))

    def save(self, path: str | Path, *, binary: bool = False) -> Path:
        """Write the schedule, with the request in its metadata (JSON; ``binary``: the
        compact binary form for the device); the path written."""
        expect("path", path, (str, Path), "a file path (str or Path)")
        schedule = self._schedule()
        if expect_flag("binary", binary):
            write_schedule_binary(schedule, path, self.request.graph)
        else:
            write_schedule(schedule, self.request.graph, path)
        return Path(path)

    def plot(self, path: str | Path) -> Path:
        """Simulate and write RAM and power over time and the schedule matrix."""
        return self.check(trace=True).plot(path)

    def trace(self, path: str | Path) -> Path:
        """Simulate and write the run as a Chrome / Perfetto trace (JSON)."""
        return self.check(trace=True).trace(path)


def plan(  # noqa: PLR0913 - the command line's words, one keyword each, and its start
        model: Model, board: str | Path | Board = DEFAULT_BOARD, *, ram: str | None = None,
        ram_bytes: int | None = None, deadline: str | None = None,
        deadline_s: float | None = None, accounting: str | Accounting = "physical",
        optimizer: str = "sgd", effort: int = DEFAULT_EFFORT,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        example_inputs: Sequence[Any] | Any | None = None, search: Search | None = None,
        started: float | None = None, **model_options: int) -> Plan:
    """POET's least-energy schedule of ``model`` on ``board``: ``poetsim solve``.

    ``model``: a zoo model name (its options as keywords: ``train_last=3``,
    ``batch_size=2``), a graph file (a :class:`~pathlib.Path`, or a name ending in
    ``.json``), a :class:`~poetsim.graph.TrainingGraph`, or a PyTorch ``nn.Module`` traced
    on ``example_inputs``. ``board``: a built-in name, a board file or a
    :class:`~poetsim.boards.Board`. The budget is ``ram`` in the command line's words
    (``"50%"`` of the plain schedule's activation peak, ``"256KiB"``, ``"board"``: all
    usable RAM, the default) or ``ram_bytes``; the deadline ``deadline`` (``"1.5x"`` of
    the plain compute time, ``"2.5s"``) or ``deadline_s``; ``accounting`` is
    ``physical`` or ``paper``; ``optimizer`` (``sgd``, ``momentum``, ``adam``) decides the
    optimizer state. ``effort`` bounds the search by deterministic work (SCIP nodes; 0:
    the time limit alone), so the same words give the same schedule on any machine;
    ``time_limit_s`` is a safety cap on the whole call (counted from ``started``, a
    :func:`time.perf_counter` instant, when given: a command's start; when it runs out
    before the model is read, :class:`~poetsim.errors.OutOfTime` says so). ``search``
    holds the other settings (:class:`Search`). Bad words raise
    :class:`~poetsim.errors.InputError`, with the command line's messages.

    Examples
    --------
    >>> import poetsim
    >>> planned = poetsim.plan("ds_cnn_s", "nrf52840", ram="board", deadline="2x",
    ...                        train_last=3)
    >>> planned.status.value, planned.gap
    ('optimal', 0.0)
    >>> round(planned.energy_j * 1e3, 2), planned.energy_j >= planned.bound_j
    (17.31, True)
    >>> planned.check().verdict.label
    'PASS'

    The same budget in bytes is the same request:

    >>> planned.request.budget_bytes
    237568
    >>> poetsim.plan("ds_cnn_s", "nrf52840", ram_bytes=237568, deadline="2x",
    ...              train_last=3).energy_j == planned.energy_j
    True
    """
    started = time.perf_counter() if started is None else started
    search = Search() if search is None else expect(
        "search", search, Search, "poetsim.Search settings")
    expect("effort", effort, int, "a whole number of nodes (int)", optional=False)
    expect("time_limit_s", time_limit_s, (int, float), "a number of seconds (float)",
           optional=False)
    expect("started", started, (int, float), "a time.perf_counter() instant (float)")
    settings = SolverSettings(time_limit_s=time_limit_s, gap_limit=search.gap_limit,
                              seed=search.seed, threads=search.threads, effort=effort)
    # the time limit holds for the whole call: reading and costing a large graph counts
    with clock.command(started, time_limit_s):
        with clock.doing("reading the model"):
            request = resolve_request(
                graph_of(model, model_options, example_inputs), board_of(board),
                ram=budget_word(ram, ram_bytes), deadline=deadline_word(deadline, deadline_s),
                accounting=accounting_of(accounting),
                optimizer=optimizer_of(optimizer) or "sgd",
                deadline_margin=search.deadline_margin)
            if search.plan_for != "typical":  # the user's words resolved on the board as given
                at = corner_board(request.board, search.plan_for)
                request = attrs.evolve(request, board=at, costs=op_costs(request.graph, at))
        outcome = run_method(request, "poet", settings, solve_options=dict(
            remat=search.remat, paging=search.paging, restricted=search.restricted,
            progress=search.progress), stop_at=started + time_limit_s)
    schedule = outcome.schedule
    if schedule is not None and search.plan_for != "typical":
        schedule = schedule.with_metadata(plan_for=search.plan_for)
    return Plan(request, outcome, schedule, search.plan_for)
