"""Mixed galleries for partial backfill: some items re-embedded by a newer generation, the rest kept.

A mixed gallery is one :class:`GalleryEmbeddings` (every vector in one space:
the same geometry, width and curvature) plus a per-item generation stamp.
:func:`backfill_order` decides which items to re-embed first:

* ``uncertainty``: highest hyperbolic uncertainty of the *current* vector first
  (u = 1 − tanh(√K‖z‖), HBCT Eq. (10)): the items the old model was least sure
  about gain most from the new model — bctflow's uncertainty-prioritised backfill;
* ``random``: a seeded permutation;
* ``oldest``: items embedded by the oldest generation first (ties random).

While a partial backfill runs, :func:`merge_by_rank` serves the mixed gallery the way Seo et al. (WACV'25) do: each
generation's vectors are searched with that generation's own query and the ranked lists are merged by rank.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from components.indexing.gallery import GalleryEmbeddings

__all__ = ["ORDERS", "backfill_order", "item_uncertainty", "merge_by_rank", "mix_galleries", "order_items"]

ORDERS = ("uncertainty", "random", "oldest")


def item_uncertainty(g: GalleryEmbeddings) -> np.ndarray:
    """Per-item hyperbolic uncertainty (N,) of Lorentz embeddings (HBCT Eq. (10), normalised form): the retrieval
    space's (:meth:`Space.uncertainty <components.geometry.space.Space.uncertainty>`)."""
    u = g.retrieval_space.uncertainty(g.z)
    if u is None:
        raise ValueError(
            "uncertainty ordering needs Lorentz embeddings (hyperbolic uncertainty); use order 'random' or 'oldest'"
        )
    return u


def backfill_order(
    current: GalleryEmbeddings, order: str, seed: int = 0, stamps: np.ndarray | None = None
) -> np.ndarray:
    """Positions (N,) of the gallery items in the order they should be re-embedded."""
    uncertainty = item_uncertainty(current) if order == "uncertainty" else None
    return order_items(len(current), order, seed, uncertainty=uncertainty, stamps=stamps)


def order_items(
    n: int, order: str, seed: int = 0, *, uncertainty: np.ndarray | None = None, stamps: np.ndarray | None = None
) -> np.ndarray:
    """Positions (n,) in re-embedding order from per-item ``uncertainty`` (n,) or generation ``stamps`` (n,)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    if order == "random":
        return perm
    if order == "uncertainty":
        if uncertainty is None:
            raise ValueError("order 'uncertainty' needs the items' uncertainty")
        return perm[np.argsort(-uncertainty[perm], kind="stable")]  # random tie-break, highest uncertainty first
    if order == "oldest":
        st = np.zeros(n, dtype=np.int64) if stamps is None else np.asarray(stamps)
        return perm[np.argsort(st[perm], kind="stable")]
    raise ValueError(f"unknown backfill order {order!r}; use one of {', '.join(ORDERS)}")


def mix_galleries(current: GalleryEmbeddings, part: GalleryEmbeddings, positions: np.ndarray) -> GalleryEmbeddings:
    """``current`` with the items at ``positions`` replaced by ``part``'s rows (``part`` row i = item ``positions[i]``).

    Both must live in one retrieval space (same geometry, features and width; the
    curvature of ``current`` is kept); otherwise a partial backfill is impossible
    and the whole gallery must be re-embedded.
    """
    pos = np.asarray(positions, dtype=np.int64)
    if not np.array_equal(part.ids, current.ids[pos]):
        raise ValueError(
            "the replacement rows are not the selected gallery items; embed exactly those items with the new model"
        )
    if (current.geometry, current.features, current.z.shape[1]) != (part.geometry, part.features, part.z.shape[1]):
        raise ValueError(
            f"cannot mix {current.geometry}/{current.features}/d={current.z.shape[1]} with "
            f"{part.geometry}/{part.features}/d={part.z.shape[1]} vectors in one index; run a full backfill instead"
        )

    def put(base: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = base.copy()
        out[pos] = rows
        return out

    same_classes = current.logits.shape[1] == part.logits.shape[1]
    logits = put(current.logits, part.logits) if same_classes else np.zeros((len(current), 0), np.float32)
    return replace(
        current,
        z=put(current.z, part.z),
        emb=put(current.emb, part.emb),
        clipped=put(current.clipped, part.clipped),
        logits=logits,
    )


def merge_by_rank(lists: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge per-generation ranked lists by rank (Seo et al., WACV'25): the first of every list, then the seconds, ….

    ``lists``: one (scores (m,), ids (m,)) per generation, each best first, each searched with that generation's own
    query over that generation's vectors only (id -1: no item). Items of equal rank are ordered by score (their own
    generation's), ties by list order. Returns the top ``k`` as (scores, ids, list index) (each (<= k,)).
    """
    ranks, scores, ids, source = [], [], [], []
    for i, (s, d) in enumerate(lists):
        keep = np.asarray(d) >= 0
        n = int(keep.sum())
        ranks.append(np.arange(n))
        scores.append(np.asarray(s, dtype=np.float64)[keep])
        ids.append(np.asarray(d, dtype=np.int64)[keep])
        source.append(np.full(n, i, dtype=np.int64))
    r, s, d, src = (np.concatenate(a) for a in (ranks, scores, ids, source))
    order = np.lexsort((src, -s, r))[:k]  # by rank, then by score (descending), then by list
    return s[order], d[order], src[order]
