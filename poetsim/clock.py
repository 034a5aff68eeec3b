"""The time limit of the run under way, for long pieces of work far below the run.

A run (:func:`poetsim.runs.run_method`) sets its stop time with :func:`limit`; work whose
length grows faster than the graph (laying out a long schedule's arena) reads it with
:func:`stop_at` and checks it every few thousand steps through a :class:`Ticker`, which
raises :class:`~poetsim.errors.OutOfTime` once it has passed. Outside a run no stop time is
set and nothing is ever cut short (``simulate``, ``regress`` without ``--resolve``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from poetsim.errors import OutOfTime

__all__ = ["GRACE_S", "Ticker", "limit", "stop_at"]

_STOP_AT: ContextVar[float | None] = ContextVar("poetsim_stop_at", default=None)


def stop_at() -> float | None:
    """The :func:`time.perf_counter` instant by which the run under way ends (None: no
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
                raise OutOfTime

    def reserve(self, seconds: float) -> None:
        """From now on, stop ``seconds`` before ``stop_at`` (the time to finish a schedule,
        :func:`finish_estimate_s`)."""
        if self.stop_at is not None:
            self.until = self.stop_at - seconds

    def can_finish(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now ends by ``stop_at`` (and :data:`GRACE_S`)."""
        return self.stop_at is None or time.perf_counter() + seconds <= self.stop_at + GRACE_S
