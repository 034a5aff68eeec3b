"""Pre-deployment check of an on-device training schedule, for the embedded engineer.

Before flashing a fine-tuning job onto an nRF52840, you want to know that it fits the
board's RAM, meets its deadline and does not wear out its storage, not only on the
board's typical figures but also at the ends of their measured ranges. This script plans
POET's least-energy schedule for the keyword-spotting DS-CNN small (``ds_cnn_s``, its last
three layers trained) within the board's usable RAM and a deadline, judges it in the
board simulation at the typical, slow and costly corners, prints what decided the verdict
(arena vs usable RAM, energy and time per iteration, storage lifetime), saves the
schedule, and exits with status 0 only when it passes at every corner (1 otherwise), so
it can gate a CI job or a release script::

    python examples/deploy_check_kws.py --out build/kws
    python examples/deploy_check_kws.py --deadline 1.05x   # too tight at the slow corner: 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import poetsim
from poetsim.units import format_bytes, format_quantity

BOARD = "nrf52840"
MODEL = "ds_cnn_s"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the schedule (default: a new temporary folder)")
    p.add_argument("--ram", default="board",
                   help="RAM budget in poetsim's words: 'board' (all usable RAM), '180KiB', "
                        "'70%%' (default: board)")
    p.add_argument("--deadline", default="2x",
                   help="deadline per iteration: '2x' the plain compute time or '2.5s' "
                        "(default: 2x)")
    p.add_argument("--train-last", type=int, default=3,
                   help="how many of the last layers are trained (default: 3)")
    return p


def _storage_line(check: poetsim.Check) -> str:
    r = check.report
    if not r.storage_wear_bytes:
        return "nothing written to storage (no paging): no wear"
    worn = format_bytes(r.storage_wear_bytes)
    if r.storage_lifetime_iterations is None:
        return f"{worn} written per iteration (the board file gives no endurance)"
    return (f"{r.storage_lifetime_iterations:.3g} iterations ({worn} written per "
            "iteration)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="kws-check-"))
    out.mkdir(parents=True, exist_ok=True)

    planned = poetsim.plan(MODEL, BOARD, ram=args.ram, deadline=args.deadline,
                           train_last=args.train_last)
    print(f"{MODEL} (last {args.train_last} layers trained) on {BOARD}, RAM {args.ram}, "
          f"deadline {args.deadline}: {planned.message}")
    if planned.schedule is None:
        print("verdict: FAIL (no schedule meets the request)")
        return 1

    check = planned.check()
    v = check.verdict
    request = planned.request
    print(f"verdict: {check.line()}")
    print(f"  arena:            {format_bytes(v.arena_bytes)} ({v.arena_bytes} B) of "
          f"{format_bytes(v.board_ram_bytes)} ({v.board_ram_bytes} B) usable RAM, "
          f"{format_bytes(v.board_ram_bytes - v.arena_bytes)} to spare")
    print(f"  energy/iteration: {format_quantity(check.energy_j, 'J')} (simulated; "
          f"optimizer's model {format_quantity(planned.energy_j, 'J')})")
    print(f"  time/iteration:   {format_quantity(check.makespan_s, 's')} of a "
          f"{format_quantity(request.deadline_s, 's')} deadline")
    print(f"  storage lifetime: {_storage_line(check)}")

    corners = check.corners()
    for corner in corners:
        cv = corner.verdict
        print(f"  {corner.corner + ' corner:':<17} {cv.label}, "
              f"{format_quantity(cv.energy_j, 'J')} and {format_quantity(cv.makespan_s, 's')} "
              "per iteration" + (f"; {cv.violations[0]}" if cv.violations else ""))

    saved = planned.save(out / f"{MODEL}-{BOARD}.json")
    print(f"schedule: {saved}")
    failed = [c.corner for c in corners if not c.verdict.passed]
    if failed:
        print(f"deploy check: FAIL at the {', '.join(failed)} corner(s): do not deploy")
        return 1
    print(f"deploy check: PASS at every corner ({', '.join(c.corner for c in corners)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
