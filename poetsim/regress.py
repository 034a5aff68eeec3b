"""Golden schedules and regression checks: what moved, by how much, and is it a regression.

A *golden* is an ordinary schedule file (``schedules/<case>.json``) whose metadata says how
to remake it (``case``, ``model`` and ``model_options``, the request's ``board``, ``ram``,
``deadline``, ``accounting`` and ``optimizer``, the ``method`` and, for the MILP methods,
the ``solver`` settings with a deterministic ``effort``) and what it gave (``expected``:
``energy_j``, ``peak_total_bytes``, ``arena_bytes``, ``makespan_s``, ``verdict``, and for
MILP cases ``objective_j`` and ``bound_j``). The cases are listed in ``schedules/cases.toml``.

:func:`check_goldens` re-simulates every golden and compares it with its expected figures
(the simulator is deterministic, so anything beyond the tolerance moved); with
``resolve=True`` it also solves each MILP case again under its deterministic effort and
compares the objective (the case's ``time_limit_s``, a safety cap, holds for each re-solve
with its simulation, counted from its start). A figure that got worse is a *regression*,
one that got better an *improvement*; but a longer makespan or a higher peak that buys
less energy (simulated, and the objective of a re-solve, when either moved) is the trade
POET exists to make: within the verdict (the deadline and the budget still met) it is an
improvement.
:func:`update_goldens` rewrites the expected figures (and, after a re-solve, the
schedules) on purpose; :func:`make_goldens` creates the goldens that ``cases.toml`` lists
and the folder lacks.
"""

from __future__ import annotations

import difflib
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim import clock
from poetsim.boards import get_board
from poetsim.errors import InputError, PoetsimError, ScheduleFileError
from poetsim.fileio import read_text, read_toml
from poetsim.graph.graph import OPTIMIZER_STATE_COPIES
from poetsim.methods import METHODS, SOLVER_METHODS, SolverSettings
from poetsim.request import Accounting, Request, request_for_schedule, resolve_request
from poetsim.runs import Outcome, run_all_and_judge
from poetsim.schedule import Schedule, read_schedule, write_schedule
from poetsim.schedule.io import DIGEST_FIELD
from poetsim.schedule.metadata import parse_metadata
from poetsim.units import format_bytes, format_quantity
from poetsim.verdict import CornerVerdict, Verdict, check_on_board, judge_corners

__all__ = ["CASES_FILE", "DEFAULT_TOLERANCE", "Case", "CaseCheck", "Change", "check_goldens",
           "load_cases", "make_goldens", "trained_on", "update_goldens"]

#: The list of cases in a goldens folder.
CASES_FILE = "cases.toml"
#: Relative tolerance of a figure before it counts as moved (0.1%).
DEFAULT_TOLERANCE = 1e-3
#: For every expected figure: +1 when more is worse (energy, time, RAM).
_WORSE_WHEN_HIGHER = {"energy_j": 1, "peak_total_bytes": 1, "arena_bytes": 1, "makespan_s": 1,
                      "objective_j": 1, "bound_j": -1}
_CASE_KEYS = ("model", "options", "board", "ram", "deadline", "accounting", "optimizer",
              "method", "effort",
              "time_limit_s", "gap_limit", "seed")


@attrs.frozen
class Case:
    """One golden's recipe, as ``cases.toml`` gives it."""

    name: str
    model: str
    board: str
    ram: str
    method: str
    accounting: Accounting = Accounting.PHYSICAL
    deadline: str | None = None
    model_options: tuple[tuple[str, int], ...] = ()
    solver: SolverSettings = SolverSettings()
    optimizer: str = "sgd"

    @property
    def milp(self) -> bool:
        return self.method in SOLVER_METHODS


@attrs.frozen
class Change:
    """One expected figure against what the check found."""

    field: str
    expected: Any
    found: Any

    @property
    def relative(self) -> float | None:
        if not isinstance(self.expected, (int, float)) or not isinstance(self.found, (int, float)):
            return None
        if self.expected == 0:
            return 0.0 if self.found == 0 else math.inf
        return (self.found - self.expected) / abs(self.expected)

    @property
    def worse(self) -> bool:
        if self.field == "verdict":
            return self.expected == "PASS" and self.found != "PASS"
        rel = self.relative
        return rel is not None and rel * _WORSE_WHEN_HIGHER.get(self.field, 1) > 0

    def describe(self) -> str:
        rel = self.relative
        delta = f" ({rel:+.2%})" if rel is not None and math.isfinite(rel) else ""
        return f"{self.field} {self.expected!r} -> {self.found!r}{delta}"


