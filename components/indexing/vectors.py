"""Queries checked for an index of a space, and the proxy form of the approximate Lorentz indexes.

A query batch is checked (:func:`checked_queries`: generation, shape, width, NaN/inf, then the space's own check,
:meth:`Space.checked <components.geometry.space.Space.checked>`) and put in the space's query form; a bad batch is an
:class:`~components.errors.IncompatibleQueryError`: FAISS itself notices neither zero vectors nor points of another
curvature. ``HYPERBOLOID_RTOL`` and ``hyperboloid_rel_error`` are the Lorentz space's
(:mod:`components.geometry.spaces.lorentz`), named here for the query service's row checks.

Also the stored form every approximate Lorentz index uses by default, whichever store holds it (docs/design.md §8.1,
§8.3; see :mod:`components.indexing.stores.faiss.index_types` for why, and for the FAISS files' other form,
``mips_l2``, the exact MIPS→L2 reduction):

* ``proxy``: rows [2⁻⁸·g_t, g_s], L2 metric, queries [2⁻⁸·q_t, q_s]. The
  Lorentz "squared chord" <g−h, g−h>_L = ‖g_s−h_s‖² − (g_t−h_t)² = −2/K − 2<g, h>_L is
  monotone in the geodesic distance (HBCT Eq. (1), (3)) but indefinite; ‖Δs‖² is the
  closest L2 form, so L2 neighbours of the scaled rows are close to geodesic ones and
  the index's candidates are re-ranked exactly. Scaling by a power of two is exact, so
  the stored rows give back the original float32 points.
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
    "lorentz_proxy_rows",
    "pq_subvectors",
]

#: Factor on the time coordinate in the ``proxy`` form (a power of two: exact in float32 both ways).
LORENTZ_TIME_SCALE = 2.0**-8


def lorentz_proxy_rows(points: np.ndarray) -> np.ndarray:
    """Hyperboloid points (N, d+1), time first -> float32 (N, d+1) [2⁻⁸·x_t, x_s] (the ``proxy`` form)."""
    out = np.array(points, dtype=np.float32, copy=True)
    out[:, 0] *= np.float32(LORENTZ_TIME_SCALE)
    return out


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


def pq_subvectors(width: int) -> int:
    """Product-quantiser sub-vectors for rows of ``width``: the divisor m of the width whose sub-vectors (width/m
    dimensions, one byte of code each) are nearest 4 dimensions, the larger m on a tie (a Lorentz row of d = 128 has
    129 coordinates: 43 sub-vectors of 3). Every store's IVF-PQ takes it (FAISS ``pq_m``, LanceDB
    ``num_sub_vectors``)."""
    divisors = [m for m in range(1, width + 1) if width % m == 0]
    return min(divisors, key=lambda m: (abs(width / m - 4), -m))
