"""``bct``: the influence loss of Shen et al. 2020 (docs/design.md §5).

L_align = CE(φ_o^cls(n), y_old): the *frozen old classifier* applied to the new
embedding n. Classes the old model never saw get a synthesised classifier row
(``synthesize_new_classes``, default on): the direction of the class mean of the
old model's features of that class (unit embeddings for the linear classifier,
tangent vectors for the Lorentz MLR, whose synthesised hyperplane passes through
the origin: a_c = 0), scaled to the mean norm of the old rows, with the mean old
bias. Without synthesis only samples of old classes contribute.

Works for any geometry as long as old and new share it and the dimension.

When the old model's classifier does not read its retrieval embedding (a BT²
parent classifies its φ3, a sub-space of the embedding), the old "classifier"
is the prototype classifier of that embedding space instead: one row per old
class, the direction of its old features' mean (cosine logits with the old
model's classifier scale). That keeps the influence loss defined along a
chain of BT² generations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from components.errors import ConfigError
from components.losses.base import AlignmentContext, AlignmentLoss, LossOutput
from components.losses.catalog import register_alignment
from components.models.classifiers import (
    LinearClassifier,
    LorentzMLR,
    linear_logits,
    lorentz_mlr_logits,
)
from components.models.encoder import EmbeddingModel, ModelOutput


@dataclass(frozen=True)
class BCTOptions:
    synthesize_new_classes: bool = True


def class_means(ctx: AlignmentContext, use_tangent: bool, classes: Tensor) -> Tensor:
    """Mean old feature (tangent z or unit embedding) per new label in ``classes``, (len(classes), d).

    One pass of the frozen old model over the (un-augmented) training data, accumulated with index_add_.
    """
    assert ctx.old_model is not None and ctx.batches is not None
    n_new = ctx.new_spec.num_classes
    sums: Tensor | None = None
    counts = torch.zeros(n_new, device=ctx.device)
    with torch.no_grad():
        for x, y in ctx.batches():
            out = ctx.old_model(x, with_logits=False)
            feats = (out.z if use_tangent else out.emb).float()
            if sums is None:
                sums = torch.zeros(n_new, feats.shape[1], device=ctx.device)
            sums.index_add_(0, y, feats)
            counts.index_add_(0, y, torch.ones_like(y, dtype=torch.float32))
    assert sums is not None
    return sums[classes] / counts[classes].clamp_min(1.0)[:, None]


@register_alignment("bct")
class BCT(AlignmentLoss):
    requires_old = True
    Options = BCTOptions

    def prepare(self, ctx: AlignmentContext) -> None:
        if ctx.old_model is None or ctx.label_map is None:
            raise ConfigError("bct needs the parent model and the label map; train generation 0 first")
        old = ctx.old_model
        # kept out of the module tree: the old model is frozen and never saved with the method
        self._old: list[EmbeddingModel] = [old]
        label_map = ctx.label_map.to(ctx.device).clone()
        self.register_buffer("seen_class", label_map >= 0, persistent=False)
        clf = old.classifier
        unseen = torch.nonzero(label_map < 0).flatten()
        lorentz = isinstance(clf, LorentzMLR)
        self._scale = old.spec.classifier_scale
        # prototype rows (a parent whose classifier reads another part of its head, e.g. BT²'s φ3) are compared by
        # cosine, like a cosine classifier's
        prototypes = not old.classifies_embedding
        self._cosine = prototypes or (isinstance(clf, LinearClassifier) and clf.cosine)
        if prototypes:  # its classifier cannot score embeddings: use prototypes of the embedding
            seen = torch.nonzero(label_map >= 0).flatten()
            n_old = old.spec.num_classes
            weight = torch.zeros(n_old, old.spec.output_dim, device=ctx.device)
            weight[label_map[seen]] = F.normalize(class_means(ctx, use_tangent=False, classes=seen), dim=-1)
            bias = torch.zeros(n_old, device=ctx.device)
        elif isinstance(clf, LinearClassifier):
            weight = clf.fc.weight.detach()
            bias = (
                clf.fc.bias.detach() if clf.fc.bias is not None else torch.zeros(weight.shape[0], device=weight.device)
            )
        elif lorentz:
            weight, bias = clf.w.detach(), clf.a.detach()
        else:  # pragma: no cover - every model has one of the two
            raise ConfigError(f"bct cannot use an old classifier of type {type(clf).__name__}")
        if self.options.synthesize_new_classes and len(unseen):
            means = class_means(ctx, use_tangent=lorentz, classes=unseen)
            rows = F.normalize(means, dim=-1) * weight.norm(dim=-1).mean()
            extra_bias = torch.zeros(len(unseen), device=ctx.device) if lorentz else bias.mean().expand(len(unseen))
            label_map[unseen] = weight.shape[0] + torch.arange(len(unseen), device=ctx.device)
            weight = torch.cat([weight, rows])
            bias = torch.cat([bias, extra_bias])
        self.register_buffer("label_map", label_map, persistent=False)
        self.register_buffer("old_weight", weight.clone(), persistent=False)
        self.register_buffer("old_bias", bias.clone(), persistent=False)

    def _old_logits(self, emb: Tensor) -> Tensor:
        old = self._old[0]
        if isinstance(old.classifier, LorentzMLR):
            return lorentz_mlr_logits(emb, self.old_bias, self.old_weight, old.curvature, old.classifier.scale)
        return linear_logits(emb.float(), self.old_weight, self.old_bias, self._scale, self._cosine)

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        target = self.label_map[labels]
        known = (target >= 0).float()
        # mean over the items the old classifier knows, 0 (with a zero gradient) when there are none; masked
        # rather than indexed, so the step needs no host synchronisation (docs/design.md §7.12)
        per_item = F.cross_entropy(self._old_logits(new.emb).float(), target.clamp_min(0), reduction="none")
        loss = (per_item * known).sum() / known.sum().clamp_min(1.0)
        # share of samples whose class the old model really saw (synthesised rows do not count)
        return LossOutput({"influence": loss}, {"bct_known_fraction": self.seen_class[labels].float().mean().detach()})