@attrs.frozen
class CaseCheck:
    """What checking one golden found. ``status``: ``ok``, ``improved``, ``regressed`` or
    ``error`` (the golden could not be checked: ``error`` says why)."""

    name: str
    path: Path
    status: str
    found: dict[str, Any]
    changes: tuple[Change, ...] = ()
    error: str = ""
    resolved: Schedule | None = attrs.field(default=None, repr=False, eq=False)
    #: the golden judged at its board's corners, when asked for
    corners: tuple[CornerVerdict, ...] = attrs.field(default=(), eq=False)

    def line(self) -> str:
        if self.status == "error":
            return f"ERROR     {self.name}: {self.error}"
        head = {"ok": "ok", "improved": "IMPROVED", "regressed": "REGRESSED"}[self.status]
        found = self.found
        text = (f"{head:<9} {self.name}: {found['verdict']}, energy "
                f"{format_quantity(found['energy_j'], 'J')}, makespan "
                f"{format_quantity(found['makespan_s'], 's')}, peak "
                f"{format_bytes(found['peak_total_bytes'])}, arena "
                f"{format_bytes(found['arena_bytes'])}")
        if found.get("objective_j") is not None:
            text += (f", objective {format_quantity(found['objective_j'], 'J')}, bound "
                     f"{format_quantity(found.get('bound_j') or 0, 'J')}, gap "
                     f"{found.get('gap') or 0:.2%}")
        if len(self.corners) > 1:
            text += "; corners " + "/".join(c.verdict.label for c in self.corners) + (
                " (typical/slow/costly)")
        if self.changes:
            text += "; " + "; ".join(c.describe() for c in self.changes)
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"case": self.name, "file": str(self.path), "status": self.status,
                "found": self.found, "error": self.error or None,
                "changes": [{"field": c.field, "expected": c.expected, "found": c.found,
                             "relative": c.relative, "worse": c.worse} for c in self.changes],
                **({"corners": [c.as_dict() for c in self.corners]} if self.corners else {})}


# ----------------------------------------------------------------------------- cases

def load_cases(folder: str | Path) -> list[Case]:
    """The cases of ``folder/cases.toml`` (one ``[[case]]`` table each)."""
    path = Path(folder) / CASES_FILE
    data = read_toml(path, InputError, "cases file")
    raw = data.get("case")
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{path}: expected [[case]] tables")
    cases, names = [], set()
    for position, item in enumerate(raw):
        where = f"{path}: case[{position}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InputError(f"{where}: must be a table with a name")
        name = item["name"]
        unknown = sorted(set(item) - {"name", *_CASE_KEYS})
        if unknown:
            raise InputError(f"{where} ({name}): unknown key {unknown[0]!r}; allowed: "
                             f"{', '.join(_CASE_KEYS)}")
        if name in names or not name.replace("_", "").replace("-", "").isalnum():
            raise InputError(f"{where}: name = {name!r}: must be unique, letters, digits, "
                             "'-' and '_'")
        names.add(name)
        if item.get("optimizer", "sgd") not in OPTIMIZER_STATE_COPIES:
            raise InputError(f"{where} ({name}): optimizer = {item.get('optimizer')!r}: must be "
                             f"one of {', '.join(OPTIMIZER_STATE_COPIES)}")
        if item.get("method") not in METHODS:
            raise InputError(f"{where} ({name}): method = {item.get('method')!r}: must be one "
                             f"of {', '.join(METHODS)}")
        try:
            solver = SolverSettings(**{k: item[k] for k in ("effort", "time_limit_s",
                                                            "gap_limit", "seed") if k in item})
            case = Case(name=name, model=str(item["model"]), board=str(item["board"]),
                        ram=str(item["ram"]), method=item["method"],
                        accounting=Accounting.parse(item.get("accounting", "physical")),
                        deadline=None if item.get("deadline") is None else str(item["deadline"]),
                        model_options=tuple(sorted(dict(item.get("options", {})).items())),
                        solver=solver, optimizer=str(item.get("optimizer", "sgd")))
        except (KeyError, TypeError) as err:
            raise InputError(f"{where} ({name}): missing or bad key {err}") from None
        except InputError as err:
            raise InputError(f"{where} ({name}): {err}") from None
        if case.milp and (case.solver.effort is None or "effort" not in item):
            # written out, not the default: a golden must not move when the default does
            raise InputError(f"{where} ({name}): a MILP case needs an effort (deterministic "
                             "work, written out), so that a re-solve gives the same schedule "
                             "anywhere")
        cases.append(case)
    return cases


