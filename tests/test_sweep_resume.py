"""A real sweep on a two-worker local Dask cluster, killed with SIGKILL midway and resumed.

The driver (``python -m poetsim sweep``) runs in its own process group; once a few points
are in the results store it is killed with SIGKILL, as a crash would. The rerun must skip
the stored points, run the rest, and leave every point in the store exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from poetsim.sweep import expand_points, load_sweep

SWEEP = """\
name = "resume"
models = ["mlp"]                 # 41 ops: POET does not close the gap within 1 s
boards = ["nrf52840"]
ram = ["60%", "70%", "80%", "90%"]
accounting = "paper"             # physically the MLP never fits: every point would be instant
deadlines = ["1.5x", "3x"]
methods = ["poet"]
[overrides]
"storage.read_throughput_bytes_per_s" = [3.64e5, 7.28e5]
[solver]
time_limit_s = 1
"""


def _stored(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    conn = sqlite3.connect(path, timeout=10)
    try:
        return conn.execute("SELECT id, status, session FROM points").fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return []
    finally:
        conn.close()


def _command(sweep: Path, results: Path) -> list[str]:
    return [sys.executable, "-m", "poetsim", "sweep", str(sweep), "--results", str(results),
            "--workers", "2", "--quiet"]


@pytest.mark.slow
def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path):
    sweep_file = tmp_path / "resume.toml"
    sweep_file.write_text(SWEEP)
    results = tmp_path / "resume.sqlite"
    expected = {p.point_id for p in expand_points(load_sweep(sweep_file))}
    assert len(expected) == 16

    proc = subprocess.Popen(_command(sweep_file, results), cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(_stored(results)) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no point finished in 120 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        try:  # the driver's worker processes exit with it; make sure of it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    before = _stored(results)
    assert 3 <= len(before) < len(expected), "the sweep was not killed midway"
    assert {status for _, status, _ in before} == {"done"}
    assert {session for _, _, session in before} == {1}

    rerun = subprocess.run([*_command(sweep_file, results), "--json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    outcome = json.loads(rerun.stdout)
    assert outcome["skipped"] == len(before)
    assert outcome["done"] == len(expected) - len(before) and outcome["failed"] == 0
    assert outcome["workers"] == 2

    after = _stored(results)
    ids = [pid for pid, _, _ in after]
    assert len(ids) == len(set(ids)) == len(expected)  # none duplicated
    assert set(ids) == expected  # none lost
    assert {status for _, status, _ in after} == {"done"}
    # the points finished before the kill were not run again
    first = {pid for pid, _, session in after if session == 1}
    assert first == {pid for pid, _, _ in before}
    assert all(session == 2 for pid, _, session in after if pid not in first)

    # a third run has nothing left to do
    again = subprocess.run([*_command(sweep_file, results), "--json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout)["skipped"] == len(expected)
    assert len(_stored(results)) == len(expected)
