"""One request: what the user asked, resolved once into bytes and seconds, priced once.

A *request* is a training graph on a board with a RAM budget, an optional deadline and an
accounting. :func:`resolve_request` is the only place where the user's words for a budget
(``"50%"``, ``"256KiB"``, a byte count, ``"board"``) and a deadline (``"1.5x"``,
``"2.5s"``, seconds) with its margin (``"10%"``, ``"0.5s"``) are parsed; the optimizer,
every baseline, the simulator's verdict, compare, the demo, sweeps and the experiments
take the resolved :class:`Request` and never parse again. The graph is priced
(:func:`poetsim.costs.op_costs`) here, once.

Two accountings (:class:`Accounting`):

* ``physical`` (the default): RAM holds everything the training keeps (activations,
  workspace and page-in buffers, parameters, gradients, optimizer state), and all of it
  must fit the board's usable RAM. A size or ``"board"`` is the whole RAM; a percentage
  is of the plain schedule's activation peak, with the resident state added on top. The
  activation budget the methods plan against is what is left of the budget after the
  resident state, and never more than what the board leaves.
  Frozen weights are the exception: on a board with memory-mapped flash (``[flash]``,
  :class:`~poetsim.boards.spec.Flash`) they stay in flash and are read in place, as real
  MCU training does (Lin et al., NeurIPS 2022: "frozen int8 weights stay in flash and are
  read in place"), whenever they fit its usable bytes (all of them, or none: they stay in
  RAM). :attr:`Request.flash_weight_bytes` carries them and :attr:`Request.resident_bytes`
  leaves them out; the solver, the checker, the simulator and the verdict take both from
  the request, so this is the one place where the placement is decided. Reading in place
  costs no extra time: the boards' compute figures are for code running from flash
  (CoreMark from flash), wait states and cache included. Trained weights, gradients and
  optimizer state never live in flash (they are written); trained weights updated in
  place, with their optimizer state, may live on the storage device
  (:attr:`Request.streamed_weight_bytes`).
* ``paper``: POET's mu_RAM. The budget covers activations and working buffers only, as in
  the paper's experiments, which assume parameters and gradients live in a separate
  region. Verdicts still say what is physically needed and whether it fits the board.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, op_costs
from poetsim.errors import InputError
from poetsim.graph.graph import OPTIMIZER_STATE_COPIES, TrainingGraph, resident_memory
from poetsim.graph.memory import minimum_ram_bytes, plain_peak
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.units import format_bytes, parse_bytes, split_quantity
from poetsim.zoo import build_model, row_bands_to_fit, zoo_options

if TYPE_CHECKING:
    from poetsim.schedule.ops import Schedule

__all__ = ["BOARD_RAM", "MAX_BUDGET_BYTES", "MAX_DEADLINE_S", "Accounting", "Request",
           "check_request_words", "flash_weight_placement", "parse_deadline",
           "parse_deadline_margin", "request_for_schedule", "resolve_request",
           "weight_placements"]

#: The budget word for "all of the board's usable RAM".
BOARD_RAM = "board"
#: Plausibility bounds on what a user may ask for: 1 PiB of RAM, a year per iteration.
MAX_BUDGET_BYTES = 2**50
MAX_DEADLINE_S = 365 * 24 * 3600.0


class Accounting(enum.Enum):
    """What a RAM budget and a verdict count (see the module docstring)."""

    PHYSICAL = "physical"
    PAPER = "paper"

    @classmethod
    def parse(cls, value: str | Accounting, *, what: str = "accounting") -> Accounting:
        if isinstance(value, Accounting):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise InputError(f"{what} = {value!r}: must be 'physical' or 'paper'") from None


@attrs.frozen
class Request:
    """A resolved request. Bytes and seconds only; nothing here is parsed again.

    ``budget_bytes`` is the user's budget in the accounting's terms (whole RAM under
    ``physical``, activations under ``paper``). ``activation_budget_bytes`` is what the
    methods plan activations and working buffers against: under ``physical`` the budget
    minus the resident state, capped by what the board leaves (never negative).
    ``resident_bytes`` (parameters, gradients, optimizer state) comes from the graph, less
    ``flash_weight_bytes``: the frozen weights read in place from the board's memory-mapped
    flash (physical accounting on a board with ``[flash]`` they fit; 0 otherwise), or less
    ``streamed_weight_bytes``: weights that live on the board's storage and are streamed
    by every op that reads them (:mod:`poetsim.graph.streaming`; physical accounting):
    the frozen ones when neither the flash nor the RAM beside the largest op can hold
    them, and then the trained ones too, with their optimizer state (``optimizer``), when
    that is still not enough and every update is applied in place (written back slice by
    slice). Then ``graph`` is the streamed graph
    (stream buffers in the workspaces) and ``costs`` price the reads and write-backs.
    ``deadline_s`` is the user's deadline. ``ram`` / ``deadline`` keep the user's words.

    ``deadline_margin_s`` is slack the methods keep below the deadline (0: none): they
    plan against :attr:`planning_deadline_s` (``deadline_s - deadline_margin_s``), so that
    a schedule has room for the board's timing variance (check it with a Monte Carlo,
    ``poetsim simulate --runs N``); verdicts still judge ``deadline_s``.
    ``deadline_margin`` keeps the user's words.
    """

    graph: TrainingGraph = attrs.field(repr=False, eq=False)
    board: Board = attrs.field(repr=False, eq=False)
    costs: OpCosts = attrs.field(repr=False, eq=False)
    accounting: Accounting
    budget_bytes: int
    activation_budget_bytes: int
    resident_bytes: int
    deadline_s: float | None
    ram: str
    deadline: str | None
    optimizer: str = "sgd"
    deadline_margin_s: float = 0.0
    deadline_margin: str | None = None
    flash_weight_bytes: int = 0
    streamed_weight_bytes: int = 0
    #: The options with which the zoo builds exactly ``graph`` (:func:`poetsim.zoo.zoo_options`),
    #: or None when it is no zoo model's graph.
    model_options: dict[str, int] | None = attrs.field(default=None, eq=False)

    @property
    def frozen_weight_bytes(self) -> int:
        """Bytes of the graph's frozen weights (wherever they live)."""
        return self.graph.frozen_param_bytes

    @property
    def board_flash_bytes(self) -> int | None:
        """The usable bytes of the board's memory-mapped flash, or None without one."""
        return None if self.board.flash is None else self.board.flash.usable_bytes

    @property
    def planning_deadline_s(self) -> float | None:
        """The deadline the methods plan against: the user's minus the margin."""
        if self.deadline_s is None:
            return None
        return self.deadline_s - self.deadline_margin_s if self.deadline_margin_s else \
            self.deadline_s

    @property
    def board_ram_bytes(self) -> int:
        """The board's usable RAM (``ram.bytes - ram.reserved_bytes``)."""
        return self.board.ram.usable_bytes

    @property
    def plain_time_s(self) -> float:
        """Every op once, nothing paged: the shortest time any schedule can take."""
        return self.costs.plain_time_s

    @property
    def plain_energy_j(self) -> float:
        """Every op once, nothing paged: the least energy any schedule can spend."""
        return self.costs.plain_energy_j

    @property
    def ram_limit_bytes(self) -> int:
        """The most RAM, resident state included, a schedule may hold at any moment and
        still meet the budget (and, under ``physical``, the board)."""
        return self.activation_budget_bytes + self.resident_bytes

    @property
    def gradient_sum_ops(self) -> int:
        """How many of the graph's ops sum a gradient (``Op.gradient_sum_of``)."""
        return sum(op.gradient_sum_of is not None for op in self.graph.ops)

    @property
    def paging_capacity_bytes(self) -> int:
        """Bytes of the storage device left for paged tensors: its capacity less the
        weights (and optimizer state) that live there (negative: they do not fit)."""
        return self.board.storage.capacity_bytes - self.streamed_weight_bytes

    @property
    def infeasible_reason(self) -> str | None:
        """Why no schedule can meet this request before any method runs, or None.

        Under ``physical`` the resident state must leave room for activations within the
        budget and the board's RAM, and what lives on the storage device must fit it.
        """
        if self.accounting is not Accounting.PHYSICAL:
            return None
        if self.paging_capacity_bytes < 0:
            capacity = self.board.storage.capacity_bytes
            state = (" and optimizer state" if WeightsOnStorage.of(self.graph).state_copies
                     else "")
            return (f"the {format_bytes(self.streamed_weight_bytes)} "
                    f"({self.streamed_weight_bytes} B) of weights{state} that must live on "
                    f"{self.board.storage.kind.value} storage exceed its capacity of "
                    f"{format_bytes(capacity)} ({capacity} B) on {self.board.name}: no "
                    "schedule can help (physical accounting)")
        room = min(self.budget_bytes, self.board_ram_bytes)
        if self.resident_bytes < room:
            return None
        where = ("the board's usable RAM" if room == self.board_ram_bytes
                 else f"the RAM budget ({self.ram})")
        in_flash = (f", with {format_bytes(self.flash_weight_bytes)} of frozen weights "
                    "read in place from flash" if self.flash_weight_bytes else "")
        return (f"parameters, gradients and optimizer state alone need "
                f"{format_bytes(self.resident_bytes)} ({self.resident_bytes} B) of RAM"
                f"{in_flash}, leaving no "
                f"room in {where} of {format_bytes(room)} ({room} B) on {self.board.name}: "
                "no schedule of activations can help (physical accounting)")

    def metadata(self) -> dict[str, Any]:
        """The request's part of a schedule's metadata: what was asked, and its bytes and
        seconds (recorded for people; a reader recomputes them, see
        :mod:`poetsim.schedule.metadata`)."""
        out = {"board": self.board.name, "accounting": self.accounting.value,
               "ram": self.ram, "deadline": self.deadline, "optimizer": self.optimizer,
               "budget_bytes": self.budget_bytes,
               "budget_activation_bytes": self.activation_budget_bytes,
               "resident_bytes": self.resident_bytes,
               "flash_weight_bytes": self.flash_weight_bytes,
               "streamed_weight_bytes": self.streamed_weight_bytes,
               "deadline_s": self.deadline_s}
        if self.deadline_margin is not None:
            out.update(deadline_margin=self.deadline_margin,
                       planning_deadline_s=self.planning_deadline_s)
        if self.model_options is not None:  # how to build the graph again (simulate, regress)
            out.update(model=self.graph.metadata["model"], model_options=self.model_options)
        elif self.graph.metadata.get("graph_file"):  # the graph file it was read from
            out.update(graph_file=self.graph.metadata["graph_file"])
        return out

    def describe_budget(self) -> str:
        """One line: the budget in words, with the accounting."""
        if self.accounting is Accounting.PAPER:
            return (f"{format_bytes(self.activation_budget_bytes)} of activations and "
                    f"buffers (paper accounting; {format_bytes(self.resident_bytes)} of "
                    "parameters, gradients and optimizer state beside it)"
                    + self._describe_bands())
        within = self.resident_bytes + self.activation_budget_bytes
        # a budget over the board's usable RAM leaves the activations what the board has:
        # say so, so that the parts add up to the whole
        head = f"{format_bytes(self.budget_bytes)} in all (physical accounting)"
        if within < self.budget_bytes:
            head = (f"{format_bytes(within)} in all (physical accounting; the "
                    f"{format_bytes(self.budget_bytes)} asked for is more than the board's "
                    f"{format_bytes(self.board.ram.usable_bytes)} usable RAM)")
        elif within > self.budget_bytes:
            head = (f"{format_bytes(self.budget_bytes)} in all (physical accounting; less "
                    "than the resident state alone)")
        return (f"{head}: {format_bytes(self.resident_bytes)} resident state + "
                f"{format_bytes(self.activation_budget_bytes)} for activations and buffers"
                + self._describe_flash() + self._describe_streamed() + self._describe_bands())

    def _describe_streamed(self) -> str:
        """Weights streamed from storage, if any (physical only)."""
        if not self.streamed_weight_bytes:
            return ""
        on_storage = WeightsOnStorage.of(self.graph)
        written = ("; the trained ones are written back by their in-place updates"
                   if on_storage.trained else "")
        state = f" and their {self.optimizer} state" if on_storage.state_copies else ""
        return (f"; {format_bytes(self.streamed_weight_bytes)} of {on_storage.what}{state} on "
                f"{self.board.storage.kind.value} storage, streamed by the ops that read "
                f"them each time they run{written}")

    def _describe_bands(self) -> str:
        """The gradient-sum ops and the row tiling of the graph's front
        (:mod:`poetsim.graph.tiling`), if any."""
        sums = self.gradient_sum_ops
        bands = self.graph.metadata.get("row_bands")
        return ((f"; {sums} gradients summed by ops of their own (gradient_sums=1)"
                 if sums else "")
                + (f"; the frozen front runs in {bands} row bands (row_bands={bands})"
                   if bands else ""))

    def _describe_flash(self) -> str:
        """Where the frozen weights live, for :meth:`describe_budget` (physical only)."""
        frozen = self.frozen_weight_bytes
        if self.flash_weight_bytes:
            return (f"; {format_bytes(self.flash_weight_bytes)} of frozen weights read in "
                    f"place from flash (of {format_bytes(self.board_flash_bytes or 0)} "
                    "usable), not in RAM")
        if frozen and self.board_flash_bytes is not None and not self.streamed_weight_bytes:
            return (f"; {format_bytes(frozen)} of frozen weights stay in RAM: over the "
                    f"{format_bytes(self.board_flash_bytes)} of usable flash")
        return ""


