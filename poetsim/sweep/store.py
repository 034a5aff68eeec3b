"""The results store of a sweep: one SQLite file, one row per finished point.

Only the sweep driver (the Dask client process) writes it, one transaction per point as
its result arrives, in WAL mode: a driver killed with ``kill -9`` loses only the points
in flight, and a committed point survives (``synchronous = NORMAL`` in WAL mode is
durable against a process crash; a power cut may lose the last transactions, never
corrupt the file). Readers (``poetsim sweep report``) may open it while a sweep runs.

Tables:

* ``points``: the point's inputs (``id`` = SHA-256 of them, the primary key, so a point
  is stored at most once), its ``status`` (``done``, or ``error`` when it raised) and its
  results: method status, feasibility, simulated energy / makespan / peak RAM, gap,
  timings, whether the schedule came from the cache, which worker ran it and in which
  ``session`` (one per ``poetsim sweep`` invocation);
* ``sessions``: one row per invocation (start time, sweep file, points, skipped);
* ``meta``: the store's format version and the sweep definition of the last run.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from poetsim import __version__
from poetsim.sweep.spec import SweepError

__all__ = ["COLUMNS", "FINAL_STATUSES", "STORE_VERSION", "ResultsStore", "cache_dir_for",
           "pending_points"]

STORE_VERSION = 5

#: Statuses after which a rerun skips the point (``error`` only without --retry-failed).
FINAL_STATUSES = ("done", "error")

#: Column name -> SQLite type, in table order.
COLUMNS: dict[str, str] = {
    # inputs
    "id": "TEXT PRIMARY KEY", "idx": "INTEGER", "sweep": "TEXT", "model": "TEXT",
    "model_options": "TEXT", "board": "TEXT", "variant": "TEXT", "overrides": "TEXT",
    "ram": "TEXT", "deadline": "TEXT", "accounting": "TEXT", "method": "TEXT",
    "solver": "TEXT",
    # outcome
    "status": "TEXT", "method_status": "TEXT", "feasible": "INTEGER", "reason": "TEXT",
    "error": "TEXT", "verdict": "TEXT", "violations": "TEXT", "fits_board_ram": "INTEGER",
    # figures (simulated unless named predicted_)
    "energy_j": "REAL", "predicted_energy_j": "REAL", "reference_energy_j": "REAL",
    "energy_overhead": "REAL", "makespan_s": "REAL", "peak_total_bytes": "INTEGER",
    "arena_bytes": "INTEGER", "board_ram_bytes": "INTEGER", "budget_bytes": "INTEGER",
    "budget_activation_bytes": "INTEGER", "resident_bytes": "INTEGER",
    "flash_weight_bytes": "INTEGER", "streamed_weight_bytes": "INTEGER",
    "row_bands": "INTEGER", "deadline_s": "REAL",
    "within_budget": "INTEGER", "deadline_met": "INTEGER", "gap": "REAL", "bound_j": "REAL",
    "recomputations": "INTEGER", "page_outs": "INTEGER", "page_ins": "INTEGER",
    # at the corners of the board's ranges, when the sweep asks (poetsim.boards.corners)
    "slow_verdict": "TEXT", "slow_makespan_s": "REAL", "slow_energy_j": "REAL",
    "costly_verdict": "TEXT", "costly_energy_j": "REAL",
    # bookkeeping
    "cached": "INTEGER", "solve_time_s": "REAL", "sim_time_s": "REAL", "wall_s": "REAL",
    "worker": "TEXT", "session": "INTEGER", "finished_at": "REAL", "poetsim_version": "TEXT",
}


def cache_dir_for(results: str | Path) -> Path:
    """The schedule cache beside a results store: ``R.sqlite`` -> ``R.cache/``."""
    path = Path(results)
    return path.with_name(path.stem + ".cache")


class ResultsStore:
    """A sweep's SQLite results store (create or reopen).

    ``writer=True`` (the sweep driver) takes an exclusive lock on ``R.sqlite.lock`` for as
    long as the store is open: a second sweep on the same store refuses at once with one
    line, instead of running every point a second time.
    """

    def __init__(self, path: str | Path, *, create: bool = True, writer: bool = False) -> None:
        self.path = Path(path)
        self._lock: Any = None
        if not create and not self.path.is_file():
            raise SweepError(f"{self.path}: no such results store")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            if writer:
                self._lock = _writer_lock(self.path)
        except OSError as err:  # a read-only or missing folder, a file where one should be
            raise SweepError(f"{self.path}: cannot write a results store there: "
                             f"{err.strerror or err}") from None
        try:
            self._conn = sqlite3.connect(self.path, timeout=30.0)
            self._conn.row_factory = sqlite3.Row
            if create:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._create()
            self._check()
        except sqlite3.DatabaseError as err:
            raise SweepError(f"{self.path}: not a poetsim results store: {err}") from None

    # ------------------------------------------------------------------ schema

    def _create(self) -> None:
        columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        with self._conn:
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS points ({columns})")
            self._conn.execute("CREATE TABLE IF NOT EXISTS sessions (session INTEGER PRIMARY "
                               "KEY AUTOINCREMENT, started_at REAL, sweep_file TEXT, "
                               "points INTEGER, skipped INTEGER, scheduler TEXT)")
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, "
                               "value TEXT)")
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('store_version', ?)",
                               (str(STORE_VERSION),))

    def _check(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone()
        if row is None or row[0] != str(STORE_VERSION):
            found = None if row is None else row[0]
            raise SweepError(f"{self.path}: store_version = {found!r}: this poetsim reads "
                             f"version {STORE_VERSION}")
        tables = {r[0] for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted({"points", "sessions"} - tables)
        if missing:
            raise SweepError(f"{self.path}: table {', '.join(missing)} is missing: a damaged "
                             "results store")

    # ------------------------------------------------------------------ writing

    def begin_session(self, *, sweep: dict[str, Any], points: int, skipped: int,
                      scheduler: str) -> int:
        """Record one invocation; returns its session number."""
        with self._conn:
            cur = self._conn.execute(
                "INSERT INTO sessions (started_at, sweep_file, points, skipped, scheduler) "
                "VALUES (?, ?, ?, ?, ?)",
                (time.time(), sweep.get("source"), points, skipped, scheduler))
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('sweep', ?)",
                               (json.dumps(sweep),))
        return int(cur.lastrowid)

    def record(self, row: dict[str, Any]) -> None:
        """Write one finished point (one transaction; replaces an earlier error row)."""
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown result columns: {sorted(unknown)}")
        row = {"poetsim_version": __version__, "finished_at": time.time(), **row}
        names = list(row)
        placeholders = ", ".join("?" for _ in names)
        with self._conn:
            self._conn.execute(
                f"INSERT OR REPLACE INTO points ({', '.join(names)}) VALUES ({placeholders})",
                [_sql_value(row[n]) for n in names])

    # ------------------------------------------------------------------ reading

    def statuses(self) -> dict[str, str]:
        """Point id -> status of every stored point."""
        return {r["id"]: r["status"] for r in self._conn.execute("SELECT id, status FROM points")}

    def rows(self) -> list[dict[str, Any]]:
        """Every stored point, in sweep order."""
        return [dict(r) for r in self._conn.execute("SELECT * FROM points ORDER BY idx, id")]

    def sessions(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._conn.execute("SELECT * FROM sessions ORDER BY session")]

    def sweep_definition(self) -> dict[str, Any] | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'sweep'").fetchone()
        if row is None:
            return None
        try:
            found = json.loads(row[0])
        except (TypeError, ValueError):
            found = None
        if not isinstance(found, dict):
            raise SweepError(f"{self.path}: the sweep definition it records is not a JSON "
                             "object (a damaged results store)")
        return found

    def close(self) -> None:
        self._conn.close()
        if self._lock is not None:
            self._lock.close()  # closing the file releases the lock
            self._lock = None

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _writer_lock(path: Path) -> Any:
    """The open lock file of ``path``, locked for this process; SweepError if another
    process holds it. The lock is released when the file is closed or the process dies."""
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    handle = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held while open
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise SweepError(f"{path}: another sweep is writing to this results store "
                         f"({holder}); wait for it to finish or use another --results file"
                         ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
    handle.flush()
    return handle


def _sql_value(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    return value


def pending_points(points: Iterable[Any], statuses: dict[str, str], *,
                   retry_failed: bool = False) -> list[Any]:
    """The points still to run: not stored, or stored as ``error`` with ``retry_failed``."""
    done = {pid for pid, status in statuses.items()
            if status == "done" or (status == "error" and not retry_failed)}
    return [p for p in points if p.point_id not in done]
