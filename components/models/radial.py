"""How a Lorentz head bounds the tangent vector before the exp map: the hard clip, or a smooth radial squash, and
the scale applied before either (docs/design.md §3).

* ``clip`` (design §3, the HBCT paper's clip radius ζ): z ← z·min(1, ζ/‖z‖). Beyond ζ the radius has no gradient:
  a point that reaches ζ never comes back, so every saturated point gets the same uncertainty and the same cone.
* ``tanh``: z ← z·ζ·tanh(‖z‖/ζ)/‖z‖, i.e. r ↦ ζ·tanh(r/ζ). The same bound ζ (approached, never reached), the identity
  near the origin (slope 1 at r = 0), and a radial derivative sech²(r/ζ) > 0 everywhere, so radius stays trainable
  and can carry uncertainty. A point counts as saturated when its squashed radius is ≥ (1 − 0.05)·ζ.

Both commute with a positive rescaling of ζ: squash(s·z, s·ζ) = s·squash(z, ζ), which is what a ζ-restarting
backfill relies on (``tangent_scale``).

The scale before the bound is 1/√d (design §3), or with ``learn_scale`` a learned α ∈ (0, 1], initialised at 1/√d,
as MERU does; α = exp(−softplus(u)) keeps it ≤ 1 with a smooth gradient everywhere.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RADIAL_MAPS", "SATURATION_TOL", "LearnableScale", "bound_radius"]

RadialMap = Literal["clip", "tanh"]
RADIAL_MAPS: tuple[RadialMap, ...] = ("clip", "tanh")
#: ``tanh``: a point is saturated when its radius is within this fraction of ζ
SATURATION_TOL = 0.05


def bound_radius(z: Tensor, zeta: float, radial: RadialMap = "clip") -> tuple[Tensor, Tensor]:
    """Bound the tangent vectors ``z`` (B, d) to radius ζ; returns (bounded (B, d), saturated (B,) bool)."""
    norm = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    safe = norm.clamp_min(torch.finfo(z.dtype).tiny)
    if radial == "clip":
        return z * (zeta / safe).clamp(max=1.0), norm.squeeze(-1) >= zeta
    if radial == "tanh":
        squashed = zeta * torch.tanh(norm / zeta)
        return z * (squashed / safe), squashed.squeeze(-1) >= (1.0 - SATURATION_TOL) * zeta
    raise ValueError(f"unknown radial map {radial!r}; use one of {RADIAL_MAPS}")


class LearnableScale(nn.Module):
    """α ∈ (0, 1], learned: α = exp(−softplus(u)), u initialised so that α = 1/√d. (B, d) → (B, d)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        # softplus(u0) = log √d  ⇔  u0 = log(√d − 1); for d = 1 (α0 = 1) softplus(u0) ≈ 0 needs u0 → −∞: use −20
        u0 = math.log(math.sqrt(dim) - 1.0) if dim > 1 else -20.0
        self.u = nn.Parameter(torch.tensor(u0))

    @property
    def alpha(self) -> Tensor:
        return torch.exp(-F.softplus(self.u))

    def forward(self, z: Tensor) -> Tensor:
        return z * self.alpha.to(z.dtype)
