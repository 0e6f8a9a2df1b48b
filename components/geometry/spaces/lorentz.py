"""``lorentz``: points of the hyperboloid of curvature −K, time coordinate first (docs/design.md §2).

The maths is :mod:`components.geometry.lorentz`'s; this module is what the rest of the code asks of it. Points are
``expmap0`` of the tangent vectors z (HBCT Eq. (5)); the bridges fit in the tangent space at the origin (the stored
z, or ``logmap0`` of served points, HBCT Eq. (6)); the query form negates the time coordinate, so a dot product with
a stored point is the Lorentz product ⟨q, g⟩_L (HBCT Eq. (1), docs/design.md §8.1), and the score is minus the
geodesic distance ``acosh(max(1, −K⟨q, g⟩_L))/√K`` (HBCT Eq. (3)) in float64 (docs/design.md §2.5: float32 distances
of close pairs collapse to 0 once x_t is a few hundred).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from components.geometry.lorentz import expmap0, logmap0, pairwise_lorentz_inner
from components.geometry.space import Rows, ScoreKernels, Space, register_space

__all__ = ["HYPERBOLOID_RTOL", "Lorentz", "flip_time", "hyperboloid_rel_error", "rescore_distance"]

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


def rescore_distance(q: np.ndarray, g: np.ndarray, curvature: float) -> np.ndarray:
    """Geodesic distances (n, k) of queries ``q`` (n, d+1; time negated) to candidates ``g`` (n, k, d+1), float64.

    HBCT Eq. (3) written through the difference x - y: on the hyperboloid ⟨x, x⟩_L = -1/K, so
    -K⟨x, y⟩_L - 1 = (K/2)⟨x - y, x - y⟩_L =: u and d = acosh(1 + u)/√K = log1p(u + √(u(u + 2)))/√K. Unlike
    acosh(-K⟨x, y⟩_L), whose argument is 1 + O(1e-7) for float32-stored points, this is exactly 0 for an item
    and itself and resolves neighbours closer than ~1e-3 (design §2.5).
    """
    dt = q[:, None, 0] + g[..., 0]  # x_t - y_t up to sign (q's time is negated)
    ds = q[:, None, 1:] - g[..., 1:]
    u = np.maximum(0.5 * curvature * (np.einsum("nkd,nkd->nk", ds, ds) - dt * dt), 0.0)
    return np.log1p(u + np.sqrt(u * (u + 2.0))) / np.sqrt(curvature)


def _lorentz_arg(inner: np.ndarray, curvature: float) -> np.ndarray:
    """In place: <q, g>_L (n, Ng) float64 -> ``max(1, -K <q, g>_L)``, the argument of the distance's acosh."""
    np.multiply(-curvature, inner, out=inner)
    return np.maximum(inner, 1.0, out=inner)


def _acosh_over_root(arg: np.ndarray, curvature: float) -> np.ndarray:
    """In place: ``acosh(arg) / sqrt(K)`` (n, Ng) float64, the geodesic distance (docs/design.md §2)."""
    np.arccosh(arg, out=arg)
    return np.divide(arg, math.sqrt(curvature), out=arg)


def _lift(v: np.ndarray, curvature: float) -> np.ndarray:
    """(N, d) → float64 hyperboloid points (N, d+1): ``expmap0`` (HBCT Eq. (5)) of ``v`` in float64."""
    return expmap0(torch.from_numpy(np.asarray(v, dtype=np.float64)), curvature).numpy()


