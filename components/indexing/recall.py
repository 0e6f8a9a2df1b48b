"""Recall against exact search, whichever store built the index (docs/design.md §8.3, §8.4).

Every build measures the recall@10 of its approximate index against the exact top-k of the same queries over the
same gallery. :class:`ExactTopK` is that exact search in numpy, over a gallery streamed in parts: the queries are
points in their space's query form (:meth:`Space.query_form <components.geometry.space.Space.query_form>`), so the
dot product with a stored point is the similarity the space ranks by — the cosine of unit rows, or the Lorentz
product ⟨q, g⟩_L of hyperboloid points, which the geodesic distance decreases with (HBCT Eq. (1), (3)) — and the
top-k of that product is the exact top-k. :func:`recall_at_k` is the share of it an index found.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ExactTopK", "recall_at_k"]

#: gallery rows scored at once: (queries, rows) float32 scores, 64 MiB for 1000 queries
_BLOCK = 16384


class ExactTopK:
    """Exact top-``k`` of fixed queries over a gallery streamed in chunks, by the dot product (float32, as an index
    ranks). ``queries``: (nq, D) such that the dot product with a gallery row is the similarity (unit rows; or
    time-negated hyperboloid points: ⟨q, g⟩_L). Holds (nq, k) scores and ids and one block of scores."""

    def __init__(self, queries: np.ndarray, k: int) -> None:
        self._q = np.ascontiguousarray(queries, dtype=np.float32)
        self._k = int(k)
        self._scores = np.full((len(self._q), self._k), -np.inf, dtype=np.float32)
        self._ids = np.full((len(self._q), self._k), -1, dtype=np.int64)

    def add(self, rows: np.ndarray, ids: np.ndarray) -> None:
        """Merge the best matches among float32 gallery ``rows`` (n, D) with int64 ``ids`` (n,)."""
        if not len(self._q) or not len(rows) or not self._k:
            return
        rows, ids = np.asarray(rows, dtype=np.float32), np.asarray(ids, dtype=np.int64)
        for start in range(0, len(rows), _BLOCK):
            block = rows[start : start + _BLOCK]
            s = np.concatenate([self._scores, self._q @ block.T], axis=1)
            found = np.concatenate(
                [self._ids, np.broadcast_to(ids[start : start + _BLOCK], (len(self._q), len(block)))], axis=1
            )
            best = np.argpartition(-s, self._k - 1, axis=1)[:, : self._k]
            self._scores = np.take_along_axis(s, best, axis=1)
            self._ids = np.take_along_axis(found, best, axis=1)

    def result(self) -> np.ndarray:
        """int64 (nq, k) ids, best first (-1 where the gallery had fewer than k rows)."""
        order = np.argsort(-self._scores, axis=1, kind="stable")
        return np.take_along_axis(self._ids, order, axis=1)


def recall_at_k(found: np.ndarray, exact: np.ndarray, self_ids: np.ndarray, k: int = 10) -> float | None:
    """Mean share of each query's exact top-``k`` that ``found`` retrieves, the query's own id dropped from both.

    ``found``, ``exact``: int64 (nq, >= k+1) ids best first (-1 = none); ``self_ids`` (nq,).
    None when no query has any other gallery item.
    """
    shares = []
    for a, e, own in zip(found, exact, self_ids):
        truth = [x for x in e if x != own and x >= 0][:k]
        if truth:
            approx = [x for x in a if x != own and x >= 0][:k]
            shares.append(len(set(approx).intersection(truth)) / len(truth))
    return float(np.mean(shares)) if shares else None