def _case_request(case: Case) -> Request:
    from poetsim.zoo import build_model

    return resolve_request(build_model(case.model, **dict(case.model_options)),
                           get_board(case.board), ram=case.ram, deadline=case.deadline,
                           accounting=case.accounting, optimizer=case.optimizer)


def _solved(request: Request, method: str, settings: SolverSettings) -> Outcome:
    """``method``'s outcome for ``request``, judged; the case's ``time_limit_s`` holds for
    both, counted from now (:func:`~poetsim.runs.run_all_and_judge`)."""
    started = time.perf_counter()
    with clock.command(started, settings.time_limit_s, "time_limit_s"):
        return run_all_and_judge(request, [method], settings, started=started)[0]


def _golden(path: Path) -> tuple[Request, Schedule]:
    """A golden's schedule and the request its file records
    (:func:`~poetsim.request.request_for_schedule`)."""
    again = "restore it, or delete it and make it again with regress --make"
    try:
        recorded = read_schedule(path)
    except ScheduleFileError as err:
        if err.rule != "edited":
            raise
        raise InputError(f"{path}: changed by hand since poetsim wrote it (its content no "
                         f"longer matches metadata.digest): {again}") from None
    if DIGEST_FIELD not in recorded.metadata:
        raise InputError(f"{path}: records no digest, so a change made to it by hand could "
                         f"not be seen: {again}")
    request = request_for_schedule(recorded, source=str(path))
    return request, read_schedule(path, request.graph)


def _figures(verdict: Verdict, energy_j: float, outcome: Outcome | None) -> dict[str, Any]:
    figures = {"energy_j": energy_j, "peak_total_bytes": verdict.peak_total_bytes,
               "arena_bytes": verdict.arena_bytes,
               "makespan_s": verdict.makespan_s, "verdict": verdict.label}
    if outcome is not None and outcome.gap is not None:
        figures.update(objective_j=outcome.predicted_energy_j, bound_j=outcome.bound_j,
                       gap=outcome.gap)
    return figures


def _golden_metadata(case: Case, outcome: Outcome) -> dict[str, Any]:
    assert outcome.verdict is not None and outcome.energy_j is not None
    expected = _figures(outcome.verdict, outcome.energy_j, outcome)
    expected.pop("gap", None)
    return {"case": case.name, "model": case.model, "model_options": dict(case.model_options),
            "solver": case.solver.for_method(case.method) or None, "expected": expected}


def make_goldens(folder: str | Path, *, only_missing: bool = True,
                 say: Callable[[str], None] = lambda _line: None) -> list[Path]:
    """Solve, simulate and write the golden of every case of ``cases.toml`` (only those
    without a file unless ``only_missing=False``); the paths written."""
    folder = Path(folder)
    written = []
    for case in load_cases(folder):
        path = folder / f"{case.name}.json"
        if only_missing and path.exists():
            continue
        request = _case_request(case)
        outcome = _solved(request, case.method, case.solver)
        if outcome.verdict is None:
            raise InputError(f"{folder / CASES_FILE}: case {case.name!r}: {case.method} has no "
                             f"checked schedule ({outcome.why_not}); a golden needs one")
        if "time" in outcome.limits_hit:
            raise InputError(f"{folder / CASES_FILE}: case {case.name!r}: the "
                             f"{case.solver.time_limit_s:g} s time limit cut the search short "
                             f"before its effort of {case.solver.effort} nodes, so a re-solve "
                             "would depend on the machine; lower the effort or raise "
                             "time_limit_s")
        schedule = outcome.schedule.with_metadata(**_golden_metadata(case, outcome))
        write_schedule(schedule, request.graph, path)
        say(f"wrote {path}: {outcome.verdict.label if outcome.verdict else '-'}, "
            f"{outcome.energy_j:.6g} J")
        written.append(path)
    return written


