"""The settings of a MILP search, validated in one place.

:class:`SolverSettings` is what a user may set of the POET MILP and its ablations (time
limit, gap, seed, threads, effort); its validators are the only check of those values, for
the CLI, the study layer and :func:`poetsim.optimizer.solve` alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from poetsim.errors import InputError

__all__ = ["DEFAULT_EFFORT", "DEFAULT_TIME_LIMIT_S", "SOLVER_METHODS", "SolverSettings"]

#: The MILP methods: their result depends on the solver settings.
SOLVER_METHODS = frozenset({"poet", "checkmate", "paging_only"})

#: Largest SCIP random seed shift.
_MAX_SEED = 2**31 - 1

#: The effort of a MILP search unless the user gives one: on this project's 2-core
#: reference machine a solve of the zoo's CIFAR models ends by this effort well within the
#: default 60 s time limit, even beside two busy processes, so by default the same
#: request gives the same schedule anywhere.
DEFAULT_EFFORT = 300
#: The time limit of a MILP search unless the user gives one: under the default effort
#: only a safety cap, set so that the effort binds first even on a loaded machine
#: (ResNet-18 CIFAR at 50%: 25 s alone, 62 s beside two busy processes).
DEFAULT_TIME_LIMIT_S = 120.0


def _positive_finite(_instance: Any, attribute: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not (0 < value <= 1e6):
        raise InputError(f"{attribute.name} = {value!r}: must be a number of seconds in "
                         "(0, 1e6]")


def _gap(_instance: Any, attribute: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < 1):
        raise InputError(f"{attribute.name} = {value!r}: must be in [0, 1)")


def _count(low: int, high: int, also: str = "") -> Callable[[Any, Any, int], None]:
    def check(_instance: Any, attribute: Any, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
            raise InputError(f"{attribute.name} = {value!r}: must be a whole number in "
                             f"[{low}, {high}]{also}")
    return check


def _no_effort_as_none(value: Any) -> Any:
    """An effort of 0 means none: the time limit alone."""
    return None if value == 0 and not isinstance(value, bool) else value


@attrs.frozen
class SolverSettings:
    """Settings of the MILP methods (``poet``, ``checkmate``, ``paging_only``)."""

    time_limit_s: float = attrs.field(default=DEFAULT_TIME_LIMIT_S, validator=_positive_finite)
    gap_limit: float = attrs.field(default=0.0, validator=_gap)
    seed: int = attrs.field(default=0, validator=_count(0, _MAX_SEED))
    threads: int = attrs.field(default=1, validator=_count(1, 1024))
    #: Deterministic work limit in SCIP nodes and their LP iterations (see
    #: :mod:`poetsim.optimizer.effort`); the time limit is then a safety cap. None (or 0):
    #: the time limit alone bounds the search, and the result depends on the machine.
    effort: int | None = attrs.field(default=DEFAULT_EFFORT, converter=_no_effort_as_none,
                                     validator=attrs.validators.optional(
                                         _count(1, 10**9, ", or 0: the time limit alone")))

    def for_method(self, method: str) -> dict[str, Any]:
        """The settings that decide ``method``'s result ({} for a heuristic baseline)."""
        return attrs.asdict(self) if method in SOLVER_METHODS else {}