def parse_deadline(deadline: str | float | None, plain_time_s: float) -> float | None:
    """``"1.5x"`` (of the plain schedule's compute time), ``"2.5"`` or ``"2.5s"``, or None."""
    if deadline is None:
        return None
    text = str(deadline).strip()
    quantity = split_quantity(text)
    if quantity is None or quantity[1] not in ("", "x", "s"):
        raise InputError(f"deadline = {text!r}: expected a factor such as 1.5x or seconds such "
                         "as 2.5s")
    value, unit = quantity
    seconds = value * plain_time_s if unit == "x" else value
    if not (value > 0) or not math.isfinite(seconds):
        raise InputError(f"deadline = {text!r}: must be a positive, finite time")
    if seconds > MAX_DEADLINE_S:
        raise InputError(f"deadline = {text!r}: {seconds:.6g} s is over the plausible "
                         f"maximum of {MAX_DEADLINE_S:.6g} s (a year)")
    return seconds


def parse_deadline_margin(margin: str | float | None, deadline_s: float | None) -> float:
    """The margin in seconds: ``"10%"`` (of the deadline), ``"0.5"`` or ``"0.5s"``; None or
    ``"0"``: 0. It must leave a positive planning deadline, and needs a deadline."""
    if margin is None:
        return 0.0
    text = str(margin).strip()
    quantity = split_quantity(text)
    if quantity is None or quantity[1] not in ("", "%", "s"):
        raise InputError(f"deadline_margin = {text!r}: expected a share of the deadline such "
                         "as 10% or seconds such as 0.5s")
    value, unit = quantity
    if deadline_s is None:
        if value == 0:
            return 0.0
        raise InputError(f"deadline_margin = {text!r}: needs a deadline to keep a margin "
                         "below (give --deadline)")
    if unit == "%":
        if not (0 <= value < 100):
            raise InputError(f"deadline_margin = {text!r}: a share must be in [0%, 100%)")
        seconds = deadline_s * value / 100
    else:
        seconds = value
        if not (0 <= seconds < deadline_s):
            raise InputError(f"deadline_margin = {text!r}: must be less than the deadline of "
                             f"{deadline_s:.6g} s")
    if not math.isfinite(seconds):
        raise InputError(f"deadline_margin = {text!r}: must be finite")
    return seconds


