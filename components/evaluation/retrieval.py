"""Retrieval metrics: CMC@k and mAP@all (docs/design.md §6).

Shapes: ``Nq`` queries, ``Ng`` gallery items. The scores are the space's (:meth:`Space.scores
<components.geometry.space.Space.scores>`): float64 (Nq, Ng) with *higher = nearer* — the cosine of float64
re-normalised unit vectors (Euclidean), minus the geodesic distance of hyperboloid points (Lorentz, HBCT Eq. (3),
docs/design.md §2.5: computed in float64).

Every reported number is computed in float64. No loop runs over single
queries or gallery items; queries are processed in fixed-size chunks so a
(10k x 10k) float64 score matrix is never materialised at once. The chunks of
:func:`retrieval_metrics` are scored with the float operations of the space's
scores (:meth:`Space.score_kernels <components.geometry.space.Space.score_kernels>`) and ranked by
:mod:`components.evaluation.ranking` (one value sort per row, no argsort; same numbers as a stable lexsort) on a
few threads; :func:`average_precision` keeps the plain stable-lexsort ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from components.evaluation.ranking import ChunkCounts, chunk_counts, label_codes, map_chunks, own_columns
from components.geometry.space import Space

if TYPE_CHECKING:
    from components.indexing.gallery import GalleryEmbeddings

__all__ = ["average_precision", "gallery_metrics", "retrieval_metrics"]


def _rank(scores: np.ndarray, relevant: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort each row by descending score, excluded entries last.

    Inputs (n, Ng). Returns ``(s, rel, ok)`` (n, Ng) in ranked order: scores,
    relevance (False where excluded) and the validity mask. The sort is
    stable, so equal scores keep gallery order (the CMC tie rule).
    """
    # np.lexsort: the LAST key is primary -> invalid entries go last, then by -score.
    order = np.lexsort((-scores, ~valid), axis=-1)
    s = np.take_along_axis(scores, order, axis=1)
    ok = np.take_along_axis(valid, order, axis=1)
    rel = np.take_along_axis(relevant, order, axis=1) & ok
    return s, rel, ok


