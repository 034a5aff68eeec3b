"""The example gallery (``examples/``): each script run as a user runs it, in a subprocess,
with its exit status and the key facts of its output checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
                          check=False)


def test_deploy_check_passes_at_every_corner(tmp_path):
    done = _run("deploy_check_kws.py", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "verdict: PASS [physical accounting]" in out
    assert "206176 B) of 232.0 KiB (237568 B) usable RAM" in out
    assert "energy/iteration: 17.31 mJ" in out
    assert "storage lifetime: nothing written to storage" in out
    for corner in ("typical", "slow", "costly"):
        assert f"{corner} corner:" in out
    assert "deploy check: PASS at every corner (typical, slow, costly)" in out
    assert (tmp_path / "ds_cnn_s-nrf52840.json").stat().st_size > 0


def test_deploy_check_fails_when_a_corner_misses_the_deadline(tmp_path):
    done = _run("deploy_check_kws.py", "--out", str(tmp_path), "--deadline", "1.05x")
    assert done.returncode == 1, done.stderr
    assert "slow corner:      FAIL" in done.stdout
    assert "deploy check: FAIL at the slow, costly corner(s)" in done.stdout


def test_sd_speed_sweep_writes_its_plot(tmp_path):
    pytest.importorskip("distributed")  # the [sweep] extra
    done = _run("sd_speed_sweep.py", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "sweep: 10 points, 10 done, 0 failed" in done.stdout
    png = tmp_path / "energy_vs_sd_speed.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert (tmp_path / "sd_speed.sqlite").is_file()
    # POET passes on a fast card and has no schedule on the slowest one
    lines = {tuple(line.split()[:3]): line for line in done.stdout.splitlines()
             if line.startswith(("poet ", "capuchin "))}
    assert lines[("poet", "364", "746")].endswith("PASS")
    assert "mJ" in lines[("poet", "364", "746")]
    assert "no poet schedule" in lines[("poet", "364", "46")]


def test_pytorch_schedule_executes_with_matching_gradients(tmp_path):
    pytest.importorskip("torch")
    done = _run("pytorch_plan_execute.py", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    recomputations = int(out.split("plan: ")[1].split(" recomputations")[0])
    page_outs = int(out.split("recomputations, ")[1].split(" page-outs")[0])
    assert recomputations + page_outs > 0  # the budget forces remat or paging
    assert "max relative gradient error: " in out
    assert out.rstrip().endswith("gradient check: PASS")
    assert (tmp_path / "schedule.json").stat().st_size > 0
