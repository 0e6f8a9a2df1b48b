"""Base losses L_base (HBCT Eq. (13)), selectable by name (``train.base_loss``).

* ``ce``: cross-entropy on the model's classifier (Lorentz MLR / linear).
* ``mixed``: the mixed-geometry contrastive loss of the HypMix paper
  (Eq. 10): one logit mixes the cosine distance (Eq. 5) and λ times the
  hyperbolic distance, s_ik = (−D_cos(z_i, z_k) − λ·D_hyp(z_i, z_k))/τ. The paper's
  positives are two views of an instance; with one view per batch we use the
  supervised form (positives = other items of the same class, SupCon-style mean).
  D_hyp is the geodesic distance on the model's hyperboloid for Lorentz models; for
  Euclidean models z is clipped at radius r and mapped with the Poincaré exp map at
  the origin of curvature c (paper Eq. 3; the paper's §4.2 settings c = 0.1, r = 2.3). The Poincaré map has
  conformal factor λ₀ = 2, so its point at tangent v lies at distance 2‖v‖ from the
  origin; we lift 2v onto the isometric Lorentz model, which gives the same D_hyp
  (paper Eq. 2) with our tested Lorentz primitives.
* ``ce+mixed``: the sum (keeps a trained classifier for BCT / PSP).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from components.errors import ConfigError
from components.geometry import expmap0, pairwise_geodesic_distance
from components.models.encoder import ModelOutput

__all__ = ["BASE_LOSSES", "BaseLoss", "MixedOptions", "base_loss", "mixed_geometry_loss"]


@dataclass(frozen=True)
class MixedOptions:
    lam: float = 3.0
    tau: float = 0.2
    curvature: float = 0.1
    clip_radius: float = 2.3


BaseLoss = Callable[[ModelOutput, Tensor, Tensor], Tensor]


def _ce(out: ModelOutput, labels: Tensor, curvature: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy on the classifier logits (B, C); ``label_smoothing`` ε mixes the one-hot target with uniform.

    Through the Lorentz MLR a correct logit grows with the radius (docs/design.md §3.4), so plain CE rewards every
    correctly classified point for moving outward until it reaches ζ; with ε > 0 the optimum logit gap is finite
    (log(1 + C(1 − ε)/ε), where the softmax equals the smoothed target), which stops that reward once a point is
    confidently classified.
    """
    assert out.logits is not None
    return F.cross_entropy(out.logits.float(), labels, label_smoothing=label_smoothing)


def mixed_geometry_loss(
    out: ModelOutput, labels: Tensor, curvature: Tensor, o: MixedOptions = MixedOptions()
) -> Tensor:
    """Supervised mixed-geometry contrastive loss (hypmix Eq. 10). Batch (B, ·) → scalar."""
    z = out.z.float()
    zn = F.normalize(z, dim=-1)
    d_cos = (2.0 - 2.0 * zn @ zn.t()).clamp_min(0.0)  # Eq. 5
    if out.emb.shape[-1] == z.shape[-1] + 1:  # Lorentz model: its own hyperboloid
        h, k = out.emb.float(), curvature.float()
    else:
        norm = z.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        clipped = z * (o.clip_radius / norm).clamp(max=1.0)
        h, k = expmap0(2.0 * clipped, o.curvature), torch.tensor(o.curvature, device=z.device)
    d_hyp = pairwise_geodesic_distance(h, h, k)
    logits = (-d_cos - o.lam * d_hyp) / o.tau
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    logits = logits.masked_fill(eye, float("-inf"))
    pos = (labels[:, None] == labels[None, :]) & ~eye
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    n_pos = pos.sum(1)
    has = n_pos > 0
    if not bool(has.any()):
        return z.sum() * 0.0
    per_anchor = -(log_prob.masked_fill(~pos, 0.0).sum(1)[has] / n_pos[has])
    return per_anchor.mean()


BASE_LOSSES = ("ce", "mixed", "ce+mixed")


def base_loss(
    name: str, options: dict | None = None, label_smoothing: float = 0.0
) -> Callable[[ModelOutput, Tensor, Tensor], Tensor]:
    """The base loss ``name`` as a function (out, labels, curvature) → scalar (``label_smoothing``: of its CE)."""
    if name not in BASE_LOSSES:
        raise ConfigError(f"unknown base loss {name!r}; use one of {', '.join(BASE_LOSSES)} (train.base_loss)")
    try:
        mo = MixedOptions(**(options or {}))
    except TypeError as err:
        raise ConfigError(f"train.base_options: {err}; valid keys: lam, tau, curvature, clip_radius") from None
    if not 0.0 <= label_smoothing < 1.0:
        raise ConfigError(f"train.label_smoothing must be in [0, 1) (got {label_smoothing}); use e.g. 0.1, or 0")
    if name == "ce":
        return lambda out, y, k: _ce(out, y, k, label_smoothing)
    if name == "mixed":
        return lambda out, y, k: mixed_geometry_loss(out, y, k, mo)
    return lambda out, y, k: _ce(out, y, k, label_smoothing) + mixed_geometry_loss(out, y, k, mo)
