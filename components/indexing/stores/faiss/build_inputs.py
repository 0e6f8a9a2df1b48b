"""The inputs of :meth:`GalleryIndex.build <components.indexing.stores.faiss.gallery_index.GalleryIndex.build>`,
checked.

A bad gallery (not 2-D, empty, too narrow, NaN/inf, bad ids, zero vectors,
off-hyperboloid points, float32 overflow) is a :class:`~components.errors.DataError`
that says how to fix it, raised before anything is indexed.

Galleries built chunk by chunk are checked chunk by chunk (:func:`checked_chunks`),
with ids unique across chunks (:class:`IdLedger`), and sampled without ever holding
more than the sample (:class:`BottomKSample`): each item's sampling key is a hash of
its id and the seed, so the sample does not depend on how the gallery is chunked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from components.errors import DataError
from components.geometry import Space

__all__ = [
    "BottomKSample",
    "GalleryScan",
    "IdLedger",
    "checked_chunks",
    "checked_gallery_vectors",
    "checked_ids",
    "id_hash",
    "scan_gallery",
    "stored_rows",
]

#: A source of gallery chunks: each call returns a fresh iterator of (vectors (n, D), ids (n,)).
Chunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def checked_gallery_vectors(vectors: np.ndarray, space: Space) -> np.ndarray:
    """``vectors`` as an array (N, D), N >= 1, finite, wide enough for ``space`` (lorentz: D = d+1 >= 2)."""
    x = np.asarray(vectors)
    if x.ndim != 2:
        raise DataError(
            f"gallery vectors must be a 2-D array (N, D), got shape {x.shape}; stack the embeddings one row per item"
        )
    n, dim = x.shape
    if n == 0:
        raise DataError("the gallery is empty; embed at least one item before building an index")
    if dim < space.min_width:
        raise DataError(
            f"gallery vectors have width {dim}, too small for {space.name}; "
            f"its points need {space.min_width} or more coordinates ({space.point_words})"
        )
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise DataError(
            f"{int(bad.sum())} of {n} gallery vectors contain NaN or inf "
            f"(first at row {int(np.argmax(bad))}); fix or drop them before building the index"
        )
    return x


def checked_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """``ids`` as unique int64 (n,), one per gallery vector."""
    id_arr = np.asarray(ids)
    if id_arr.ndim != 1 or id_arr.shape[0] != n:
        raise DataError(
            f"ids must be 1-D with one id per gallery vector ({n}), got shape {id_arr.shape}; "
            "pass ids aligned with the rows of vectors"
        )
    if not np.issubdtype(id_arr.dtype, np.integer):
        raise DataError(
            f"ids must be integers (FAISS stores int64 ids), got dtype {id_arr.dtype}; "
            "map your item keys to int64 first"
        )
    id64 = id_arr.astype(np.int64)
    uniq, counts = np.unique(id64, return_counts=True)
    if uniq.size != n:
        raise DataError(
            f"ids are not unique (e.g. id {int(uniq[np.argmax(counts > 1)])} occurs "
            f"{int(counts.max())} times); give every gallery item its own id"
        )
    return id64


def stored_rows(x: np.ndarray, space: Space) -> np.ndarray:
    """The float32 rows (N, D) an index stores for gallery ``x`` (N, D): the space's checked points
    (:meth:`Space.checked <components.geometry.space.Space.checked>`: unit rows, or the hyperboloid points)."""
    fix = f"drop or re-embed them ({space.point_words})"
    stored = space.checked(x, error=DataError, what="gallery vectors", fix=fix).astype(np.float32)
    if not np.isfinite(stored).all():
        raise DataError("gallery vectors overflow float32; clip the tangent norm (ζ) before lifting")
    return stored


def id_hash(ids: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of int64 ``ids`` (n,) mixed with ``salt``: uint64 (n,), well spread for any id pattern."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids, dtype=np.int64).view(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (salt + 1)) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def checked_chunks(chunks: Chunks, space: Space, *, label: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Check every chunk ``chunks()`` yields; yield its float32 stored rows (n, D) and int64 ids (n,).

    Rows are as :func:`stored_rows` makes them (unit rows / hyperboloid points). Empty
    chunks are skipped; all chunks must have the same width. With ``label`` a
    :class:`~components.errors.DataError` names the chunk and its global rows.
    """
    start, width = 0, None
    for i, (vectors, ids) in enumerate(chunks()):
        x = np.asarray(vectors)
        if x.ndim == 2 and x.shape[0] == 0:
            continue
        n = x.shape[0] if x.ndim else 0
        try:
            x = checked_gallery_vectors(x, space)
            if width is not None and x.shape[1] != width:
                raise DataError(
                    f"gallery vectors have width {x.shape[1]} but earlier chunks have width {width}; "
                    "every chunk must come from the same model"
                )
            id64 = checked_ids(ids, x.shape[0])
            rows = stored_rows(x, space)
        except DataError as e:
            if not label:
                raise
            raise DataError(f"gallery chunk {i} (rows {start}..{start + n - 1} overall): {e}") from e
        width = x.shape[1]
        start += x.shape[0]
        yield rows, id64


