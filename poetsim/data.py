"""Where poetsim's own data files are: the built-in board files and the golden schedules.

The repository keeps them at its top level (``device_models/``, ``schedules/``); the wheel
carries them inside the package (``poetsim/device_models``, ``poetsim/schedules``: the
``force-include`` table of ``pyproject.toml``). :func:`data_dir` finds either, so a source
checkout, an editable install and an installed wheel all read the same files.
"""

from __future__ import annotations

from pathlib import Path

from poetsim.errors import InternalError

__all__ = ["DATA_DIRS", "data_dir"]

#: The data folders, each named as at the repository's top level and inside the wheel.
DATA_DIRS = ("device_models", "schedules")

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder of poetsim's data ``name`` (one of :data:`DATA_DIRS`): inside the
    package where a wheel installed it, else at the top of the source checkout the package
    is imported from (an editable install's too).

    >>> data_dir("device_models").joinpath("nrf52840.toml").is_file()
    True
    """
    if name not in DATA_DIRS:
        raise InternalError(f"no data folder {name!r}; poetsim's are {', '.join(DATA_DIRS)}")
    places = (_PACKAGE / name, _PACKAGE.parent / name)
    for folder in places:
        if folder.is_dir():
            return folder
    raise InternalError(f"poetsim's {name}/ is in neither {places[0]} (an installed wheel) "
                        f"nor {places[1]} (a source checkout): a broken installation")
