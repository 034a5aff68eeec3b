"""The exception hierarchy of poetsim.

Every error poetsim raises on purpose derives from :class:`PoetsimError`, so a caller
(or the CLI) can catch one class and print a one-line message. Errors about bad input
also derive from :class:`ValueError`, the conventional Python type for them.
"""

from __future__ import annotations

__all__ = [
    "PoetsimError",
    "InputError",
    "GraphError",
    "GraphFileError",
    "BoardError",
    "UnknownNameError",
]


class PoetsimError(Exception):
    """Base class of all errors raised by poetsim."""


class InputError(PoetsimError, ValueError):
    """A user-supplied value or file is invalid; the message says which and why."""


class GraphError(InputError):
    """A training graph breaks a structural rule (cycle, dangling edge, bad cost, ...)."""


class GraphFileError(GraphError):
    """A graph file cannot be read: syntax, schema or content."""


class BoardError(InputError):
    """A board description is invalid; the message names file, key, value and rule."""


class UnknownNameError(InputError, LookupError):
    """A named model, board or option does not exist."""
