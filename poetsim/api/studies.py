"""The studies over many runs: every method on one request (:func:`compare_methods`,
``poetsim compare``), a what-if sweep (:func:`run_sweep`, ``poetsim sweep``) and the
golden schedules (:func:`regress_goldens`, ``poetsim regress``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from poetsim import clock
from poetsim.api.arguments import (
    Model,
    accounting_of,
    board_of,
    budget_word,
    deadline_word,
    expect,
    expect_callable,
    expect_flag,
    graph_of,
    optimizer_of,
)
from poetsim.boards import DEFAULT_BOARD, Board
from poetsim.compare import Progress as ComparisonProgress
from poetsim.compare import compare, format_table, write_outcomes
from poetsim.data import data_dir
from poetsim.errors import InputError
from poetsim.methods import DEFAULT_EFFORT, DEFAULT_TIME_LIMIT_S, SolverSettings
from poetsim.regress import CaseCheck
from poetsim.request import Accounting, Request, resolve_request
from poetsim.runs import Outcome, corners_by

if TYPE_CHECKING:
    from poetsim.sweep import Progress, Sweep, SweepOutcome

__all__ = ["Comparison", "Regression", "compare_methods", "parse_share", "regress_goldens",
           "run_sweep"]


@attrs.frozen(repr=False)
class Comparison:
    """Every method's outcome on one request, POET's first, each simulated and judged
    (``verdict``, ``energy_j``, ``makespan_s``, ``energy_overhead`` against every op once
    with unlimited RAM, ``why_not``)."""

    request: Request
    outcomes: tuple[Outcome, ...] = attrs.field(converter=tuple)

    def __repr__(self) -> str:
        return f"<Comparison of {len(self.outcomes)} methods>"

    def __getitem__(self, method: str) -> Outcome:
        for outcome in self.outcomes:
            if outcome.method == method:
                return outcome
        raise InputError(f"method = {method!r}: not compared here; compared: "
                         f"{', '.join(o.method for o in self.outcomes)}")

    def table(self) -> str:
        """The plain-text table ``poetsim compare`` prints."""
        return format_table(self.outcomes)

    def as_dicts(self) -> list[dict[str, Any]]:
        """JSON-ready figures, one dict per method (``poetsim compare --json``)."""
        return [o.as_dict() for o in self.outcomes]

    def at_corners(self) -> Comparison:
        """The same outcomes, each schedule also judged at the corners of the board's
        ranges (``poetsim compare --corners``; none where a command's time limit runs out
        first)."""
        return attrs.evolve(self, outcomes=[
            attrs.evolve(o, corners=corners_by(self.request, o, None)) for o in self.outcomes])

    def save(self, out_dir: str | Path) -> list[Path]:
        """Write every schedule and ``comparison.json`` into the new folder ``out_dir``;
        the paths written."""
        expect("out_dir", out_dir, (str, Path), "a folder path (str or Path)")
        return write_outcomes(self.outcomes, self.request, out_dir)


def compare_methods(  # noqa: PLR0913 - the command line's words, one keyword each
                    model: Model, board: str | Path | Board = DEFAULT_BOARD, *,
                    ram: str | None = None, ram_bytes: int | None = None,
                    deadline: str | None = None, deadline_s: float | None = None,
                    accounting: str | Accounting = "physical", optimizer: str = "sgd",
                    effort: int = DEFAULT_EFFORT, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                    example_inputs: Sequence[Any] | Any | None = None,
                    methods: Iterable[str] | None = None,
                    progress: ComparisonProgress | None = None,
                    started: float | None = None, **model_options: int) -> Comparison:
    """POET against the baselines on one request (``poetsim compare``): the same model,
    board, budget, deadline, accounting, optimizer and effort words as :func:`plan`;
    ``methods`` the baselines to run after POET (default: all of
    :data:`poetsim.methods.METHODS`); ``time_limit_s`` caps each MILP solve, or, with
    ``started`` (a :func:`time.perf_counter` instant: a command's start), the whole
    comparison counted from it, every method's share included; ``progress`` is called as
    each method ends, with its position, the number of methods and its outcome.

    Examples
    --------
    >>> import poetsim
    >>> table = poetsim.compare_methods("ds_cnn_s", "nrf52840", ram="board", deadline="2x",
    ...                                 methods=["dtr", "checkpoint_all"], train_last=3)
    >>> [(o.method, o.verdict.label if o.verdict else None) for o in table.outcomes]
    [('poet', 'PASS'), ('dtr', 'PASS'), ('checkpoint_all', None)]
    >>> table["checkpoint_all"].why_not
    'its schedule needs 224000 B of activation RAM, over the budget of 191904 B'
    """
    expect("effort", effort, int, "a whole number of nodes (int)", optional=False)
    expect("time_limit_s", time_limit_s, (int, float), "a number of seconds (float)",
           optional=False)
    expect("started", started, (int, float), "a time.perf_counter() instant (float)")
    if methods is not None:
        methods = list(expect("methods", methods, (list, tuple), "a list of method names"))
        for method in methods:
            expect("methods", method, str, "a list of method names (str)", optional=False)
    settings = SolverSettings(time_limit_s=time_limit_s, effort=effort)
    expect_callable("progress", progress, "a function of (position, methods, outcome)")
    # with ``started``, reading and costing a large graph count against the limit too
    with clock.command(started, time_limit_s):
        with clock.doing("reading the model"):
            request = resolve_request(
                graph_of(model, model_options, example_inputs), board_of(board),
                ram=budget_word(ram, ram_bytes), deadline=deadline_word(deadline, deadline_s),
                accounting=accounting_of(accounting),
                optimizer=optimizer_of(optimizer) or "sgd")
        return Comparison(request, compare(request, settings=settings, methods=methods,
                                           progress=progress, started=started))


def run_sweep(sweep: str | Path | Sweep, results: str | Path | None = None, *,
              cache_dir: str | Path | None = None, scheduler: str | None = None,
              workers: int | None = None, retry_failed: bool = False,
              progress: Callable[[Progress], None] | None = None) -> SweepOutcome:
    """Run (or resume) the what-if sweep of the file ``sweep`` (or a loaded
    :class:`~poetsim.sweep.Sweep`) on Dask: every point not yet in the SQLite store
    ``results`` (default ``./NAME.sqlite``, NAME from the sweep); ``scheduler`` a running
    cluster's address (default: a local one of ``workers`` processes); ``progress`` is
    called after every finished point. See :func:`poetsim.sweep.run_sweep`.

    Examples
    --------
    >>> import pathlib, tempfile, poetsim
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "tiny.toml").write_text('''
    ... models = [{name = "mlp", layers = 4, width = 64}]
    ... boards = ["nrf52840"]
    ... ram = ["80%"]
    ... methods = ["dtr", "chen_greedy"]
    ... accounting = "paper"
    ... ''')
    >>> swept = poetsim.run_sweep(folder / "tiny.toml", folder / "tiny.sqlite", workers=1)
    >>> swept.total, swept.done, swept.failed
    (2, 2, 0)
    """
    from poetsim.sweep import Sweep, load_sweep
    from poetsim.sweep import run_sweep as run

    if not isinstance(sweep, Sweep):
        sweep = load_sweep(expect("sweep", sweep, (str, Path),
                                  "a sweep file (str or Path) or a Sweep"))
    expect("results", results, (str, Path), "a results store path (str or Path)")
    expect("cache_dir", cache_dir, (str, Path), "a folder path (str or Path)")
    expect("scheduler", scheduler, str, "a scheduler address such as tcp://host:8786 (str)")
    expect("workers", workers, int, "a number of processes (int)")
    expect_flag("retry_failed", retry_failed)
    expect_callable("progress", progress, "a function of the sweep's progress")
    store = Path(results) if results is not None else Path(f"{sweep.name}.sqlite")
    return run(sweep, store, scheduler=scheduler, workers=workers, cache_dir=cache_dir,
               retry_failed=retry_failed, progress=progress)


def parse_share(value: str | float, name: str = "tolerance") -> float:
    """A share in ``[0, 1)``: ``"0.1%"`` or ``0.001``."""
    expect(name, value, (str, int, float), "a share such as '0.1%' (str) or 0.001 (float)")
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{name} = {value!r}: expected a share such as 0.1% or 0.001"
                         ) from None
    if not (0 <= number < 1):
        raise InputError(f"{name} = {value!r}: must be in [0, 100%)")
    return number


@attrs.frozen(repr=False)
class Regression:
    """What checking the golden schedules found: one check per golden (``status``: ok,
    improved, regressed or error), the goldens rewritten, and the ones that regressed."""

    checks: tuple[CaseCheck, ...] = attrs.field(converter=tuple)
    updated: tuple[str, ...] = attrs.field(converter=tuple)
    #: the expected figures were rewritten on purpose (``update``): nothing regressed
    update: bool = False

    def __repr__(self) -> str:
        return f"<Regression {self.summary_line()}>"

    @property
    def regressed(self) -> list[str]:
        """The names of the goldens that regressed or could not be checked."""
        return [c.name for c in self.checks if c.status in ("regressed", "error")]

    @property
    def passed(self) -> bool:
        """No golden regressed, or what moved was accepted (``update``)."""
        return not self.regressed or self.update

    def summary_line(self) -> str:
        counts = {s: sum(c.status == s for c in self.checks)
                  for s in ("ok", "improved", "regressed", "error")}
        regressed = self.regressed
        goldens = "golden" if len(self.checks) == 1 else "goldens"
        return (f"{len(self.checks)} {goldens}: {counts['ok']} ok, {counts['improved']} "
                f"improved, {counts['regressed']} regressed, {counts['error']} errors"
                + (f"; regressed: {', '.join(regressed)}" if regressed else ""))

    def lines(self) -> list[str]:
        """What ``poetsim regress`` prints: a line per golden and per rewrite, a summary."""
        return [c.line() for c in self.checks] + list(self.updated) + [self.summary_line()]

    def as_dict(self) -> dict[str, Any]:
        return {"cases": [c.as_dict() for c in self.checks], "updated": list(self.updated),
                "regressed": self.regressed}


def regress_goldens(folder: str | Path | None = None, *, names: Sequence[str] = (),
                    tolerance: str | float = "0.1%", resolve: bool = False,
                    corners: bool = False, make: bool = False, update: bool = False,
                    say: Callable[[str], None] | None = None,
                    progress: Callable[[CaseCheck], None] | None = None) -> Regression:
    """Check the golden schedules of ``folder`` (``poetsim regress``; by default the
    built-in ones: ``schedules/`` of the checkout, or the installed package's copy), or
    only the cases ``names``: each re-simulated (and, with ``resolve``, solved again under
    its deterministic effort) and compared with the figures it expects; a figure that
    moved beyond ``tolerance`` (``"0.1%"`` or a share) for the worse is a regression.
    ``make`` first makes the goldens ``cases.toml`` lists and the folder lacks (``say`` is
    told of each); ``update`` rewrites the expected figures of those that moved;
    ``corners`` also judges each at its board's corners; ``progress`` hears of each check
    as it ends.

    Examples
    --------
    One golden of the repository's ``schedules/``, checked in a folder of its own:

    >>> import pathlib, shutil, tempfile, poetsim
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = shutil.copy("schedules/poet-ds_cnn_s_last3-nrf52840-board.json", folder)
    >>> found = poetsim.regress_goldens(folder)
    >>> found.passed, [check.status for check in found.checks]
    (True, ['ok'])
    """
    from poetsim.regress import check_goldens, make_goldens, update_goldens

    expect("folder", folder, (str, Path), "a folder path (str or Path)")
    folder = data_dir("schedules") if folder is None else folder
    share = parse_share(tolerance)
    for name, flag in (("resolve", resolve), ("corners", corners), ("make", make),
                       ("update", update)):
        expect_flag(name, flag)
    names = list(expect("names", names, (list, tuple), "a list of case names"))
    for name in names:
        expect("names", name, str, "a list of case names (str)", optional=False)
    expect_callable("progress", progress, "a function of a check")
    expect_callable("say", say, "a function of a line (str)")
    if make:
        make_goldens(folder, say=say or (lambda _line: None))
    checks = check_goldens(folder, tolerance=share, resolve=resolve, corners=corners,
                           names=names, progress=progress)
    return Regression(checks, update_goldens(checks) if update else [], update)
