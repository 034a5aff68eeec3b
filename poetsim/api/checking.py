"""A schedule simulated on its board and judged: :class:`Check`, and :func:`simulate` for a
schedule file (what ``poetsim simulate`` runs).

The request a file is judged against is the one it records
(:func:`poetsim.request.request_for_schedule`), each part overridable; the verdict is
:mod:`poetsim.verdict`'s, the one judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from poetsim.api.arguments import (
    Model,
    accounting_of,
    board_of,
    budget_word,
    deadline_word,
    expect,
    expect_flag,
    graph_of,
    is_graph_file,
    model_options_of,
    optimizer_of,
)
from poetsim.boards import Board
from poetsim.errors import InputError, ScheduleError, ScheduleFileError
from poetsim.request import BOARD_RAM, Accounting, Request, request_for_schedule, resolve_request
from poetsim.schedule import Schedule, read_schedule, read_schedule_binary
from poetsim.schedule.io import DIGEST_FIELD, is_binary_schedule
from poetsim.schedule.metadata import disagreements, parse_metadata
from poetsim.sim import SimReport
from poetsim.sim.montecarlo import MAX_RUNS, MonteCarlo, monte_carlo
from poetsim.verdict import CornerVerdict, Verdict, check_on_board, judge_corners

__all__ = ["Check", "simulate"]


@attrs.frozen(repr=False)
class Check:
    """A schedule run in the simulation of its request's board, and the verdict on it.

    ``report`` holds the simulated figures (energy by component, makespan, peak RAM and
    where), ``verdict`` the PASS or FAIL with every reason; :meth:`line` says both in one
    line. :meth:`plot` and :meth:`trace` write the run's pictures.
    """

    request: Request
    schedule: Schedule
    report: SimReport
    verdict: Verdict

    def __repr__(self) -> str:
        return f"<Check {self.line()}>"

    @property
    def passed(self) -> bool:
        """The schedule runs on the board within the budget and the deadline."""
        return self.verdict.passed

    @property
    def energy_j(self) -> float:
        """Simulated energy of one training iteration."""
        return self.report.energy_j

    @property
    def makespan_s(self) -> float:
        """Simulated time of one training iteration."""
        return self.report.makespan_s

    def line(self) -> str:
        """One line: the verdict, the physical need and the reasons for a FAIL."""
        return self.verdict.line()

    def as_dict(self, *, transfers: bool = False) -> dict[str, Any]:
        """What ``poetsim simulate --json`` prints (without its Monte Carlo and corners;
        ``transfers``: with the transfer plan)."""
        return {**self.report.as_dict(transfers=transfers), **self.verdict.as_dict(),
                "request": self.request.metadata()}

    def corners(self) -> list[CornerVerdict]:
        """The schedule judged at every corner of the board's ranges, typical first."""
        return judge_corners(self.request, self.schedule, self.verdict)

    def monte_carlo(self, runs: int, seed: int = 0) -> MonteCarlo:
        """``runs`` simulations drawing each write's extra busy time from the board's
        ``storage.write_busy`` (seeds ``seed`` ..): makespan and energy percentiles, beside
        this (nominal) verdict; :func:`poetsim.verdict.deadline_met_runs` counts the runs
        that meet the deadline."""
        expect("runs", runs, int, "a whole number (int)")
        expect("seed", seed, int, "a whole number (int)")
        if not 1 <= runs <= MAX_RUNS:
            raise InputError(f"runs = {runs}: must be a whole number in [1, {MAX_RUNS}]")
        if seed < 0:
            raise InputError(f"seed = {seed}: must be a whole number >= 0")
        r = self.request
        return monte_carlo(r.graph, r.board, self.schedule, runs=runs, seed=seed,
                           budget_bytes=r.ram_limit_bytes, resident_bytes=r.resident_bytes,
                           costs=r.costs)

    def traced(self) -> Check:
        """This check with the simulation's timeline recorded (for plots and traces)."""
        if self.report.timeline is not None:
            return self
        report, _ = check_on_board(self.request, self.schedule, trace=True)
        return attrs.evolve(self, report=report)

    def plot(self, path: str | Path) -> Path:
        """Write RAM and power over time and the schedule matrix (``.png``, ``.svg`` or
        ``.pdf``); the path written."""
        from poetsim.report import plot_simulation

        expect("path", path, (str, Path), "a file path (str or Path)")
        plot_simulation(self.request.graph, self.schedule, self.traced().report, path,
                        verdict=self.verdict.label)
        return Path(path)

    def trace(self, path: str | Path) -> Path:
        """Write the run as a Chrome / Perfetto trace (JSON, opens in ui.perfetto.dev);
        the path written."""
        from poetsim.sim.trace import write_chrome_trace

        expect("path", path, (str, Path), "a file path (str or Path)")
        write_chrome_trace(self.traced().report, path, verdict=self.verdict.label,
                           deadline_s=self.verdict.deadline_s)
        return Path(path)


