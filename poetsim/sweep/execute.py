"""Running a sweep on Dask distributed, resumable, with a progress callback.

:func:`run_sweep` expands the sweep's points, skips those the results store already
holds, and submits the rest to a Dask cluster: by default an in-process
:class:`distributed.LocalCluster` on this machine (one single-threaded worker process per
core, at most one per point), or an existing cluster given by its scheduler address
(``tcp://HOST:PORT``), used as it is. Each worker runs :func:`poetsim.sweep.worker.run_point`.
As results arrive (:func:`distributed.as_completed`) the driver writes each in its own
transaction; nothing else writes the store.

The schedule cache (:class:`poetsim.runs.RunCache`) is a folder the *workers* write:
``R.cache/`` beside the store ``R.sqlite`` unless given. On one machine every worker
shares it. On a multi-machine cluster the path must be on a filesystem every worker
mounts at the same path (NFS, ...); otherwise each machine keeps its own cache there.
Workers on other machines also need poetsim installed (same version).

Dask is an extra (``pip install 'poetsim[sweep]'``): without it :func:`run_sweep` raises
a one-line :class:`~poetsim.errors.DaskMissingError` before it touches the store.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from poetsim.errors import DaskMissingError
from poetsim.sweep.spec import Sweep, SweepError, expand_points
from poetsim.sweep.store import ResultsStore, cache_dir_for, pending_points

__all__ = ["DASK_MISSING", "Progress", "SweepOutcome", "require_distributed", "run_sweep"]

DASK_MISSING = "poetsim sweep runs its points on Dask: pip install 'poetsim[sweep]'"


@attrs.frozen
class Progress:
    """Where a running sweep stands (points of this invocation, plus ``skipped``)."""

    total: int
    skipped: int
    done: int
    failed: int
    running: int
    elapsed_s: float

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.done - self.failed

    @property
    def eta_s(self) -> float | None:
        """Estimated seconds left, from this run's rate so far (None before a result)."""
        finished = self.done + self.failed
        if finished == 0:
            return None
        return self.elapsed_s / finished * self.remaining


@attrs.frozen
class SweepOutcome:
    """The figures of one invocation of a sweep."""

    results: str
    cache_dir: str
    total: int
    skipped: int
    done: int
    failed: int
    cache_hits: int
    wall_s: float
    workers: int
    scheduler: str

    @property
    def ran(self) -> int:
        return self.done + self.failed

    @property
    def points_per_min(self) -> float:
        return 60.0 * self.ran / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cache_hit_rate(self) -> float | None:
        return self.cache_hits / self.done if self.done else None

    def as_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "ran": self.ran,
                "points_per_min": self.points_per_min, "cache_hit_rate": self.cache_hit_rate}


def require_distributed() -> Any:
    """The ``distributed`` module, or a one-line :class:`DaskMissingError`."""
    try:
        import distributed
    except ImportError:
        raise DaskMissingError(DASK_MISSING) from None
    return distributed


def _local_cluster(workers: int):
    return require_distributed().LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
        scheduler_port=0, silence_logs=logging.ERROR)


def _connect(scheduler: str | None, workers: int):
    """(client, cluster or None); raises SweepError if the scheduler cannot be reached."""
    distributed = require_distributed()
    if scheduler is None:
        cluster = _local_cluster(workers)
        return distributed.Client(cluster, set_as_default=False), cluster
    try:
        return distributed.Client(scheduler, timeout="10s", set_as_default=False), None
    except (OSError, TimeoutError, ValueError) as err:
        raise SweepError(f"--scheduler {scheduler!r}: cannot connect: {err}") from None


def run_sweep(sweep: Sweep, results: str | Path, *, scheduler: str | None = None,
              workers: int | None = None, cache_dir: str | Path | None = None,
              retry_failed: bool = False,
              progress: Callable[[Progress], None] | None = None) -> SweepOutcome:
    """Run every point of ``sweep`` not yet in the store ``results``; see the module doc.

    ``workers``: local worker processes (default: the number of cores); ignored with
    ``scheduler``. ``retry_failed``: run points stored as ``error`` again (by default a
    failed point is final, like a finished one). ``progress`` is called after every
    finished point (and once at the start).
    """
    if workers is not None and workers < 1:
        raise SweepError(f"workers = {workers}: must be at least 1 (or none given: one per "
                         "core)")
    as_completed = require_distributed().as_completed

    from poetsim.sweep.worker import run_point

    results = Path(results)
    cache = Path(cache_dir) if cache_dir is not None else cache_dir_for(results)
    points = expand_points(sweep)
    started = time.perf_counter()
    with ResultsStore(results, writer=True) as store:
        recorded = (store.sweep_definition() or {}).get("name", sweep.name)
        if recorded != sweep.name:  # its points would be reported as this sweep's
            raise SweepError(f"{results}: holds the results of sweep {recorded!r}, not of "
                             f"{sweep.name!r} ({sweep.source}); use another --results file")
        todo = pending_points(points, store.statuses(), retry_failed=retry_failed)
        skipped = len(points) - len(todo)
        where = scheduler or "local"
        session = store.begin_session(sweep=sweep.as_dict(), points=len(points),
                                      skipped=skipped, scheduler=where)
        done = failed = hits = 0
        nworkers = 0
        if todo:
            nworkers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
            client, cluster = _connect(scheduler, nworkers)
            try:
                slots = sum(client.nthreads().values()) or nworkers
                nworkers = len(client.nthreads()) or nworkers
                by_key = {}
                futures = []
                for point in todo:
                    future = client.submit(run_point, point, str(cache), pure=False,
                                           priority=-point.index)
                    by_key[future.key] = point
                    futures.append(future)
                if progress:
                    progress(Progress(len(points), skipped, 0, 0, min(slots, len(todo)),
                                      time.perf_counter() - started))
                for future in as_completed(futures, loop=client.loop):
                    point = by_key[future.key]
                    try:
                        result = future.result()
                    except Exception as err:  # noqa: BLE001 - e.g. KilledWorker
                        result = {"status": "error",
                                  "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"
                                  if str(err) else type(err).__name__}
                    future.release()
                    store.record({**point.inputs(), "sweep": sweep.name, "session": session,
                                  **result})
                    if result["status"] == "done":
                        done += 1
                        hits += bool(result.get("cached"))
                    else:
                        failed += 1
                    if progress:
                        left = len(todo) - done - failed
                        progress(Progress(len(points), skipped, done, failed, min(slots, left),
                                          time.perf_counter() - started))
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
    return SweepOutcome(results=str(results), cache_dir=str(cache), total=len(points),
                        skipped=skipped, done=done, failed=failed, cache_hits=hits,
                        wall_s=time.perf_counter() - started, workers=nworkers,
                        scheduler=scheduler or "local")
