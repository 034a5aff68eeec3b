"""Sweep files: what-if sweeps as a cross product of models, boards, overrides and budgets.

A sweep file is TOML::

    name = "whatif_nrf52840"               # optional; default: the file name
    models = ["resnet18_cifar", { name = "mlp", layers = 4, width = 64 }]
    boards = ["nrf52840", "my_board.toml"] # built-in names or board files (relative to
                                           # the sweep file)
    ram = ["50%", "70%", "256KiB", "board"] # RAM budgets (see below)
    accounting = "physical"                # or "paper" (POET's mu_RAM); default physical
    deadlines = ["1.5x", "none"]           # "1.5x", seconds ("2.5" / "2.5s") or "none"
    methods = ["poet", "dtr", "chen_greedy"]

    [overrides]                            # dotted board keys, each a list of values
    "storage.read_throughput_bytes_per_s" = [3.64e5, 7.28e5]
    "ram.bytes" = [262144, 524288]
    "dma.channels" = [0, 1]

    [solver]                               # the MILP methods' settings (poet, checkmate,
    time_limit_s = 120                     # paging_only); threads are always 1; the time
    gap_limit = 0.0                        # limit holds for each point as a whole, any
    seed = 0                               # method's, from reading its model to its
    effort = 2000                          # simulation (optional effort: default 300;
                                           # 0: the time limit alone)

The points are the cross product of models x boards x override values x ram x deadlines
x methods, in that nesting order (the last varies fastest), which is also the order they
are submitted and reported in. Dotted override keys may be quoted or written as TOML
dotted keys (the two are the same table). A RAM budget is as for ``poetsim solve`` (a
percentage of the plain schedule's activation peak, a size or bytes), or ``"board"``: the
board's usable RAM (``ram.bytes - ram.reserved_bytes``), the budget that makes
``ram.bytes`` overrides matter. What a budget covers, and what the verdict counts, is the
sweep's ``accounting`` (:mod:`poetsim.request`): ``physical`` (everything resident,
within the board's RAM) or ``paper``.

Everything is checked when the file is read: models and their options, boards, every
override combination applied to every board (with all of :mod:`poetsim.boards.spec`'s
validators), budgets, deadlines, methods and solver settings. A problem raises
:class:`SweepError` with one line naming the file, the key, the value and the rule,
before any point runs.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from poetsim.boards.load import SECTIONS, board_numbers
from poetsim.boards.registry import get_board
from poetsim.boards.spec import Board, BoardFieldError, Source, SourceKind
from poetsim.errors import InputError, PoetsimError, SweepError
from poetsim.fileio import read_toml
from poetsim.methods import METHODS, SolverSettings
from poetsim.request import BOARD_RAM, Accounting, parse_deadline, resolve_request

__all__ = ["BOARD_BUDGET", "Point", "SolverSettings", "Sweep", "SweepError", "apply_overrides",
           "expand_points", "load_sweep", "parse_sweep", "variant_label"]

#: The RAM budget word meaning "the board's usable RAM".
BOARD_BUDGET = BOARD_RAM

_TOP_KEYS = ("name", "models", "boards", "overrides", "ram", "accounting", "deadlines",
             "methods", "solver", "corners")
_SOLVER_KEYS = ("time_limit_s", "gap_limit", "seed", "effort")


@attrs.frozen
class ModelChoice:
    """A zoo model with its options (sorted ``(name, value)`` pairs)."""

    name: str
    options: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.name}[{opts}]" if opts else self.name


@attrs.frozen
class Sweep:
    """A parsed, validated sweep file."""

    name: str
    source: str
    models: tuple[ModelChoice, ...]
    boards: tuple[Board, ...]
    overrides: tuple[tuple[str, tuple[Any, ...]], ...]
    ram: tuple[str, ...]
    deadlines: tuple[str | None, ...]
    methods: tuple[str, ...]
    solver: SolverSettings = SolverSettings()
    accounting: Accounting = Accounting.PHYSICAL
    #: judge every schedule at the corners of its board's ranges too
    #: (:mod:`poetsim.boards.corners`)
    corners: bool = False

    @property
    def size(self) -> int:
        """The number of points (before duplicates are dropped)."""
        variants = math.prod(len(values) for _, values in self.overrides)
        return (len(self.models) * len(self.boards) * variants * len(self.ram)
                * len(self.deadlines) * len(self.methods))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source,
                "models": [{"name": m.name, **dict(m.options)} for m in self.models],
                "boards": [b.name for b in self.boards],
                "overrides": {k: list(v) for k, v in self.overrides},
                "ram": list(self.ram), "accounting": self.accounting.value,
                "deadlines": [d or "none" for d in self.deadlines],
                "methods": list(self.methods), "solver": attrs.asdict(self.solver),
                **({"corners": True} if self.corners else {})}


@attrs.frozen
class Point:
    """One (model, board variant, RAM budget, deadline, method) of a sweep.

    ``board`` is the overridden board (its name is the base board's; ``variant`` is the
    label with the overrides, e.g. ``nrf52840[dma.channels=0]``). ``point_id`` is a
    SHA-256 of every input that decides the result: the results store's key.
    """

    index: int
    model: ModelChoice
    board: Board = attrs.field(eq=False, repr=False)
    variant: str
    overrides: tuple[tuple[str, Any], ...]
    ram: str
    deadline: str | None
    method: str
    solver: SolverSettings
    point_id: str
    accounting: Accounting = Accounting.PHYSICAL
    corners: bool = False

    def inputs(self) -> dict[str, Any]:
        """The point's inputs as JSON-ready columns of the results store."""
        return {"id": self.point_id, "idx": self.index, "model": self.model.name,
                "model_options": json.dumps(dict(self.model.options), sort_keys=True),
                "board": self.board.name, "variant": self.variant,
                "overrides": json.dumps(dict(self.overrides)), "ram": self.ram,
                "deadline": self.deadline or "none", "accounting": self.accounting.value,
                "method": self.method,
                "solver": json.dumps(self.solver.for_method(self.method), sort_keys=True)}