def _budget_figure(text: str, reference_bytes: int) -> int:
    """The user's budget in bytes: a percentage of ``reference_bytes`` or a size."""
    if text.endswith("%"):
        try:
            fraction = float(text[:-1]) / 100
        except ValueError:
            raise InputError(f"ram = {text!r}: expected a percentage such as 50%") from None
        if not (fraction > 0) or not math.isfinite(fraction):
            raise InputError(f"ram = {text!r}: must be a positive percentage")
        figure = math.floor(fraction * reference_bytes)
    else:
        figure = parse_bytes(text, what="ram")
    if figure > MAX_BUDGET_BYTES:
        raise InputError(f"ram = {text!r}: {figure} B is over the plausible maximum of "
                         f"{MAX_BUDGET_BYTES} B (1 PiB)")
    return figure


def check_request_words(ram: str | None = None, deadline: str | None = None) -> None:
    """Check a budget (``"50%"``, ``"256KiB"``, bytes, ``"board"``) and a deadline
    (``"1.5x"``, seconds) as a user or a schedule file words them, without a graph: every
    rule of :func:`resolve_request` that needs none. Raises a one-line :class:`InputError`."""
    if ram is not None and str(ram).strip() != BOARD_RAM:
        _budget_figure(str(ram).strip(), 0)
    parse_deadline(deadline, 0.0)