@register_space("lorentz")
class Lorentz(Space):
    """Hyperboloid points (N, d+1), time first; similarity = minus the geodesic distance."""

    extra_width = 1
    radius_encodes_confidence = True
    indefinite = True
    point_words = "Lorentz points of its curvature, time coordinate first"

    @property
    def label(self) -> str:
        return f"L K={self.curvature:g}"

    def points(self, z: Rows, emb: Rows) -> Rows:
        """``expmap0(z)`` at K (HBCT Eq. (5)); numpy z is lifted in float64, exactly on the hyperboloid."""
        if isinstance(z, Tensor):
            return expmap0(z, self.curvature)
        return _lift(z, self.curvature)

    def tangent(self, z: np.ndarray, emb: np.ndarray) -> np.ndarray:
        """The stored tangent vectors ``z`` (N, d) themselves, float64 (their norms carry the uncertainty)."""
        return np.asarray(z).astype(np.float64)

    def to_tangent(self, points: np.ndarray) -> np.ndarray:
        """``logmap0`` (HBCT Eq. (6)) of points (N, d+1) on the K-hyperboloid, float64 (N, d)."""
        return logmap0(torch.from_numpy(np.asarray(points, dtype=np.float64)), self.curvature).numpy()

    def from_tangent(self, v: np.ndarray) -> np.ndarray:
        return _lift(v, self.curvature)

    def checked(self, x: np.ndarray, *, error: type[Exception], what: str, fix: str) -> np.ndarray:
        """(N, d+1) float64 rows checked to lie on the K-hyperboloid, time first."""
        x64 = np.asarray(x, dtype=np.float64)
        off = ~(hyperboloid_rel_error(x64, self.curvature) <= HYPERBOLOID_RTOL)
        if off.any():
            raise error(
                f"{int(off.sum())} of {len(x64)} {what} are not on the hyperboloid <x,x>_L = -1/K with "
                f"K={self.curvature} (first at row {int(np.argmax(off))}); {fix}"
            )
        return x64

    def on_space(self, rows: np.ndarray) -> np.ndarray:
        return hyperboloid_rel_error(rows, self.curvature) <= HYPERBOLOID_RTOL

    def query_form(self, points: np.ndarray) -> np.ndarray:
        """[-q_t, q_s] (a copy): its dot product with a stored point is ⟨q, g⟩_L."""
        return flip_time(points)

    def restore_decoded(self, rows: np.ndarray) -> np.ndarray:
        """Candidates (n, k, d+1) decoded from PQ codes: x_t recomputed from x_s (HBCT Eq. (2)), in place."""
        rows[..., 0] = np.sqrt(1.0 / self.curvature + np.einsum("nkd,nkd->nk", rows[..., 1:], rows[..., 1:]))
        return rows

    def _scores(self, q: np.ndarray, g: np.ndarray) -> np.ndarray:
        """``-acosh(max(1, -K <q, g>_L)) / sqrt(K)`` with <., .>_L from
        :func:`components.geometry.lorentz.pairwise_lorentz_inner` in float64."""
        inner = pairwise_lorentz_inner(torch.from_numpy(q), torch.from_numpy(g)).numpy()
        return -_acosh_over_root(_lorentz_arg(inner, self.curvature), self.curvature)

    def score_kernels(self, q_all: np.ndarray, g_all: np.ndarray) -> ScoreKernels:
        """Rows are ranked by ``max(1, -K <q, g>_L)``; the acosh is only evaluated where rounding could tie two."""
        g_t = torch.from_numpy(g_all).transpose(-1, -2)
        k = self.curvature

        def product(start: int, out: np.ndarray) -> None:
            # pairwise_lorentz_inner's two steps, the product written into a reused buffer. The query block is a
            # fresh (64-byte aligned) tensor as there: MKL's float64 results can depend on the inputs' alignment.
            x = torch.from_numpy(q_all[start : start + out.shape[0]])
            torch.matmul(torch.cat([-x[..., :1], x[..., 1:]], dim=-1), g_t, out=torch.from_numpy(out))

        def finish(block: np.ndarray) -> np.ndarray:
            return _lorentz_arg(block, k)  # ranked as is; acosh only where rounding could tie

        def distance_of(arg: np.ndarray) -> np.ndarray:
            return _acosh_over_root(arg, k)

        return product, finish, distance_of

    def candidate_scores(self, q: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Minus :func:`rescore_distance` (exactly 0 for an item and itself)."""
        return -rescore_distance(q, g, self.curvature)

    def uncertainty(self, z: np.ndarray) -> np.ndarray:
        """u = 1 − tanh(√K‖z‖) (HBCT Eq. (10), normalised form, docs/design.md §2.3), float64 (N,)."""
        return 1.0 - np.tanh(np.sqrt(self.curvature) * np.linalg.norm(z.astype(np.float64), axis=1))
