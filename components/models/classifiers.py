"""Classifiers over embeddings: linear (on unit vectors) and Lorentz MLR.

Both have a functional form (:func:`linear_logits`, :func:`lorentz_mlr_logits`)
so alignment methods can apply a frozen old classifier with extra rows
(BCT's synthesised classes) without building a module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LinearClassifier", "LorentzMLR", "linear_logits", "lorentz_mlr_logits"]


def linear_logits(emb: Tensor, weight: Tensor, bias: Tensor | None, scale: float, cosine: bool = False) -> Tensor:
    """s · (ê W^T + b), or for a cosine classifier s · ê Ŵ^T (unit rows, no bias).
    emb: (B, d), weight: (C, d), bias: (C,) → (B, C)."""
    if cosine:
        return scale * (emb @ F.normalize(weight, dim=-1).t())
    out = emb @ weight.t()
    if bias is not None:
        out = out + bias
    return scale * out


def lorentz_mlr_logits(h: Tensor, a: Tensor, w: Tensor, curvature: Tensor | float = 1.0, scale: float = 1.0) -> Tensor:
    """Lorentz MLR (Bdeir et al. 2023; HBCT Eq. (9)), docs/design.md §3.4. h: (B, d+1), a: (C,), w: (C, d) → (B, C).

    α_c = cosh(a_c/√k)·⟨h_s, w_c⟩ − sinh(a_c/√k)·‖w_c‖·h_t,  logit_c = s·‖w_c‖·√k·asinh(α_c / (√k·‖w_c‖)),
    k = 1/K, s = ``scale`` (``model.mlr_scale``; 1 is Eq. (9) as published). ‖w_c‖ is used directly (the
    reference code's sqrt(‖cosh·w‖² − (sinh‖w‖)²) cancels catastrophically in float32 for |a| ≳ 8).
    """
    # float32 even inside bf16 autocast (docs/design.md §2.5)
    with torch.autocast(device_type=h.device.type, enabled=False):
        h, a, w = h.float(), a.float(), w.float()
        k = 1.0 / torch.as_tensor(curvature, dtype=h.dtype, device=h.device)
        sk = k.sqrt()
        w_norm = torch.linalg.vector_norm(w, dim=-1).clamp_min(1e-12)  # (C,)
        arg = a / sk
        alpha = torch.cosh(arg) * (h[:, 1:] @ w.t()) - torch.sinh(arg) * w_norm * h[:, :1]
        return scale * w_norm * sk * torch.asinh(alpha / (sk * w_norm))


class LinearClassifier(nn.Module):
    """Classifier on L2-normalised embeddings ê. (B, d) → (B, C).

    ``cosine`` (default): logits = s · ê Ŵ^T with unit-norm class rows and no bias
    (NormFace). The class prototypes spread over the sphere and the embeddings with
    them. A plain linear layer (s · (ê W^T + b)) can classify inside a narrow cone —
    measured on Fashion-MNIST: mean pairwise cosine 0.97 between embeddings — where
    a shift common to all items, not the class, decides cross-model neighbours.
    The fixed scale s lets softmax become confident although ‖ê‖ = 1.
    """

    def __init__(self, embed_dim: int, num_classes: int, scale: float = 16.0, cosine: bool = True) -> None:
        super().__init__()
        self.cosine = bool(cosine)
        self.fc = nn.Linear(embed_dim, num_classes, bias=not self.cosine)
        self.scale = float(scale)

    @property
    def weight(self) -> Tensor:
        return self.fc.weight

    def forward(self, emb: Tensor) -> Tensor:
        return linear_logits(emb, self.fc.weight, self.fc.bias, self.scale, self.cosine)


class LorentzMLR(nn.Module):
    """Lorentz multinomial logistic regression, see :func:`lorentz_mlr_logits`, times a fixed logit scale s
    (``model.mlr_scale``, default 1: the paper's Eq. (9) as it stands). h: (B, d+1) → (B, C).

    Why a scale: a logit is about ‖w_c‖ times h's signed distance to the class hyperplane, and that distance is at
    most about the radius bound ζ (≈ 1). With w initialised at ‖w_c‖ ≈ 0.58 the logits span less than ±1, so softmax
    stays flat until ‖w‖ grows and every point is pushed to ζ — the classifier's radial reward (design §3.4). The
    cosine classifier's s = 16 plays the same part on the sphere.
    """

    def __init__(self, embed_dim: int, num_classes: int, scale: float = 1.0) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"the Lorentz MLR logit scale must be > 0 (got {scale}); model.mlr_scale: 1.0 is Eq. (9)")
        self.a = nn.Parameter(torch.zeros(num_classes))
        self.w = nn.Parameter(torch.empty(num_classes, embed_dim))
        nn.init.uniform_(self.w, -1.0 / math.sqrt(embed_dim), 1.0 / math.sqrt(embed_dim))
        self.scale = float(scale)

    def forward(self, h: Tensor, curvature: Tensor | float = 1.0) -> Tensor:
        return lorentz_mlr_logits(h, self.a, self.w, curvature, self.scale)
