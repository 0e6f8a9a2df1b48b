"""Embedding images with a trained model (batched, no grad, autocast on CUDA): in memory, or streamed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from components.data.batches import iterate_batches, to_image_tensor
from components.data.sources.split import SourceDataset
from components.geometry import Space
from components.models.encoder import EmbeddingModel
from components.models.features import simplex_features
from components.training.device import (
    Precision,
    autocast,
    prepare_module,
    select_device,
    to_memory_format,
)

__all__ = ["Embeddings", "embed_images", "embed_split", "embed_stream", "retrieval_vectors"]


@dataclass
class Embeddings:
    """z: (N, d) float32 tangent vectors after clipping (Lorentz) or raw projections;
    emb: (N, d+1) hyperboloid points / (N, d) unit vectors, float32;
    clipped: (N,) bool; logits: (N, C) float32."""

    z: np.ndarray
    emb: np.ndarray
    clipped: np.ndarray
    logits: np.ndarray


def _forward(model: EmbeddingModel, x: torch.Tensor, dev: torch.device, precision: Precision) -> Embeddings:
    """One batch (B, C, H, W) float in [0, 1] on ``dev`` → its :class:`Embeddings` on the host."""
    with autocast(dev, precision):
        out = model(to_memory_format(x, dev, precision))
    return Embeddings(
        out.z.float().cpu().numpy(),
        out.emb.float().cpu().numpy(),
        out.clipped.cpu().numpy(),
        out.logits.float().cpu().numpy(),  # type: ignore[union-attr]
    )


def _cat(parts: list[Embeddings]) -> Embeddings:
    return Embeddings(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("z", "emb", "clipped", "logits")))


@torch.no_grad()
def embed_images(
    model: EmbeddingModel,
    images: np.ndarray,
    batch_size: int = 512,
    device: str = "auto",
    on_batch: Callable[[int], None] | None = None,
    precision: Precision = "auto",
) -> Embeddings:
    """Embed (N, H, W, C) uint8 images. The model is used in eval mode. ``on_batch(n)`` after each batch of n."""
    dev = select_device(device)  # type: ignore[arg-type]
    model = prepare_module(model, dev, precision).eval()
    data = to_image_tensor(images, np.zeros(len(images), dtype=np.int64), pin=dev.type == "cuda")
    parts = []
    for x, _ in iterate_batches(data, batch_size, dev, shuffle=False):
        parts.append(_forward(model, x, dev, precision))
        if on_batch is not None:
            on_batch(len(x))
    return _cat(parts)


@torch.no_grad()
def embed_stream(
    model: EmbeddingModel,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    device: str = "auto",
    precision: Precision = "auto",
) -> Iterator[tuple[Embeddings, np.ndarray, np.ndarray]]:
    """Embed batches as a DataLoader yields them, one at a time (memory does not grow with the corpus).

    ``batches``: (images uint8 (B, C, H, W), labels (B,), ids (B,)), e.g.
    :meth:`components.data.sources.ImageSource.loader` (pinned memory on CUDA, copied
    with ``non_blocking``). Yields (:class:`Embeddings` of the B items, labels (B,), ids (B,)).
    """
    dev = select_device(device)  # type: ignore[arg-type]
    model = prepare_module(model, dev, precision).eval()
    for images, labels, ids in batches:
        x = images.to(dev, non_blocking=dev.type == "cuda").float().div_(255.0)
        yield _forward(model, x, dev, precision), labels.numpy(), ids.numpy()


def embed_split(
    model: EmbeddingModel,
    split: SourceDataset,
    *,
    batch_size: int = 512,
    device: str = "auto",
    precision: Precision = "auto",
    workers: int = 0,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[Embeddings, np.ndarray, np.ndarray]:
    """Embed every item of ``split`` through its loader, in split order: (:class:`Embeddings` (N items), labels (N,),
    ids (N,)). ``workers`` decode (a split on disk); ``on_batch(n)`` after each batch of n items."""
    dev = select_device(device)  # type: ignore[arg-type]
    loader = split.loader(batch_size=batch_size, workers=workers, pin_memory=dev.type == "cuda")
    parts, labels, ids = [], [], []
    for emb, y, i in embed_stream(model, loader, device, precision):
        parts.append(emb)
        labels.append(y)
        ids.append(i)
        if on_batch is not None:
            on_batch(len(i))
    if not parts:
        raise ValueError("the split to embed is empty")
    return _cat(parts), np.concatenate(labels), np.concatenate(ids)


def retrieval_vectors(emb: Embeddings, space: Space, features: str = "embedding") -> np.ndarray:
    """Vectors for retrieval and reported metrics, float64: the points of ``space`` (:meth:`Space.points
    <components.geometry.space.Space.points>`).

    Lorentz: the clipped tangent vectors lifted again in float64 (docs/design.md §2:
    float32 points lose close-pair distances once x_t grows). Euclidean: the
    unit vectors. PSP / LSP: simplex features of the logits.
    """
    if features != "embedding":
        return simplex_features(emb.logits, features)
    return space.points(emb.z, emb.emb)
