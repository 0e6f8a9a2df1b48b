"""The serving form of a generation: raw images in, the vectors the FAISS index holds out, as one module.

:class:`RetrievalEmbedder` wraps a trained :class:`~components.models.encoder.EmbeddingModel` so that a
single ``forward`` does what serving needs — uint8 images (N, H, W, C) → float in [0, 1], channels first →
the model (its normalisation and resizing are inside it) → the retrieval vectors of
:func:`components.training.embed.retrieval_vectors` (Lorentz: the clipped tangent vector lifted by the exponential
map in float64; Euclidean: the unit vector; PSP / LSP: the simplex features of the logits), returned as float32.
Because it is one plain torch module, ``torch.export`` can trace it into a graph that loads with torch alone: the
registered MLflow model is that graph (docs/design.md §7.16).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from components.models.encoder import EmbeddingModel
from components.models.features import simplex_project

__all__ = ["RetrievalEmbedder"]


class RetrievalEmbedder(nn.Module):
    """uint8 images (N, H, W, C) → retrieval vectors (N, D) float32, in eval mode.

    D = embed_dim + 1 (Lorentz: hyperboloid points, time first), embed_dim (Euclidean unit vectors) or the number
    of classes (PSP / LSP). The curvature is fixed at its trained value (a learned K is a constant once trained).
    """

    def __init__(self, model: EmbeddingModel) -> None:
        super().__init__()
        self.model = model.eval()
        self.features = model.spec.features
        self.num_classes = model.spec.num_classes
        self.curvature = float(model.curvature.detach())
        #: the model's space at its trained K: its points are the retrieval vectors
        self.space = model.spec.space.at(self.curvature)

    def forward(self, images: Tensor) -> Tensor:
        x = images.permute(0, 3, 1, 2).to(torch.float32) / 255.0
        out = self.model(x, with_logits=self.features != "embedding")
        if self.features != "embedding":
            assert out.logits is not None
            vectors = simplex_project(out.logits.to(torch.float64), self.features, self.num_classes)
        else:
            vectors = self.space.points(out.z.to(torch.float64), out.emb)
        return vectors.to(torch.float32)
