"""poetsim: energy-optimal rematerialization and paging schedules for training on edge boards.

The public API (:mod:`poetsim.api`), from the package's top level::

    import poetsim
    planned = poetsim.plan("ds_cnn_s", "nrf52840", ram="board", deadline="2x", train_last=3)
    print(planned.check().line())

:func:`plan`, :func:`simulate`, :func:`compare_methods`, :func:`run_sweep` and
:func:`regress_goldens`, their results :class:`Plan`, :class:`Check`, :class:`Comparison`
and :class:`Regression`, the settings :class:`Search`, and the exceptions
:class:`PoetsimError` (the root) and :class:`InputError` (bad input). They are imported
when first used, so ``import poetsim`` stays light and the modules that import
``poetsim.__version__`` see no cycle.
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: When this process imported poetsim (:func:`time.perf_counter`): a command run from the
#: command line counts its time limit from here, loading poetsim included.
IMPORTED_AT = _time.perf_counter()

if TYPE_CHECKING:
    from poetsim.api import (
        Check,
        Comparison,
        Plan,
        Regression,
        Search,
        compare_methods,
        plan,
        regress_goldens,
        run_sweep,
        simulate,
    )
    from poetsim.errors import ArgumentTypeError, InputError, PoetsimError

#: Each public name and the module it lives in.
_PUBLIC = {**dict.fromkeys(("Check", "Comparison", "Plan", "Regression", "Search",
                            "compare_methods", "plan", "regress_goldens", "run_sweep",
                            "simulate"), "poetsim.api"),
           **dict.fromkeys(("ArgumentTypeError", "InputError", "PoetsimError"),
                           "poetsim.errors")}

__all__ = ["ArgumentTypeError", "Check", "Comparison", "InputError", "Plan", "PoetsimError",
           "Regression", "Search", "__version__", "compare_methods", "plan", "regress_goldens",
           "run_sweep", "simulate"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'poetsim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
