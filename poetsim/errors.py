"""The exception hierarchy of poetsim.

Every error poetsim raises on purpose derives from :class:`PoetsimError`, so a caller
(or the CLI) can catch one class and print a one-line message. Errors about bad input
also derive from :class:`ValueError`, the conventional Python type for them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PoetsimError",
    "OutOfTime",
    "InputError",
    "ArgumentTypeError",
    "GraphError",
    "GraphFileError",
    "ContractViolation",
    "UnsupportedOpError",
    "BoardError",
    "BoardFieldError",
    "UnknownNameError",
    "ScheduleError",
    "ScheduleFileError",
    "FileProblem",
    "ExecutionError",
    "SweepError",
    "TorchMissingError",
    "DaskMissingError",
    "BuildTimeout",
    "InternalError",
    "PoetsimWarning",
]


class PoetsimError(Exception):
    """Base class of all errors raised by poetsim."""


class InputError(PoetsimError, ValueError):
    """A user-supplied value or file is invalid; the message says which and why."""


class ArgumentTypeError(InputError, TypeError):
    """An argument of a public function has the wrong type; the message names the parameter,
    the value, the type expected and the type given."""


class GraphError(InputError):
    """A training graph breaks a structural rule (cycle, dangling edge, bad cost, ...)."""


class GraphFileError(GraphError):
    """A graph file cannot be read: syntax, schema or content."""


class BoardError(InputError):
    """A board description is invalid; the message names file, key, value and rule."""


class UnknownNameError(InputError, LookupError):
    """A named model, board or option does not exist."""


class UnsupportedOpError(GraphError):
    """The traced model uses an op poetsim has no cost and backward rule for."""


class BoardFieldError(BoardError):
    """A board field breaks a rule. ``field`` may be dotted (``storage.block_bytes``)."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field} = {value!r}: {rule}")

    def within(self, section: str) -> BoardFieldError:
        """The same error with ``section.`` put in front of the field name."""
        return BoardFieldError(f"{section}.{self.field}", self.value, self.rule)


class ScheduleError(PoetsimError, ValueError):
    """A schedule breaks a rule of the contract; the message names step, op and rule."""


class ContractViolation(ScheduleError):  # noqa: N818 - named after what it carries
    """The first rule of the contract a schedule breaks, found by its replay; ``violation``
    (:class:`poetsim.schedule.replay.Violation`) says which rule, where."""

    def __init__(self, violation: Any) -> None:
        super().__init__(f"{violation.message} [{violation.rule}]")
        self.violation = violation


class ScheduleFileError(InputError):
    """A schedule file or binary cannot be read; the message names source, position, rule."""

    def __init__(self, message: str, rule: str = "", position: int | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.position = position


class FileProblem(ScheduleFileError):
    """A problem found while reading a schedule, before the file's name is known: where in
    the document, what and the rule; :meth:`error` names the source."""

    def __init__(self, where: str, detail: str, rule: str, position: int | None = None) -> None:
        super().__init__(detail, rule, position)
        self.where, self.detail = where, detail

    def error(self, source: str) -> ScheduleFileError:
        parts = [source, self.where, self.detail] if self.where else [source, self.detail]
        return ScheduleFileError(f"{': '.join(parts)} [{self.rule}]", self.rule, self.position)


class ExecutionError(InputError):
    """A schedule cannot be executed for real as written; the message names the step."""


class SweepError(InputError):
    """A sweep file or results store is invalid; the message names file, key, value, rule."""


class TorchMissingError(InputError):
    """PyTorch is not installed (``pip install 'poetsim[torch]'``)."""


class DaskMissingError(InputError):
    """Dask's ``distributed``, which runs sweeps, is not installed
    (``pip install 'poetsim[sweep]'``)."""


class BuildTimeout(PoetsimError):
    """Internal: building the MILP took longer than the time allowed for the whole solve
    (the solver catches it and answers with its best plan so far)."""


class OutOfTime(PoetsimError):  # noqa: N818 - a signal of the clock, not an error
    """A time limit passed in the middle of a piece of work (raised by
    :meth:`poetsim.clock.Ticker.tick`): a searching baseline catches its own, a run its
    share's; what reaches a caller (the limit ran out before the request was read) says so
    in one line. ``when`` is what was under way ("while building the model", or "")."""

    def __init__(self, message: str = "", when: str = "") -> None:
        super().__init__(message)
        self.when = when


class InternalError(PoetsimError):
    """A bug of poetsim's, found by one of its own consistency checks (the CLI exits 3)."""


class PoetsimWarning(UserWarning):
    """Something poetsim worked around (a warm start skipped, ...); the CLI prints one line."""
