"""Optimiser and per-step learning-rate schedule (linear warm-up, then cosine or constant)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["build_optimizer", "build_scheduler", "lr_factor"]


def build_optimizer(
    params: Iterable[nn.Parameter], name: str, lr: float, momentum: float, weight_decay: float
) -> torch.optim.Optimizer:
    params = [p for p in params if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=momentum > 0)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; use sgd or adamw")


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
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total_steps, warmup_steps, schedule))
