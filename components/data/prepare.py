"""A dataset ready for training: loaded, optionally subsampled per class, resized. Cached per process."""

from __future__ import annotations

import functools

import numpy as np

from components.data.catalog import DatasetRequest, create_dataset
from components.data.sources.split import DatasetSplits, SourceDataset

__all__ = ["per_class_subsample", "prepared_splits"]


def per_class_subsample(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    """Sorted positions of at most ``per_class`` random items of every class (vectorised, deterministic)."""
    perm = np.random.default_rng(seed).permutation(len(labels))
    order = perm[np.argsort(labels[perm], kind="stable")]
    sorted_labels = labels[order]
    rank = np.arange(len(order)) - np.searchsorted(sorted_labels, sorted_labels, side="left")
    return np.sort(order[rank < per_class])


def _shrink(split: SourceDataset, per_class: int | None, seed: int, size: int | None) -> SourceDataset:
    if per_class is not None:
        split = split.subset(per_class_subsample(split.labels, per_class, seed))
    return split if size is None else split.resized(size)


@functools.lru_cache(maxsize=4)
def prepared_splits(
    name: str, request: DatasetRequest, max_train_per_class: int | None = None, max_test_per_class: int | None = None
) -> DatasetSplits:
    """The named dataset's splits after subsampling and resizing; the fingerprint records both."""
    s = create_dataset(name, **vars(request))
    image_size = request.image_size
    if image_size is None and max_train_per_class is None and max_test_per_class is None:
        return s
    size = None if image_size is None or s.train.image_shape[:2] == (image_size, image_size) else image_size
    seed = request.split_seed
    return DatasetSplits(
        s.name,
        _shrink(s.train, max_train_per_class, seed, size),
        _shrink(s.test, max_test_per_class, seed + 1, size),
        f"{s.fingerprint}|size={image_size}|train<={max_train_per_class}|test<={max_test_per_class}|seed={seed}",
        s.meta,
    )
