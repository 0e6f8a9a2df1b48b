"""The one split interface: a dataset split, in memory or on disk, seen the same way.

:class:`SourceDataset` is every split the lifecycle reads — a registered dataset decoded into memory (an
:class:`~components.data.sources.memory.ArraySource`) or a corpus on disk (WebDataset shards, a manifest, an image
folder) — as positions into an :class:`~components.data.sources.base.ImageSource`: ``labels``, ``ids``,
``class_names``, ``image_shape``, ``subset``, ``positions_of``, and the pixels only through
:meth:`SourceDataset.loader` (batch by batch) or :meth:`SourceDataset.sample` (a seeded subset). A selection
(per-class subsample, a generation's manifest) is a set of positions, so selecting never reads an image.

Statistics of a split (:mod:`components.data.stats`) and every embedding of one read it through this interface,
so the same images give the same numbers wherever they live. Only :meth:`SourceDataset.resident` says whether the
images are already in memory: the training loop (``components.training.data.training_data``) gathers such batches
by index instead of through a DataLoader — the one place that may care.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader

from components.data.base import ArrayDataset
from components.data.sources.base import ImageSource, positions_of_ids
from components.data.sources.memory import ArraySource

__all__ = ["SAMPLE_SIZE", "DatasetSplits", "SourceDataset"]

#: images a statistic of a split is computed from (normalisation, clip fraction): a seeded sample of at most this many
SAMPLE_SIZE = 10_000


@dataclass(frozen=True, eq=False)
class SourceDataset:
    """The items of ``source`` at ``positions`` (all when None), yielded as ``image_size`` × ``image_size`` images.

    labels: (N,) int64 class indices into ``class_names`` (-1: unlabelled); ids: (N,) int64 unique.
    """

    source: ImageSource
    image_size: int
    positions: np.ndarray | None = None
    _rows: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rows = np.arange(len(self.source)) if self.positions is None else np.asarray(self.positions, np.int64)
        object.__setattr__(self, "_rows", rows)

    @classmethod
    def in_memory(cls, data: ArrayDataset, name: str = "array", *, fingerprint: str | None = None) -> SourceDataset:
        """All of ``data`` (images (N, H, W, C) uint8 in memory) as a split at its native size."""
        return cls(ArraySource(data, name, fingerprint=fingerprint), int(data.images.shape[1]))

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> np.ndarray:
        """(N,) int64 positions of this split's items in its source."""
        return self._rows

    @property
    def labels(self) -> np.ndarray:
        return self.source.labels[self._rows]

    @property
    def ids(self) -> np.ndarray:
        return self.source.ids[self._rows]

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.source.class_names

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of the yielded images."""
        return (self.image_size, self.image_size, self.source.channels)

    def subset(self, index: np.ndarray) -> SourceDataset:
        """Rows ``index`` (positions in this split, not ids), in that order."""
        return SourceDataset(self.source, self.image_size, self._rows[np.asarray(index, dtype=np.int64)])

    def resized(self, image_size: int) -> SourceDataset:
        """The same items yielded at ``image_size`` × ``image_size`` (bilinear, antialiased)."""
        return SourceDataset(self.source, int(image_size), self._rows)

    def sample(self, at_most: int = SAMPLE_SIZE, seed: int = 0) -> SourceDataset:
        """A seeded random subset of at most ``at_most`` items, in split order (the whole split when smaller)."""
        n = len(self)
        if n <= at_most:
            return self
        return self.subset(np.sort(np.random.default_rng(seed).choice(n, size=at_most, replace=False)))

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        """Positions of ``ids`` in this split (UnknownIdError, a KeyError, on ids it does not hold)."""
        own = self.ids
        return positions_of_ids(own, np.argsort(own, kind="stable"), ids, f"this split of {self.source.name!r}")

    def loader(self, *, batch_size: int, **options: Any) -> DataLoader:
        """The source's DataLoader over this split at the split's image size: ``(images uint8 (B, C, H, W),
        labels (B,), ids (B,))``; ``options`` are :meth:`ImageSource.loader`'s (``shuffle``, ``seed``, ``epoch``,
        ``workers``, ``pin_memory``, ``drop_last``, ``shard = (rank, world)``: this rank's part of every batch)."""
        return self.source.loader(self._rows, batch_size=batch_size, image_size=self.image_size, **options)

    def resident(self) -> tuple[Tensor, Tensor, Tensor] | None:
        """``(images uint8 (N, C, H, W), labels (N,), ids (N,))`` when the images already sit in memory (gathered
        by index, no decoding), else None: the split is read through :meth:`loader`."""
        return self.source.resident(self._rows, self.image_size)

    def decode(self, batch_size: int = 1024) -> ArrayDataset:
        """Every item decoded into memory, in split order: images (N, H, W, C) uint8. For small splits (tests, a
        model's input example): a large one is read through :meth:`loader` instead."""
        h, w, c = self.image_shape
        images = np.empty((len(self), h, w, c), dtype=np.uint8)
        labels = np.empty(len(self), dtype=np.int64)
        ids = np.empty(len(self), dtype=np.int64)
        at = 0
        for x, y, i in self.loader(batch_size=batch_size):
            n = len(y)
            images[at : at + n] = x.permute(0, 2, 3, 1).numpy()
            labels[at : at + n], ids[at : at + n] = y.numpy(), i.numpy()
            at += n
        order = np.argsort(self.positions_of(ids[:at]), kind="stable")  # a source may yield in its own order
        return ArrayDataset(images[order], labels[order], ids[order], self.class_names)


@dataclass(frozen=True)
class DatasetSplits:
    """A dataset's fixed train/test split, both through the one split interface. ``fingerprint`` identifies the
    exact content. ``test`` is the labelled evaluation split every generation is measured on (and, by default, the
    gallery the live index serves)."""

    name: str
    train: SourceDataset
    test: SourceDataset
    fingerprint: str
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_arrays(
        cls, name: str, train: ArrayDataset, test: ArrayDataset, fingerprint: str, meta: dict | None = None
    ) -> DatasetSplits:
        """The splits of a dataset decoded into memory."""
        return cls(
            name,
            SourceDataset.in_memory(train, f"{name}/train"),
            SourceDataset.in_memory(test, f"{name}/test"),
            fingerprint,
            dict(meta or {}),
        )
