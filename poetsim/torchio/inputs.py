"""The example inputs of an import and the user's model factory.

:func:`parse_input_spec` reads an ``--input-shape`` (``2,3,32,32`` or ``2,16:int:100``),
:func:`make_inputs` makes random example tensors for such specs, :func:`load_factory`
finds a ``MODULE:FACTORY`` callable and :func:`call_factory` calls it, each failure a
one-line :class:`~poetsim.errors.InputError`.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from poetsim.errors import InputError
from poetsim.torchio.tables import require_torch

__all__ = ["MAX_INPUT_ELEMENTS", "InputSpec", "call_factory", "load_factory", "make_inputs",
           "parse_input_spec"]


@attrs.frozen
class InputSpec:
    """One example input: a shape, and for integer inputs the exclusive upper bound."""

    shape: tuple[int, ...] = attrs.field(converter=tuple)
    int_high: int | None = None


def parse_input_spec(text: str) -> InputSpec:
    """``2,3,32,32`` (float, normal) or ``2,16:int:100`` (integers in [0, 100))."""
    shape_text, _, rest = text.partition(":")
    try:  # an empty size (2,,16) is a typo, not a separator to skip
        shape = tuple(int(s) for s in shape_text.split(","))
    except ValueError:
        raise InputError(f"--input-shape {text!r}: expected sizes like 2,3,32,32") from None
    if not shape or min(shape) < 1:
        raise InputError(f"--input-shape {text!r}: sizes must be positive integers")
    if not rest:
        return InputSpec(shape)
    kind, _, high = rest.partition(":")
    if kind != "int" or not high.strip().isdigit() or int(high) < 1:
        raise InputError(f"--input-shape {text!r}: expected SHAPE or SHAPE:int:HIGH, "
                         "e.g. 2,16:int:100")
    return InputSpec(shape, int(high))


#: The most elements one example input may have (2**31: 8 GiB of float32), far beyond any
#: model a board trains; a bigger shape is almost always a typo.
MAX_INPUT_ELEMENTS = 2**31


def make_inputs(specs: Sequence[InputSpec], seed: int = 0) -> tuple[Any, ...]:
    """Random example tensors for ``specs`` (deterministic for a seed)."""
    for s in specs:
        if math.prod(s.shape) > MAX_INPUT_ELEMENTS:
            shape = ",".join(map(str, s.shape))
            raise InputError(f"--input-shape {shape}: {math.prod(s.shape):.3g} elements, over "
                             f"the {MAX_INPUT_ELEMENTS} an example input may have")
    torch = require_torch()
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, s.int_high, s.shape, generator=gen) if s.int_high
                 else torch.randn(s.shape, generator=gen) for s in specs)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"


def call_factory(spec: str, factory: Callable[[], Any]) -> tuple[Any, Any]:
    """``factory()`` as ``(module, example inputs or None)``: a factory returns a module or
    a pair of them; its exception, or another tuple, a one-line :class:`InputError` naming
    ``spec``."""
    try:
        made = factory()
    except Exception as err:  # noqa: BLE001 - the user's factory raised
        raise InputError(f"model factory {spec!r} raised {type(err).__name__}: "
                         f"{_first_line(err)}") from None
    if not isinstance(made, tuple):
        return made, None
    if len(made) != 2:
        raise InputError(f"model factory {spec!r} returned a tuple of {len(made)}: expected "
                         "a module, or (module, example inputs)")
    return made[0], made[1]


def load_factory(spec: str) -> Callable[[], Any]:
    """``package.module:factory`` or ``path/to/file.py:factory`` to the callable."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"model factory {spec!r}: expected MODULE:FACTORY, e.g. "
                         "mymodels:resnet18 or models.py:resnet18")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise InputError(f"model factory {spec!r}: file {module_name!r} not found")
            unique = f"_poetsim_factory_{abs(hash(str(path.resolve())))}"
            module = sys.modules.get(unique)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(unique, path)
                module = importlib.util.module_from_spec(loader_spec)  # type: ignore[arg-type]
                sys.modules[unique] = module
                loader_spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))  # as `python -m` does
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise InputError(f"model factory {spec!r}: cannot import {module_name!r}: "
                         f"{err}") from None
    except SyntaxError as err:
        raise InputError(f"model factory {spec!r}: cannot import {module_name!r}: "
                         f"{err.msg} ({Path(err.filename or module_name).name}, line "
                         f"{err.lineno})") from None
    except Exception as err:  # noqa: BLE001 - the user's module raised while loading
        raise InputError(f"model factory {spec!r}: importing {module_name!r} raised "
                         f"{type(err).__name__}: {_first_line(err)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"model factory {spec!r}: {module_name!r} has no callable {attr!r}")
    return factory