def resolve_request(graph: TrainingGraph, board: Board, *, ram: str | int = "100%",
                    deadline: str | float | None = None,
                    accounting: str | Accounting = Accounting.PHYSICAL,
                    optimizer: str = "sgd", costs: OpCosts | None = None,
                    deadline_margin: str | float | None = None) -> Request:
    """The request of the user's words: one of the two ways to make a :class:`Request`
    (the other is :func:`request_for_schedule`, a schedule file's).

    Resolves the budget and deadline on ``graph`` and ``board`` and prices the graph; a
    zoo model none of whose schedules could fit because one op alone does not is reshaped
    first (:func:`_tiled_to_fit`: gradient sums, then row bands), here and nowhere else.

    ``ram``: ``"50%"`` (of the plain schedule's activation peak), ``"256KiB"`` or bytes
    (the whole RAM under ``physical``, activations under ``paper``), or ``"board"`` (the
    board's usable RAM). ``deadline``: ``"1.5x"`` of the plain compute time, seconds, or
    None. ``optimizer`` (``sgd``, ``momentum``, ``adam``) decides the optimizer state.
    ``costs`` may be given when already computed for this graph and board.
    ``deadline_margin``: ``"10%"`` of the deadline or seconds (``"0.5s"``) that the methods
    keep free below the deadline (:attr:`Request.planning_deadline_s`); None: none.
    """
    words = dict(ram=ram, deadline=deadline, accounting=accounting, optimizer=optimizer,
                 deadline_margin=deadline_margin)
    request = _resolve(graph, board, costs=costs, **words)
    return _tiled_to_fit(request, lambda g: _resolve(g, board, **words))


