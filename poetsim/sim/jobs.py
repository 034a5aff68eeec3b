"""The simulation's transfer jobs: one per planned page-in or page-out, priced once per
size, with the extra write-busy time a seeded run draws, and their record in the report."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from poetsim.boards.spec import Board, WriteBusy
from poetsim.costs import OpCosts
from poetsim.graph.streaming import stream_commands
from poetsim.schedule.replay import Replay
from poetsim.sim.dma import TransferJob
from poetsim.sim.planner import PlannedTransfer
from poetsim.sim.report import TransferRecord
from poetsim.sim.storage import (
    TransferTiming,
    draw_write_busy,
    transfer_timing,
    with_write_busy,
    write_commands,
)

__all__ = ["draw_run_write_busy", "transfer_jobs", "transfer_record"]


def transfer_jobs(board: Board, costs: OpCosts,
                  plan: Sequence[PlannedTransfer]) -> list[TransferJob]:
    """A job for each planned transfer, in plan order; equal transfers share one timing."""
    timings: dict[tuple[int, bool, float, float], TransferTiming] = {}
    size = costs.output_bytes.tolist()
    in_s, in_j = costs.pagein_time_s.tolist(), costs.pagein_energy_j.tolist()
    out_s, out_j = costs.pageout_time_s.tolist(), costs.pageout_energy_j.tolist()
    jobs = []
    for planned in plan:
        k, write = planned.tensor, planned.kind == "page_out"
        key = ((size[k], True, out_s[k], out_j[k]) if write
               else (size[k], False, in_s[k], in_j[k]))
        timing = timings.get(key)
        if timing is None:
            timing = timings[key] = transfer_timing(board, key[0], write=write,
                                                    time_s=key[2], energy_j=key[3])
        jobs.append(TransferJob(planned.kind, k, planned.op, planned.step, timing, planned))
    return jobs


def draw_run_write_busy(replay: Replay, costs: OpCosts, board: Board,
                        jobs: Sequence[TransferJob], busy: WriteBusy, seed: int
                        ) -> dict[int, tuple[float, float]]:
    """Lengthen every page-out job by its drawn extra write-busy time (plan order), then
    draw every weight write-back's (list order, after the page-outs' draws, which stay as
    they were); the write-backs' as COMPUTE position -> (seconds, storage joules)."""
    writes = [job for job in jobs if job.kind == "page_out" and job.timing.time_s > 0]
    known: dict[int, list[int]] = {}

    def commands_of(nbytes: int) -> list[int]:
        if nbytes not in known:
            known[nbytes] = write_commands(board, nbytes)
        return known[nbytes]

    rng = np.random.default_rng(seed)
    extras = draw_write_busy(busy, rng, [commands_of(job.timing.nbytes) for job in writes])
    power = busy.power_w if busy.power_w is not None else board.storage.write_power_w
    for job, extra in zip(writes, extras, strict=True):
        job.timing = with_write_busy(job.timing, extra, power)
    backs = replay.write_back_positions
    commands = []
    for i in backs:
        k = replay.steps[i].op
        commands.append([c for size, count in stream_commands(
            replay.graph, k, int(costs.writeback_bytes[k])) for _ in range(count)
            for c in commands_of(size)])
    drawn: dict[int, tuple[float, float]] = {}
    for i, extra in zip(backs, draw_write_busy(busy, rng, commands), strict=True):
        if extra > 0.0:
            drawn[i - 1] = (extra, extra * power)  # at its COMPUTE
    return drawn


def transfer_record(job: TransferJob) -> TransferRecord:
    """What the report keeps of a finished (or cancelled) job."""
    plan = job.plan
    return TransferRecord(
        kind=job.kind, tensor=job.tensor, op=job.op, step=job.step,
        consumer_step=plan.consumer_step, trigger_step=plan.trigger_step,
        planned_start_s=plan.planned_start_s, needed_s=plan.needed_s,
        issued_s=job.issued_s, started_s=job.started_s, service_s=job.service_s,
        ended_s=job.ended_s, stall_s=job.stall_s, ram_delayed=plan.ram_delayed,
        channel=job.channel, bytes=job.timing.nbytes, device_bytes=job.timing.device_bytes)