def _ap_from_ranked(s: np.ndarray, rel: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Per-row AP (n,) from ranked rows (see :func:`_rank`).

    scikit-learn's ``average_precision_score`` takes one threshold per
    distinct score: AP = sum_groups (recall gained in the group) x (precision
    at the end of the group) = sum_i rel_i * P[end(i)] / R, where end(i) is
    the last ranked position with the same score as i.
    """
    n, m = s.shape
    if m == 0:
        return np.full(n, np.nan)
    pos = np.arange(m)
    last = np.ones((n, m), dtype=bool)  # position i ends its tie group
    last[:, :-1] = (s[:, 1:] != s[:, :-1]) | ~ok[:, 1:] | ~ok[:, :-1]
    end = np.where(last, pos, m)
    end = np.minimum.accumulate(end[:, ::-1], axis=1)[:, ::-1]
    tp = np.cumsum(rel, axis=1, dtype=np.float64)
    precision = tp / (pos + 1.0)  # valid entries come first, so pos+1 counts them
    prec_at_end = np.take_along_axis(precision, end, axis=1)
    n_rel = tp[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.where(rel, prec_at_end, 0.0).sum(axis=1) / n_rel
    return np.where(n_rel > 0, ap, np.nan)


def average_precision(scores: np.ndarray, relevant: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Average precision of every row, float64 (Nq,) (docs/design.md §6, mAP@all).

    ``scores``: (Nq, Ng), higher = more relevant; ``relevant``: (Nq, Ng) bool;
    ``valid``: (Nq, Ng) bool, False = excluded from the ranking (e.g. the
    query itself), None = all take part. Row i equals scikit-learn's
    ``average_precision_score(relevant[i][valid[i]], scores[i][valid[i]])``,
    tied scores included (a tie group is one threshold). Rows without a
    relevant valid entry give NaN.
    """
    s = np.asarray(scores, dtype=np.float64)
    rel = np.asarray(relevant, dtype=bool)
    ok = np.ones_like(rel) if valid is None else np.asarray(valid, dtype=bool)
    if s.ndim != 2 or rel.shape != s.shape or ok.shape != s.shape:
        raise ValueError(
            f"scores, relevant and valid must share one 2-D shape (Nq, Ng), got "
            f"{s.shape}, {rel.shape}, {ok.shape}; build all three per query x gallery pair"
        )
    if not np.isfinite(s[ok]).all():
        raise ValueError(
            "scores contain NaN or inf at valid entries; "
            "compute scores from finite embeddings (or mark those entries invalid)"
        )
    return _ap_from_ranked(*_rank(s, rel, ok))


def _check_items(name: str, vecs: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> None:
    n = np.asarray(vecs).shape[0] if np.asarray(vecs).ndim >= 1 else -1
    for what, arr in (("labels", labels), ("ids", ids)):
        a = np.asarray(arr)
        if a.ndim != 1 or a.shape[0] != n:
            raise ValueError(
                f"{name} {what} must be 1-D with one entry per {name} vector ({n}), "
                f"got shape {a.shape}; pass {what} aligned with the embedding rows"
            )


def retrieval_metrics(
    query_vecs: np.ndarray,
    query_labels: np.ndarray,
    query_ids: np.ndarray,
    gallery_vecs: np.ndarray,
    gallery_labels: np.ndarray,
    gallery_ids: np.ndarray,
    space: Space,
    ks: Sequence[int] = (1, 5),
    leave_one_out: bool = True,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """CMC@k and mAP@all of one (query model, gallery model) pair (docs/design.md §6).

    ``query_vecs``: (Nq, D) and ``gallery_vecs``: (Ng, D) points of ``space`` (for
    lorentz, hyperboloid points, time first); ``*_labels``: class labels
    (Nq,), (Ng,); ``*_ids``: item ids (Nq,), (Ng,). Queries and gallery may
    be the same items embedded by different models (cross retrieval), so
    leave-one-out excludes the gallery item whose *id* equals the query's id,
    not the one at the same position (gallery ids must then be unique).

    A gallery item is relevant when its label equals the query's. Queries
    with no relevant item left after exclusion are skipped for every metric.
    Ranking: descending score, ties kept in gallery order (stable sort).

    Returns ``{"cmc@k": ... for k in ks, "map": ..., "n_queries": int}``;
    the metrics are NaN when ``n_queries`` is 0. The scores of a chunk of
    ``chunk_size`` queries are those ``space.scores`` gives it (for
    lorentz, rows are ranked by ``max(1, -K <q, g>_L)`` and the acosh is only
    evaluated where its rounding could tie two items); chunks run on a few
    threads while BLAS is held to one thread per call (restored afterwards).
    """
    _check_items("query", query_vecs, query_labels, query_ids)
    _check_items("gallery", gallery_vecs, gallery_labels, gallery_ids)
    ks = _checked_ranks(ks, chunk_size)
    q_lab, g_lab = np.asarray(query_labels), np.asarray(gallery_labels)
    q_ids, g_ids = np.asarray(query_ids), np.asarray(gallery_ids)
    if leave_one_out and np.unique(g_ids).size != g_ids.size:
        raise ValueError(
            "gallery ids are not unique, so leave-one-out cannot tell which item "
            "is the query's own; give every gallery item a distinct id"
        )
    # Validate / convert once; chunks below only slice.
    q_all, g_all = space.checked_pair(query_vecs, gallery_vecs)
    q_code, g_code = label_codes(q_lab, g_lab)
    excluded = own_columns(q_ids, g_ids) if leave_one_out else np.full(q_ids.shape[0], -1, dtype=np.int64)
    n_rel = np.bincount(g_code, minlength=int(max(q_code.max(initial=-1), g_code.max(initial=-1))) + 1)[q_code]
    own_relevant = excluded >= 0
    own_relevant[own_relevant] = g_code[excluded[own_relevant]] == q_code[own_relevant]
    n_rel = n_rel - own_relevant
    product, finish, distance_of = space.score_kernels(q_all, g_all)

    def rank(start: int, raw: np.ndarray) -> ChunkCounts:
        sl = slice(start, start + raw.shape[0])
        return chunk_counts(raw, finish, q_code[sl], g_code, excluded[sl], n_rel[sl], ks, distance_of)

    results = map_chunks(product, rank, q_all.shape[0], g_all.shape[0], chunk_size)
    hits = {k: sum(r[1][k] for r in results) for k in ks}
    ap = np.concatenate([r[0] for r in results]) if results else np.zeros(0)
    return _metrics_from_counts(hits, float(ap.sum()), ap.size)  # one sum: the same for any threads / blocks


def _checked_ranks(ks: Sequence[int], chunk_size: int) -> tuple[int, ...]:
    """The CMC ranks ``ks`` as ints; ValueError for no rank, a rank below 1, or a ``chunk_size`` below 1."""
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive ranks such as (1, 5), got {ks!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}; use e.g. 1024")
    return ks


def _metrics_from_counts(hits: dict[int, int], ap_sum: float, n_used: int) -> dict[str, float]:
    """``{"cmc@k": ..., "map": ..., "n_queries": n_used}`` from summed counts; NaN metrics when no query was used."""
    out: dict[str, float] = {}
    for k, h in hits.items():
        out[f"cmc@{k}"] = h / n_used if n_used else float("nan")
    out["map"] = ap_sum / n_used if n_used else float("nan")
    out["n_queries"] = n_used
    return out


def gallery_metrics(
    query: GalleryEmbeddings, gallery: GalleryEmbeddings, ks: Sequence[int] = (1, 5), chunk_size: int = 1024
) -> dict[str, float]:
    """M(φ_q, φ_g) (docs/design.md §6) for two models' embeddings of the same gallery items.

    Queries are the gallery items embedded by the query model, put into the
    gallery's space (:meth:`GalleryEmbeddings.vectors_against`), each excluded
    from its own gallery by id. Returns {"cmc@k": …, "map": …}.
    """
    res = retrieval_metrics(
        query.vectors_against(gallery),
        query.labels,
        query.ids,
        gallery.vectors(),
        gallery.labels,
        gallery.ids,
        gallery.retrieval_space,
        ks=tuple(ks),
        leave_one_out=True,
        chunk_size=chunk_size,
    )
    return {k: float(v) for k, v in res.items() if k != "n_queries"}
