"""Optimiser (timm's factory) and per-step lr schedule: linear warm-up, then cosine or constant (docs/design.md §4.1).

The schedule stays a :class:`torch.optim.lr_scheduler.LambdaLR` over :func:`lr_factor` rather than timm's
``CosineLRScheduler``: this warm-up reaches the base lr on its last step and the cosine starts from it on the next, so
the base lr is used twice; no setting of timm's scheduler gives that sequence for 2 or more warm-up steps (its closest
is 5e-3 off at lr 0.1, 20 steps, 3 of warm-up), so a run with ``train.warmup_epochs > 0`` would train on other
learning rates. Without warm-up timm computes ``π·t/T`` where this computes ``π·(t/T)``: the same float32 lr the
optimiser applies, but the logged float64 lr differs in its last bit on about one step in five. Keeping it keeps
seeded runs, their logged metrics and the resume of existing checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["build_optimizer", "build_scheduler", "lr_factor"]

#: ``train.optimizer`` values; timm's registry maps both to torch's own classes (torch.optim.SGD / AdamW).
_OPTIMIZERS = ("sgd", "adamw")


def build_optimizer(
    params: Iterable[nn.Parameter], name: str, lr: float, momentum: float, weight_decay: float
) -> torch.optim.Optimizer:
    """timm's ``create_optimizer_v2`` over the parameters that require grad, as one parameter group.

    ``sgd``: ``torch.optim.SGD`` with Nesterov momentum when ``momentum > 0`` (plain SGD when 0); ``adamw``:
    ``torch.optim.AdamW`` with torch's betas and eps (``momentum`` unused). Weight decay applies to every parameter:
    they are passed as parameters, not as a module, and ``filter_bias_and_bn=False``, so timm does not exempt
    biases and norm weights.
    """
    if name not in _OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; use {' or '.join(_OPTIMIZERS)}")
    # imported here: timm imports torchvision and torch._dynamo (~3 s of CPU), which a command that never builds an
    # optimiser (backfill, rollback, doctor, serve) should not pay at start-up
    from timm.optim import create_optimizer_v2

    trainable = [p for p in params if p.requires_grad]
    extra = {"momentum": momentum, "nesterov": momentum > 0} if name == "sgd" else {}
    return create_optimizer_v2(trainable, opt=name, lr=lr, weight_decay=weight_decay, filter_bias_and_bn=False, **extra)


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Multiplier of the base lr at ``step`` (0-based)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, (step - warmup_steps) / span)
    return 0.5 * (1.0 + math.cos(math.pi * t))


def build_scheduler(
    opt: torch.optim.Optimizer, total_steps: int, warmup_steps: int, schedule: str
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step schedule: step ``s`` (0-based) trains with ``base lr × lr_factor(s, …)``; stepped after each update."""
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total_steps, warmup_steps, schedule))
