"""A dataset split that stays on disk: an :class:`ImageSource` seen through the split interface.

:class:`SourceDataset` has what the lifecycle reads from an in-memory
:class:`~components.data.base.ArrayDataset` — ``labels``, ``ids``, ``class_names``,
``image_shape``, ``subset``, ``positions_of`` — except ``images``: its pixels are only
ever streamed, batch by batch, through :meth:`SourceDataset.loader`. A selection
(per-class subsample, a generation's manifest) is a set of positions into the source,
so selecting never reads an image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from components.data.sources.base import ImageSource, positions_of_ids

__all__ = ["SAMPLE_SIZE", "SourceDataset"]

#: images a statistic of a split on disk is estimated from (normalisation, clip fraction): a seeded sample
SAMPLE_SIZE = 10_000


@dataclass(frozen=True, eq=False)
class SourceDataset:
    """The items of ``source`` at ``positions`` (all when None), yielded as ``image_size`` × ``image_size`` images.

    labels: (N,) int64 class indices into ``class_names``; ids: (N,) int64 unique.
    """

    source: ImageSource
    image_size: int
    positions: np.ndarray | None = None
    _rows: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rows = np.arange(len(self.source)) if self.positions is None else np.asarray(self.positions, np.int64)
        object.__setattr__(self, "_rows", rows)

    def __len__(self) -> int:
        return len(self._rows)

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

    def sample(self, at_most: int = SAMPLE_SIZE, seed: int = 0) -> SourceDataset:
        """A seeded random subset of at most ``at_most`` items, in split order (the whole split when smaller)."""
        n = len(self)
        return self.subset(np.sort(np.random.default_rng(seed).choice(n, size=min(at_most, n), replace=False)))

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        """Positions of ``ids`` in this split (UnknownIdError, a KeyError, on ids it does not hold)."""
        own = self.ids
        return positions_of_ids(own, np.argsort(own, kind="stable"), ids, f"this split of {self.source.name!r}")

    def loader(self, *, batch_size: int, **options: Any) -> DataLoader:
        """The source's DataLoader over this split at the split's image size: ``(images uint8 (B, C, H, W),
        labels (B,), ids (B,))``; ``options`` are :meth:`ImageSource.loader`'s (``shuffle``, ``seed``, ``epoch``,
        ``workers``, ``pin_memory``, ``drop_last``, ``shard = (rank, world)``: this rank's part of every batch)."""
        return self.source.loader(self._rows, batch_size=batch_size, image_size=self.image_size, **options)
