"""Finding boards: the built-in board files and user files given by path."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from poetsim.boards.load import load_board
from poetsim.boards.spec import Board
from poetsim.data import data_dir
from poetsim.errors import UnknownNameError

__all__ = ["DEFAULT_BOARD", "board_for_schedule", "builtin_board_dir", "builtin_board_names",
           "get_board"]

#: The board the quick start and the demo use.
DEFAULT_BOARD = "nrf52840"


def builtin_board_dir() -> Path:
    """The folder of built-in board files: ``device_models/`` of the checkout, or the
    installed package's copy (:func:`poetsim.data.data_dir`)."""
    return data_dir("device_models")


def builtin_board_names() -> list[str]:
    """Names of the built-in boards, sorted."""
    return sorted(p.stem for p in builtin_board_dir().glob("*.toml"))


@cache
def _builtin(name: str) -> Board:
    return load_board(builtin_board_dir() / f"{name}.toml")


def get_board(name_or_path: str | Path) -> Board:
    """A built-in board by name, or a board file by path (anything ending in ``.toml``)."""
    text = str(name_or_path)
    if text.endswith(".toml") or "/" in text or Path(text).is_file():
        return load_board(text)
    if text not in builtin_board_names():
        raise UnknownNameError(
            f"unknown board {text!r}; built-in boards: {', '.join(builtin_board_names())} "
            "(or give the path of a .toml board file)"
        )
    return _builtin(text)


def board_for_schedule(given: str | Path | None, recorded: str | None, source: str) -> Board:
    """The board a command runs a schedule on: the one the user ``given``, else the one the
    schedule file (``source``) ``recorded`` it was made for, else :data:`DEFAULT_BOARD`. A
    recorded board that is not built in is a one-line error asking for its file."""
    if given is None and recorded is not None:
        try:
            return get_board(recorded)
        except UnknownNameError as err:
            raise UnknownNameError(f"{source}: made for board {recorded!r}, which is not built "
                                   f"in: give it with --board FILE ({err})") from None
    return get_board(given or DEFAULT_BOARD)
