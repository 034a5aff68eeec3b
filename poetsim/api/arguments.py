"""What the public API's functions take, read once: the model (a zoo name, a graph file, a
:class:`~poetsim.graph.TrainingGraph` or a PyTorch ``nn.Module``), the board (a name, a
file or a :class:`~poetsim.boards.Board`), and the budget and deadline in the command
line's words or in bytes and seconds.

Nothing here parses a budget or a deadline: the words and the numbers both go to
:func:`poetsim.request.resolve_request` (or :func:`~poetsim.request.request_for_schedule`),
the one parser, so ``ram_bytes=262144`` is exactly ``--ram 262144``. What is checked here
is the type of each argument (a wrong one raises :class:`~poetsim.errors.ArgumentTypeError`
naming the parameter and the type expected) and that a value is given one way only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from poetsim.boards import Board, get_board
from poetsim.errors import ArgumentTypeError, InputError
from poetsim.graph import TrainingGraph, read_graph
from poetsim.graph.graph import OPTIMIZER_STATE_COPIES
from poetsim.request import BOARD_RAM, Accounting
from poetsim.zoo import build_model

__all__ = ["Model", "accounting_of", "board_of", "budget_word", "deadline_word", "expect",
           "expect_flag", "graph_of", "is_graph_file", "model_options_of", "optimizer_of"]

#: What a model may be given as (an ``nn.Module`` is typed ``Any``: torch is optional).
Model = str | Path | TrainingGraph | Any


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def expect(name: str, value: Any, types: type | tuple[type, ...], expected: str, *,
           optional: bool = True) -> Any:
    """``value`` when it is of ``types`` (a bool is no number), or None if ``optional``,
    else an :class:`ArgumentTypeError` naming ``name``, ``expected`` and the type given."""
    allowed = types if isinstance(types, tuple) else (types,)
    if value is None and optional or isinstance(value, allowed) and (
            bool in allowed or not isinstance(value, bool)):
        return value
    raise ArgumentTypeError(f"{name} = {_shown(value)}: expected {expected}, not "
                            f"{type(value).__name__}")


def expect_callable(name: str, value: Any, expected: str) -> Any:
    """``value`` when it is None or callable, else an :class:`ArgumentTypeError`."""
    if value is None or callable(value):
        return value
    raise ArgumentTypeError(f"{name} = {_shown(value)}: expected {expected} (callable) or "
                            f"None, not {type(value).__name__}")


def expect_flag(name: str, value: Any) -> bool:
    """``value`` when it is True or False, else an :class:`ArgumentTypeError`."""
    if isinstance(value, bool):
        return value
    raise ArgumentTypeError(f"{name} = {_shown(value)}: expected True or False (bool), not "
                            f"{type(value).__name__}")


def _one_of(word_name: str, word: Any, number_name: str, number: Any) -> None:
    if word is not None and number is not None:
        raise InputError(f"{word_name} = {word!r} and {number_name} = {number!r}: give one "
                         "of them")


def budget_word(ram: str | None, ram_bytes: int | None, default: str | None = BOARD_RAM
                ) -> str | None:
    """The budget as the user words it: ``ram`` (``"50%"``, ``"256KiB"``, ``"board"``), or
    ``ram_bytes`` written as the command line would take it; neither: ``default``."""
    expect("ram", ram, str, "a budget such as '50%', '256KiB' or 'board' (str)")
    expect("ram_bytes", ram_bytes, int, "a number of bytes (int)")
    _one_of("ram", ram, "ram_bytes", ram_bytes)
    if ram_bytes is not None:
        return str(ram_bytes)
    return default if ram is None else ram


def deadline_word(deadline: str | None, deadline_s: float | None) -> str | float | None:
    """The deadline as the user words it: ``deadline`` (``"1.5x"``, ``"2.5s"``), or
    ``deadline_s`` seconds; neither: none."""
    expect("deadline", deadline, str, "a deadline such as '1.5x' or '2.5s' (str)")
    expect("deadline_s", deadline_s, (int, float), "a number of seconds (float)")
    _one_of("deadline", deadline, "deadline_s", deadline_s)
    return deadline_s if deadline_s is not None else deadline


def accounting_of(accounting: str | Accounting | None) -> str | Accounting | None:
    """``accounting`` checked for its type (its value is checked where it is resolved)."""
    return expect("accounting", accounting, (str, Accounting),
                  "'physical' or 'paper' (str or Accounting)")


def optimizer_of(optimizer: str | None) -> str | None:
    """``optimizer`` when it is one the graph's resident state knows, or None."""
    expect("optimizer", optimizer, str, "'sgd', 'momentum' or 'adam' (str)")
    if optimizer is not None and optimizer not in OPTIMIZER_STATE_COPIES:
        raise InputError(f"optimizer = {optimizer!r}: must be one of "
                         f"{', '.join(OPTIMIZER_STATE_COPIES)}")
    return optimizer


def board_of(board: str | Path | Board) -> Board:
    """The board: a :class:`Board` as it is, or a built-in name or a board file."""
    if isinstance(board, Board):
        return board
    expect("board", board, (str, Path), "a board name, a board file (str or Path) or a Board",
           optional=False)
    return get_board(board)


def model_options_of(model_options: Mapping[str, Any]) -> Mapping[str, int]:
    """``model_options`` when every value is an int (the zoo also takes the command line's
    words, ``"2"``; a caller's ``layers="2"`` is a slip), else an
    :class:`ArgumentTypeError`."""
    for option, value in model_options.items():
        expect(option, value, int, "a whole number (int)", optional=False)
    return model_options


def is_graph_file(model: Any) -> bool:
    """Whether ``model`` names a graph file rather than a zoo model."""
    return isinstance(model, Path) or isinstance(model, str) and model.endswith(".json")


def _is_torch_module(model: Any) -> bool:
    torch = sys.modules.get("torch")  # a module is only one if torch is already imported
    return torch is not None and isinstance(model, torch.nn.Module)


def graph_of(model: Model, model_options: Mapping[str, int],
             example_inputs: Sequence[Any] | Any | None = None) -> TrainingGraph:
    """The training graph of ``model``: the zoo model of that name built with
    ``model_options``, the graph file at that path (a :class:`~pathlib.Path`, or a name
    ending in ``.json``), the graph itself, or a PyTorch module traced on
    ``example_inputs`` (:func:`poetsim.torchio.import_module`: one input, or a tuple of
    them)."""
    if example_inputs is not None and not _is_torch_module(model):
        raise InputError(f"example_inputs given for model {_shown(model)}: they are for a "
                         "torch.nn.Module only")
    if model_options and (is_graph_file(model) or not isinstance(model, str)):
        raise InputError(f"model options {', '.join(model_options)} given for "
                         f"{_shown(model)}: they are for a zoo model only")
    model_options_of(model_options)
    if isinstance(model, TrainingGraph):
        return model
    if is_graph_file(model):
        return read_graph(str(model))
    if isinstance(model, str):
        return build_model(model, **model_options)
    if _is_torch_module(model):
        from poetsim.torchio import import_module

        if example_inputs is None:
            raise InputError("example_inputs: a torch.nn.Module is traced on example inputs; "
                             "give them, e.g. example_inputs=torch.randn(1, 3, 32, 32)")
        inputs = (tuple(example_inputs) if isinstance(example_inputs, (tuple, list))
                  else (example_inputs,))
        return import_module(model, inputs).graph
    raise ArgumentTypeError(f"model = {_shown(model)}: expected a zoo model name (str), a "
                            "graph file (Path, or str ending in .json), a TrainingGraph or a "
                            f"torch.nn.Module, not {type(model).__name__}")
