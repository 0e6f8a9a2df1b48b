"""Vectors in an index's space: unit rows (Euclidean) or hyperboloid points (Lorentz), checked.

Shared by index building (a bad gallery is a :class:`~components.errors.DataError`)
and search (bad queries are an :class:`~components.errors.IncompatibleQueryError`):
FAISS itself notices neither zero vectors nor points of another curvature.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HYPERBOLOID_RTOL", "flip_time", "hyperboloid_rel_error", "in_index_space"]

#: Allowed |K<x,x>_L + 1| / (K x_t^2) for a point to count as on the hyperboloid
#: (float32 rounding of x_t^2 is ~1e-7 relative; a wrong K or a time-last layout
#: is off by O(1) near the origin).
HYPERBOLOID_RTOL = 1e-4


def hyperboloid_rel_error(x: np.ndarray, curvature: float) -> np.ndarray:
    """Per-row |K<x,x>_L + 1| / (K x_t^2) in float64 for points (N, d+1); inf if x_t <= 0."""
    x64 = x.astype(np.float64, copy=False)
    t = x64[:, 0]
    inner = np.einsum("ij,ij->i", x64[:, 1:], x64[:, 1:]) - t * t
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(curvature * inner + 1.0) / (curvature * t * t)
    return np.where(t > 0, rel, np.inf)


def flip_time(x: np.ndarray) -> np.ndarray:
    """[x_t, x_s] -> [-x_t, x_s] (copy), so a dot product becomes <., .>_L (docs/design.md §8)."""
    out = np.array(x, copy=True)
    out[:, 0] = -out[:, 0]
    return out


def in_index_space(
    x: np.ndarray, geometry: str, curvature: float, *, error: type[Exception], what: str, fix: str
) -> np.ndarray:
    """(N, D) float64 rows as an index of ``geometry`` holds them: L2-normalised (euclidean), or checked to lie on
    the K-hyperboloid, time first (lorentz). Raises ``error`` naming ``what`` and the ``fix`` otherwise."""
    x64 = np.asarray(x, dtype=np.float64)
    if geometry == "euclidean":
        norms = np.linalg.norm(x64, axis=1, keepdims=True)
        zero = norms[:, 0] == 0
        if zero.any():
            raise error(
                f"{int(zero.sum())} {what} are all zeros (first at row {int(np.argmax(zero))}), "
                f"so their cosine is undefined; {fix}"
            )
        return x64 / norms
    off = ~(hyperboloid_rel_error(x64, curvature) <= HYPERBOLOID_RTOL)
    if off.any():
        raise error(
            f"{int(off.sum())} of {len(x64)} {what} are not on the hyperboloid <x,x>_L = -1/K with K={curvature} "
            f"(first at row {int(np.argmax(off))}); {fix}"
        )
    return x64
