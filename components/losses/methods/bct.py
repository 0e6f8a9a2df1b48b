"""``bct``: the influence loss of Shen et al. 2020 (design §5).

L_align = CE(φ_o^cls(n), y_old): the *frozen old classifier* applied to the
new embedding n, on the samples whose class the old model knows (labels are
mapped to the old classifier's indices through ``label_map``). Works for any
geometry as long as old and new share it and the dimension (the old Lorentz
MLR classifies hyperboloid points as readily as the linear one unit vectors).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from components.errors import ConfigError
from components.losses.base import AlignmentContext, AlignmentLoss, LossOutput
from components.losses.registry import register_alignment
from components.models.encoder import EmbeddingModel, ModelOutput


@register_alignment("bct")
class BCT(AlignmentLoss):
    requires_old = True

    def prepare(self, ctx: AlignmentContext) -> None:
        if ctx.old_model is None or ctx.label_map is None:
            raise ConfigError("bct needs the parent model and the label map; train generation 0 first")
        # kept out of the module tree: the old model is frozen and never saved with the method
        self._old: list[EmbeddingModel] = [ctx.old_model]
        self.register_buffer("label_map", ctx.label_map.to(ctx.device), persistent=False)

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        old_labels = self.label_map[labels]
        known = old_labels >= 0
        if not bool(known.any()):
            zero = new.emb.sum() * 0.0
            return LossOutput({"influence": zero}, {"bct_known_fraction": 0.0})
        logits = self._old[0].classify(new.emb[known])
        loss = F.cross_entropy(logits.float(), old_labels[known])
        return LossOutput({"influence": loss}, {"bct_known_fraction": float(known.float().mean())})
