"""What an alignment method may look at before training (:class:`~components.losses.base.AlignmentContext`), built
from the training data the loop reads: the parent and the reference, the map from new to old labels, the training
batches in order, a seeded random sample of them, and the training augmentation."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from components.data.batches import augment_batch
from components.data.selection import label_positions
from components.losses.base import AlignmentContext
from components.models.encoder import EmbeddingModel
from components.models.spec import ModelSpec
from components.training.data import EpochRead, TrainData

__all__ = ["alignment_context"]

#: batch size of the context's passes over the training data (no gradients: larger than a training batch)
CONTEXT_BATCH = 256


def alignment_context(
    spec: ModelSpec,
    device: torch.device,
    data: TrainData,
    *,
    batch_size: int,
    seed: int,
    crop_padding: int,
    hflip: bool,
    old_model: EmbeddingModel | None,
    reference_model: EmbeddingModel | None,
) -> AlignmentContext:
    """The context of a training run on ``data`` (``batch_size``, ``seed``, the augmentation ``crop_padding`` /
    ``hflip``: the run's own settings) for a new model of ``spec`` with the frozen ``old_model`` (its class order maps
    the new labels to its own) and ``reference_model``."""
    label_map = (
        torch.from_numpy(label_positions(spec.class_order, old_model.spec.class_order))
        if old_model is not None
        else None
    )

    def in_order() -> Iterator[tuple[Tensor, Tensor]]:
        return data.batches(EpochRead(max(batch_size, CONTEXT_BATCH), device, shuffle=False, seed=seed))

    def sample(n: int) -> Iterator[tuple[Tensor, Tensor]]:
        gen = torch.Generator().manual_seed(seed)
        batches = data.batches(EpochRead(CONTEXT_BATCH, device, shuffle=True, seed=seed, generator=gen))
        seen = 0
        for x, y in batches:
            if seen >= n:
                break
            yield x[: n - seen], y[: n - seen]
            seen += min(len(x), n - seen)

    def augment(x: Tensor, gen: torch.Generator) -> Tensor:
        return augment_batch(x, crop_padding=crop_padding, hflip=hflip, generator=gen)

    return AlignmentContext(
        spec, device, old_model, label_map, in_order, reference_model, sample=sample, augment=augment, seed=seed
    )
