"""``hbct``: Hyperbolic Backward-Compatible Training (the HBCT paper; docs/design.md §4).

L_align = w_entail·L_entail + L_contrast, added to the base loss with weight λ
(HBCT Eq. (13) / (16)). With h_n,i, h_o,i the new and (frozen) old
embeddings of item i in the batch (B items, hyperboloid points (B, d+1)):

* L_entail (HBCT §4.2, Eq. (11)): mean_i max(0, ext(h_o,i, h_n,i) − aper(h_o,i)).
* L_contrast, RINCE (HBCT Eq. (12), docs/design.md §4): with s_ij = −dist(h_n,i, h_o,j)/τ
  and the per-anchor q_i = u(h_o,i) (HBCT Eq. (10), no gradient, ≥ q_min)
      ℓ_i = −exp(q_i·s_ii)/q_i + (β·Σ_j exp(s_ij))^(q_i)/q_i
  computed in log space: (β Σ exp s)^q = exp(q·(log β + logsumexp s)).

Ablations (HBCT Appendix, Tables 3-5): ``entailment: false``; ``contrast:
infonce`` (q → 0), ``distortion`` (L_mdist = mean d(h_o, h_n)) or ``none``;
``distance``: geodesic (Eq. 3) / squared_lorentz (Law et al. 2019:
‖x−y‖²_L = −2/K − 2⟨x,y⟩_L) / inner (−⟨x,y⟩_L − 1/K); ``fixed_q`` replaces
the uncertainty weighting by a constant, ``shuffle_q`` permutes it across the batch (the same weights, detached
from their items: a control for whether the per-item uncertainty matters); ``entail_weight`` is λ_entail of
Eq. (16). Curvature (Table 3) and ζ_n (Table 4) are model settings
(``geometry.curvature`` / ``learn_curvature``, ``geometry.delta_zeta``); with a
learnable K the alignment terms are computed on the old model's hyperboloid.
Same-class off-diagonal pairs are negatives as in the paper unless
``mask_same_class``.

ε from data (``epsilon_rule: view_angle``, :mod:`components.losses.cone_epsilon`, docs/design.md §4.6): before
training, :meth:`HBCT.prepare` reads ε off the parent (the P_``epsilon_percentile`` of the ε that holds the
parent's own view-to-view disagreement, never below ``epsilon``) and trains with it; the value and the reason are in
``choices``, which the lineage and the benchmark rows record.

Diagnostics (docs/design.md §4.5, :meth:`HBCT.diagnostics`): after training, the cones on the gallery at the ε the
model trained with — ``in_cone_fraction`` (share of items whose new embedding lies in its old one's cone, Eq. (11)),
``entail_angle_deg`` / ``aperture_deg`` (median ext(h_o, h_n) and aper(h_o) in degrees), in float64.

All terms are computed in float32 whatever the autocast dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from components.errors import ConfigError
from components.geometry import (
    Lorentz,
    distance_from_inner,
    expmap0,
    exterior_angle,
    half_aperture,
    lorentz_inner,
    pairwise_lorentz_inner,
    uncertainty,
)
from components.losses.base import AlignmentContext, AlignmentLoss, EmbeddedGallery, LossOutput, MethodDiagnostics
from components.losses.catalog import register_alignment
from components.losses.cone_epsilon import SAMPLE as CONE_SAMPLE
from components.losses.cone_epsilon import view_epsilon
from components.models.encoder import ModelOutput

__all__ = [
    "HBCT",
    "HBCTOptions",
    "entailment_loss",
    "gallery_cones",
    "info_nce",
    "pairwise_distance",
    "rince",
    "trained_epsilon",
]

Distance = Literal["geodesic", "squared_lorentz", "inner"]


@dataclass(frozen=True)
class HBCTOptions:
    tau: float = 0.5
    beta: float = 0.01
    epsilon: float = 0.1
    #: fixed: ε = ``epsilon``; view_angle: ε from the parent's view-to-view disagreement (docs/design.md §4.6),
    #: at least ``epsilon``
    epsilon_rule: Literal["fixed", "view_angle"] = "fixed"
    epsilon_percentile: float = 50.0
    entailment: bool = True
    entail_weight: float = 1.0
    contrast: Literal["rince", "infonce", "distortion", "none"] = "rince"
    distance: Distance = "geodesic"
    q_min: float = 1e-3
    fixed_q: float | None = None
    #: each step, the per-anchor q of a random permutation of the batch's items (a control for the weighting)
    shuffle_q: bool = False
    mask_same_class: bool = False

    def __post_init__(self) -> None:
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0 (got {self.tau})")
        if not 0 < self.beta <= 1:
            raise ValueError(f"beta must be in (0, 1] (got {self.beta})")
        if self.epsilon <= 0:
            raise ValueError(f"epsilon must be > 0 (got {self.epsilon})")
        if self.epsilon_rule not in ("fixed", "view_angle"):
            raise ValueError(f"epsilon_rule must be fixed or view_angle (got {self.epsilon_rule!r})")
        if not 0 < self.epsilon_percentile <= 100:
            raise ValueError(f"epsilon_percentile must be in (0, 100] (got {self.epsilon_percentile})")
        if not 0 < self.q_min <= 1:
            raise ValueError(f"q_min must be in (0, 1] (got {self.q_min})")
        if self.fixed_q is not None and not 0 < self.fixed_q <= 1:
            raise ValueError(f"fixed_q must be in (0, 1] or null (got {self.fixed_q})")
        if self.contrast not in ("rince", "infonce", "distortion", "none"):
            raise ValueError(f"contrast must be rince, infonce, distortion or none (got {self.contrast!r})")
        if self.distance not in ("geodesic", "squared_lorentz", "inner"):
            raise ValueError(f"distance must be geodesic, squared_lorentz or inner (got {self.distance!r})")


def _to_distance(inner: Tensor, k: Tensor, kind: Distance) -> Tensor:
    """Distance from Lorentz inner products ⟨x, y⟩_L (any shape)."""
    if kind == "geodesic":
        return distance_from_inner(inner, k)
    if kind == "squared_lorentz":
        return (-2.0 / k - 2.0 * inner).clamp_min(0.0)
    return (-inner - 1.0 / k).clamp_min(0.0)


def pairwise_distance(h_n: Tensor, h_o: Tensor, k: Tensor, kind: Distance = "geodesic") -> Tensor:
    """(B, d+1) × (B, d+1) → (B, B) distances dist(h_n,i, h_o,j)."""
    return _to_distance(pairwise_lorentz_inner(h_n, h_o), k, kind)


def rince(s: Tensor, q: Tensor, beta: float, neg_mask: Tensor | None = None) -> Tensor:
    """RINCE (HBCT Eq. (12)) per anchor. s: (B, B) logits with positives on the diagonal;
    q: (B,) in (0, 1]; neg_mask: (B, B) bool of entries kept in the sum (None = all). → (B,)."""
    pos = s.diagonal()
    if neg_mask is not None:
        s = s.masked_fill(~neg_mask, float("-inf"))
    lse = torch.logsumexp(s, dim=1)
    return (-torch.exp(q * pos) + torch.exp(q * (math.log(beta) + lse))) / q


def info_nce(s: Tensor, neg_mask: Tensor | None = None) -> Tensor:
    """InfoNCE per anchor (the q → 0 limit of RINCE up to constants). (B, B) → (B,)."""
    pos = s.diagonal()
    if neg_mask is not None:
        s = s.masked_fill(~neg_mask, float("-inf"))
    return -pos + torch.logsumexp(s, dim=1)


def trained_epsilon(options: HBCTOptions, choices: Mapping[str, Any]) -> float:
    """The ε an HBCT model's cones trained with: the one ``prepare`` chose from data (``choices``, as a training
    result records them), else the configured ``options.epsilon``."""
    return float(choices.get("epsilon", options.epsilon))


def entailment_loss(h_o: Tensor, h_n: Tensor, k: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Per-item max(0, ext − aper) and the in-cone indicator. (B, d+1) ×2 → ((B,), (B,) bool)."""
    ext = exterior_angle(h_o, h_n, k)
    aper = half_aperture(h_o, k, epsilon)
    return torch.relu(ext - aper), ext <= aper


