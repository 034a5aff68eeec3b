"""The wheel carries the board files and the golden schedules, and an installed poetsim,
outside the checkout, runs the demo and checks the goldens."""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel ``pip wheel`` builds of the checkout (once for this module's tests)."""
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out),
         str(ROOT)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (built,) = out.glob("poetsim-*.whl")
    return built


def _packaged(names: list[str], folder: str, pattern: str) -> list[str]:
    return sorted(Path(n).relative_to(f"poetsim/{folder}").as_posix() for n in names
                  if n.startswith(f"poetsim/{folder}/") and Path(n).match(pattern))


@pytest.mark.slow
def test_wheel_contains_board_files_and_goldens(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    boards = sorted(p.name for p in (ROOT / "device_models").glob("*.toml"))
    assert boards and _packaged(names, "device_models", "*.toml") == boards
    goldens = sorted(p.name for p in (ROOT / "schedules").glob("*.json"))
    assert goldens and _packaged(names, "schedules", "*.json") == goldens
    assert "poetsim/schedules/cases.toml" in names
    assert "poetsim/cli/main.py" in names
    # the request, method registry and verdict layers ship with the package
    for module in ("request", "methods", "verdict", "schedule/metadata", "data"):
        assert f"poetsim/{module}.py" in names, module
    # checkmate and paging-only are methods now, not baseline modules
    assert not any(n.startswith(("poetsim/baselines/checkmate", "poetsim/baselines/paging_only",
                                 "poetsim/baselines/seeded")) for n in names)


def _venv_with(wheel: Path, venv: Path) -> Path:
    """A fresh virtual environment with ``wheel`` installed alone (``--no-deps``: no
    network); its dependencies come from the test interpreter's site-packages, added by a
    ``.pth`` file after the install, so that pip never sees the checkout's (editable)
    poetsim. Its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # a venv's --system-site-packages are its base Python's, not those of the venv the
    # tests run in: name those too
    Path(purelib, "_poetsim_test_deps.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    return python


@pytest.mark.slow
def test_installed_wheel_runs_the_demo_and_regress(wheel, tmp_path):
    """#31: ``pip install`` the wheel into a fresh environment; from a folder outside the
    checkout, the demo runs and PASSes and ``regress`` finds every golden, all ok."""
    python = _venv_with(wheel, tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)

    # the installed package and its data, not the checkout's
    where = run("-c", "import poetsim, poetsim.data as d; print(poetsim.__file__); "
                      "print(d.data_dir('device_models')); print(d.data_dir('schedules'))")
    assert where.returncode == 0, where.stderr[-2000:]
    for line in where.stdout.split():
        assert Path(line).is_relative_to(tmp_path / "venv"), line

    demo = run("-m", "poetsim", "demo", "--out", str(work / "demo"))
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-3000:]
    assert re.search(r"^poet +PASS ", demo.stdout, re.M), demo.stdout[-3000:]
    assert json.loads((work / "demo" / "summary.json").read_text())["verdict"] == "PASS"

    regress = run("-m", "poetsim", "regress")
    assert regress.returncode == 0, (regress.stdout + regress.stderr)[-3000:]
    goldens = len(list((ROOT / "schedules").glob("*.json")))
    assert f"{goldens} goldens: {goldens} ok," in regress.stdout, regress.stdout[-3000:]

    # the console script the wheel declares
    boards = subprocess.run([str(python.parent / "poetsim"), "boards", "list"], cwd=work,
                            env=env, capture_output=True, text=True, timeout=120)
    assert boards.returncode == 0 and "nrf52840" in boards.stdout, boards.stderr[-2000:]
