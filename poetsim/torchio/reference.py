"""The reference an execution is checked against, and the comparisons that check it.

:func:`reference` trains a float64 copy of the module the plain way: ``loss.backward()``
then ``torch.optim``'s step (:func:`~poetsim.torchio.optim.reference_optimizer`) on the
trained parameters (dropout modules in eval mode: the graph takes dropout as the identity),
same batch and targets as the run. :func:`compare_grads`, :func:`compare_weights` and
:func:`compare_states` measure the run against it:

* the gradient error of a parameter is its largest absolute difference over its largest
  reference gradient;
* the weight error its largest absolute difference from the reference's updated weights
  over the reference's largest step on it (``lr`` x gradient: a missing or doubled update
  is an error of 1, at any ``lr``); for a weight on storage, the run's weights are its
  file's contents after the iteration, so a missing write-back is caught;
* the state error, the optimizer state's largest relative difference from
  ``torch.optim``'s.

Each gradient and step scale is floored at 1e-3 of the model's largest (a gradient that is
zero in exact arithmetic is rounding noise). A frozen parameter must come out bit for bit
as it went in.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import attrs

from poetsim.torchio.model import ImportedModel
from poetsim.torchio.optim import STATE_SLOTS, reference_optimizer
from poetsim.torchio.runner import Runner

__all__ = ["Reference", "compare_grads", "compare_states", "compare_weights", "reference"]


@attrs.frozen
class Reference:
    """Plain training on a float64 copy: gradients of the trained parameters, every
    parameter after ``torch.optim``'s step (:func:`~poetsim.torchio.optim.reference_optimizer`)
    and the optimizer's state of each trained one."""

    grads: dict[str, Any]
    weights: dict[str, Any]
    states: dict[str, dict[str, Any]]


def reference(imported: ImportedModel, runner: Runner, lr: float) -> Reference:
    """``loss.backward()`` then the optimizer's step on the trained parameters, float64."""
    torch = runner.torch
    model = copy.deepcopy(imported.module).double().train()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.eval()  # the graph takes dropout as the identity
    for name, p in model.named_parameters():
        p.requires_grad_(name in runner.trained)
    out = model(*runner.batch)
    outputs = [x for x in _flatten(out) if isinstance(x, torch.Tensor)]
    logits = outputs[int(imported.graph.metadata.get("output_index", 0))]
    if imported.loss == "mse":
        loss = torch.nn.functional.mse_loss(logits, runner.target)
    else:
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 runner.target)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()
             if p.grad is not None}
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    optimizer = reference_optimizer(torch, list(trained.values()), runner.optimizer, lr)
    optimizer.step()
    states = {name: {slot: optimizer.state[p][slot] for slot in STATE_SLOTS[runner.optimizer]}
              for name, p in trained.items() if p.grad is not None}
    return Reference(grads, {name: p.detach() for name, p in model.named_parameters()},
                      states)


def _max_abs(x: Any) -> float:
    return float(x.abs().max()) if x.numel() else 0.0


def _floor(values: Mapping[str, Any]) -> float:
    """1e-3 of the largest magnitude over all parameters: below it, a value that is zero in
    exact arithmetic (a key bias's gradient under softmax) is rounding noise on both sides."""
    return 1e-3 * max((_max_abs(v) for v in values.values()), default=0.0)


def compare_grads(grads: Mapping[str, Any], reference: Mapping[str, Any], rtol: float
                   ) -> tuple[float, str, list[str]]:
    """Largest relative gradient error, its parameter, and the reasons to fail."""
    worst, worst_name = 0.0, ""
    reasons: list[str] = []
    floor = _floor(reference)
    for p_name, ref in reference.items():
        got = grads.get(p_name)
        if got is None:
            worst, worst_name = float("inf"), p_name
            reasons.append(f"no gradient computed for parameter {p_name!r}")
            continue
        err = _max_abs(got - ref) / max(_max_abs(ref), floor, 1e-300)
        if err > worst or not worst_name:
            worst, worst_name = err, p_name
    if worst > rtol and not reasons:
        reasons.append(f"gradient of {worst_name!r} differs from plain autograd by "
                       f"{worst:.3g} (relative), over {rtol:g}")
    return worst, worst_name, reasons


def compare_weights(runner: Runner, reference: Reference, rtol: float
                     ) -> tuple[float, str, list[str]]:
    """Largest error of the updated weights relative to the reference's step, its parameter,
    and the reasons to fail (a frozen parameter that changed at all is one)."""
    steps = {name: reference.weights[name] - runner.initial[name] for name in reference.weights}
    floor = _floor(steps)
    worst, worst_name = 0.0, ""
    reasons: list[str] = []
    for name, ref in reference.weights.items():
        got = runner.final_weight(name)  # a weight on storage: its file's contents
        if name not in runner.trained and not runner.torch.equal(got, runner.initial[name]):
            reasons.append(f"frozen parameter {name!r} changed")
        err = _max_abs(got - ref) / max(_max_abs(steps[name]), floor, 1e-300)
        if err > worst or not worst_name:
            worst, worst_name = err, name
    if worst > rtol:
        reasons.append(f"updated weights of {worst_name!r} differ from plain autograd + "
                       f"{runner.optimizer} by {worst:.3g} (relative to the step), over "
                       f"{rtol:g}")
    return worst, worst_name, reasons


def compare_states(runner: Runner, reference: Reference, rtol: float
                    ) -> tuple[float, list[str]]:
    """Largest relative error of the optimizer state after the step (in RAM or written
    back to storage) against ``torch.optim``'s, and the reasons to fail."""
    worst, worst_slot = 0.0, ""
    for name, slots in reference.states.items():
        got = runner.final_state(name)
        for slot, ref in slots.items():
            err = _max_abs(got[slot] - ref) / max(_max_abs(ref), 1e-300)
            if err > worst or not worst_slot:
                worst, worst_slot = err, f"{slot} of {name!r}"
    reasons = ([f"optimizer state {worst_slot} differs from torch.optim's by {worst:.3g} "
                f"(relative), over {rtol:g}"] if worst > rtol else [])
    return worst, reasons


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [y for v in value.values() for y in _flatten(v)]
    if isinstance(value, (list, tuple)):
        return [y for v in value for y in _flatten(v)]
    if hasattr(value, "to_tuple"):
        return _flatten(value.to_tuple())
    return [value]
