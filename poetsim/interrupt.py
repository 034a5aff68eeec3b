"""Ctrl-C that stops a command, SCIP's searches included.

SCIP catches SIGINT itself by default: it ends the running search as if a limit had been
reached, and poetsim would go on, write its files and exit 0. poetsim turns that off on
every model (:func:`scip_model`) and keeps Python's own handling, with one difference while
SCIP runs (:func:`solving`): a Ctrl-C there is only recorded, an event handler on every
model interrupts the search at its next node or LP, and :class:`KeyboardInterrupt` is
raised as soon as SCIP returns. The CLI turns
it into one line and exit status 130, nothing written. A second Ctrl-C raises at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["requested", "scip_model", "solving"]

_state = {"depth": 0, "requested": False}


def requested() -> bool:
    """Whether Ctrl-C was pressed during the SCIP search running now."""
    return bool(_state["requested"])


def _on_sigint(signum: int, frame: Any) -> None:
    if _state["depth"] and not _state["requested"]:
        _state["requested"] = True  # SCIP is running: its event handlers stop it
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def solving() -> Iterator[None]:
    """Around ``model.optimize()``: a Ctrl-C meanwhile ends the search, then raises
    :class:`KeyboardInterrupt`."""
    installed = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _on_sigint) if installed else None
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if installed:
            signal.signal(signal.SIGINT, previous)
    if _state["requested"] and not _state["depth"]:
        _state["requested"] = False
        raise KeyboardInterrupt


def scip_model(name: str) -> Any:
    """A quiet SCIP model that leaves Ctrl-C to poetsim (see the module docstring)."""
    from pyscipopt import SCIP_EVENTTYPE, SCIP_STAGE, Eventhdlr, Model

    class StopOnCtrlC(Eventhdlr):
        def eventinit(self):
            self.model.catchEvent(SCIP_EVENTTYPE.LPSOLVED, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event):
            if _state["requested"] and self.model.getStage() == SCIP_STAGE.SOLVING:
                self.model.interruptSolve()

    model = Model(name)
    model.hideOutput()
    model.setParam("misc/catchctrlc", False)
    model.includeEventhdlr(StopOnCtrlC(), "poetsim_ctrl_c", "ends the search on Ctrl-C")
    return model
