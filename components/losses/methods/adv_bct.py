"""``adv_bct``: AdvBCT (Pan et al. 2023), docs/design.md §5.

* Elastic boundary: per old class, the centre c_y of the old (unit) features and a
  radius r_y = the largest distance to c_y among the features that survive an IQR
  filter (distance ≤ Q3 + 1.5·IQR); L_boundary = mean_i max(0, ‖n̂_i − c_y‖ − r_y)
  over samples of old classes pulls each new embedding into its class ball.
* Adversarial: a discriminator D (MLP, owned by this module and trained with the
  model's optimiser) separates old features (label 0) from new ones (label 1); the
  new features reach D through a gradient-reversal layer, so the encoder learns to
  make them indistinguishable from old ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.autograd import scale_grad
from components.errors import ConfigError
from components.geometry import Euclidean
from components.losses.base import AlignmentContext, AlignmentLoss, LossOutput
from components.losses.catalog import register_alignment
from components.models.encoder import ModelOutput


@dataclass(frozen=True)
class AdvBCTOptions:
    adversarial_weight: float = 1.0
    grl_scale: float = 1.0
    iqr_factor: float = 1.5


def grad_reverse(x: Tensor, scale: float = 1.0) -> Tensor:
    """Identity forward, −scale × gradient backward."""
    return scale_grad(x, -scale)


def class_balls(feats: Tensor, labels: Tensor, num_classes: int, iqr_factor: float) -> tuple[Tensor, Tensor]:
    """Centres (C, d) and IQR-filtered radii (C,) of unit features (N, d) per label; empty classes get radius 0."""
    centres = torch.zeros(num_classes, feats.shape[1], device=feats.device)
    counts = torch.zeros(num_classes, device=feats.device)
    centres.index_add_(0, labels, feats)
    counts.index_add_(0, labels, torch.ones_like(labels, dtype=feats.dtype))
    centres = centres / counts.clamp_min(1.0)[:, None]
    dist = (feats - centres[labels]).norm(dim=-1)
    radii = torch.zeros(num_classes, device=feats.device)
    for c in torch.unique(labels).tolist():  # one quantile per class, not per embedding
        d = dist[labels == c]
        q1, q3 = torch.quantile(d, 0.25), torch.quantile(d, 0.75)
        kept = d[d <= q3 + iqr_factor * (q3 - q1)]
        radii[c] = kept.max() if len(kept) else d.max()
    return centres, radii


@register_alignment("adv_bct")
class AdvBCT(AlignmentLoss):
    requires_old = True
    space = Euclidean.name
    Options = AdvBCTOptions

    def prepare(self, ctx: AlignmentContext) -> None:
        if ctx.old_model is None or ctx.label_map is None or ctx.batches is None:
            raise ConfigError("adv_bct needs the parent model; train generation 0 first")
        feats, labels = [], []
        with torch.no_grad():
            for x, y in ctx.batches():
                feats.append(F.normalize(ctx.old_model(x, with_logits=False).emb.float(), dim=-1))
                labels.append(y)
        f, y = torch.cat(feats), torch.cat(labels)
        known = ctx.label_map.to(ctx.device)[y] >= 0
        centres, radii = class_balls(f[known], y[known], ctx.new_spec.num_classes, self.options.iqr_factor)
        self.register_buffer("centres", centres, persistent=False)
        self.register_buffer("radii", radii, persistent=False)
        self.register_buffer("known_class", ctx.label_map.to(ctx.device) >= 0, persistent=False)
        d = f.shape[1]
        self.discriminator = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1)).to(ctx.device)

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        assert old is not None
        n, o = F.normalize(new.emb.float(), dim=-1), F.normalize(old.emb.float(), dim=-1)
        known = self.known_class[labels]
        gap = (n - self.centres[labels]).norm(dim=-1) - self.radii[labels]
        boundary = torch.relu(gap)[known].mean() if bool(known.any()) else n.sum() * 0.0
        logit_old = self.discriminator(o).squeeze(-1)
        logit_new = self.discriminator(grad_reverse(n, self.options.grl_scale)).squeeze(-1)
        adv = F.binary_cross_entropy_with_logits(
            logit_old, torch.zeros_like(logit_old)
        ) + F.binary_cross_entropy_with_logits(logit_new, torch.ones_like(logit_new))
        fooled = float((logit_new < 0).float().mean())
        return LossOutput(
            {"boundary": boundary, "adversarial": self.options.adversarial_weight * adv}, {"disc_fooled": fooled}
        )
