"""Small file helpers: atomic writes, so no partial file is left, and TOML reading with
one-line errors."""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_text", "read_text", "read_toml"]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one.

    The bytes go to a temporary file in the same folder, which is then renamed over the
    target; an interruption leaves no half-written file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    """The UTF-8 text at ``path``; an unreadable file raises ``error`` with one line naming
    the file (``what`` says which kind of file it should be)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror}") from None


def read_toml(path: str | Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The parsed TOML document at ``path``; an unreadable or invalid file raises ``error``
    with one line naming the file (``what`` says which kind of file it should be)."""
    text = read_text(path, error, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{path}: not valid TOML: {err}") from None