# ----------------------------------------------------------------------------- checks

def _compare(expected: dict[str, Any], found: dict[str, Any], fields: Iterable[str],
             tolerance: float) -> list[Change]:
    changes = []
    for name in fields:
        if name not in expected or expected[name] is None:
            continue
        old, new = expected[name], found.get(name)
        if name == "verdict":
            moved = old != new
        else:
            moved = new is None or not math.isclose(new, old, rel_tol=tolerance,
                                                    abs_tol=1e-12)
        if moved:
            changes.append(Change(name, old, new))
    return changes


#: The figures every golden expects (re-solves add ``objective_j`` and ``bound_j``): one
#: missing would switch its check off, so a golden without it is refused.
_ALWAYS_EXPECTED = ("energy_j", "peak_total_bytes", "arena_bytes", "makespan_s", "verdict")


def _check_one(path: Path, tolerance: float, resolve: bool, corners: bool = False
               ) -> CaseCheck:
    name = path.stem
    try:
        meta = _golden_metadata_of(path)
        name = meta.case or name
        request, schedule = _golden(path)
        report, verdict = check_on_board(request, schedule)
        at_corners = judge_corners(request, schedule, verdict) if corners else []
        found = _figures(verdict, report.energy_j, None)
        expected = dict(meta.expected)
        fields = list(_ALWAYS_EXPECTED)
        resolved = None
        if resolve and meta.method in SOLVER_METHODS:
            # the re-solved schedule, simulated, stands against the golden's figures
            outcome = _solved(request, meta.method, SolverSettings(**(meta.solver or {})))
            if outcome.verdict is None or outcome.energy_j is None:
                raise InputError(f"{path}: the re-solve found no checked schedule: "
                                 f"{outcome.why_not}")
            resolved = outcome.schedule
            found = _figures(outcome.verdict, outcome.energy_j, outcome)
            fields += ["objective_j", "bound_j"]
    except (PoetsimError, OSError, ValueError) as err:
        return CaseCheck(name, path, "error", {}, error=str(err).splitlines()[0])
    changes = tuple(_compare(expected, found, fields, tolerance))
    return CaseCheck(name, path, _status(changes), found, changes, resolved=resolved,
                     corners=tuple(at_corners))


#: Figures that trade against the energy: worse alone, an improvement with less energy.
_TRADED = frozenset({"peak_total_bytes", "arena_bytes", "makespan_s"})


def _status(changes: tuple[Change, ...]) -> str:
    """``regressed``, ``improved`` or ``ok`` (see the module docstring)."""
    energy = [c for c in changes if c.field in ("energy_j", "objective_j")]
    bought = bool(energy) and not any(c.worse for c in energy)
    if any(c.worse and not (bought and c.field in _TRADED) for c in changes):
        return "regressed"
    return "improved" if changes else "ok"


def trained_on(board: str, folder: str | Path) -> list[dict[str, Any]]:
    """The golden training jobs of ``folder`` that physically pass on ``board``, each
    simulated again now (the figures are the simulator's, not the file's): case, model
    and its options, method, optimizer, RAM budget, deadline, energy and time per
    iteration, peak RAM and storage lifetime. Goldens judged under the paper's
    accounting do not count."""
    if not Path(folder).is_dir():
        raise InputError(f"{folder}: not a folder of golden schedules")
    found = []
    for path in _goldens(Path(folder)):
        meta = _golden_metadata_of(path)
        if meta.board != board or meta.accounting != Accounting.PHYSICAL.value:
            continue
        _, report, verdict = _simulate(path)
        if not verdict.passed:
            continue
        found.append({"case": meta.case or path.stem, "model": meta.model,
                      "model_options": dict(meta.model_options or {}), "method": meta.method,
                      "optimizer": meta.optimizer or "sgd", "ram": meta.ram,
                      "deadline": meta.deadline,
                      "energy_j": report.energy_j, "makespan_s": verdict.makespan_s,
                      "peak_total_bytes": verdict.peak_total_bytes,
                      "arena_bytes": verdict.arena_bytes,
                      "storage_lifetime_iterations": report.storage_lifetime_iterations})
    return found


