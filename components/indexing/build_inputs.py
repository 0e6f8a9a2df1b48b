"""The inputs of :meth:`GalleryIndex.build <components.indexing.faiss_index.GalleryIndex.build>`, checked.

A bad gallery (not 2-D, empty, too narrow, NaN/inf, bad ids, zero vectors,
off-hyperboloid points, float32 overflow) is a :class:`~components.errors.DataError`
that says how to fix it, raised before anything is indexed.
"""

from __future__ import annotations

import numpy as np

from components.errors import DataError
from components.indexing.vectors import in_index_space

__all__ = ["checked_gallery_vectors", "checked_ids", "stored_rows"]


def checked_gallery_vectors(vectors: np.ndarray, geometry: str) -> np.ndarray:
    """``vectors`` as an array (N, D), N >= 1, finite, wide enough for ``geometry`` (lorentz: D = d+1 >= 2)."""
    x = np.asarray(vectors)
    if x.ndim != 2:
        raise DataError(
            f"gallery vectors must be a 2-D array (N, D), got shape {x.shape}; stack the embeddings one row per item"
        )
    n, dim = x.shape
    if n == 0:
        raise DataError("the gallery is empty; embed at least one item before building an index")
    min_dim = 2 if geometry == "lorentz" else 1
    if dim < min_dim:
        raise DataError(
            f"gallery vectors have width {dim}, too small for {geometry}; "
            "lorentz points need d+1 >= 2 coordinates, time first"
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


def stored_rows(x: np.ndarray, geometry: str, curvature: float) -> np.ndarray:
    """The float32 rows (N, D) an index stores for gallery ``x`` (N, D): unit rows, or the hyperboloid points."""
    fix = (
        "drop or re-embed them"
        if geometry == "euclidean"
        else "pass points lifted with expmap0 at this curvature, time first"
    )
    rows = in_index_space(x, geometry, curvature, error=DataError, what="gallery vectors", fix=fix)
    stored = rows.astype(np.float32) if geometry == "euclidean" else x.astype(np.float32)
    if not np.isfinite(stored).all():
        raise DataError("gallery vectors overflow float32; clip the tangent norm (ζ) before lifting")
    return stored
