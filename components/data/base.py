"""Images decoded into memory (what a registered dataset's loader builds), and the fingerprint of arrays.

The lifecycle never reads an :class:`ArrayDataset` directly: a loader hands it over as a split
(:meth:`components.data.sources.split.SourceDataset.in_memory`), read like any split on disk.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

__all__ = ["ArrayDataset", "array_fingerprint"]


@dataclass(frozen=True)
class ArrayDataset:
    """Images held as one uint8 array.

    images: (N, H, W, C) uint8; labels: (N,) int64 original class index into
    ``class_names``; ids: (N,) int64 sample ids, unique within the dataset
    (stable across runs: they are what manifests and galleries refer to).
    """

    images: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.images)
        if self.images.dtype != np.uint8 or self.images.ndim != 4:
            raise ValueError(f"images must be uint8 (N, H, W, C), got {self.images.dtype} {self.images.shape}")
        if self.labels.shape != (n,) or self.ids.shape != (n,):
            raise ValueError(f"labels/ids must have shape ({n},), got {self.labels.shape} / {self.ids.shape}")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(H, W, C)."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def subset(self, index: np.ndarray) -> ArrayDataset:
        """Rows ``index`` (positions, not ids), in that order."""
        return ArrayDataset(self.images[index], self.labels[index], self.ids[index], self.class_names)

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        """Positions of ``ids`` in this dataset (DataError-free: raises KeyError on unknown ids)."""
        order = np.argsort(self.ids, kind="stable")
        pos = np.searchsorted(self.ids, ids, sorter=order)
        pos = np.clip(pos, 0, len(self.ids) - 1)
        found = order[pos]
        bad = self.ids[found] != ids
        if bad.any():
            raise KeyError(f"{int(bad.sum())} ids not in the dataset, e.g. {ids[bad][:5].tolist()}")
        return found


def array_fingerprint(*arrays: np.ndarray, extra: str = "") -> str:
    """sha256 over arrays' dtype, shape and bytes (plus an optional string)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(extra.encode())
    return h.hexdigest()
