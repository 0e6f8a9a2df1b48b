"""Queries checked for an index of a space, and the stored forms of the approximate Lorentz indexes.

A query batch is checked (:func:`checked_queries`: generation, shape, width, NaN/inf, then the space's own check,
:meth:`Space.checked <components.geometry.space.Space.checked>`) and put in the space's query form; a bad batch is an
:class:`~components.errors.IncompatibleQueryError`: FAISS itself notices neither zero vectors nor points of another
curvature. ``HYPERBOLOID_RTOL`` and ``hyperboloid_rel_error`` are the Lorentz space's
(:mod:`components.geometry.spaces.lorentz`), named here for the query service's row checks.

Also the two stored forms the approximate Lorentz indexes can use (docs/design.md §8.1,
§8.3; see :mod:`components.indexing.index_types` for which is used and why):

* ``proxy`` (default): rows [2⁻⁸·g_t, g_s], L2 metric, queries [2⁻⁸·q_t, q_s]. The
  Lorentz "squared chord" <g−h, g−h>_L = ‖g_s−h_s‖² − (g_t−h_t)² = −2/K − 2<g, h>_L is
  monotone in the geodesic distance (HBCT Eq. (1), (3)) but indefinite; ‖Δs‖² is the
  closest L2 form, so L2 neighbours of the scaled rows are close to geodesic ones and
  the index's candidates are re-ranked exactly. Scaling by a power of two is exact, so
  the stored rows give back the original float32 points.
* ``mips_l2``: the exact MIPS→L2 reduction. Gallery g (d+1, time first) is stored as
  g' = [g, sqrt(M² − ‖g‖²)] with M ≥ max ‖g‖, so every g' lies on the sphere of radius
  M; a query q becomes q' = λ[−q_t, q_s, 0] with λ = M / ‖q‖ > 0. Then
  ‖q' − g'‖² = 2M² − 2λ<q, g>_L, so for each query the L2 ranking is the geodesic
  ranking, exactly. λ changes no ranking; it puts the query on the gallery's sphere,
  which makes IVF's coarse assignment behave as for an ordinary L2 search.
"""

from __future__ import annotations

import numpy as np

from components.geometry import Space
from components.geometry.spaces.lorentz import HYPERBOLOID_RTOL, hyperboloid_rel_error

__all__ = [
    "HYPERBOLOID_RTOL",
    "LORENTZ_TIME_SCALE",
    "checked_queries",
    "hyperboloid_rel_error",
    "lorentz_l2_queries",
    "lorentz_l2_rows",
    "lorentz_proxy_rows",
]

#: Factor on the time coordinate in the ``proxy`` form (a power of two: exact in float32 both ways).
LORENTZ_TIME_SCALE = 2.0**-8


def lorentz_proxy_rows(points: np.ndarray) -> np.ndarray:
    """Hyperboloid points (N, d+1), time first -> float32 (N, d+1) [2⁻⁸·x_t, x_s] (the ``proxy`` form)."""
    out = np.array(points, dtype=np.float32, copy=True)
    out[:, 0] *= np.float32(LORENTZ_TIME_SCALE)
    return out


def lorentz_l2_rows(points: np.ndarray, radius: float) -> np.ndarray:
    """Gallery hyperboloid points (N, d+1) -> float32 rows (N, d+2) [g, sqrt(M² − ‖g‖²)] of norm M = ``radius``.

    ``radius`` must be >= every ‖g‖ (computed in float64 from float32 ``points``);
    the extra coordinate is clamped at 0 for the farthest points.
    """
    g = np.asarray(points, dtype=np.float32)
    sq = np.einsum("ij,ij->i", g.astype(np.float64), g.astype(np.float64))
    extra = np.sqrt(np.maximum(radius * radius - sq, 0.0)).astype(np.float32)
    return np.concatenate([g, extra[:, None]], axis=1)


def lorentz_l2_queries(flipped: np.ndarray, radius: float) -> np.ndarray:
    """Queries with the time coordinate already negated (N, d+1) -> float32 (N, d+2) λ[q', 0], ‖λq'‖ = ``radius``."""
    q = np.asarray(flipped, dtype=np.float64)
    scale = radius / np.linalg.norm(q, axis=1, keepdims=True)
    return np.concatenate([q * scale, np.zeros((q.shape[0], 1))], axis=1).astype(np.float32)


def checked_queries(
    queries: np.ndarray,
    *,
    dim: int,
    space: Space,
    generations: tuple[int, ...],
    query_generation: int | None,
    where: str,
    error: type[Exception],
) -> np.ndarray:
    """Queries (Nq, ``dim``) for an index of ``space`` that accepts query ``generations``, checked.

    Returns float64 rows in the space's query form (:meth:`Space.query_form
    <components.geometry.space.Space.query_form>`: L2-normalised rows, or hyperboloid points with the time
    coordinate negated), so a dot product with a gallery row is the cosine / <q, g>_L. Raises ``error`` naming
    ``where`` (the index) for a wrong generation, shape, width, NaN/inf, zero vectors or points off the hyperboloid.
    """
    if query_generation is not None and query_generation not in generations:
        raise error(
            f"queries from generation {query_generation} cannot search the {where}: it accepts "
            f"generations {list(generations)}; backfill (re-embed the gallery with "
            f"generation {query_generation} and rebuild the index) or query with a compatible model"
        )
    q = np.asarray(queries)
    if q.ndim != 2:
        raise error(
            f"queries must be a 2-D array (Nq, {dim}), got shape {q.shape}; stack query embeddings one row per query"
        )
    if q.shape[1] != dim:
        raise error(
            f"queries have width {q.shape[1]} but the {where} stores width {dim}; "
            "embed queries with a model of a compatible generation and geometry "
            f"(generations {list(generations)})"
        )
    bad = ~np.isfinite(q).all(axis=1)
    if bad.any():
        raise error(
            f"{int(bad.sum())} of {q.shape[0]} queries contain NaN or inf "
            f"(first at row {int(np.argmax(bad))}); fix the query embeddings before searching"
        )
    fix = f"query the {where} with {space.point_words}"
    return space.query_form(space.checked(q, error=error, what="queries", fix=fix))
