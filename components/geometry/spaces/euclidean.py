"""``euclidean``: unit vectors on the sphere, compared by cosine similarity (docs/design.md §6).

Points are the head's unit rows (N, d); the bridges fit in the sphere's ambient coordinates (unit rows again); the
query form is the point itself (a dot product of unit rows is the cosine). K is only recorded.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from components.geometry.space import Rows, ScoreKernels, Space, register_space, unit_rows

__all__ = ["UNIT_NORM_ATOL", "Euclidean"]

#: Allowed | ||x|| - 1 | for stored (float32) unit rows.
UNIT_NORM_ATOL = 1e-3


def _clip_cosine(s: np.ndarray) -> np.ndarray:
    """In place: dot products (n, Ng) of unit rows -> cosine scores clipped to [-1, 1]."""
    return np.clip(s, -1.0, 1.0, out=s)


@register_space("euclidean")
class Euclidean(Space):
    """Unit vectors (N, d); similarity = cosine of float64 re-normalised rows."""

    point_words = "nonzero vectors"

    @property
    def label(self) -> str:
        return "E"

    def points(self, z: Rows, emb: Rows) -> Rows:
        """The head's unit rows ``emb`` (B, d) themselves (numpy: as float64)."""
        return emb if isinstance(emb, Tensor) else np.asarray(emb, dtype=np.float64)

    def tangent(self, z: np.ndarray, emb: np.ndarray) -> np.ndarray:
        """The unit rows of ``emb`` (N, d), float64: the sphere's ambient coordinates."""
        return unit_rows(np.asarray(emb, dtype=np.float64))

    def to_tangent(self, points: np.ndarray) -> np.ndarray:
        return unit_rows(np.asarray(points, dtype=np.float64))

    def from_tangent(self, v: np.ndarray) -> np.ndarray:
        """(N, d) → the unit rows, float64 (a mapped vector put back on the sphere)."""
        return unit_rows(np.asarray(v, dtype=np.float64))

    def checked(self, x: np.ndarray, *, error: type[Exception], what: str, fix: str) -> np.ndarray:
        """(N, d) float64 L2-normalised rows; ``error`` for all-zero rows (their cosine is undefined)."""
        x64 = np.asarray(x, dtype=np.float64)
        norms = np.linalg.norm(x64, axis=1, keepdims=True)
        zero = norms[:, 0] == 0
        if zero.any():
            raise error(
                f"{int(zero.sum())} {what} are all zeros (first at row {int(np.argmax(zero))}), "
                f"so their cosine is undefined; {fix}"
            )
        return x64 / norms

    def on_space(self, rows: np.ndarray) -> np.ndarray:
        return np.abs(np.linalg.norm(rows.astype(np.float64), axis=1) - 1.0) <= UNIT_NORM_ATOL

    def query_form(self, points: np.ndarray) -> np.ndarray:
        """The unit rows themselves: their dot product with a stored unit row is the cosine."""
        return points

    def _scores(self, q: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Cosine similarity (Nq, Ng) after float64 re-normalisation (all-zero rows score 0 against everything)."""
        return _clip_cosine(unit_rows(q) @ unit_rows(g).T)

    def score_kernels(self, q_all: np.ndarray, g_all: np.ndarray) -> ScoreKernels:
        g_unit_t = unit_rows(g_all).T  # the gallery normalisation of _scores, done once

        def product(start: int, out: np.ndarray) -> None:
            np.matmul(unit_rows(q_all[start : start + out.shape[0]]), g_unit_t, out=out)

        return product, _clip_cosine, None

    def candidate_scores(self, q: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Cosine of unit queries (n, d) with the re-normalised candidates (n, k, d), clipped to [-1, 1]."""
        g = g / np.maximum(np.linalg.norm(g, axis=-1, keepdims=True), 1e-30)
        return np.clip(np.einsum("nd,nkd->nk", q, g), -1.0, 1.0)
