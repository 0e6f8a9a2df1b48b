"""Retrieval scores and metrics: CMC@k and mAP@all (docs/design.md §6).

Shapes: ``Nq`` queries, ``Ng`` gallery items. Score matrices are (Nq, Ng)
float64 with *higher = nearer*:

* Euclidean: cosine similarity of float64 re-normalised vectors (N, d).
* Lorentz: minus the geodesic distance, HBCT Eq. (3) / docs/design.md §2,
  ``-acosh(-K <q, g>_L) / sqrt(K)`` for hyperboloid points (N, d+1), time
  coordinate first, computed in float64 (docs/design.md §2 "Numerics": float32
  distances of close pairs collapse to 0 once x_t is a few hundred).

Every reported number is computed in float64. No loop runs over single
queries or gallery items; queries are processed in fixed-size chunks so a
(10k x 10k) float64 score matrix is never materialised at once. The chunks of
:func:`retrieval_metrics` are scored with the float operations of
:func:`retrieval_scores` and ranked by :mod:`components.evaluation.ranking`
(one value sort per row, no argsort; same numbers as a stable lexsort) on a
few threads; :func:`average_precision` keeps the plain stable-lexsort ranking.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from components.evaluation.ranking import ChunkCounts, chunk_counts, label_codes, map_chunks, own_columns
from components.geometry import pairwise_lorentz_inner

if TYPE_CHECKING:
    from components.indexing.gallery import GalleryEmbeddings

__all__ = [
    "GEOMETRIES",
    "average_precision",
    "gallery_metrics",
    "retrieval_metrics",
    "retrieval_scores",
]

#: Geometries understood by :func:`retrieval_scores`.
GEOMETRIES: tuple[str, ...] = ("euclidean", "lorentz")


def _check_geometry(geometry: str, curvature: float) -> None:
    if geometry not in GEOMETRIES:
        raise ValueError(f"unknown geometry {geometry!r}; use one of {', '.join(map(repr, GEOMETRIES))}")
    if not (math.isfinite(curvature) and curvature > 0):
        raise ValueError(
            f"curvature must be a finite number > 0 (the space has curvature -K), "
            f"got {curvature!r}; pass the K the embeddings were lifted with"
        )


def _as_matrix(name: str, x: np.ndarray) -> np.ndarray:
    """Validate an embedding matrix and return it as float64 (N, D)."""
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array (N, D), got shape {a.shape}; "
            "stack the embeddings into one matrix, one row per item"
        )
    a = a.astype(np.float64, copy=False)
    if not np.isfinite(a).all():
        raise ValueError(
            f"{name} contains NaN or inf values; fix the embedding model (or drop the broken rows) before evaluating"
        )
    return a


def retrieval_scores(
    queries: np.ndarray,
    gallery: np.ndarray,
    geometry: str,
    curvature: float = 1.0,
) -> np.ndarray:
    """All query x gallery similarity scores, float64 (Nq, Ng), higher = nearer.

    ``queries``: (Nq, D), ``gallery``: (Ng, D). ``geometry="euclidean"``: any
    D, cosine similarity after float64 re-normalisation (all-zero rows score
    0 against everything). ``geometry="lorentz"``: hyperboloid points with
    D = d+1, time first; returns ``-acosh(max(1, -K <q, g>_L)) / sqrt(K)``
    (docs/design.md §2, HBCT Eq. (3)), with <., .>_L from
    :func:`components.geometry.pairwise_lorentz_inner` in float64.
    """
    _check_geometry(geometry, curvature)
    q = _as_matrix("queries", queries)
    g = _as_matrix("gallery", gallery)
    if q.shape[1] != g.shape[1]:
        raise ValueError(
            f"queries have width {q.shape[1]} but gallery has width {g.shape[1]}; "
            "embed both with models of the same output dimension and geometry"
        )
    if geometry == "euclidean":
        return _clip_cosine(_unit_rows(q) @ _unit_rows(g).T)
    _check_lorentz_width(q)
    inner = pairwise_lorentz_inner(torch.from_numpy(q), torch.from_numpy(g)).numpy()
    return -_lorentz_distance(inner, curvature)


def _check_lorentz_width(x: np.ndarray) -> None:
    if x.shape[1] < 2:
        raise ValueError(
            "lorentz embeddings need width d+1 >= 2 (time coordinate first); "
            "pass hyperboloid points, not tangent vectors"
        )


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` (N, d) float64 divided by their norms (all-zero rows stay zero)."""
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(np.float64).tiny)


def _clip_cosine(s: np.ndarray) -> np.ndarray:
    """In place: dot products (n, Ng) of unit rows -> cosine scores clipped to [-1, 1]."""
    return np.clip(s, -1.0, 1.0, out=s)


def _lorentz_arg(inner: np.ndarray, curvature: float) -> np.ndarray:
    """In place: <q, g>_L (n, Ng) float64 -> ``max(1, -K <q, g>_L)``, the argument of the distance's acosh."""
    np.multiply(-curvature, inner, out=inner)
    return np.maximum(inner, 1.0, out=inner)


