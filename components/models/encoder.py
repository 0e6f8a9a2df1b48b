"""The embedding model of one generation: normalise → timm backbone → head → classifier."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from components.geometry import Lorentz
from components.models.backbone import create_backbone
from components.models.classifiers import LinearClassifier, LorentzMLR
from components.models.head_catalog import HEADS, create_head
from components.models.spec import ModelSpec

__all__ = ["EmbeddingModel", "ModelOutput", "build_model"]


@dataclass
class ModelOutput:
    """z: (B, d) tangent vector after clipping (Lorentz) or raw projection (Euclidean);
    emb: (B, d+1) hyperboloid points or (B, d) unit vectors; logits: (B, C) or None;
    clipped: (B,) bool."""

    z: Tensor
    emb: Tensor
    logits: Tensor | None
    clipped: Tensor
    aux: dict[str, Tensor] = field(default_factory=dict)


class EmbeddingModel(nn.Module):
    """Images (B, C, H, W) float in [0, 1] → :class:`ModelOutput`.

    Input normalisation is part of the model (buffers saved in the checkpoint),
    so serving needs nothing but the checkpoint.
    """

    def __init__(self, spec: ModelSpec, pretrained_path: str | None = None) -> None:
        super().__init__()
        self.spec = spec
        c = spec.in_chans
        mean = torch.tensor(spec.norm_mean, dtype=torch.float32).reshape(1, -1, 1, 1)
        std = torch.tensor(spec.norm_std, dtype=torch.float32).reshape(1, -1, 1, 1)
        if mean.shape[1] not in (1, c) or std.shape[1] not in (1, c):
            raise ValueError(f"norm_mean/norm_std must have 1 or {c} entries")
        self.register_buffer("norm_mean", mean)
        self.register_buffer("norm_std", std)
        #: the width of the backbone's pooled features, the head's input
        self.backbone, self.feature_dim = create_backbone(
            spec.backbone,
            in_chans=c,
            small_stem=spec.small_stem,
            pretrained_path=pretrained_path,
            kwargs=spec.backbone_kwargs,
        )
        # the head first, then the classifier (the order the parameters are initialised in); every head gives the
        # classifier an embed_dim-wide input (+1 time coordinate for a Lorentz model)
        self.head: nn.Module = create_head(spec.head, spec, self.feature_dim)
        #: a Lorentz model classifies its hyperboloid points with the Lorentz MLR, any other its unit rows linearly
        self.classifier: nn.Module = (
            LorentzMLR(spec.embed_dim, spec.num_classes, spec.mlr_scale)
            if isinstance(spec.space, Lorentz)
            else LinearClassifier(spec.embed_dim, spec.num_classes, spec.classifier_scale, spec.classifier == "cosine")
        )

    @property
    def curvature(self) -> Tensor:
        """K as a 0-d tensor: a Lorentz head holds it (learnable with learn_curvature); else the spec's."""
        if isinstance(self.classifier, LorentzMLR):
            return self.head.curvature
        return torch.tensor(self.spec.curvature)

    @property
    def classifies_embedding(self) -> bool:
        """Whether the classifier reads the retrieval embedding (False for a head whose classifier reads another
        part of it, e.g. BT²'s φ3)."""
        return HEADS.get(self.spec.head).classifies_embedding

    def classify(self, emb: Tensor) -> Tensor:
        """Logits (B, C) of this model's classifier for embeddings (B, ·)."""
        if isinstance(self.classifier, LorentzMLR):
            return self.classifier(emb, self.curvature)
        return self.classifier(emb)

    def forward(self, x: Tensor, with_logits: bool = True) -> ModelOutput:
        size = self.spec.input_size
        if size is not None and x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        x = (x - self.norm_mean) / self.norm_std
        feats = self.backbone(x)
        out = self.head(feats)
        cls_in = out.emb if out.cls_input is None else out.cls_input
        logits = self.classify(cls_in) if with_logits else None
        return ModelOutput(out.z, out.emb, logits, out.clipped, out.aux)


def build_model(spec: ModelSpec, pretrained_path: str | None = None) -> EmbeddingModel:
    return EmbeddingModel(spec, pretrained_path)


def build_meta_model(spec: ModelSpec, pretrained_path: str | None = None) -> EmbeddingModel:
    """The model of ``spec`` with its tensors on the meta device: shapes, no memory, no initialisation (building a
    standard ResNet-18 on the CPU initialises 11M parameters: 98 ms of one core against 17 ms here). A pretrained
    file's copies into it are no-ops, their warning silenced: what is wanted is the structure."""
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # "copying … to a meta parameter … is a no-op"
        return EmbeddingModel(spec, pretrained_path)
