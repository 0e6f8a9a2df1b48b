"""Autograd helpers shared by the losses and the training loop."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["scale_grad"]


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, factor: float) -> Tensor:  # type: ignore[override]
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return ctx.factor * grad, None


def scale_grad(x: Tensor, factor: float) -> Tensor:
    """Identity forward; the gradient multiplied by ``factor`` backward (−s: a gradient reversal layer)."""
    return _ScaleGrad.apply(x, factor)