def _resolve(graph: TrainingGraph, board: Board, *, ram: str | int,
             deadline: str | float | None, accounting: str | Accounting, optimizer: str,
             deadline_margin: str | float | None, costs: OpCosts | None = None,
             placement: WeightsOnStorage | None = None) -> Request:
    """The request of exactly ``graph``; ``placement`` forces which weights live on
    storage (a schedule file's graph says), else it is decided here."""
    accounting = Accounting.parse(accounting)
    if costs is not None and len(costs) != len(graph.ops):
        raise InputError(f"costs cover {len(costs)} ops, but graph {graph.name!r} has "
                         f"{len(graph.ops)}")
    resident = resident_memory(graph, optimizer=optimizer).total_bytes
    usable = board.ram.usable_bytes
    text = str(ram).strip()
    physical = accounting is Accounting.PHYSICAL
    flash_weights = (flash_weight_placement(graph, board)
                     if physical and not (placement and placement.frozen) else 0)
    resident -= flash_weights
    if placement is not None:
        on_storage = placement
    else:
        on_storage = (_weights_on_storage(graph, resident, usable, optimizer)
                      if physical and not flash_weights else WeightsOnStorage())
    streamed = on_storage.total_bytes(graph)
    if on_storage:
        graph, costs, resident = on_storage.graph(graph), None, resident - streamed
    if costs is None:
        costs = op_costs(graph, board)
    if text == BOARD_RAM:
        budget = usable
        activations = usable - resident if physical else usable
    elif text.endswith("%"):
        activations = _budget_figure(text, plain_peak(graph).bytes)
        budget = activations + resident if physical else activations
    else:
        budget = _budget_figure(text, 0)
        activations = budget - resident if physical else budget
    if physical:
        activations = max(0, min(activations, usable - resident))
    deadline_s = parse_deadline(deadline, float(costs.compute_time_s.sum()))
    margin_s = parse_deadline_margin(deadline_margin, deadline_s)
    return Request(graph=graph, board=board, costs=costs, accounting=accounting,
                   budget_bytes=budget, activation_budget_bytes=activations,
                   resident_bytes=resident, deadline_s=deadline_s, ram=text,
                   deadline=None if deadline is None else str(deadline).strip(),
                   optimizer=optimizer, deadline_margin_s=margin_s,
                   deadline_margin=None if deadline_margin is None
                   else str(deadline_margin).strip(), flash_weight_bytes=flash_weights,
                   streamed_weight_bytes=streamed, model_options=zoo_options(graph))


