"""``hoc``: the alignment loss of HOC (Biondi et al. 2024), without its fixed simplex classifier (docs/design.md §5).

ℓ_i = −μ⟨ô_i, n̂_i⟩ + logsumexp_{j: y_j ≠ y_i} μ⟨ô_i, n̂_j⟩: each old embedding pulls its own
new embedding and pushes the new embeddings of other classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from components.geometry import Euclidean
from components.losses.base import AlignmentLoss, LossOutput
from components.losses.catalog import register_alignment
from components.models.encoder import ModelOutput


@dataclass(frozen=True)
class HOCOptions:
    mu: float = 10.0

    def __post_init__(self) -> None:
        if self.mu <= 0:
            raise ValueError(f"mu must be > 0 (got {self.mu})")


def hoc_loss(n: Tensor, o: Tensor, labels: Tensor, mu: float) -> Tensor:
    """Per-anchor HOC alignment. n, o: (B, d) unit vectors → (B,); anchors without other-class items give 0."""
    s = mu * (o @ n.t())  # s[i, j] = μ⟨ô_i, n̂_j⟩
    other = labels[:, None] != labels[None, :]
    lse = torch.logsumexp(s.masked_fill(~other, float("-inf")), dim=1)
    has = other.any(1)
    return torch.where(has, -s.diagonal() + lse, torch.zeros_like(lse))


@register_alignment("hoc")
class HOC(AlignmentLoss):
    requires_old = True
    space = Euclidean.name
    Options = HOCOptions

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        assert old is not None
        n, o = F.normalize(new.emb.float(), dim=-1), F.normalize(old.emb.float(), dim=-1)
        return LossOutput({"hoc": hoc_loss(n, o, labels, self.options.mu).mean()})
