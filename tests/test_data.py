"""poetsim.data: where the built-in board files and golden schedules are, in a checkout and
in an installed package."""

from __future__ import annotations

from pathlib import Path

import pytest

import poetsim.data
from poetsim.boards import builtin_board_dir
from poetsim.data import DATA_DIRS, data_dir
from poetsim.errors import InternalError

ROOT = Path(__file__).resolve().parents[1]


def test_a_checkout_reads_its_top_level_folders():
    assert data_dir("device_models") == ROOT / "device_models" == builtin_board_dir()
    assert data_dir("schedules") == ROOT / "schedules"
    assert (data_dir("schedules") / "cases.toml").is_file()


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A poetsim package folder of its own, in a ``site-packages`` of its own."""
    folder = tmp_path / "site-packages" / "poetsim"
    folder.mkdir(parents=True)
    monkeypatch.setattr(poetsim.data, "_PACKAGE", folder)
    return folder


@pytest.mark.parametrize("name", DATA_DIRS)
def test_an_installed_package_reads_its_own_copy_first(package, name):
    (package / name).mkdir()
    (package.parent / name).mkdir()  # a folder of that name beside it does not count
    assert data_dir(name) == package / name


def test_without_a_packaged_copy_the_folder_beside_the_package_is_read(package):
    (package.parent / "schedules").mkdir()
    assert data_dir("schedules") == package.parent / "schedules"


def test_missing_data_is_an_internal_error_naming_both_places(package):
    with pytest.raises(InternalError, match=r"schedules/ is in neither .*site-packages/poetsim"
                                            r"/schedules .* nor .*site-packages/schedules"):
        data_dir("schedules")
    with pytest.raises(InternalError, match="no data folder 'zoo'"):
        data_dir("zoo")