def gallery_cones(z_old: np.ndarray, z_new: np.ndarray, curvature: float, epsilon: float) -> tuple[Tensor, Tensor]:
    """(ext(h_o, h_n), aper(h_o)) per item, (N,) float64 radians (HBCT Eq. (11)). z_old, z_new: (N, d) tangent
    vectors of the same items, row-aligned, lifted onto the hyperboloid of curvature K = ``curvature``."""
    h_o = expmap0(torch.from_numpy(np.asarray(z_old)).double(), curvature)
    h_n = expmap0(torch.from_numpy(np.asarray(z_new)).double(), curvature)
    return exterior_angle(h_o, h_n, curvature), half_aperture(h_o, curvature, epsilon)


@register_alignment("hbct")
class HBCT(AlignmentLoss):
    requires_old = True
    space = Lorentz.name
    Options = HBCTOptions
    _k: float = 1.0  # curvature K, set from the model spec in prepare()

    _relift: bool = False

    @property
    def epsilon(self) -> float:
        """The ε the cones use: the one :meth:`prepare` chose from data, else the configured one."""
        return trained_epsilon(self.options, self.choices)

    @classmethod
    def diagnostics(
        cls, options: HBCTOptions, choices: Mapping[str, Any], old: EmbeddedGallery, new: EmbeddedGallery
    ) -> MethodDiagnostics:
        """The cones on the gallery (HBCT Eq. (11)) at the ε the model trained with, on the parent's hyperboloid:
        the in-cone fraction, the median exterior angle and the median half-aperture in degrees."""
        eps = trained_epsilon(options, choices)
        ext, aper = gallery_cones(old.z, new.z, old.curvature, eps)
        measured: dict[str, float | None] = {
            "in_cone_fraction": float((ext <= aper).double().mean()),
            "entail_angle_deg": float(torch.rad2deg(ext).median()),
            "aperture_deg": float(torch.rad2deg(aper).median()),
        }
        return MethodDiagnostics(measured, {"epsilon": eps})

    def prepare(self, ctx: AlignmentContext) -> None:
        # The alignment happens on the old gallery's hyperboloid (the space cross retrieval uses).
        # With a learnable curvature the new model's own K drifts; its tangent vectors are then
        # lifted again with the old K for the alignment terms.
        self._k = float(ctx.old_model.curvature) if ctx.old_model is not None else float(ctx.new_spec.curvature)
        self._relift = bool(ctx.new_spec.learn_curvature)
        o: HBCTOptions = self.options
        if o.epsilon_rule == "view_angle" and o.entailment and ctx.old_model is not None:
            if ctx.sample is None or ctx.augment is None:
                raise ConfigError(
                    "hbct epsilon_rule view_angle needs the training data and its augmentation before training; "
                    "train through components.training.train_model, or set epsilon_rule: fixed"
                )
            room = float(ctx.new_spec.zeta or 0.0) - float(ctx.old_model.spec.zeta or 0.0)
            chosen = view_epsilon(
                ctx.old_model,
                ctx.sample(CONE_SAMPLE),
                ctx.augment,
                room=room,
                percentile=o.epsilon_percentile,
                floor=o.epsilon,
                seed=ctx.seed,
            )
            self.choices = {"epsilon": chosen.epsilon, "epsilon_reason": chosen.reason}

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        assert old is not None, "hbct needs the old model's outputs"
        o: HBCTOptions = self.options
        k = torch.as_tensor(self._k, dtype=torch.float32, device=new.emb.device)
        h_n = expmap0(new.z.float(), k) if self._relift else new.emb.float()
        h_o = old.emb.float().detach()
        terms: dict[str, Tensor] = {}
        stats: dict[str, Tensor | float] = {}

        if o.entailment:
            per_item, inside = entailment_loss(h_o, h_n, k, self.epsilon)
            terms["entail"] = o.entail_weight * per_item.mean()
            stats["in_cone_fraction"] = inside.float().mean().detach()
        q = uncertainty(h_o).clamp_min(o.q_min) if o.fixed_q is None else torch.full_like(h_o[:, 0], o.fixed_q)
        if o.shuffle_q:
            q = q[torch.randperm(q.shape[0], device=q.device)]
        stats["q_mean"] = q.mean().detach()

        if o.contrast in ("rince", "infonce"):
            s = -pairwise_distance(h_n, h_o, k, o.distance) / o.tau
            mask = None
            if o.mask_same_class:
                eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
                mask = (labels[:, None] != labels[None, :]) | eye
            per_anchor = rince(s, q, o.beta, mask) if o.contrast == "rince" else info_nce(s, mask)
            terms["contrast"] = per_anchor.mean()
        elif o.contrast == "distortion":
            terms["distortion"] = _to_distance(lorentz_inner(h_n, h_o), k, o.distance).mean()
        return LossOutput(terms, stats)
