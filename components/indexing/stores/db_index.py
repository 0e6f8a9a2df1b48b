"""A database store's gallery version as the flows read and search it (docs/design.md §8.4): its attachment
(:class:`StoreManifest`), its index (:class:`DatabaseIndex`: checked queries, float64 re-scoring) and the recall@10 a
build measures against exact search (:func:`measure_recall`).

A database answers an approximate top-``limit`` over the stored rows (:mod:`components.indexing.stores.db_rows`):
the inner product of unit rows (cosine), or L2 over the Lorentz proxy rows. :class:`DatabaseIndex` asks it for
``rerank``·k candidates with their stored vectors and re-scores them in float64 by the space's exact scores (cosine, or
minus the geodesic distance), best first — the scores every store's index returns — after the same query checks
(width, finiteness, geometry, query generation).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from components.errors import IncompatibleQueryError, IndexIntegrityError
from components.indexing.manifest import ATTACHMENT, GalleryManifest
from components.indexing.parts import GalleryParts
from components.indexing.recall import ExactTopK, recall_at_k
from components.indexing.vectors import checked_queries
from components.io import atomic_write_text

__all__ = ["RESCORE_QUERIES", "DatabaseIndex", "Fetch", "StoreManifest", "measure_recall"]

#: (checked float32 queries (nq, D), limit) → (ids int64 (nq, limit), stored vectors float32 (nq, limit, D)), -1 pads
Fetch = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
#: neighbours retrieved when measuring recall@10: 10 plus the query's own item
_RECALL_K = 11
#: queries whose candidates one pass fetches and re-scores (their stored vectors are held together)
RESCORE_QUERIES = 1024


@dataclass(frozen=True, kw_only=True)
class StoreManifest(GalleryManifest):
    """The attachment a database store writes: the :class:`~components.indexing.manifest.GalleryManifest` of the
    version, and which collection of which store holds its vectors: ``store`` (its params name), ``uri``,
    ``collection``, its rows per generation stamp as written (``counts_by_generation``) and ``extra`` (the store's
    options, the live alias's name, the write record)."""

    store: str
    uri: str
    collection: str
    counts_by_generation: dict[int, int]
    extra: dict[str, Any] = field(default_factory=dict)

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        body = {**asdict(self), "counts_by_generation": {str(g): n for g, n in self.counts_by_generation.items()}}
        atomic_write_text(directory / ATTACHMENT, json.dumps(body, indent=1, sort_keys=True) + "\n")
        return directory / ATTACHMENT

    @classmethod
    def load(cls, directory: Path) -> StoreManifest:
        path = Path(directory) / ATTACHMENT
        try:
            body = json.loads(path.read_text())
            body["counts_by_generation"] = {int(g): int(n) for g, n in body["counts_by_generation"].items()}
            body["compatible_generations"] = tuple(int(g) for g in body["compatible_generations"])
            return cls(**body)
        except FileNotFoundError:
            raise IndexIntegrityError(f"{path} is missing: the index was never attached; rebuild the gallery") from None
        except (ValueError, KeyError, TypeError) as err:
            raise IndexIntegrityError(
                f"{path} is damaged ({type(err).__name__}); restore its folder from a backup or rebuild the gallery"
            ) from None


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
            queries, dim=m.dim, space=m.space, generations=m.compatible_generations,
            query_generation=query_generation, error=IncompatibleQueryError,
            where=f"{m.store} collection {m.collection} (generation {m.generation}, {m.geometry}, dim {m.dim})",
        )  # fmt: skip
        return self._search(qx, min(int(k), self.ntotal))

    def _search(self, qx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search checked float64 queries (time negated for lorentz) and re-score the candidates in float64, at most
        ``RESCORE_QUERIES`` queries at a time: their candidates' stored vectors are (queries, rerank·k, dim) — 10k
        queries' top-404 of width 129 held 2 GB, 4 GB again in float64, at once."""
        limit = min(self.ntotal, k * self._rerank)
        out = [self._rescored(qx[i : i + RESCORE_QUERIES], k, limit) for i in range(0, len(qx), RESCORE_QUERIES)]
        if not out:
            return np.zeros((0, k)), np.zeros((0, k), dtype=np.int64)
        return np.concatenate([s for s, _ in out]), np.concatenate([f for _, f in out])

    def _rescored(self, qx: np.ndarray, k: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        found, g = self._fetch(qx.astype(np.float32), limit)
        valid = found >= 0
        s = np.where(valid, self._manifest.space.candidate_scores(qx, g.astype(np.float64)), -np.inf)
        order = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, order, axis=1), np.take_along_axis(found, order, axis=1)


def measure_recall(index: DatabaseIndex, parts: GalleryParts, n_queries: int) -> StoreManifest:
    """The manifest of ``index`` with its recall@10 against exact search and its queries/s: the first ``n_queries``
    gallery items as queries (each one's own id dropped), the exact top-11 accumulated part by part
    (:class:`~components.indexing.recall.ExactTopK`, numpy: the dot product of the queries' query form with the
    gallery points ranks as the space's exact scores do)."""
    space = next(parts.parts()).gallery.retrieval_space
    rows, ids = [], []
    for part in parts.parts():
        rows.append(part.gallery.vectors())
        ids.append(part.gallery.ids)
        if sum(len(r) for r in rows) >= n_queries:
            break
    q = np.concatenate(rows)[:n_queries]
    q_ids = np.concatenate(ids)[:n_queries].astype(np.int64)
    qx = space.query_form(q)
    exact = ExactTopK(qx, min(_RECALL_K, index.ntotal))
    for part in parts.parts():
        exact.add(part.gallery.vectors().astype(np.float32), part.gallery.ids.astype(np.int64))
    t = time.perf_counter()
    _, found = index._search(qx, min(_RECALL_K, index.ntotal))
    qps = len(qx) / max(time.perf_counter() - t, 1e-9)
    recall = recall_at_k(found, exact.result(), q_ids, _RECALL_K - 1)
    return replace(index.manifest, recall_at_10=recall, recall_queries=len(q_ids), search_qps=qps)
