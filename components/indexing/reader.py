"""The one reader a backfill reads a finished part store through (docs/design.md §7.6, §7.10).

A backfill needs three things of a live gallery's part store: its **rows** (every item's id and the generation stamp
of its vector — which items it holds, how many of them a generation embedded), a **selection** (the positions a
partial backfill re-embeds first, in :data:`~components.indexing.mixed.ORDERS` order, leaving out rows a generation
already embedded) and its vectors in **windows** of a fixed size (a gallery transform carries them ``chunk_size`` at
a time; a forecast measures a sample). :class:`PartReader` answers the three: the row table is read once, in one pass
over the parts that opens only their ``ids`` and ``stamps`` arrays, and kept; windows stream one part at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from components.indexing.gallery import GalleryEmbeddings
from components.indexing.mixed import order_items
from components.indexing.parts import GalleryParts, StoredPart

__all__ = ["PartReader", "Rows"]


@dataclass(frozen=True)
class Rows:
    """A part store's row table in store order: ``ids`` (N,) int64 and ``stamps`` (N,) int64, the generation whose
    space each row's vector is in."""

    ids: np.ndarray
    stamps: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def stamped(self, generation: int) -> np.ndarray:
        """A mask (N,) of the rows ``generation`` embedded."""
        return self.stamps == generation

    def generations(self) -> list[int]:
        """The generations whose vectors the store holds, ascending."""
        return [int(g) for g in np.unique(self.stamps)]


class PartReader:
    """A finished part store (``store.json`` + ``parts/``, or a single ``gallery.npz`` written before part stores) as
    the backfill reads it: :attr:`rows`, :meth:`selection`, :meth:`windows`.

    ``generation``: the stamp of rows written without stamps (a single-file gallery: the generation whose folder or
    live index version holds it). Opening checks ``store.json`` (:class:`GalleryParts`; IndexIntegrityError in one
    line for a missing or unfinished store).
    """

    def __init__(self, path: Path, generation: int = -1) -> None:
        self.store = GalleryParts(path, generation)
        self.path = self.store.path

    def __len__(self) -> int:
        return len(self.store)

    @cached_property
    def rows(self) -> Rows:
        """The row table, read once: each part's ``ids`` and ``stamps`` only (a single-file gallery: whole)."""
        table = self.store.columns("ids", "stamps")
        return Rows(table["ids"].astype(np.int64), table["stamps"].astype(np.int64))

    def selection(self, order: str, seed: int = 0, *, skip: int | None = None) -> np.ndarray:
        """Positions (≤ N,) of the rows in re-embedding order (:func:`~components.indexing.mixed.order_items`:
        highest hyperbolic uncertainty of the stored vector, HBCT Eq. (10); seeded random; oldest stamp first), the
        rows stamped ``skip`` left out (topping a generation's share up: what it embedded is not embedded again).
        A partial backfill re-embeds a prefix of it."""
        uncertainty = self.store.column("uncertainty") if order == "uncertainty" else None
        stamps = self.rows.stamps
        ranked = order_items(len(self), order, seed, uncertainty=uncertainty, stamps=stamps)
        return ranked if skip is None else ranked[stamps[ranked] != skip]

    def windows(self, size: int) -> Iterator[StoredPart]:
        """The rows in store order, ``size`` at a time (the last window shorter), whatever the parts' sizes; one part
        (and one window) in memory at a time."""
        return self.store.windows(size)

    def first(self) -> GalleryEmbeddings:
        """The first part's rows (what the store's vectors are: their space and width), without reading the rest."""
        return next(self.store.parts()).gallery

    def embeddings(self) -> GalleryEmbeddings:
        """Every row in memory, in store order (small galleries: the evaluation split)."""
        return self.store.embeddings()

    def digest(self) -> str:
        """The sha256 that pins this gallery (:meth:`GalleryParts.digest`)."""
        return self.store.digest()
