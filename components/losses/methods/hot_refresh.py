"""``hot_refresh``: the RA-comp loss of Hot-Refresh (Zhang et al. 2022), docs/design.md §5.

Per anchor i, logits over
  [⟨n̂_i, ô_i⟩ (the positive),  ⟨n̂_i, ô_j⟩ for j of other classes,  ⟨n̂_i, n̂_j⟩ for j of other classes] / τ
and cross-entropy with the positive as target; same-class entries are masked.
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
class HotRefreshOptions:
    tau: float = 0.5

    def __post_init__(self) -> None:
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0 (got {self.tau})")


def ra_comp(n: Tensor, o: Tensor, labels: Tensor, tau: float) -> Tensor:
    """Per-anchor RA-comp loss. n, o: (B, d) unit vectors; labels: (B,) → (B,)."""
    other = labels[:, None] != labels[None, :]  # (B, B): True for other-class pairs
    s_no = (n @ o.t()) / tau
    s_nn = (n @ n.t()) / tau
    pos = s_no.diagonal()[:, None]
    neg = torch.cat([s_no.masked_fill(~other, float("-inf")), s_nn.masked_fill(~other, float("-inf"))], dim=1)
    logits = torch.cat([pos, neg], dim=1)
    return -F.log_softmax(logits, dim=1)[:, 0]


@register_alignment("hot_refresh")
class HotRefresh(AlignmentLoss):
    requires_old = True
    space = Euclidean.name
    Options = HotRefreshOptions

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        assert old is not None
        n, o = F.normalize(new.emb.float(), dim=-1), F.normalize(old.emb.float(), dim=-1)
        return LossOutput({"ra_comp": ra_comp(n, o, labels, self.options.tau).mean()})
