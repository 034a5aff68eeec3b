"""The time limit of the run under way, for long pieces of work far below the run.

A run (:func:`poetsim.runs.run_method`) sets its stop time with :func:`limit`; work whose
length grows faster than the graph (laying out a long schedule's arena) reads it with
:func:`stop_at` and checks it every few thousand steps through a :class:`Watch`, which
raises :class:`~poetsim.errors.OutOfTime` once it has passed. Outside a run no stop time is
set and nothing is ever cut short (``simulate``, ``regress`` without ``--resolve``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from poetsim.errors import OutOfTime

__all__ = ["Watch", "limit", "stop_at"]

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


class Watch:
    """Counts work and reads the clock every ``every`` units of it: :meth:`tick` raises
    :class:`~poetsim.errors.OutOfTime` once the run's :func:`stop_at` has passed."""

    __slots__ = ("every", "left", "until")

    def __init__(self, every: int = 4096) -> None:
        self.until = stop_at()
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