def _golden_metadata_of(path: Path) -> Any:
    """A golden's parsed metadata, refused when it lacks what remaking it needs."""
    try:
        raw = json.loads(read_text(path, InputError, "golden schedule"))
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not JSON: {err.msg} (line {err.lineno})") from None
    meta = parse_metadata(raw.get("metadata", {}) if isinstance(raw, dict) else {},
                          source=str(path))
    missing = [f for f in ("model", "board", "ram", "accounting", "method", "expected")
               if getattr(meta, f) is None]
    if missing:
        raise InputError(f"{path}: metadata.{missing[0]} is missing: not a golden")
    if meta.method not in METHODS:
        raise InputError(f"{path}: metadata.method = {meta.method!r}: must be one of "
                         f"{', '.join(METHODS)}")
    unexpected = [f for f in _ALWAYS_EXPECTED if meta.expected.get(f) is None]
    if unexpected:
        raise InputError(f"{path}: metadata.expected.{unexpected[0]} is missing: a golden "
                         f"expects {', '.join(_ALWAYS_EXPECTED)}")
    return meta


def _simulate(path: Path) -> tuple[Request, Any, Verdict]:
    """The golden's request, as its file records it, and its schedule simulated and judged
    on the board."""
    request, schedule = _golden(path)
    report, verdict = check_on_board(request, schedule)
    return request, report, verdict


def _goldens(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder of golden schedules")
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise InputError(f"{folder}: no golden schedules (*.json); make them with "
                         "poetsim regress --make")
    return paths


def check_goldens(folder: str | Path, *, tolerance: float = DEFAULT_TOLERANCE,
                  resolve: bool = False, corners: bool = False,
                  names: Sequence[str] = (),
                  progress: Callable[[CaseCheck], None] | None = None) -> list[CaseCheck]:
    """Check every golden of ``folder`` (see the module docstring), or only the cases
    ``names``, in file-name order; with ``corners``, each also judged at the corners of
    its board's ranges (reported, not compared: the expected figures are the typical
    corner's). ``progress`` hears of each check as it ends."""
    if not (0 <= tolerance < 1):
        raise InputError(f"tolerance = {tolerance!r}: must be in [0, 1)")
    folder = Path(folder)
    paths = _goldens(folder)
    listed = [case.name for case in load_cases(folder)] \
        if (folder / CASES_FILE).exists() else []
    known = {path.stem for path in paths} | set(listed)
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{folder}: no golden {name!r}{hint}; poetsim regress lists "
                             "them all")
    wanted = set(names) or known
    checks = []
    for path in paths:
        if path.stem in wanted:
            checks.append(_check_one(path, tolerance, resolve, corners))
            if progress is not None:
                progress(checks[-1])
    # a case whose golden is gone is an error, not a pass
    found = {check.path.stem for check in checks}
    checks += [CaseCheck(name, folder / f"{name}.json", "error", {},
                         error=f"{CASES_FILE} lists it but {name}.json is missing "
                               "(make it with poetsim regress --make)")
               for name in listed if name in wanted and name not in found]
    return checks


def update_goldens(checks: Iterable[CaseCheck]) -> list[str]:
    """Rewrite the expected figures (and re-solved schedules) of the checks that moved;
    one line per golden rewritten."""
    lines = []
    for check in checks:
        if check.status in ("ok", "error"):
            continue
        meta = parse_metadata(json.loads(check.path.read_text(encoding="utf-8"))["metadata"],
                              source=str(check.path))
        request, schedule = _golden(check.path)
        expected = {**meta.expected, **{k: v for k, v in check.found.items() if k != "gap"}}
        golden = {"case": meta.case, "model": meta.model,
                  "model_options": dict(meta.model_options or {}), "solver": meta.solver,
                  "expected": expected}
        schedule = check.resolved if check.resolved is not None else schedule
        write_schedule(schedule.with_metadata(**golden), request.graph, check.path)
        lines.append(f"updated {check.path}: " + "; ".join(c.describe() for c in check.changes))
    return lines
