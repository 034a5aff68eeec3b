"""Small file helpers: atomic writes, so no partial file is left, and TOML reading with
one-line errors."""

from __future__ import annotations

import codecs
import contextlib
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from poetsim.errors import InputError

__all__ = ["atomic_write_bytes", "atomic_write_text", "check_new_folder", "new_folder",
           "read_text", "read_toml"]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one.

    The bytes go to a temporary file in the same folder, which is then renamed over the
    target; an interruption leaves no half-written file behind. A path that cannot be
    written (a folder, a read-only folder, a folder that cannot be made or is a file) is a
    one-line :class:`~poetsim.errors.InputError` naming it.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: cannot write a file there: it is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        existing = next((p for p in path.parents if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise InputError(f"{path}: cannot write: {existing} is a file, not a folder"
                             ) from None
        raise InputError(f"{path}: cannot write: {err.strerror or err}") from None
    try:
        # mkstemp creates the file private (0600); give it the usual umask-based mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def read_text(path: str | Path, error: type[Exception], what: str) -> str:
    """The UTF-8 text at ``path``; a file that cannot be read raises ``error`` with one line
    naming the file and why (``what`` says which kind of file it should be).

    Covered: a missing file, a directory, no permission or any other OS error, and bytes
    that are not UTF-8 (the message gives the first bad byte and its offset). A UTF-8 byte
    order mark at the start is accepted and dropped.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror or err}") from None
    except ValueError as err:  # e.g. a NUL character in the path
        raise error(f"{path!r}: cannot read {what}: {err}") from None
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = start + err.start
        raise error(f"{path}: not UTF-8 text (byte 0x{data[offset]:02x} at offset "
                    f"{offset}): a {what} must be UTF-8") from None


def read_toml(path: str | Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The parsed TOML document at ``path``; an unreadable or invalid file raises ``error``
    with one line naming the file (``what`` says which kind of file it should be)."""
    text = read_text(path, error, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{path}: not valid TOML: {err}") from None
    except RecursionError:
        raise error(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    except ValueError as err:  # a number of thousands of digits
        raise error(f"{path}: not valid TOML: {err}") from None


def check_new_folder(folder: str | Path, error: type[Exception]) -> Path:
    """``folder`` as a Path if it does not exist or is empty; else ``error`` in one line."""
    path = Path(folder)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise error(f"--out {str(path)!r}: exists and is not an empty folder; choose a new "
                    "path")
    return path


@contextlib.contextmanager
def new_folder(folder: str | Path, error: type[Exception]) -> Iterator[Path]:
    """Fill a new folder all or nothing: yields a temporary folder beside ``folder``, renamed
    to it when the block completes and removed when it fails (``folder`` must not exist or
    be empty: :func:`check_new_folder`)."""
    final = check_new_folder(folder, error)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        if final.is_dir():
            final.rmdir()  # checked empty above
        # mkdtemp makes the folder private; give it the mode a plain mkdir would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
