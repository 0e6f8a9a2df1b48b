"""Orthogonal Procrustes with a global scale: y ≈ s · x W, W semi-orthogonal (Drift-Adapter's OP map; Schönemann
1966). An isometry up to scale, so it keeps every distance ratio of the source space: the map to try first, and the
one Procrustes bounds (Maystre et al., 2025) say suffices when two models' spaces differ by a rotation."""

from __future__ import annotations

import numpy as np

from components.bridges.base import BridgeMap, register_map

__all__ = ["Procrustes"]


def procrustes(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """The W (d_in, d_out) with orthonormal columns or rows minimising ‖s·xW − y‖_F, and that s:
    W = U Vᵀ from the SVD U Σ Vᵀ of xᵀy; s = tr Σ / ‖x‖²_F."""
    u, sigma, vt = np.linalg.svd(x.T @ y, full_matrices=False)
    return u @ vt, float(sigma.sum() / max((x * x).sum(), 1e-300))


@register_map("procrustes")
class Procrustes(BridgeMap):
    """x (N, d_in) → s · x W (N, d_out)."""

    def __init__(self) -> None:
        self.w = np.zeros((0, 0))
        self.scale = 1.0

    def fit(self, x: np.ndarray, y: np.ndarray, seed: int = 0) -> Procrustes:
        self.w, self.scale = procrustes(x, y)
        return self

    def apply(self, x: np.ndarray) -> np.ndarray:
        return self.scale * (x @ self.w)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"w": self.w, "scale": np.array(self.scale)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Procrustes:
        m = cls()
        m.w, m.scale = np.asarray(arrays["w"], dtype=np.float64), float(arrays["scale"])
        return m
