"""Low-rank affine: y ≈ x (s·W_P + L) + b, the Procrustes isometry s·W_P (:mod:`.procrustes`) plus a rank-r
correction L and a bias b (Drift-Adapter's LA map), fitted jointly by alternating the two closed forms: the
Procrustes fit of what L leaves, then L as reduced-rank ridge regression of what the isometry leaves (Izenman 1975:
the ridge solution projected onto the top ``rank`` right singular vectors of its fitted values), until the error
stops falling (at most ``iterations`` rounds)."""

from __future__ import annotations

import numpy as np

from components.bridges.base import BridgeMap, register_map
from components.bridges.maps.procrustes import procrustes
from components.errors import ConfigError

__all__ = ["LowRankAffine"]


@register_map("low_rank")
class LowRankAffine(BridgeMap):
    """x (N, d_in) → x W + b (N, d_out), W = s·W_P + L, rank L ≤ ``rank``; ``ridge``: the penalty on L, relative to
    the mean squared norm of x's rows."""

    def __init__(self, rank: int = 16, ridge: float = 1e-2, iterations: int = 100) -> None:
        if rank < 1 or ridge < 0 or iterations < 1:
            raise ConfigError(
                f"low_rank map: rank {rank} and iterations {iterations} must be ≥ 1 and ridge {ridge} ≥ 0; set "
                "upgrade.map_options"
            )
        self.rank, self.ridge, self.iterations = int(rank), float(ridge), int(iterations)
        self.w = np.zeros((0, 0))
        self.b = np.zeros(0)

    def fit(self, x: np.ndarray, y: np.ndarray, seed: int = 0) -> LowRankAffine:
        mx, my = x.mean(0), y.mean(0)
        xc, yc = x - mx, y - my  # centred: the bias is the means' difference
        gram = xc.T @ xc + self.ridge * float((xc * xc).sum(1).mean()) * np.eye(x.shape[1])
        low = np.zeros((x.shape[1], y.shape[1]))
        last = np.inf
        for _ in range(self.iterations):
            w_p, s = procrustes(xc, yc - xc @ low)
            full = np.linalg.solve(gram, xc.T @ (yc - s * xc @ w_p))  # (d_in, d_out) ridge of the isometry's residual
            _, _, vt = np.linalg.svd(xc @ full, full_matrices=False)
            v = vt[: min(self.rank, vt.shape[0])].T  # (d_out, r)
            low = full @ v @ v.T
            err = float(np.linalg.norm(xc @ (s * w_p + low) - yc))
            if err > last * (1 - 1e-9):
                break
            last = err
        self.w = s * w_p + low
        self.b = my - mx @ self.w
        return self

    def apply(self, x: np.ndarray) -> np.ndarray:
        return x @ self.w + self.b

    def arrays(self) -> dict[str, np.ndarray]:
        opts = np.array([self.rank, self.ridge, self.iterations], dtype=np.float64)
        return {"w": self.w, "b": self.b, "options": opts}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> LowRankAffine:
        rank, ridge, iterations = (float(v) for v in arrays["options"])
        m = cls(int(rank), ridge, int(iterations))
        m.w, m.b = np.asarray(arrays["w"], dtype=np.float64), np.asarray(arrays["b"], dtype=np.float64)
        return m
