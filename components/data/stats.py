"""Statistics of a split, computed one way wherever its images live.

Every statistic is taken over the same seeded sample of at most :data:`~components.data.sources.split.SAMPLE_SIZE`
images (:meth:`SourceDataset.sample`), read through the split's loader: a split in memory and the same images in
WebDataset shards give the same numbers.
"""

from __future__ import annotations

import numpy as np
import torch

from components.data.sources.split import SAMPLE_SIZE, SourceDataset
from components.errors import DataError

__all__ = ["normalization_stats"]

#: images per batch while summing
_BATCH = 1024


def normalization_stats(
    split: SourceDataset, sample: int = SAMPLE_SIZE, seed: int = 0
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std (population) of a seeded sample of ``split``'s images, in [0, 1] units.

    The pixel sums Σx and Σx² are accumulated as exact integers over uint8 batches (B, C, H, W), so the result does
    not depend on how the images are batched or where they are stored; mean = Σx / (255·n),
    std = √(Σx² / (255²·n) − mean²), floored at 1e-3 (a constant channel would divide by zero).
    """
    s1: torch.Tensor | None = None
    s2: torch.Tensor | None = None
    count = 0
    for images, _, _ in split.sample(sample, seed).loader(batch_size=_BATCH):
        x = images.to(torch.int64).transpose(0, 1).reshape(images.shape[1], -1)  # (C, B·H·W)
        s1 = x.sum(1) if s1 is None else s1 + x.sum(1)
        s2 = (x * x).sum(1) if s2 is None else s2 + (x * x).sum(1)
        count += x.shape[1]
    if s1 is None or s2 is None or count == 0:
        raise DataError("the training split is empty: select at least one image")
    mean = s1.numpy().astype(np.float64) / (255.0 * count)
    var = np.maximum(s2.numpy().astype(np.float64) / (255.0 * 255.0 * count) - mean**2, 0.0)
    return tuple(float(v) for v in mean), tuple(float(max(v, 1e-3)) for v in np.sqrt(var))