def _weights_on_storage(graph: TrainingGraph, resident: int, usable: int,
                        optimizer: str) -> WeightsOnStorage:
    """Which weights leave RAM for the storage device: none while the resident state and
    the largest op's working set fit the board; else the frozen ones; and the trained
    ones too, with their ``optimizer``'s state, if that is not enough and every update is
    in place (no resident gradient; the update reads and writes the state it needs)."""
    def fits(g: TrainingGraph, held: int) -> bool:
        return held + minimum_ram_bytes(g)[0] <= usable
    if fits(graph, resident):
        return WeightsOnStorage()
    choice = WeightsOnStorage(frozen=graph.frozen_param_bytes > 0)
    held = resident - choice.total_bytes(graph)
    in_place = resident_memory(graph).gradient_bytes == 0
    if graph.trained_param_bytes and in_place and not fits(choice.graph(graph), held):
        choice = attrs.evolve(choice, trained=True,
                              state_copies=OPTIMIZER_STATE_COPIES[optimizer])
    return choice


def request_for_schedule(schedule: Schedule, board: Board | str | Path | None = None, *,
                         source: str = "schedule", graph: TrainingGraph | None = None,
                         model: str | None = None,
                         model_options: Mapping[str, int] | None = None,
                         ram: str | None = None, deadline: str | float | None = None,
                         accounting: str | Accounting | None = None,
                         optimizer: str | None = None) -> Request:
    """The request a schedule file records: the other of the two ways to make a
    :class:`Request` (the first is :func:`resolve_request`, the user's words).

    Every part is the file's unless given here (a command line's overrides): the graph
    (``graph``; else the graph file it records, ``metadata.graph_file``; else the zoo
    ``model`` built with ``model_options``, by default the model and options it records,
    which already carry any gradient sums and row bands: nothing is reshaped here), the
    ``board`` (a :class:`Board`, a name or a file; else the one it records), the budget
    and deadline words (else the recorded ones, resolved again on this graph and board; no
    budget: the board's RAM), the ``accounting`` and the ``optimizer``. Which weights live
    on storage is the one placement whose graph the schedule's fingerprint names (the
    board's own choice first), so that judging a file under another accounting judges the
    schedule it holds. ``source`` names the file in errors. The file's byte and second
    figures are never taken (:func:`poetsim.schedule.metadata.disagreements` lists them).
    """
    from poetsim.boards import board_for_schedule
    from poetsim.graph.io import graph_fingerprint
    from poetsim.schedule.metadata import parse_metadata

    meta = parse_metadata(schedule.metadata, source=source)
    if not isinstance(board, Board):
        board = board_for_schedule(None if board is None else str(board), meta.board, source)
    if graph is None:
        graph = _recorded_graph(meta, schedule, source, model, model_options)
    optimizer = optimizer or meta.optimizer or "sgd"
    words = dict(ram=ram or meta.ram or BOARD_RAM,
                 deadline=deadline if deadline is not None else meta.deadline,
                 accounting=accounting or meta.accounting or Accounting.PHYSICAL,
                 optimizer=optimizer, deadline_margin=None)
    request = _resolve(graph, board, **words)
    if graph_fingerprint(request.graph) == schedule.graph_fingerprint:
        return request
    for placement in weight_placements(optimizer):
        placed = placement.graph(graph) if placement else graph
        if graph_fingerprint(placed) == schedule.graph_fingerprint:
            return _resolve(graph, board, placement=placement, **words)
    return request  # made for another graph: the checker names the mismatch


