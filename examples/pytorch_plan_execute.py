"""Your own PyTorch model, planned for a small board and executed for real, for the ML
engineer who wants proof that a rematerialization and paging schedule computes the same
training step as plain autograd.

A little CNN defined here is traced (``torch.export``) and planned with
:func:`poetsim.plan` on the nRF52840 under a RAM budget too small to keep every
activation, so POET's schedule recomputes or pages tensors. The schedule is saved, then
executed op by op on real float64 tensors (:func:`poetsim.torchio.execute_schedule`:
recomputing, paging to files and back, freeing, then the SGD step), and its parameter
gradients and updated weights are compared with ``loss.backward()`` and
``torch.optim.SGD``. Needs ``pip install 'poetsim[torch]'``::

    python examples/pytorch_plan_execute.py --out build/torch
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import poetsim
from poetsim.units import format_bytes, format_quantity

BOARD = "nrf52840"


def make_model():
    """A little CNN for 1x16x16 images, 10 classes."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 10))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the schedule and its page files (default: a new "
                        "temporary folder)")
    p.add_argument("--ram", default="75%",
                   help="RAM budget: '50%%' of the plain schedule's activation peak (plus "
                        "the resident state), or a size such as '64KiB' (default: 75%%)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="torch-plan-"))
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from poetsim.torchio import execute_schedule, import_module

    model = make_model()
    inputs = (torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(0)),)
    planned = poetsim.plan(model, BOARD, example_inputs=inputs, ram=args.ram, deadline="3x")
    print(f"{planned.request.graph.name} on {BOARD}, RAM {args.ram}: {planned.message}")
    if planned.schedule is None:
        print("gradient check: FAIL (no schedule to execute)")
        return 1
    schedule = planned.schedule
    check = planned.check()
    print(f"plan: {schedule.recomputations()} recomputations, {schedule.page_outs} page-outs; "
          f"{format_quantity(check.energy_j, 'J')} and {format_quantity(check.makespan_s, 's')} "
          f"per iteration (simulated); {check.verdict.label}")
    print(f"budget: {format_bytes(planned.request.budget_bytes)} "
          f"({planned.request.budget_bytes} B); arena {format_bytes(check.verdict.arena_bytes)}")
    saved = planned.save(out / "schedule.json")
    print(f"schedule: {saved}")

    # the same module traced again gives the same graph: execute_schedule checks its
    # fingerprint against the schedule's
    imported = import_module(model, inputs)
    report = execute_schedule(imported, schedule, board=planned.request.board,
                              page_dir=out / "pages")
    print(f"executed {report.steps} steps for real: {report.recomputations} recomputations, "
          f"{report.page_outs} page-outs, {format_bytes(report.bytes_written)} "
          f"({report.bytes_written} B) written to page files")
    print(f"measured peak of live activations: {format_bytes(report.peak_live_bytes)} "
          f"({report.peak_live_bytes} B, graph units) vs the simulator's "
          f"{format_bytes(report.simulated_peak_bytes)}")
    print(f"max relative gradient error: {report.max_rel_grad_error:.3g} (dimensionless; "
          f"tolerance {report.grad_rtol:g}, worst {report.worst_param})")
    print(f"max relative weight error after the SGD step: {report.max_rel_weight_error:.3g}")
    if not report.passed:
        print(f"gradient check: FAIL ({'; '.join(report.reasons)})")
        return 1
    print("gradient check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
