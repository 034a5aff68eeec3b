"""The optimizer step ``execute`` applies to each trained parameter, with its state.

One training iteration from a fresh optimizer, as ``torch.optim`` takes it with the
hyper-parameters below, so that :func:`reference_optimizer` (``torch.optim`` itself) is
an independent check of :func:`apply_step`:

* ``sgd``: ``p -= lr * g`` (no state);
* ``momentum``: ``buf = MOMENTUM * buf + g``, ``p -= lr * buf``, from ``buf = 0``
  (``torch.optim.SGD``'s first step sets ``buf = g``, the same);
* ``adam``: ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, bias-corrected for the
  first step, ``p -= lr * m_hat / (sqrt(v_hat) + eps)``, from ``m = v = 0``.

The state slots are named as ``torch.optim`` names them, so that its state can be compared
slot by slot; their count is :data:`poetsim.graph.graph.OPTIMIZER_STATE_COPIES`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ADAM_BETAS", "ADAM_EPS", "MOMENTUM", "STATE_SLOTS", "apply_step",
           "reference_optimizer", "zero_state"]

#: ``torch.optim.SGD(momentum=...)`` of the ``momentum`` optimizer.
MOMENTUM = 0.9
#: ``torch.optim.Adam``'s defaults.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8

#: Each optimizer's state slots per parameter, as ``torch.optim`` names them.
STATE_SLOTS: dict[str, tuple[str, ...]] = {
    "sgd": (), "momentum": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq")}


def zero_state(param: Any, optimizer: str) -> dict[str, Any]:
    """A fresh optimizer's state of ``param``: zeros in every slot."""
    return {slot: param.detach().new_zeros(param.shape) for slot in STATE_SLOTS[optimizer]}


def apply_step(param: Any, grad: Any, state: dict[str, Any], optimizer: str, lr: float,
               ) -> None:
    """The first step of ``optimizer`` on ``param`` (a tensor updated in place) with
    gradient ``grad``; ``state`` (:func:`zero_state`) is updated in place too."""
    if optimizer == "sgd":
        step = grad
    elif optimizer == "momentum":
        buf = state["momentum_buffer"]
        buf.mul_(MOMENTUM).add_(grad)
        step = buf
    elif optimizer == "adam":
        b1, b2 = ADAM_BETAS
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(grad, alpha=1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        step = (m / (1 - b1)) / ((v / (1 - b2)).sqrt() + ADAM_EPS)
    else:
        raise ValueError(f"optimizer = {optimizer!r}: must be one of {', '.join(STATE_SLOTS)}")
    param.sub_(lr * step)


def reference_optimizer(torch: Any, params: list[Any], optimizer: str, lr: float) -> Any:
    """``torch.optim``'s own optimizer for ``optimizer``, with the same hyper-parameters."""
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=MOMENTUM)
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS)
    raise ValueError(f"optimizer = {optimizer!r}: must be one of {', '.join(STATE_SLOTS)}")
