"""The verdict: does this schedule run on this board? Judged here and nowhere else.

:func:`judge` takes a resolved :class:`~poetsim.request.Request` and the
:class:`~poetsim.sim.SimReport` of a schedule simulated for it, and returns a
:class:`Verdict`. PASS is a promise that the schedule runs on the board. It requires:

* under ``physical`` accounting (the default), everything resident at every moment
  (activations, workspace and page-in buffers, parameters, gradients, optimizer state)
  laid out in one static arena (:mod:`poetsim.schedule.arena`, every buffer at an offset,
  as a microcontroller runtime allocates them) within the board's usable RAM and within
  the user's budget: bytes that fit but cannot be placed do not pass;
* under ``paper`` accounting, activations and buffers within the user's budget (POET's
  mu_RAM); whether the arena fits the board is still reported (``fits_board_ram``)
  and noted, but does not decide;
* in both, the user's deadline (the request's, never a tightened one), the storage
  capacity, and the flash endurance where the board file gives one;
* the frozen weights the request placed in the board's memory-mapped flash
  (``flash_weight_bytes``, decided by :func:`~poetsim.request.resolve_request`, judged
  here, not re-made) within the flash's usable bytes.

The resident state comes from the graph through the request, never from a schedule
file; the simulation must have been run with it (:func:`judge` checks).

Energy does not decide: the op-list model prices waiting (idle, stall, storage at rest,
wake-ups) on its own timeline, which the simulator's just-in-time prefetch and bus
contention can beat or miss by a few percent, so a PASS does not promise the predicted
energy. The simulator recomputes the op-list prediction from the schedule (never taking
the file's figure, :class:`~poetsim.sim.report.Prediction`) and the verdict carries it
beside the simulated energy, with a note when they differ by more than
:data:`ENERGY_NOTE_SHARE`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from poetsim.errors import InternalError
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.request import Accounting, Request
from poetsim.schedule import Schedule
from poetsim.sim import simulate
from poetsim.sim.report import SimReport
from poetsim.units import format_bytes, format_quantity, meets_deadline

__all__ = ["ENERGY_NOTE_SHARE", "FAIL", "PASS", "CornerVerdict", "Verdict", "check_on_board",
           "deadline_met_runs", "judge", "judge_corners", "ram_violations"]

PASS = "PASS"
FAIL = "FAIL"

#: Relative difference of simulated and predicted energy above which the verdict notes it.
ENERGY_NOTE_SHARE = 0.01

#: Simulator observations this module re-judges against the request (the others count
#: as violations as they are).
_REJUDGED = frozenset({"ram_overflow", "storage_full", "flash_worn_out"})


@attrs.frozen
class Verdict:
    """PASS or FAIL with every figure that decided it, in bytes and seconds.

    ``arena_bytes`` is the static arena that holds every buffer at its offset (resident
    state included), at least ``peak_total_bytes``; ``fits_board_ram`` and, under
    ``physical``, ``within_budget`` judge it.
    ``flash_weight_bytes`` are the frozen weights read in place from flash (not in
    ``resident_bytes``), ``board_flash_bytes`` the flash's usable bytes (None: no flash).
    ``violations`` are one-line reasons for FAIL (empty on PASS); ``energy_j`` is simulated,
    ``model_energy_j`` the optimizer's op-list model of the same schedule (recomputed, not
    read from the file; it does not decide, see the module docstring); ``notes`` are one-line
    facts that did not decide (under ``paper`` accounting, that the whole state does not
    fit the board; a schedule file's metadata that disagrees with what poetsim recomputes).
    """

    passed: bool
    accounting: Accounting
    peak_total_bytes: int
    arena_bytes: int
    peak_activation_bytes: int
    resident_bytes: int
    board_ram_bytes: int
    fits_board_ram: bool
    budget_bytes: int
    within_budget: bool
    makespan_s: float
    deadline_s: float | None
    deadline_met: bool | None
    peak_storage_bytes: int
    storage_capacity_bytes: int
    violations: tuple[str, ...]
    notes: tuple[str, ...] = ()
    energy_j: float | None = None
    model_energy_j: float | None = None
    flash_weight_bytes: int = 0
    board_flash_bytes: int | None = None
    streamed_weight_bytes: int = 0
    #: The streamed bytes include the trained weights' optimizer state.
    streamed_state: bool = False

    @property
    def label(self) -> str:
        return PASS if self.passed else FAIL

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with units in the keys."""
        out = attrs.asdict(self, recurse=False)
        out.pop("passed")
        out["accounting"] = self.accounting.value
        out["violations"] = list(self.violations)
        out["notes"] = list(self.notes)
        return {"verdict": self.label, **out}

    def line(self) -> str:
        """One line for people: the verdict, the physical need and the reasons."""
        need = (f"peak {format_bytes(self.peak_total_bytes)} in all "
                f"({format_bytes(self.resident_bytes)} resident state + "
                f"{format_bytes(self.peak_activation_bytes)} activations), arena "
                f"{format_bytes(self.arena_bytes)}, of "
                f"{format_bytes(self.board_ram_bytes)} usable RAM: "
                + ("fits the board" if self.fits_board_ram else "does not fit the board"))
        if self.flash_weight_bytes:
            need += f" ({format_bytes(self.flash_weight_bytes)} frozen weights in flash)"
        if self.streamed_weight_bytes:
            need += (f" ({format_bytes(self.streamed_weight_bytes)} of weights"
                     f"{' and optimizer state' if self.streamed_state else ''} streamed from "
                     "storage)")
        text = f"{self.label} [{self.accounting.value} accounting] {need}"
        if self.violations:
            text += "; " + "; ".join(self.violations)
        return text


def _peak_where(report: SimReport) -> str:
    if report.peak_step < 0:
        return "before the first step"
    return f"at step {report.peak_step}, {report.peak_action} {report.peak_op!r}"


def _judge_ram(request: Request, report: SimReport, violations: list[str],
               notes: list[str]) -> tuple[bool, bool]:
    """Whether the arena fits the board's RAM and the budget; the reasons if not."""
    physical = request.accounting is Accounting.PHYSICAL
    peak_total = report.peak_ram_bytes
    peak_activation = peak_total - request.resident_bytes
    board_ram = request.board_ram_bytes
    arena = report.arena_bytes
    fits_board = arena <= board_ram
    where = _peak_where(report)
    whole = (f"peak RAM {format_bytes(peak_total)} ({peak_total} B: "
             f"{request.resident_bytes} B parameters, gradients and optimizer state + "
             f"{peak_activation} B activations and buffers, {where})")
    if arena > peak_total:  # the bytes fit a board the buffers' layout may not
        whole += (f", laid out in an arena of {format_bytes(arena)} ({arena} B, "
                  f"{arena - peak_total} B of fragmentation)")
    if not fits_board:
        text = (f"{whole} is over the board's usable RAM of {format_bytes(board_ram)} "
                f"({board_ram} B)")
        (violations if physical else notes).append(
            text if physical else f"physically: {text}; the paper's accounting leaves the "
                                  "resident state out")
    if physical:
        within_budget = arena <= request.budget_bytes
        if not within_budget and request.budget_bytes < board_ram:
            violations.append(f"{whole} is over the budget of {request.ram} = "
                              f"{format_bytes(request.budget_bytes)} ({request.budget_bytes} B)")
    else:
        within_budget = peak_activation <= request.budget_bytes
        if not within_budget:
            violations.append(
                f"peak activation RAM {format_bytes(peak_activation)} ({peak_activation} B, "
                f"{where}) is over the activation budget of {request.ram} = "
                f"{format_bytes(request.budget_bytes)} ({request.budget_bytes} B)")
    return fits_board, within_budget


def ram_violations(request: Request, report: SimReport) -> list[str]:
    """Why ``report``'s RAM (its arena under ``physical`` accounting, its activations under
    ``paper``) breaks the request's board or budget, judged as :func:`judge` judges it; for
    commands that judge a run's memory without a whole verdict (``execute``)."""
    violations: list[str] = []
    _judge_ram(request, report, violations, [])
    return violations


def _judge_storage(request: Request, report: SimReport) -> list[str]:
    """What breaks the storage's capacity, the flash's endurance or the flash's room for
    frozen weights."""
    violations = []
    streamed = request.streamed_weight_bytes  # the streamed weights live there too
    if report.peak_storage_bytes + streamed > report.storage_capacity_bytes:
        held = (f"{report.peak_storage_bytes} B at its peak" if not streamed else
                f"{report.peak_storage_bytes + streamed} B at its peak ({streamed} B of "
                "them weights and state that live there)")
        violations.append(f"storage holds {held}, over its capacity of "
                          f"{report.storage_capacity_bytes} B")
    if (report.flash_endurance_cycles is not None
            and report.flash_max_erase_count > report.flash_endurance_cycles):
        violations.append(
            f"a flash sector is erased {report.flash_max_erase_count} times in one iteration, "
            f"over its endurance of {report.flash_endurance_cycles} cycles")
    flash_weights = request.flash_weight_bytes
    board_flash = request.board_flash_bytes
    if flash_weights and (board_flash is None or flash_weights > board_flash):
        room = ("the board has no memory-mapped flash" if board_flash is None
                else f"over the board's usable flash of {format_bytes(board_flash)} "
                     f"({board_flash} B)")
        violations.append(f"{format_bytes(flash_weights)} ({flash_weights} B) of frozen "
                          f"weights placed in flash: {room}")
    return violations


def judge(request: Request, report: SimReport, *, notes: Iterable[str] = (),
          predicted_energy_j: float | None = None) -> Verdict:
    """The verdict on ``report``, a simulation of a schedule made for ``request``.

    ``notes`` are carried into the verdict (e.g. disagreements of a schedule file's
    metadata with the request, found by :mod:`poetsim.schedule.metadata`).
    ``predicted_energy_j``, the op-list model's energy of the schedule, is noted when the
    simulated energy differs from it by more than :data:`ENERGY_NOTE_SHARE`.
    """
    if report.resident_bytes != request.resident_bytes:
        raise InternalError(
            f"the simulation counted {report.resident_bytes} B resident, the request "
            f"{request.resident_bytes} B; simulate with the request's resident state")
    violations: list[str] = []
    notes = list(notes)
    fits_board, within_budget = _judge_ram(request, report, violations, notes)
    deadline_met = None
    if request.deadline_s is not None:
        deadline_met = meets_deadline(report.makespan_s, request.deadline_s)
        if not deadline_met:
            violations.append(
                f"makespan {format_quantity(report.makespan_s, 's', 6)} exceeds the deadline "
                f"of {format_quantity(request.deadline_s, 's', 6)} ({request.deadline}) by "
                f"{format_quantity(report.makespan_s - request.deadline_s, 's')}")
    violations += _judge_storage(request, report)
    violations += [v.message for v in report.violations if v.rule not in _REJUDGED]
    if predicted_energy_j and abs(report.energy_j / predicted_energy_j - 1) > ENERGY_NOTE_SHARE:
        notes.append(f"simulated energy {format_quantity(report.energy_j, 'J', 6)} is "
                     f"{report.energy_j / predicted_energy_j - 1:+.1%} off the optimizer's "
                     f"op-list model ({format_quantity(predicted_energy_j, 'J', 6)}): its "
                     "timeline of waits differs from the simulated one")
    return Verdict(
        passed=not violations, accounting=request.accounting,
        peak_total_bytes=report.peak_ram_bytes, arena_bytes=report.arena_bytes,
        peak_activation_bytes=report.peak_ram_bytes - request.resident_bytes,
        resident_bytes=request.resident_bytes,
        board_ram_bytes=request.board_ram_bytes, fits_board_ram=fits_board,
        budget_bytes=request.budget_bytes, within_budget=within_budget,
        makespan_s=report.makespan_s, deadline_s=request.deadline_s,
        deadline_met=deadline_met, peak_storage_bytes=report.peak_storage_bytes,
        storage_capacity_bytes=report.storage_capacity_bytes,
        violations=tuple(violations), notes=tuple(notes), energy_j=report.energy_j,
        model_energy_j=predicted_energy_j, flash_weight_bytes=request.flash_weight_bytes,
        board_flash_bytes=request.board_flash_bytes,
        streamed_weight_bytes=request.streamed_weight_bytes,
        streamed_state=WeightsOnStorage.of(request.graph).state_copies > 0)


def deadline_met_runs(request: Request, makespans_s: Iterable[float]) -> int | None:
    """How many runs of these makespans meet the request's deadline, each judged as
    :func:`judge` judges one run (None without a deadline): a Monte Carlo study's count."""
    if request.deadline_s is None:
        return None
    return sum(meets_deadline(m, request.deadline_s) for m in makespans_s)


def check_on_board(request: Request, schedule: Schedule, *, trace: bool = False,
                   notes: Iterable[str] = ()) -> tuple[SimReport, Verdict]:
    """Simulate ``schedule`` on the request's board with the request's resident state,
    budget and deadline, and judge it."""
    report = simulate(request.graph, request.board, schedule,
                      budget_bytes=request.ram_limit_bytes,
                      resident_bytes=request.resident_bytes, costs=request.costs, trace=trace)
    return report, judge(request, report, notes=notes,
                         predicted_energy_j=report.prediction.predicted_energy_j)


@attrs.frozen
class CornerVerdict:
    """The verdict of one schedule at one corner of the board's ranges
    (:mod:`poetsim.boards.corners`)."""

    corner: str
    verdict: Verdict

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {"name": self.corner, "verdict": v.label, "makespan_s": v.makespan_s,
                "energy_j": v.energy_j, "violations": list(v.violations)}

    def phrase(self) -> str:
        """``PASS (typical)``, ``FAIL at the slow corner: <first reason>``."""
        v = self.verdict
        energy = "" if v.energy_j is None else format_quantity(v.energy_j, "J")
        if self.corner == "typical":
            return f"{v.label} (typical{', ' + energy if energy else ''})"
        if v.passed:
            return (f"PASS at the {self.corner} corner ({energy}, "
                    f"{format_quantity(v.makespan_s, 's')})")
        return f"FAIL at the {self.corner} corner ({energy}): {v.violations[0]}"


def judge_corners(request: Request, schedule: Schedule, typical: Verdict | None = None
                  ) -> list[CornerVerdict]:
    """``schedule`` judged at every corner of the request's board, typical first (its
    verdict ``typical`` when already judged): the same graph, budget and deadline in
    seconds, each corner's board and its costs. A board without ranges has one corner."""
    from poetsim.boards.corners import CORNERS, corner_board
    from poetsim.costs import op_costs

    if typical is None:
        typical = check_on_board(request, schedule)[1]
    out = [CornerVerdict("typical", typical)]
    if not request.board.ranges:
        return out
    for corner in CORNERS[1:]:
        board = corner_board(request.board, corner)
        at = attrs.evolve(request, board=board, costs=op_costs(request.graph, board))
        out.append(CornerVerdict(corner, check_on_board(at, schedule)[1]))
    return out