def check_schedule(request: Request, schedule: Schedule, *, trace: bool = False,
                   notes: tuple[str, ...] = (), source: str | None = None) -> Check:
    """``schedule`` simulated and judged against ``request`` (``trace``: with its
    timeline); a rule of the op-list contract it breaks names ``source``."""
    try:
        report, verdict = check_on_board(request, schedule, trace=trace, notes=notes)
    except ScheduleError as err:
        if source is None:
            raise
        raise ScheduleError(f"{source}: {err}") from None
    return Check(request, schedule, report, verdict)


def simulate(schedule: str | Path, board: str | Path | Board | None = None, *,
             model: Model | None = None, ram: str | None = None, ram_bytes: int | None = None,
             deadline: str | None = None, deadline_s: float | None = None,
             accounting: str | Accounting | None = None, optimizer: str | None = None,
             accept_edits: bool = False, trace: bool = False, **model_options: int) -> Check:
    """Run the schedule file ``schedule`` in the simulation of a board and judge it.

    Everything is the file's unless given: the ``board`` (a name, a board file or a
    :class:`~poetsim.boards.Board`; else the board it records), the graph (``model``: a zoo
    model name, with ``model_options``, a graph file or a
    :class:`~poetsim.graph.TrainingGraph`; else the graph it records), the budget
    (``ram`` in words or ``ram_bytes``), the deadline (``deadline`` in words or
    ``deadline_s``), the ``accounting`` and the ``optimizer``. A binary schedule records
    neither graph nor board: give ``model`` and ``board``. A file changed after poetsim
    wrote it is refused unless ``accept_edits``. ``trace`` records the timeline at once
    (:meth:`Check.plot` and :meth:`Check.trace` record it when needed).

    Examples
    --------
    >>> import pathlib, tempfile, poetsim
    >>> planned = poetsim.plan("ds_cnn_s", "nrf52840", ram="board", deadline="2x",
    ...                        train_last=3)
    >>> path = planned.save(pathlib.Path(tempfile.mkdtemp()) / "s.json")
    >>> check = poetsim.simulate(path)
    >>> check.passed, check.makespan_s <= check.verdict.deadline_s
    (True, True)

    The same file judged against a smaller budget than it was made for:

    >>> tight = poetsim.simulate(path, ram="150KiB")
    >>> tight.verdict.label, tight.verdict.violations[0][:36]
    ('FAIL', 'peak RAM 201.3 KiB (206176 B: 45664 ')
    """
    expect("schedule", schedule, (str, Path), "a schedule file (str or Path)", optional=False)
    expect_flag("accept_edits", accept_edits)
    expect_flag("trace", trace)
    model_options_of(model_options)
    source = str(schedule)
    words = dict(ram=budget_word(ram, ram_bytes, default=None),
                 deadline=deadline_word(deadline, deadline_s),
                 accounting=accounting_of(accounting), optimizer=optimizer_of(optimizer))
    if is_binary_schedule(source):
        request, loaded, notes = _binary_request(source, board, model, model_options, words)
    else:
        request, loaded, notes = _recorded_request(source, board, model, model_options, words,
                                                   accept_edits)
    return check_schedule(request, loaded, trace=trace, notes=tuple(notes), source=source)


def _binary_request(source: str, board: Any, model: Any, options: dict[str, int],
                    words: dict[str, Any]) -> tuple[Request, Schedule, list[str]]:
    """A binary schedule records no request: the user's words make it."""
    if model is None or board is None:
        raise InputError(f"{source}: a binary schedule records neither its model nor its "
                         "board: give --model (or --graph) and --board")
    request = resolve_request(graph_of(model, options), board_of(board),
                              ram=BOARD_RAM if words["ram"] is None else words["ram"],
                              deadline=words["deadline"],
                              accounting=words["accounting"] or Accounting.PHYSICAL.value,
                              optimizer=words["optimizer"] or "sgd")
    return request, read_schedule_binary(source, request.graph), []


def _recorded_request(source: str, board: Any, model: Any, options: dict[str, int],
                      words: dict[str, Any], accept_edits: bool
                      ) -> tuple[Request, Schedule, list[str]]:
    """The request a JSON schedule records, each part overridden by the caller's; the
    notes say where the file and what poetsim recomputes disagree."""
    notes: list[str] = []
    try:
        recorded = read_schedule(source)
    except ScheduleFileError as err:
        if err.rule != "edited" or not accept_edits:
            raise
        recorded = read_schedule(source, accept_edits=True)
        notes.append(f"{source} was changed after poetsim wrote it: judged as it is now "
                     "(--accept-edits)")
    zoo = isinstance(model, str) and not is_graph_file(model)
    request = request_for_schedule(
        recorded, None if board is None else board_of(board), source=source,
        graph=None if model is None or zoo else graph_of(model, options),
        model=model if zoo else None, model_options=options or None, **words)
    schedule = read_schedule(source, request.graph, accept_edits=accept_edits)
    notes += disagreements(parse_metadata(recorded.metadata), request.metadata())
    if DIGEST_FIELD not in recorded.metadata:
        notes.append(f"{source} records no digest (written by an older poetsim, or "
                     "stripped): changes made to it since cannot be detected")
    return request, schedule, notes
