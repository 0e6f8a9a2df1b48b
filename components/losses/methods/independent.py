"""``independent`` (φ*): no alignment at all — the base loss only.

The upper reference for P_com / P_up and the lower bound of cross retrieval
(docs/design.md §5). Generation 0 always trains this way.
"""

from __future__ import annotations

from torch import Tensor

from components.losses.base import AlignmentLoss, LossOutput
from components.losses.catalog import register_alignment
from components.models.encoder import ModelOutput


@register_alignment("independent")
class Independent(AlignmentLoss):
    requires_old = False

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        return LossOutput(terms={})
