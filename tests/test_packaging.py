"""The wheel carries the board files, so an installed poetsim finds its built-in boards."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_board_files(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
         str(ROOT)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("poetsim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    boards = sorted(p.name for p in (ROOT / "device_models").glob("*.toml"))
    packaged = sorted(Path(n).name for n in names
                      if n.startswith("poetsim/device_models/") and n.endswith(".toml"))
    assert boards and packaged == boards
    assert "poetsim/cli/main.py" in names
    # the request, method registry and verdict layers ship with the package
    for module in ("request", "methods", "verdict", "schedule/metadata"):
        assert f"poetsim/{module}.py" in names, module
    # checkmate and paging-only are methods now, not baseline modules
    assert not any(n.startswith(("poetsim/baselines/checkmate", "poetsim/baselines/paging_only",
                                 "poetsim/baselines/seeded")) for n in names)