# ----------------------------------------------------------------------------- boards

def _format_value(value: Any) -> str:
    """``2e6`` for 2000000.0, ``728000`` for 728000.0, ``1`` for 1: short and exact enough."""
    if isinstance(value, float):
        return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{value:g}")
    return str(value)


def variant_label(board: Board, overrides: tuple[tuple[str, Any], ...]) -> str:
    """``nrf52840[dma.channels=0,ram.bytes=524288]``; the plain name without overrides."""
    if not overrides:
        return board.name
    return f"{board.name}[{','.join(f'{k}={_format_value(v)}' for k, v in overrides)}]"


def _split_key(origin: str, key: str) -> tuple[str, str]:
    section, dot, field = key.partition(".")
    if section not in SECTIONS:
        close = difflib.get_close_matches(section, list(SECTIONS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SweepError(f"{origin}: overrides: key {key!r}: unknown board section "
                         f"{section!r}{hint}; sections: {', '.join(SECTIONS)}")
    names = [f.name for f in attrs.fields(SECTIONS[section])]
    if not dot or field not in names:
        close = difflib.get_close_matches(field, names, n=1)
        hint = f" (did you mean '{section}.{close[0]}'?)" if close else ""
        raise SweepError(f"{origin}: overrides: key {key!r}: not a field of [{section}]{hint}; "
                         f"fields: {', '.join(names)}")
    return section, field


def apply_overrides(board: Board, overrides: tuple[tuple[str, Any], ...], *,
                    origin: str = "<sweep>") -> Board:
    """``board`` with dotted ``overrides`` applied through :func:`attrs.evolve`.

    Each section is rebuilt once with all its overridden fields, then the board, so every
    validator of :mod:`poetsim.boards.spec` runs on the combination. Overridden numbers
    get the source kind ``what-if`` and lose any range they had (a what-if value is the
    same at every corner). Raises :class:`SweepError` naming the key and value.
    """
    if not overrides:
        return board
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in overrides:
        section, field = _split_key(origin, key)
        by_section.setdefault(section, {})[field] = value
    label = ", ".join(f"{k} = {_format_value(v)}" for k, v in overrides)
    where = f"{origin}: overrides ({label}) on board {board.name!r}"
    changes: dict[str, Any] = {}
    for section, fields in by_section.items():
        if getattr(board, section) is None:
            raise SweepError(f"{where}: the board has no [{section}] section to override")
        try:
            changes[section] = attrs.evolve(getattr(board, section), **fields)
        except BoardFieldError as err:
            err = err.within(section)
            raise SweepError(f"{where}: {err.field} = {err.value!r}: {err.rule}") from None
        except (TypeError, ValueError) as err:
            raise SweepError(f"{where}: {err}") from None
    sources = dict(board.sources)
    for key, _ in overrides:
        sources[key] = Source(SourceKind.WHAT_IF, f"sweep {origin}")
    # a number set by the sweep is that number at every corner: its measured range goes
    overridden = {key for key, _ in overrides}
    ranges = {key: ends for key, ends in board.ranges.items() if key not in overridden}
    try:
        return attrs.evolve(board, sources=sources, ranges=ranges, **changes)
    except BoardFieldError as err:
        raise SweepError(f"{where}: {err.field} = {err.value!r}: {err.rule}") from None


# ----------------------------------------------------------------------------- parsing

def _flatten(prefix: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(_flatten(full, value))
        else:
            out[full] = value
    return out


def _toml(value: Any) -> str:
    """``value`` as a TOML scalar, for a hint."""
    return json.dumps(value) if isinstance(value, (str, bool)) else repr(value)


def _list(origin: str, data: Mapping[str, Any], key: str, default: list[Any] | None = None
          ) -> list[Any]:
    if key not in data:
        if default is None:
            raise SweepError(f"{origin}: missing key {key!r}: a list of values")
        return default
    value = data[key]
    if not isinstance(value, list):  # one value is still a list: a scalar is a slip
        raise SweepError(f"{origin}: {key} = {value!r}: must be a list, e.g. {key} = "
                         f"[{_toml(value)}]")
    if not value:
        raise SweepError(f"{origin}: {key} = []: must list at least one value")
    return value


def _models(origin: str, raw: list[Any]) -> tuple[ModelChoice, ...]:
    from poetsim.zoo import build_model, model_options

    out = []
    for item in raw:
        if isinstance(item, str):
            name, options = item, {}
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            options = {k: v for k, v in item.items() if k != "name"}
            name = item["name"]
        else:
            raise SweepError(f"{origin}: models: {item!r}: must be a model name or a table "
                             "{ name = ..., OPTION = VALUE, ... }")
        try:
            model_options(name)
            build_model(name, **options)
        except PoetsimError as err:
            raise SweepError(f"{origin}: models: {err}") from None
        out.append(ModelChoice(name, tuple(sorted((k, int(v)) for k, v in options.items()))))
    return tuple(out)


def _boards(origin: str, base: Path, raw: list[Any]) -> tuple[Board, ...]:
    out = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise SweepError(f"{origin}: boards: {item!r}: must be a built-in board name or "
                             "the path of a board file")
        ref = item
        if ref.endswith(".toml") and not Path(ref).is_absolute():
            ref = str(base / ref)
        try:
            out.append(get_board(ref))
        except PoetsimError as err:
            raise SweepError(f"{origin}: boards: {err}") from None
    return tuple(out)


def _overrides(origin: str, raw: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise SweepError(f"{origin}: overrides = {raw!r}: must be a table of dotted board "
                         "keys, each with a list of values")
    out = []
    for key, values in _flatten("", raw).items():
        _split_key(origin, key)
        if not isinstance(values, list):
            raise SweepError(f"{origin}: overrides: {key} = {values!r}: must be a list of "
                             f"values, e.g. {key} = [{_toml(values)}]")
        if not values:
            raise SweepError(f"{origin}: overrides: {key} = []: must list at least one value")
        for value in values:
            if isinstance(value, (dict, list)):
                raise SweepError(f"{origin}: overrides: {key} = {value!r}: must be a number, "
                                 "a string or a boolean")
        out.append((key, tuple(values)))
    return tuple(out)


def _ram(origin: str, raw: list[Any], models: tuple[ModelChoice, ...],
         boards: tuple[Board, ...], accounting: Accounting) -> tuple[str, ...]:
    from poetsim.zoo import build_model

    graph = build_model(models[0].name, **dict(models[0].options))
    out = []
    for item in raw:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise SweepError(f"{origin}: ram = {item!r}: must be a percentage (\"50%\"), a size "
                             f"(\"256KiB\"), bytes or {BOARD_BUDGET!r}")
        text = str(item).strip()
        try:
            resolve_request(graph, boards[0], ram=text, accounting=accounting)
        except PoetsimError as err:
            raise SweepError(f"{origin}: {err}") from None
        out.append(text)
    return tuple(out)


def _deadlines(origin: str, raw: list[Any]) -> tuple[str | None, ...]:
    out: list[str | None] = []
    for item in raw:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SweepError(f"{origin}: deadlines = {item!r}: must be a factor (\"1.5x\"), "
                             "seconds or \"none\"")
        text = str(item).strip()
        if text.lower() == "none":
            out.append(None)
            continue
        try:
            parse_deadline(text, 1.0)
        except PoetsimError as err:
            raise SweepError(f"{origin}: {err}") from None
        out.append(text)
    return tuple(out)


def _methods(origin: str, raw: list[Any]) -> tuple[str, ...]:
    for item in raw:
        if item not in METHODS:
            raise SweepError(f"{origin}: methods = {item!r}: must be one of {', '.join(METHODS)}")
    if len(set(raw)) != len(raw):
        raise SweepError(f"{origin}: methods = {raw!r}: lists a method twice")
    return tuple(raw)


def _solver(origin: str, raw: Any) -> SolverSettings:
    if raw is None:
        return SolverSettings()
    if not isinstance(raw, dict):
        raise SweepError(f"{origin}: solver = {raw!r}: must be a table")
    for key in raw:
        if key not in _SOLVER_KEYS:
            raise SweepError(f"{origin}: solver: unknown key {key!r}; allowed: "
                             f"{', '.join(_SOLVER_KEYS)}")
    try:
        return SolverSettings(**raw)
    except InputError as err:
        raise SweepError(f"{origin}: solver.{err}") from None


def parse_sweep(data: Mapping[str, Any], *, origin: str = "<sweep>",
                base_dir: str | Path = ".") -> Sweep:
    """Validate a sweep document (the TOML structure) and every point it implies."""
    for key in data:
        if key not in _TOP_KEYS:
            close = difflib.get_close_matches(key, _TOP_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SweepError(f"{origin}: unknown key {key!r}{hint}; allowed: "
                             f"{', '.join(_TOP_KEYS)}")
    name = data.get("name", Path(origin).stem)
    # the default results store is ./NAME.sqlite: a name given is a file name, not a path
    if not isinstance(name, str) or "name" in data and (not name.replace("_", "").replace(
            "-", "").replace(".", "").isalnum() or name.startswith(".")):
        raise SweepError(f"{origin}: name = {name!r}: must be letters, digits, '-', '_' and "
                         "'.', not starting with '.' (it names the results file)")
    models = _models(origin, _list(origin, data, "models"))
    boards = _boards(origin, Path(base_dir), _list(origin, data, "boards"))
    try:
        accounting = Accounting.parse(data.get("accounting", Accounting.PHYSICAL.value))
    except InputError as err:
        raise SweepError(f"{origin}: {err}") from None
    sweep = Sweep(
        name=name, source=origin, models=models, boards=boards,
        overrides=_overrides(origin, data.get("overrides")),
        ram=_ram(origin, _list(origin, data, "ram"), models, boards, accounting),
        accounting=accounting,
        deadlines=_deadlines(origin, _list(origin, data, "deadlines", ["none"])),
        methods=_methods(origin, _list(origin, data, "methods")),
        solver=_solver(origin, data.get("solver")),
        corners=_flag(origin, data, "corners"),
    )
    expand_points(sweep)  # every override combination on every board must validate
    return sweep


def _flag(origin: str, data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise SweepError(f"{origin}: {key} = {value!r}: must be true or false")
    return value


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (TOML)."""
    path = Path(path)
    data = read_toml(path, SweepError, "sweep file")
    return parse_sweep(data, origin=str(path), base_dir=path.parent)


# ----------------------------------------------------------------------------- points

def _point_id(model: ModelChoice, board: Board, variant: str, ram: str, deadline: str | None,
              method: str, solver: SolverSettings, accounting: Accounting,
              corners: bool = False) -> str:
    doc = {"model": model.name, "options": dict(model.options), "board": board_numbers(board),
           "variant": variant, "ram": ram, "deadline": deadline, "method": method,
           "solver": solver.for_method(method), "accounting": accounting.value,
           # only when asked for, so that the points of sweeps without them keep their keys
           **({"corners": dict(board.ranges)} if corners else {})}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def expand_points(sweep: Sweep) -> list[Point]:
    """The sweep's points in their deterministic order (duplicates dropped)."""
    keys = [k for k, _ in sweep.overrides]
    combos = list(itertools.product(*(values for _, values in sweep.overrides)))
    points: list[Point] = []
    seen: set[str] = set()
    for model in sweep.models:
        for base in sweep.boards:
            for combo in combos:
                overrides = tuple(zip(keys, combo, strict=True))
                board = apply_overrides(base, overrides, origin=sweep.source)
                variant = variant_label(base, overrides)
                for ram, deadline, method in itertools.product(sweep.ram, sweep.deadlines,
                                                               sweep.methods):
                    pid = _point_id(model, board, variant, ram, deadline, method, sweep.solver,
                                    sweep.accounting, sweep.corners)
                    if pid in seen:
                        continue
                    seen.add(pid)
                    points.append(Point(index=len(points), model=model, board=board,
                                        variant=variant, overrides=overrides, ram=ram,
                                        deadline=deadline, method=method,
                                        solver=sweep.solver, point_id=pid,
                                        accounting=sweep.accounting, corners=sweep.corners))
    return points