class IdLedger:
    """The ids of a gallery seen chunk by chunk: count, order digest, uniqueness across chunks.

    Keeps every id (8 bytes each) for :meth:`check_unique` unless ``keep`` is false.
    """

    def __init__(self, *, keep: bool = True) -> None:
        self._parts: list[np.ndarray] = []
        self._keep = keep
        self._digest = hashlib.sha256()
        self.count = 0

    def add(self, ids: np.ndarray) -> None:
        """Record one chunk's int64 ids (n,)."""
        if self._keep:
            self._parts.append(ids)
        self._digest.update(np.ascontiguousarray(ids).tobytes())
        self.count += ids.shape[0]

    @property
    def digest(self) -> str:
        """sha256 of the ids in the order seen (to check that a second pass saw the same gallery)."""
        return self._digest.hexdigest()

    def check_unique(self) -> None:
        """Raise DataError naming a repeated id when any id occurred twice, in one chunk or across chunks."""
        if not self.count:
            raise DataError("the gallery is empty; embed at least one item before building an index")
        if not self._keep:
            raise RuntimeError("IdLedger(keep=False) cannot check uniqueness")
        ids = np.sort(np.concatenate(self._parts))
        self._parts = [ids]
        dup = ids[1:] == ids[:-1]
        if dup.any():
            raise DataError(
                f"ids are not unique across chunks ({int(dup.sum())} repeats, e.g. id {int(ids[1:][dup][0])}); "
                "give every gallery item its own id, and yield each item in exactly one chunk"
            )

    def same_as(self, other: IdLedger) -> None:
        """Raise DataError unless ``other`` saw the same ids in the same order (two passes over ``chunks()``)."""
        if other.count != self.count or other.digest != self.digest:
            raise DataError(
                f"chunks() yielded different data on a later pass ({other.count} ids, first pass {self.count}); "
                "make chunks() return the same chunks, in the same order, on every call"
            )


class BottomKSample:
    """The ``k`` rows with the smallest keys seen so far: a uniform sample without replacement.

    Holds at most about 1.5·k rows; feed chunks with :meth:`offer`, read with :meth:`result`.
    """

    def __init__(self, k: int) -> None:
        self.k = int(k)
        self._keys = np.empty(0, dtype=np.uint64)
        self._rows: np.ndarray | None = None
        self._ids = np.empty(0, dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_n = 0

    def offer(self, keys: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> None:
        """Consider rows (n, D) with uint64 ``keys`` (n,) and ids (n,); keeps copies of the candidates only."""
        if self.k == 0:
            return
        if self._keys.size >= self.k:
            keep = keys < self._keys.max()
            keys, rows, ids = keys[keep], rows[keep], ids[keep]
        if keys.size:
            self._pending.append((keys.copy(), np.array(rows, copy=True), ids.copy()))
            self._pending_n += keys.size
        if self._pending_n > max(self.k // 2, 1024):
            self._merge()

    def _merge(self) -> None:
        if not self._pending:
            return
        parts_k, parts_r, parts_i = zip(*self._pending)
        keys = np.concatenate([self._keys, *parts_k])
        rows = np.concatenate(parts_r if self._rows is None else [self._rows, *parts_r])
        ids = np.concatenate([self._ids, *parts_i])
        self._pending, self._pending_n = [], 0
        if keys.size > self.k:
            sel = np.argpartition(keys, self.k - 1)[: self.k]
            keys, rows, ids = keys[sel], rows[sel], ids[sel]
        self._keys, self._rows, self._ids = keys, rows, ids

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows (m, D), ids (m,)), m = min(k, rows seen), ordered by key (so any prefix is a uniform sample)."""
        self._merge()
        if self._rows is None:
            raise DataError("the gallery is empty; embed at least one item before building an index")
        order = np.argsort(self._keys, kind="stable")
        return self._rows[order], self._ids[order]


@dataclass
class GalleryScan:
    """What one pass over a gallery's checked chunks learnt.

    ``ledger``: its ids (unique, checked); ``rows`` float32 (m, D) / ``ids`` (m,): the
    sample, ordered by sampling key; ``max_sq_norm``: the largest squared Euclidean norm
    of a stored row (float64).
    """

    ledger: IdLedger
    rows: np.ndarray
    ids: np.ndarray
    max_sq_norm: float


def scan_gallery(checked: Iterable[tuple[np.ndarray, np.ndarray]], sample_size: int, seed: int) -> GalleryScan:
    """One pass over ``checked`` (rows, ids) chunks (see :func:`checked_chunks`): ids, a sample, the largest norm."""
    ledger, sample, max_sq = IdLedger(), BottomKSample(sample_size), 0.0
    for rows, ids in checked:
        ledger.add(ids)
        sample.offer(id_hash(ids, seed), rows, ids)
        r64 = rows.astype(np.float64)
        max_sq = max(max_sq, float(np.einsum("ij,ij->i", r64, r64).max()))
    ledger.check_unique()
    rows, ids = sample.result()
    return GalleryScan(ledger, rows, ids, max_sq)
