"""Embedding heads: Euclidean (L2-normalised) and Lorentz (rescale → bound at ζ → exp map)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.geometry import expmap0
from components.models.radial import LearnableScale, RadialMap, bound_radius

__all__ = ["BT2Head", "EuclideanHead", "HeadOutput", "LorentzHead", "orthonormal_from_skew", "rescale_and_clip"]


@dataclass
class HeadOutput:
    """z: (B, D) tangent/raw vector; emb: (B, D) unit vectors or (B, D+1) hyperboloid points;
    clipped: (B,) bool, True where the norm hit the clip radius; cls_input: what the
    classifier sees (default: emb); aux: head-specific intermediates."""

    z: Tensor
    emb: Tensor
    clipped: Tensor
    cls_input: Tensor | None = None
    aux: dict[str, Tensor] = field(default_factory=dict)


def rescale_and_clip(z: Tensor, zeta: float, scale: float = 1.0, radial: RadialMap = "clip") -> tuple[Tensor, Tensor]:
    """Design §3: z ← z/√d (·scale), then bound the radius at ζ (:func:`~components.models.radial.bound_radius`:
    the hard clip, or ``tanh``). ``z``: (B, d) → ((B, d), saturated (B,))."""
    return bound_radius(z * (scale / math.sqrt(z.shape[-1])), zeta, radial)


class EuclideanHead(nn.Module):
    """features (B, F) → linear → [BatchNorm "neck"] → L2 normalise → (B, d).

    The BN neck centres the embedding per dimension before normalisation, removing
    the direction all items share (pooled ReLU features are non-negative), so the
    unit embeddings spread over the sphere instead of sitting in a narrow cone.
    """

    geometry = "euclidean"

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

    geometry = "lorentz"

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


@torch.compiler.disable
def orthonormal_from_skew(params: Tensor) -> Tensor:
    """P = exp(A) with A = U − Uᵀ skew-symmetric, so P is orthonormal (BT² Lemma 2). (m, m) → (m, m).

    Left out of ``torch.compile`` (a graph break): on CUDA, ``matrix_exp`` copies from the host to choose its
    degree, which CUDA-graph capture (``train.compile_mode: reduce-overhead``, the default on a GPU) refuses —
    seen on an H200, where every BT² model failed at its first step."""
    a = params.triu(1)
    return torch.linalg.matrix_exp(a - a.t())


class BT2Head(nn.Module):
    """BT² head (the BT² paper, Algorithm 1; docs/design.md §5.7).

    With m = embed_dim (the part trained like an independent new model),
    n = compat_dim (the old gallery's dimension) and d = extra_dims:

        φ1 = neck(features) ∈ R^(m+n);  φ2 = normalise(f(φ1)) ∈ R^d;  φ3 = normalise(φ1[:m])
        φ4 = C·B1 φ3 ∈ R^m;             φ5 = B2 [φ2; φ4[:n−d]] ∈ R^n
        φ_new = normalise([φ5; φ4[n−d:]]) ∈ R^(m+d)

    B1, B2 are learnable orthonormal basis transformations exp(A) (Lemma 2), so no
    information of φ3 is lost. The classifier sees φ3 (cls_input); the alignment
    loss sees normalise(φ5) (aux["compat"]), the prefix compared with old galleries.
    """

    geometry = "euclidean"

    def __init__(
        self, in_features: int, embed_dim: int, compat_dim: int, extra_dims: int, scale_c: float = 1.0
    ) -> None:
        super().__init__()
        m, n, d = embed_dim, compat_dim, extra_dims
        self.m, self.n, self.d = m, n, d
        self.neck = nn.Linear(in_features, m + n)
        self.f = nn.Linear(m + n, d) if d > 0 else None
        self.b1 = nn.Parameter(torch.zeros(m, m))
        self.b2 = nn.Parameter(torch.zeros(n, n))
        self.scale_c = float(scale_c)

    def forward(self, feats: Tensor) -> HeadOutput:
        phi1 = self.neck(feats).float()
        phi3 = F.normalize(phi1[:, : self.m], dim=-1)
        phi4 = self.scale_c * phi3 @ orthonormal_from_skew(self.b1).t()
        keep = self.n - self.d
        parts = [phi4[:, :keep]]
        if self.f is not None:
            parts.insert(0, F.normalize(self.f(phi1), dim=-1))
        phi5 = torch.cat(parts, dim=-1) @ orthonormal_from_skew(self.b2).t()
        z = torch.cat([phi5, phi4[:, keep:]], dim=-1)
        emb = F.normalize(z, dim=-1)
        clipped = torch.zeros(z.shape[0], dtype=torch.bool, device=z.device)
        return HeadOutput(
            z, emb, clipped, cls_input=phi3, aux={"compat": F.normalize(phi5, dim=-1), "independent": phi3}
        )
