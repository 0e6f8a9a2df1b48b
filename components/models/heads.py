"""Embedding heads: Euclidean (L2-normalised) and Lorentz (rescale → clip at ζ → exp map)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.geometry import expmap0

__all__ = ["HeadOutput", "EuclideanHead", "LorentzHead", "rescale_and_clip"]


@dataclass
class HeadOutput:
    """z: (B, d) tangent/raw vector; emb: (B, d) unit vectors or (B, d+1) hyperboloid points;
    clipped: (B,) bool, True where the norm hit the clip radius."""

    z: Tensor
    emb: Tensor
    clipped: Tensor


def rescale_and_clip(z: Tensor, zeta: float) -> tuple[Tensor, Tensor]:
    """Design §3: z ← z/√d, then z ← z·min(1, ζ/‖z‖). ``z``: (B, d) → ((B, d), clipped (B,))."""
    z = z / math.sqrt(z.shape[-1])
    norm = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    scale = (zeta / norm.clamp_min(torch.finfo(z.dtype).tiny)).clamp(max=1.0)
    return z * scale, (norm.squeeze(-1) >= zeta)


class EuclideanHead(nn.Module):
    """features (B, F) → linear → L2 normalise → (B, d)."""

    geometry = "euclidean"

    def __init__(self, in_features: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, embed_dim)

    def forward(self, feats: Tensor) -> HeadOutput:
        z = self.proj(feats)
        emb = F.normalize(z.float(), dim=-1)
        return HeadOutput(z, emb, torch.zeros(z.shape[0], dtype=torch.bool, device=z.device))


class LorentzHead(nn.Module):
    """features (B, F) → linear → z/√d → clip at ζ → exp map at the origin → (B, d+1).

    The lift runs in float32 even under bf16 autocast (sinh/cosh and the
    clip are not safe in bf16). ``curvature`` K is fixed unless ``learn_curvature``.
    """

    geometry = "lorentz"

    def __init__(self, in_features: int, embed_dim: int, zeta: float, curvature: float, learn_curvature: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, embed_dim)
        self.zeta = float(zeta)
        log_k = torch.tensor(math.log(curvature))
        if learn_curvature:
            self.log_k = nn.Parameter(log_k)
        else:
            self.register_buffer("log_k", log_k)

    @property
    def curvature(self) -> Tensor:
        return self.log_k.exp()

    def forward(self, feats: Tensor) -> HeadOutput:
        z = self.proj(feats)
        with torch.autocast(device_type=z.device.type, enabled=False):
            z, clipped = rescale_and_clip(z.float(), self.zeta)
            h = expmap0(z, self.curvature.float())
        return HeadOutput(z, h, clipped)
