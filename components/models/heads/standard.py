"""``standard``: the plain head of either geometry — Euclidean (L2-normalised, docs/design.md §3.5) or Lorentz
(rescale → bound at ζ → exp map, docs/design.md §3). z is the whole retrieval embedding, ``embed_dim`` wide, and the
classifier reads it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.geometry import Lorentz, expmap0
from components.models.head_catalog import HeadKind, HeadOutput, register_head
from components.models.radial import LearnableScale, RadialMap, bound_radius

if TYPE_CHECKING:
    from components.models.spec import ModelSpec

__all__ = ["EuclideanHead", "LorentzHead", "StandardHead"]


class EuclideanHead(nn.Module):
    """features (B, F) → linear → [BatchNorm "neck"] → L2 normalise → (B, d).

    The BN neck centres the embedding per dimension before normalisation, removing
    the direction all items share (pooled ReLU features are non-negative), so the
    unit embeddings spread over the sphere instead of sitting in a narrow cone.
    """

    def __init__(self, in_features: int, embed_dim: int, bn_neck: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, embed_dim)
        self.neck = nn.BatchNorm1d(embed_dim) if bn_neck else nn.Identity()

    def forward(self, feats: Tensor) -> HeadOutput:
        z = self.neck(self.proj(feats))
        emb = F.normalize(z.float(), dim=-1)
        return HeadOutput(z, emb, torch.zeros(z.shape[0], dtype=torch.bool, device=z.device))


class LorentzHead(nn.Module):
    """features (B, F) → linear → z·α (α = 1/√d, or learned with ``learn_scale``) → bound at ζ (``radial``: the
    hard clip or the tanh squash, components/models/radial.py) → exp map at the origin → (B, d+1).

    The lift runs in float32 even under bf16 autocast (sinh/cosh and the
    clip are not safe in bf16). ``curvature`` K is fixed unless ``learn_curvature``.
    """

    def __init__(
        self,
        in_features: int,
        embed_dim: int,
        zeta: float,
        curvature: float,
        learn_curvature: bool = False,
        tangent_scale: float = 1.0,
        radial: RadialMap = "clip",
        learn_scale: bool = False,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, embed_dim)
        self.zeta = float(zeta)
        self.tangent_scale = float(tangent_scale)
        self.radial = radial
        self.scale = LearnableScale(embed_dim) if learn_scale else None
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
            scaled = (
                z.float() * (self.tangent_scale / math.sqrt(z.shape[-1]))
                if self.scale is None
                else self.scale(z.float()) * self.tangent_scale
            )
            radius = torch.linalg.vector_norm(scaled, dim=-1)  # before the bound: where the data wants to be
            z, clipped = bound_radius(scaled, self.zeta, self.radial)
            h = expmap0(z, self.curvature.float())
        return HeadOutput(z, h, clipped, aux={"radius": radius})


@register_head("standard")
class StandardHead(HeadKind):
    """The geometry's own head: :class:`LorentzHead` for a Lorentz model, :class:`EuclideanHead` otherwise."""

    @classmethod
    def check(cls, spec: ModelSpec) -> None:
        if spec.extra_dims:
            raise ValueError("extra_dims only applies to the BT² head")

    @classmethod
    def build(cls, spec: ModelSpec, in_features: int) -> nn.Module:
        if isinstance(spec.space, Lorentz):
            assert spec.zeta is not None
            return LorentzHead(
                in_features,
                spec.embed_dim,
                spec.zeta,
                spec.curvature,
                spec.learn_curvature,
                spec.tangent_scale,
                spec.radial,
                spec.learn_scale,
            )
        return EuclideanHead(in_features, spec.embed_dim, spec.bn_neck)
