"""Embedding a set of images with a trained model (batched, no grad, autocast on CUDA)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from components.data.batches import iterate_batches, to_image_tensor
from components.geometry import expmap0
from components.models.encoder import EmbeddingModel
from components.models.features import simplex_features
from components.training.device import (
    autocast,
    prepare_module,
    select_device,
    to_memory_format,
)

__all__ = ["Embeddings", "embed_images", "retrieval_vectors"]


@dataclass
class Embeddings:
    """z: (N, d) float32 tangent vectors after clipping (Lorentz) or raw projections;
    emb: (N, d+1) hyperboloid points / (N, d) unit vectors, float32;
    clipped: (N,) bool; logits: (N, C) float32."""

    z: np.ndarray
    emb: np.ndarray
    clipped: np.ndarray
    logits: np.ndarray


@torch.no_grad()
def embed_images(
    model: EmbeddingModel,
    images: np.ndarray,
    batch_size: int = 512,
    device: str = "auto",
    on_batch: Callable[[int], None] | None = None,
) -> Embeddings:
    """Embed (N, H, W, C) uint8 images. The model is used in eval mode. ``on_batch(n)`` after each batch of n."""
    dev = select_device(device)  # type: ignore[arg-type]
    model = prepare_module(model, dev).eval()
    data = to_image_tensor(images, np.zeros(len(images), dtype=np.int64), pin=dev.type == "cuda")
    zs, embs, clips, logits = [], [], [], []
    for x, _ in iterate_batches(data, batch_size, dev, shuffle=False):
        with autocast(dev):
            out = model(to_memory_format(x, dev))
        zs.append(out.z.float().cpu())
        embs.append(out.emb.float().cpu())
        clips.append(out.clipped.cpu())
        logits.append(out.logits.float().cpu())  # type: ignore[union-attr]
        if on_batch is not None:
            on_batch(len(x))
    return Embeddings(
        torch.cat(zs).numpy(), torch.cat(embs).numpy(), torch.cat(clips).numpy(), torch.cat(logits).numpy()
    )


def retrieval_vectors(emb: Embeddings, geometry: str, curvature: float, features: str = "embedding") -> np.ndarray:
    """Vectors for retrieval and reported metrics, float64.

    Lorentz: the clipped tangent vectors lifted again in float64 (docs/design.md §2:
    float32 points lose close-pair distances once x_t grows). Euclidean: the
    unit vectors. PSP / LSP: simplex features of the logits.
    """
    if features != "embedding":
        return simplex_features(emb.logits, features)
    if geometry == "lorentz":
        return expmap0(torch.from_numpy(emb.z).double(), curvature).numpy()
    return emb.emb.astype(np.float64)
