"""Atomic writes leave either the old file or the new one, never a partial file; reading
a file that is missing, a directory, unreadable or not UTF-8 raises one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from poetsim.errors import BoardError, InputError
from poetsim.fileio import atomic_write_text, read_text, read_toml


def test_atomic_write_replaces(tmp_path):
    path = tmp_path / "sub" / "f.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["f.txt"]


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    atomic_write_text(path, "old")

    def boom(*_args):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


# ----------------------------------------------------------------------------- reading


def _one_line_error(path, what="board file", reader=read_text) -> str:
    with pytest.raises(BoardError) as info:
        reader(path, BoardError, what)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message or repr(str(path)) in message
    return message


def test_read_text_returns_utf8_text(tmp_path):
    path = tmp_path / "board.toml"
    path.write_bytes("name = \"café\"\n".encode())
    assert read_text(path, BoardError, "board file") == "name = \"café\"\n"


def test_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "board.toml"
    path.write_bytes(b"\xef\xbb\xbfname = 'x'\n")
    assert read_text(path, BoardError, "board file") == "name = 'x'\n"
    assert read_toml(path, BoardError, "board file") == {"name": "x"}


def test_non_utf8_file_names_the_byte_and_offset(tmp_path):
    path = tmp_path / "board.toml"
    path.write_bytes(b"name = 'abc'\n\xff\n")
    message = _one_line_error(path)
    assert message == (f"{path}: not UTF-8 text (byte 0xff at offset 13): "
                       "a board file must be UTF-8")
    assert isinstance(BoardError(message), InputError)


def test_non_utf8_offset_counts_the_byte_order_mark(tmp_path):
    path = tmp_path / "board.toml"
    path.write_bytes(b"\xef\xbb\xbfab\xe9")  # Latin-1 e-acute after a UTF-8 BOM
    assert "byte 0xe9 at offset 5" in _one_line_error(path)


def test_toml_reader_rejects_non_utf8_in_one_line(tmp_path):
    path = tmp_path / "board.toml"
    path.write_bytes(b"title = 'caf\xe9'\n")
    assert "not UTF-8 text (byte 0xe9 at offset 12)" in _one_line_error(path, reader=read_toml)


def test_missing_file_is_one_line(tmp_path):
    path = tmp_path / "missing.toml"
    assert _one_line_error(path) == f"{path}: cannot read board file: No such file or directory"


def test_directory_is_one_line(tmp_path):
    message = _one_line_error(tmp_path)
    assert message.startswith(f"{tmp_path}: cannot read board file: ")


def test_permission_error_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "board.toml"
    path.write_text("a = 1\n")

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    assert _one_line_error(path) == f"{path}: cannot read board file: Permission denied"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads files whatever their mode")
def test_unreadable_file_is_one_line(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text("a = 1\n")
    path.chmod(0)
    try:
        assert _one_line_error(path) == f"{path}: cannot read board file: Permission denied"
    finally:
        path.chmod(0o644)


def test_nul_in_path_is_one_line():
    with pytest.raises(BoardError) as info:
        read_text("bad\0name.toml", BoardError, "board file")
    assert "\n" not in str(info.value) and "cannot read board file" in str(info.value)


def test_invalid_toml_is_one_line(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text("a = = 1\n")
    assert _one_line_error(path, reader=read_toml).startswith(f"{path}: not valid TOML: ")


def test_deeply_nested_toml_is_one_line(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert _one_line_error(path, reader=read_toml) == (
        f"{path}: not valid TOML: arrays or tables nested too deeply")


def test_number_of_thousands_of_digits_is_one_line(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text("a = " + "9" * 5000 + "\n")
    assert _one_line_error(path, reader=read_toml).startswith(
        f"{path}: not valid TOML: Exceeds the limit")


def test_an_unwritable_output_is_a_one_line_input_error(tmp_path):
    from poetsim.errors import InputError
    from poetsim.fileio import atomic_write_text

    with pytest.raises(InputError, match="cannot write a file there: it is a folder"):
        atomic_write_text(tmp_path, "x")
    with pytest.raises(InputError, match="cannot write"):
        atomic_write_text("/proc/poetsim-nope.json", "x")
    assert list(tmp_path.iterdir()) == []