def _recorded_graph(meta: Any, schedule: Schedule, source: str, model: str | None,
                    model_options: Mapping[str, int] | None) -> TrainingGraph:
    """The graph a schedule file says it was made for (see :func:`request_for_schedule`)."""
    from poetsim.graph.io import read_graph
    from poetsim.zoo import model_names

    recorded = meta.graph_file
    if model is None and recorded is not None:
        if not Path(recorded).is_file():
            raise InputError(f"{source}: made from the graph file {recorded!r}, which is not "
                             "there: pass it with --graph FILE")
        return read_graph(recorded)
    name = model or meta.model or schedule.graph_name
    if name not in model_names():
        raise InputError(f"{source}: made for graph {schedule.graph_name!r}, which is no zoo "
                         "model and records no graph file: pass its graph with --graph FILE")
    if model_options is None:
        model_options = meta.model_options if name == meta.model else None
    return build_model(name, **dict(model_options or {}))


def weight_placements(optimizer: str) -> list[WeightsOnStorage]:
    """Every placement of weights on storage (none first), with ``optimizer``'s state
    beside trained weights there or not."""
    copies = sorted({0, OPTIMIZER_STATE_COPIES[optimizer]})
    return [WeightsOnStorage()] + [
        WeightsOnStorage(frozen, trained, n if trained else 0)
        for frozen, trained in ((True, False), (False, True), (True, True))
        for n in copies if trained or not n]


def _tiled_to_fit(request: Request, resolve: Callable[[TrainingGraph], Request]) -> Request:
    """``request``, or the same request on its zoo model reshaped so that every op fits
    the activation budget when one op alone would not: first with the gradient of each op
    read by several summed by an op of its own (``gradient_sums=1``), kept when it lowers
    the largest working set; then, if that is not enough, with the frozen front in the
    fewest row bands that make it fit (:func:`poetsim.zoo.row_bands_to_fit`). ``resolve``
    makes the request of a graph (the same ``ram``, ``deadline`` and accounting). A model
    nothing makes fit comes back in its best shape, so that its refusal names the op
    that truly cannot fit."""
    options = request.model_options
    budget = request.activation_budget_bytes
    need = minimum_ram_bytes(request.graph)[0]
    if options is None or need <= budget:
        return request
    model = str(request.graph.metadata["model"])
    if not options.get("gradient_sums"):
        summed = resolve(build_model(model, **options, gradient_sums=1))
        summed_need = minimum_ram_bytes(summed.graph)[0]
        if summed_need < need:
            request, options = summed, {**options, "gradient_sums": 1}
            if summed_need <= budget:
                return request
    bands = row_bands_to_fit(model, options, budget)
    return resolve(build_model(model, **options, row_bands=bands)) if bands else request


def flash_weight_placement(graph: TrainingGraph, board: Board) -> int:
    """Bytes of frozen weights that live in ``board``'s memory-mapped flash, read in
    place: all of the graph's frozen weights when the board has ``[flash]`` and they fit
    its usable bytes, else 0 (they stay in RAM). Used by :func:`resolve_request` under
    physical accounting; call that, not this, to decide a request."""
    frozen = graph.frozen_param_bytes
    if board.flash is None or frozen <= 0 or frozen > board.flash.usable_bytes:
        return 0
    return frozen

