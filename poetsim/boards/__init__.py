"""Board descriptions: validated specs, TOML board files and the built-in boards."""

from poetsim.boards.load import board_from_dict, board_to_dict, load_board
from poetsim.boards.registry import (
    DEFAULT_BOARD,
    board_for_schedule,
    builtin_board_dir,
    builtin_board_names,
    get_board,
)
from poetsim.boards.spec import (
    Board,
    BoardFieldError,
    Bus,
    ContentionModel,
    Cpu,
    Dma,
    Flash,
    Profile,
    Ram,
    Source,
    SourceKind,
    Storage,
    StorageKind,
    WriteBusy,
)

__all__ = [
    "DEFAULT_BOARD", "Board", "BoardFieldError", "Bus", "ContentionModel", "Cpu", "Dma", "Flash",
    "Profile", "Ram", "Source", "SourceKind", "Storage", "StorageKind", "WriteBusy",
    "board_for_schedule", "board_from_dict", "board_to_dict", "builtin_board_dir",
    "builtin_board_names", "get_board", "load_board",
]