def _acosh_over_root(arg: np.ndarray, curvature: float) -> np.ndarray:
    """In place: ``acosh(arg) / sqrt(K)`` (n, Ng) float64, the geodesic distance (docs/design.md §2)."""
    np.arccosh(arg, out=arg)
    return np.divide(arg, math.sqrt(curvature), out=arg)


def _lorentz_distance(inner: np.ndarray, curvature: float) -> np.ndarray:
    """In place: <q, g>_L (n, Ng) float64 -> geodesic distance ``acosh(max(1, -K <q, g>_L)) / sqrt(K)``.

    Elementwise only (so row blocks give the numbers of the whole matrix); the score is its negation,
    and ``-(a / c) == (-a) / c`` exactly in IEEE arithmetic.
    """
    return _acosh_over_root(_lorentz_arg(inner, curvature), curvature)


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
    geometry: str,
    curvature: float = 1.0,
    ks: Sequence[int] = (1, 5),
    leave_one_out: bool = True,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """CMC@k and mAP@all of one (query model, gallery model) pair (docs/design.md §6).

    ``query_vecs``: (Nq, D) and ``gallery_vecs``: (Ng, D) embeddings (for
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
    ``chunk_size`` queries are those :func:`retrieval_scores` gives it (for
    lorentz, rows are ranked by ``max(1, -K <q, g>_L)`` and the acosh is only
    evaluated where its rounding could tie two items); chunks run on a few
    threads while BLAS is held to one thread per call (restored afterwards).
    """
    _check_geometry(geometry, curvature)
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
    q_all = _as_matrix("queries", query_vecs)
    g_all = _as_matrix("gallery", gallery_vecs)
    if q_all.shape[1] != g_all.shape[1]:
        raise ValueError(
            f"queries have width {q_all.shape[1]} but gallery has width {g_all.shape[1]}; "
            "embed both with models of the same output dimension and geometry"
        )
    if geometry == "lorentz":
        _check_lorentz_width(q_all)
    q_code, g_code = label_codes(q_lab, g_lab)
    excluded = own_columns(q_ids, g_ids) if leave_one_out else np.full(q_ids.shape[0], -1, dtype=np.int64)
    n_rel = np.bincount(g_code, minlength=int(max(q_code.max(initial=-1), g_code.max(initial=-1))) + 1)[q_code]
    own_relevant = excluded >= 0
    own_relevant[own_relevant] = g_code[excluded[own_relevant]] == q_code[own_relevant]
    n_rel = n_rel - own_relevant
    product, finish, distance_of = _chunk_kernels(q_all, g_all, geometry, curvature)

    def rank(start: int, raw: np.ndarray) -> ChunkCounts:
        sl = slice(start, start + raw.shape[0])
        return chunk_counts(raw, finish, q_code[sl], g_code, excluded[sl], n_rel[sl], ks, distance_of)

    results = map_chunks(product, rank, q_all.shape[0], g_all.shape[0], chunk_size)
    hits = {k: sum(r[1][k] for r in results) for k in ks}
    ap = np.concatenate([r[0] for r in results]) if results else np.zeros(0)
    return _metrics_from_counts(hits, float(ap.sum()), ap.size)  # one sum: the same for any threads / blocks


def _chunk_kernels(q_all: np.ndarray, g_all: np.ndarray, geometry: str, curvature: float) -> tuple:
    """``(product, finish, distance_of)`` of :func:`~components.evaluation.ranking.chunk_counts` for a geometry.

    ``product(start, out)`` writes the raw scores of queries ``start : start + len(out)`` into ``out``
    (n, Ng) with the float operations of :func:`retrieval_scores` (a query chunk there is this chunk).
    """
    if geometry == "lorentz":
        g_t = torch.from_numpy(g_all).transpose(-1, -2)

        def product(start: int, out: np.ndarray) -> None:
            # pairwise_lorentz_inner's two steps, the product written into a reused buffer. The query block is a
            # fresh (64-byte aligned) tensor as there: MKL's float64 results can depend on the inputs' alignment.
            x = torch.from_numpy(q_all[start : start + out.shape[0]])
            torch.matmul(torch.cat([-x[..., :1], x[..., 1:]], dim=-1), g_t, out=torch.from_numpy(out))

        def finish(block: np.ndarray) -> np.ndarray:
            return _lorentz_arg(block, curvature)  # ranked as is; acosh only where rounding could tie

        def distance_of(arg: np.ndarray) -> np.ndarray:
            return _acosh_over_root(arg, curvature)

        return product, finish, distance_of
    g_unit_t = _unit_rows(g_all).T  # retrieval_scores' gallery normalisation, done once

    def product(start: int, out: np.ndarray) -> None:
        np.matmul(_unit_rows(q_all[start : start + out.shape[0]]), g_unit_t, out=out)

    return product, _clip_cosine, None


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
        gallery.retrieval_geometry,
        gallery.curvature,
        ks=tuple(ks),
        leave_one_out=True,
        chunk_size=chunk_size,
    )
    return {k: float(v) for k, v in res.items() if k != "n_queries"}
