"""Reference: the original (slow, lexsort-based) exact retrieval evaluation, for equality tests of the fast path.

``components/evaluation/retrieval.py`` as it was before the fast path: per chunk of queries, a full float64 score
matrix (Nq_chunk, Ng), a stable ``np.lexsort`` of every row, AP with scikit-learn's tie semantics (docs/design.md
§6.2) by the lexsort path the library keeps (:func:`components.evaluation.average_precision`) and CMC from the
ranked relevance. Input validation is left out; the numbers are computed exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from components.evaluation import average_precision
from components.geometry import pairwise_lorentz_inner


def reference_scores(queries: np.ndarray, gallery: np.ndarray, geometry: str, curvature: float = 1.0) -> np.ndarray:
    """Float64 (Nq, Ng) scores, higher = nearer: cosine (euclidean) or minus the geodesic distance (lorentz)."""
    q = np.asarray(queries).astype(np.float64, copy=False)
    g = np.asarray(gallery).astype(np.float64, copy=False)
    if geometry == "euclidean":
        tiny = np.finfo(np.float64).tiny
        qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), tiny)
        gn = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), tiny)
        return np.clip(qn @ gn.T, -1.0, 1.0)
    inner = pairwise_lorentz_inner(torch.from_numpy(q), torch.from_numpy(g)).numpy()
    arg = np.maximum(-curvature * inner, 1.0)
    return -np.arccosh(arg) / math.sqrt(curvature)


def reference_average_precision(scores: np.ndarray, relevant: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """AP of every row (Nq,) of ``scores`` (Nq, Ng) with ``relevant`` / ``valid`` masks (Nq, Ng): the plain stable
    lexsort path the library keeps (:func:`components.evaluation.average_precision`), whose rows equal
    scikit-learn's ``average_precision_score`` (checked in test_retrieval_metrics)."""
    return average_precision(scores, relevant, valid)


def _chunk_counts(
    scores: np.ndarray, relevant: np.ndarray, valid: np.ndarray, ks: tuple[int, ...]
) -> tuple[int, float, dict[int, int]]:
    order = np.lexsort((-scores, ~valid), axis=-1)  # descending score, excluded last; stable: ties keep gallery order
    rel = np.take_along_axis(relevant & valid, order, axis=1)
    used = rel.any(axis=1)
    ap = float(reference_average_precision(scores, relevant, valid)[used].sum())
    top = np.cumsum(rel[:, : max(ks)], axis=1) > 0
    hits = {}
    for k in ks:
        j = min(k, top.shape[1]) - 1
        hits[k] = int(top[used, j].sum()) if j >= 0 else 0
    return int(used.sum()), ap, hits


def reference_retrieval_metrics(
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
    """``{"cmc@k": ..., "map": ..., "n_queries": n}`` exactly as the original ``retrieval_metrics`` computed them."""
    ks = tuple(int(k) for k in ks)
    q_lab, g_lab = np.asarray(query_labels), np.asarray(gallery_labels)
    q_ids, g_ids = np.asarray(query_ids), np.asarray(gallery_ids)
    q_all = np.asarray(query_vecs).astype(np.float64, copy=False)
    g_all = np.asarray(gallery_vecs).astype(np.float64, copy=False)
    hits = {k: 0 for k in ks}
    ap_sum = 0.0
    n_used = 0
    for start in range(0, q_all.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        scores = reference_scores(q_all[sl], g_all, geometry, curvature)
        relevant = q_lab[sl, None] == g_lab[None, :]
        valid = q_ids[sl, None] != g_ids[None, :] if leave_one_out else np.ones_like(relevant)
        used, ap, chunk_hits = _chunk_counts(scores, relevant, valid, ks)
        n_used += used
        ap_sum += ap
        for k in ks:
            hits[k] += chunk_hits[k]
    out: dict[str, float] = {}
    for k, h in hits.items():
        out[f"cmc@{k}"] = h / n_used if n_used else float("nan")
    out["map"] = ap_sum / n_used if n_used else float("nan")
    out["n_queries"] = n_used
    return out
