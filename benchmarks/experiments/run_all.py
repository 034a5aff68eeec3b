"""Run the four paper experiments (Fig. 3, Fig. 4, Fig. 5, Table 3) in one process pool.

    .venv/bin/python -m benchmarks.experiments.run_all --smoke   # seconds, for CI
    .venv/bin/python -m benchmarks.experiments.run_all --full    # the reproduction

All points of all experiments share one pool of ``--jobs`` workers and one
:class:`~poetsim.runs.RunCache` (``--cache``, default ``benchmarks/results/cache/``), so a
re-run only re-simulates. Outputs go to ``--out`` (default ``benchmarks/results``, or
``out/experiments-smoke`` with ``--smoke``), one folder per experiment, plus ``findings.md`` and
``run_all_<mode>.md`` with the wall time and cache use.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

from benchmarks.experiments import (
    fig3_energy_vs_ram,
    fig4_deadlines,
    fig5_capuchin,
    findings,
    table3_pofo,
)
from benchmarks.experiments.common import (
    default_out,
    experiment_parser,
    log,
    run_points,
    write_text,
)

#: In pool order: Fig. 5 last, so that the points it shares with Fig. 3 come from the cache.
EXPERIMENTS = (fig3_energy_vs_ram, fig4_deadlines, table3_pofo, fig5_capuchin)


def run(mode: str, out: Path, cache: Path | None, jobs: int) -> dict:
    started = time.perf_counter()
    plan = [(exp, exp.points(mode)) for exp in EXPERIMENTS]
    allpoints = [p for _, pts in plan for p in pts]
    log(f"run_all --{mode}: {len(allpoints)} points, {jobs} jobs")
    rows = run_points(allpoints, cache_dir=cache, jobs=jobs)
    solved_s = time.perf_counter() - started
    files = []
    for exp, _ in plan:
        exp_rows = [r for r in rows if r["experiment"] == exp.NAME]
        files += exp.outputs(exp_rows, out)
    files.append(write_text(out / "findings.md", findings.findings(out)))
    # the full results in the default folder are RESULTS.md's source, never a smoke run
    if mode == "full" and out.resolve() == findings.RESULTS_DIR.resolve() \
            and findings.update_results_md(out):
        files.append(findings.RESULTS_MD)
    wall = time.perf_counter() - started
    cached = sum(1 for r in rows if r["cached"])
    solver_s = sum(r["run_time_s"] or 0.0 for r in rows if not r["cached"])
    summary = {"mode": mode, "points": len(allpoints), "method_runs": len(rows),
               "cached_runs": cached, "solver_seconds_this_run": solver_s,
               "wall_s": wall, "solve_and_simulate_s": solved_s, "jobs": jobs,
               "files": [str(f) for f in files]}
    write_text(out / f"run_all_{mode}.md", "\n".join([
        f"# run_all --{mode}",
        "",
        f"- points: {len(allpoints)}, method runs: {len(rows)} ({cached} from the cache)",
        (f"- wall time: {wall:.0f} s ({wall / 60:.1f} min) with {jobs} worker processes on "
         f"{platform.machine()} ({platform.python_version()})"),
        f"- method run time spent in this run (not cached): {solver_s:.0f} s",
    ]))
    log(f"run_all --{mode}: {wall:.1f} s wall, {cached}/{len(rows)} method runs cached")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    parser.add_argument("--no-cache", action="store_true", help="solve everything again")
    args = parser.parse_args(argv)
    run("smoke" if args.smoke else "full", args.out or default_out(args.smoke),
        None if args.no_cache else args.cache, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
