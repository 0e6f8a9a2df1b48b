"""What every database store's index shares (docs/design.md §8.4): checked queries, float64 re-scoring, the
recall@10 a build measures against exact search.

A database answers an approximate top-``limit`` by inner product over the stored rows — unit vectors (cosine), or
hyperboloid points, time first, searched with the query's time coordinate negated, so the inner product is the
Lorentz product ⟨q, g⟩_L and larger is nearer, as on the FAISS path (:mod:`components.indexing.index_types`).
:class:`DatabaseIndex` asks it for ``rerank``·k candidates with their stored vectors and re-scores them in float64
(cosine, or minus the geodesic distance), best first — the same scores :class:`~components.indexing.faiss_index.
GalleryIndex` returns — after the same query checks (width, finiteness, geometry, query generation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from components.errors import IncompatibleQueryError
from components.indexing.backend import StoreManifest
from components.indexing.index_types import ExactTopK, lorentz_rescore_distance, recall_at_k
from components.indexing.store import GalleryStore
from components.indexing.vectors import checked_queries, flip_time

__all__ = ["DatabaseIndex", "Fetch", "measure_recall"]

#: (checked float32 queries (nq, D), limit) → (ids int64 (nq, limit), stored vectors float32 (nq, limit, D)), -1 pads
Fetch = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
#: neighbours retrieved when measuring recall@10: 10 plus the query's own item
_RECALL_K = 11


class DatabaseIndex:
    """A database store's gallery index as the flows search it (:class:`~components.indexing.backend.SearchIndex`).

    ``fetch`` asks the database; ``rerank``: candidates per wanted neighbour (≥ 1), re-scored exactly."""

    def __init__(self, manifest: StoreManifest, fetch: Fetch, rerank: int = 1) -> None:
        self._manifest = manifest
        self._fetch = fetch
        self._rerank = max(1, int(rerank))

    @property
    def manifest(self) -> StoreManifest:
        return self._manifest

    @property
    def ntotal(self) -> int:
        return int(self._manifest.count)

    @property
    def dim(self) -> int:
        return int(self._manifest.dim)

    def with_compatible_generations(self, generations: tuple[int, ...] | list[int]) -> DatabaseIndex:
        return DatabaseIndex(self._manifest.with_compatible(generations), self._fetch, self._rerank)

    def search(
        self, queries: np.ndarray, k: int, *, query_generation: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest gallery items of each query: (scores float64 (nq, k'), ids int64 (nq, k')), k' =
        min(k, ntotal), best first; missing slots (id -1) score -inf. IncompatibleQueryError as GalleryIndex."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        m = self._manifest
        qx = checked_queries(
            queries, dim=m.dim, geometry=m.geometry, curvature=m.curvature, generations=m.compatible_generations,
            query_generation=query_generation, error=IncompatibleQueryError,
            where=f"{m.store} collection {m.collection} (generation {m.generation}, {m.geometry}, dim {m.dim})",
        )  # fmt: skip
        return self._search(qx, min(int(k), self.ntotal))

    def _search(self, qx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search checked float64 queries (time negated for lorentz) and re-score the candidates in float64."""
        limit = min(self.ntotal, k * self._rerank)
        found, g = self._fetch(qx.astype(np.float32), limit)
        valid = found >= 0
        g = g.astype(np.float64)
        if self._manifest.geometry == "euclidean":
            g[valid] /= np.maximum(np.linalg.norm(g[valid], axis=1, keepdims=True), 1e-30)
            s = np.clip(np.einsum("nd,nkd->nk", qx, g), -1.0, 1.0)
        else:
            s = -lorentz_rescore_distance(qx, g, self._manifest.curvature)
        s = np.where(valid, s, -np.inf)
        order = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, order, axis=1), np.take_along_axis(found, order, axis=1)


def measure_recall(index: DatabaseIndex, parts: GalleryStore, n_queries: int) -> StoreManifest:
    """The manifest of ``index`` with its recall@10 against exact search and its queries/s: the first ``n_queries``
    gallery items as queries (each one's own id dropped), the exact top-11 accumulated part by part."""
    first = next(parts.parts()).gallery
    lorentz = first.retrieval_geometry == "lorentz"
    rows, ids = [], []
    for part in parts.parts():
        rows.append(part.gallery.vectors())
        ids.append(part.gallery.ids)
        if sum(len(r) for r in rows) >= n_queries:
            break
    q = np.concatenate(rows)[:n_queries]
    q_ids = np.concatenate(ids)[:n_queries].astype(np.int64)
    qx = flip_time(q) if lorentz else q
    exact = ExactTopK(qx, min(_RECALL_K, index.ntotal))
    for part in parts.parts():
        exact.add(part.gallery.vectors().astype(np.float32), part.gallery.ids.astype(np.int64))
    t = time.perf_counter()
    _, found = index._search(qx, min(_RECALL_K, index.ntotal))
    qps = len(qx) / max(time.perf_counter() - t, 1e-9)
    recall = recall_at_k(found, exact.result(), q_ids, _RECALL_K - 1)
    return replace(index.manifest, recall_at_10=recall, recall_queries=len(q_ids), search_qps=qps)
