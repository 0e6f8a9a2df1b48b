"""Retrieval metrics from a k-nearest-neighbour result, for galleries too large for exact evaluation.

Above ``evaluation.exact_max_items`` gallery items the exact CMC@k / mAP@all of
:func:`components.evaluation.retrieval.retrieval_metrics` (docs/design.md §6.2) is replaced by metrics
that only need each query's top-k list, e.g. a FAISS search. The protocol is that of docs/design.md §6.1:
relevant = same class, the query's own item is removed by *id* (leave-one-out), queries without a relevant
gallery item are skipped. The list order is taken as the ranking (ties are whatever order the search
returned: rank-based metrics, no tie groups).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from components.evaluation.ranking import label_codes, own_columns

__all__ = ["topk_metrics"]

#: Cut-off of the ``map@100`` metric.
_MAP_CUTOFF = 100


def _as_vector(name: str, x: np.ndarray, n: int | None = None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        want = "1-D" if n is None else f"1-D with {n} entries (one per row of neighbour_ids)"
        raise ValueError(f"{name} must be {want}, got shape {a.shape}; pass it aligned with the items")
    return a


def _gallery_positions(neighbour_ids: np.ndarray, gallery_ids: np.ndarray) -> np.ndarray:
    """Gallery position (Nq, k) int64 of every neighbour id, -1 for -1 (no neighbour); ValueError for unknown ids."""
    pos = np.full(neighbour_ids.shape, -1, dtype=np.int64)
    present = neighbour_ids >= 0
    if not present.any():
        return pos
    if gallery_ids.shape[0] == 0:
        raise ValueError(
            "neighbour_ids name gallery items but the gallery is empty; pass the gallery that was searched"
        )
    order = np.argsort(gallery_ids, kind="stable")
    wanted = neighbour_ids[present]
    at = np.minimum(np.searchsorted(gallery_ids[order], wanted), gallery_ids.shape[0] - 1)
    found = gallery_ids[order][at] == wanted
    if not found.all():
        raise ValueError(
            f"{int((~found).sum())} neighbour ids are not in gallery_ids (first: {wanted[~found][0]!r}); "
            "pass the ids and labels of the gallery that was searched"
        )
    pos[present] = order[at]
    return pos


def topk_metrics(
    neighbour_ids: np.ndarray,
    query_ids: np.ndarray,
    query_labels: np.ndarray,
    gallery_ids: np.ndarray,
    gallery_labels: np.ndarray,
    *,
    ks: Sequence[int] = (1, 5),
    leave_one_out: bool = True,
) -> dict[str, float]:
    """CMC@k, recall@k, mAP@R and mAP@100 from each query's k nearest gallery items (docs/design.md §6).

    ``neighbour_ids``: (Nq, k) int64 gallery ids, best first, -1 = no neighbour (an approximate index may
    return fewer than k); ``query_ids``, ``query_labels``: (Nq,); ``gallery_ids`` (unique),
    ``gallery_labels``: (Ng,), the whole searched gallery (it gives each query's relevant count). With
    ``leave_one_out`` the query's own id is removed from its list first, so search k+1 neighbours (the list
    must then hold at least ``max(ks) + 1`` columns, otherwise ``max(ks)``).

    Per query, R = relevant gallery items (same label), its own item excluded; queries with R = 0 are
    skipped. Over the remaining list (best first, rank i from 1, P@i = relevant among the first i / i):

    * ``cmc@k``: a relevant item among the first k (equals the exact CMC@k of
      :func:`~components.evaluation.retrieval.retrieval_metrics` when the lists come from an exact search
      whose ties keep gallery order);
    * ``recall@k``: relevant items among the first k / R;
    * ``map@R``: sum of P@i over relevant ranks i <= R, divided by R (AP truncated at R, "R-precision
      style"); it is computed over the returned list, so a query with R > the list's length gets a
      *lower bound* (relevant items beyond the list count as missed) — search k >= R for the exact value;
    * ``map@100``: sum of P@i over relevant ranks i <= 100, divided by min(R, 100); again a lower bound
      where fewer than min(R, 100) neighbours were returned.

    Returns ``{"cmc@k": ..., "recall@k": ... for k in ks, "map@R": ..., "map@100": ..., "n_queries": int}``;
    metrics are NaN when ``n_queries`` is 0. Fully vectorised over queries.
    """
    nb = np.asarray(neighbour_ids)
    if nb.ndim != 2 or not np.issubdtype(nb.dtype, np.integer):
        raise ValueError(
            f"neighbour_ids must be a 2-D integer array (Nq, k) of gallery ids, got shape {nb.shape} and dtype "
            f"{nb.dtype}; pass the ids a kNN search returned, -1 where it found no neighbour"
        )
    nq, width = nb.shape
    q_ids = _as_vector("query_ids", query_ids, nq)
    q_lab = _as_vector("query_labels", query_labels, nq)
    g_ids = _as_vector("gallery_ids", gallery_ids)
    g_lab = _as_vector("gallery_labels", gallery_labels, g_ids.shape[0])
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive ranks such as (1, 5), got {ks!r}")
    usable = width - 1 if leave_one_out else width
    if max(ks) > usable:
        raise ValueError(
            f"neighbour lists hold {width} ids, too few for cmc@{max(ks)}"
            + (" after removing the query itself" if leave_one_out else "")
            + f"; search at least {max(ks) + int(leave_one_out)} neighbours"
        )
    if np.unique(g_ids).size != g_ids.size:
        raise ValueError("gallery ids are not unique; give every gallery item a distinct id")

    nb = nb.astype(np.int64, copy=False)
    q_code, g_code = label_codes(q_lab, g_lab)
    n_rel = np.bincount(g_code, minlength=int(max(q_code.max(initial=-1), g_code.max(initial=-1))) + 1)[q_code]
    pos = _gallery_positions(nb, g_ids)
    if leave_one_out:
        own = own_columns(q_ids, g_ids)
        has_own = own >= 0
        has_own[has_own] = g_code[own[has_own]] == q_code[has_own]
        n_rel = n_rel - has_own
        # drop the query's own id, keeping the order of the others (the gap moves to the end)
        is_own = (pos == own[:, None]) & (own[:, None] >= 0)
        keep = np.argsort(is_own, axis=1, kind="stable")
        pos = np.where(np.take_along_axis(is_own, keep, axis=1), -1, np.take_along_axis(pos, keep, axis=1))
    found = pos >= 0
    rel = np.zeros(pos.shape, dtype=bool)  # (Nq, k) relevant neighbour
    rel[found] = g_code[pos[found]] == np.broadcast_to(q_code[:, None], pos.shape)[found]

    used = n_rel > 0
    rel, r = rel[used], n_rel[used].astype(np.float64)
    n_used = int(used.sum())
    out: dict[str, float] = {}
    nan = float("nan")
    hits = np.cumsum(rel, axis=1)  # relevant among the first i
    for k in ks:
        out[f"cmc@{k}"] = float((hits[:, k - 1] > 0).mean()) if n_used else nan
    for k in ks:
        out[f"recall@{k}"] = float((hits[:, k - 1] / r).mean()) if n_used else nan
    rank = np.arange(1, width + 1, dtype=np.float64)
    precision = np.where(rel, hits / rank, 0.0)  # P@i at relevant ranks
    at_r = (precision * (rank[None, :] <= r[:, None])).sum(axis=1) / r
    at_100 = precision[:, :_MAP_CUTOFF].sum(axis=1) / np.minimum(r, _MAP_CUTOFF)
    out["map@R"] = float(at_r.mean()) if n_used else nan
    out[f"map@{_MAP_CUTOFF}"] = float(at_100.mean()) if n_used else nan
    out["n_queries"] = n_used
    return out
