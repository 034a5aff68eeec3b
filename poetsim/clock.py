"""The time limit of the command under way, for long pieces of work far below it.

A command (``poetsim solve``, ``compare``, the demo, or the API call behind it) sets its
whole limit with :func:`command`, and a run (:func:`poetsim.runs.run_method`) its share
with :func:`limit`; work whose length grows with the graph (building and costing a
model, replaying and simulating a schedule, laying out its arena) reads the sooner stop
time with :func:`stop_at` and checks it every few thousand steps through a
:class:`Ticker`, which raises :class:`~poetsim.errors.OutOfTime` once it has passed. Its
message (:func:`ran_out`) names the user's limit, what was under way (:func:`doing`) and
what to raise. Outside a command no stop time is set and nothing is ever cut short
(``simulate``, ``regress`` without ``--resolve``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import NamedTuple

from poetsim.errors import OutOfTime

__all__ = ["GRACE_S", "Ticker", "command", "doing", "limit", "named", "out_of_time", "ran_out",
           "stop_at", "time_for"]

_STOP_AT: ContextVar[float | None] = ContextVar("poetsim_stop_at", default=None)


class _Command(NamedTuple):
    """The command under way: its limit, the words that name it ("--time-limit"), and
    when it was entered, by the wall clock and by this process's CPU time."""

    limit_s: float
    name: str
    wall_s: float
    cpu_s: float


_COMMAND: ContextVar[_Command | None] = ContextVar("poetsim_command", default=None)
#: What the work under way is, in words that follow "while" ("building the model").
_DOING: ContextVar[str] = ContextVar("poetsim_doing", default="")


def stop_at() -> float | None:
    """The :func:`time.perf_counter` instant by which the work under way ends (None: no
    limit)."""
    return _STOP_AT.get()


@contextlib.contextmanager
def limit(until: float | None) -> Iterator[None]:
    """Within the block, :func:`stop_at` is ``until`` (a :func:`time.perf_counter`
    instant), or the enclosing one when that is sooner."""
    outer = _STOP_AT.get()
    token = _STOP_AT.set(until if outer is None or (until is not None and until < outer)
                         else outer)
    try:
        yield
    finally:
        _STOP_AT.reset(token)


@contextlib.contextmanager
def command(started: float | None, limit_s: float, name: str | None = None
            ) -> Iterator[None]:
    """Within the block, a whole command's limit: ``limit_s`` seconds counted from
    ``started`` (a :func:`time.perf_counter` instant: the process's start on the command
    line; None: no limit for the whole) bound :func:`stop_at`, and :func:`ran_out` names
    them, as ``name`` (the flag the user sets, ``"--time-limit"``; default: the enclosing
    command's, else "time limit")."""
    if started is None:
        yield
        return
    outer = _COMMAND.get()
    name = name or (outer.name if outer is not None else "time limit")
    token = _COMMAND.set(_Command(limit_s, name, time.perf_counter(), time.process_time()))
    try:
        with limit(started + limit_s):
            yield
    finally:
        _COMMAND.reset(token)


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """Within the block, the work under way is ``what`` (words that follow "while": an
    :class:`~poetsim.errors.OutOfTime` raised in it says so)."""
    token = _DOING.set(what)
    try:
        yield
    finally:
        _DOING.reset(token)


def named(share_s: float | None = None, whose: str = "") -> str:
    """The time limit at work, in the user's words: the command's (``"the 10 s
    --time-limit"``), with ``share_s``, the part of it ``whose`` work had, beside it when
    that is less (``"... (poet had 2.54 s of it)"``); outside a command, ``share_s`` is the
    limit itself (``"the 2.54 s time limit"``)."""
    command_ = _COMMAND.get()
    if command_ is None:
        return "the time limit" if share_s is None else f"the {share_s:.3g} s time limit"
    text = f"the {command_.limit_s:g} s {command_.name}"
    if share_s is not None and share_s < 0.995 * command_.limit_s:
        text += f" ({whose or 'this step'} had {share_s:.3g} s of it)"
    return text


def ran_out(when: str, share_s: float | None = None, whose: str = "",
            then: str = "may find one") -> str:
    """One line: the time limit (:func:`named`) ran out ``when`` ("while ..."), and what to
    raise (a longer one ``then`` does)."""
    command_ = _COMMAND.get()
    name = "time limit" if command_ is None else command_.name
    return f"{named(share_s, whose)} ran out{' ' + when if when else ''}; a longer {name} {then}"


#: The wall time a command runs before its share of a CPU (:func:`time_for`) is judged.
_SHARE_AFTER_S = 0.5


def time_for(cpu_s: float) -> bool:
    """Whether work of about ``cpu_s`` seconds of CPU ends by :func:`stop_at` (always,
    without one), at the share of a CPU this process has had since the command began:
    beside busy processes a second of work takes longer."""
    until, command_ = _STOP_AT.get(), _COMMAND.get()
    if until is None:
        return True
    now = time.perf_counter()
    share = 1.0
    if command_ is not None and now - command_.wall_s > _SHARE_AFTER_S:
        share = min(1.0, max(0.05, (time.process_time() - command_.cpu_s)
                             / (now - command_.wall_s)))
    return now + cpu_s / share <= until


def out_of_time() -> OutOfTime:
    """The :class:`~poetsim.errors.OutOfTime` to raise now; its message
    (:func:`ran_out`) names what was under way."""
    what = _DOING.get()
    when = f"while {what}" if what else ""
    return OutOfTime(ran_out(when), when)


#: A search finishes its result (a baseline's schedule) when that should end at most this
#: long after its ``stop_at``; else it answers that it ran out of its time.
GRACE_S = 0.25


class Ticker:
    """Counts work and looks at the clock every ``every`` units of it.

    :meth:`tick` raises :class:`OutOfTime` once ``stop_at`` (a :func:`time.perf_counter`
    instant, or None: never) has passed. A unit is a step of a program or a state of a
    dynamic program (about a microsecond), so the clock is read every millisecond or so and
    a search stops well within a tenth of a second of ``stop_at``. A search that builds
    programs keeps the time to finish one (:meth:`reserve`): it stops that much earlier,
    and finishes its best one only if that ends in time (:meth:`can_finish`).
    """

    __slots__ = ("every", "left", "stop_at", "until")

    def __init__(self, stop_at: float | None, every: int = 2048) -> None:
        self.stop_at = stop_at
        self.until = stop_at
        self.every = every
        self.left = every

    def tick(self, work: int = 1) -> None:
        if self.until is None:
            return
        self.left -= work
        if self.left <= 0:
            self.left = self.every
            if time.perf_counter() > self.until:
                raise out_of_time()

    def reserve(self, seconds: float) -> None:
        """From now on, stop ``seconds`` before ``stop_at`` (the time to finish a schedule,
        :func:`finish_estimate_s`)."""
        if self.stop_at is not None:
            self.until = self.stop_at - seconds

    def can_finish(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now ends by ``stop_at`` (and :data:`GRACE_S`)."""
        return self.stop_at is None or time.perf_counter() + seconds <= self.stop_at + GRACE_S
