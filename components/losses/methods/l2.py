"""``l2``: L_align = mean_i ‖n̂_i − ô_i‖² between the new and old unit embeddings (docs/design.md §5)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from components.geometry import Euclidean
from components.losses.base import AlignmentLoss, LossOutput
from components.losses.catalog import register_alignment
from components.models.encoder import ModelOutput


@register_alignment("l2")
class L2(AlignmentLoss):
    requires_old = True
    space = Euclidean.name

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        assert old is not None
        n, o = F.normalize(new.emb.float(), dim=-1), F.normalize(old.emb.float(), dim=-1)
        return LossOutput({"l2": (n - o).pow(2).sum(-1).mean()})
