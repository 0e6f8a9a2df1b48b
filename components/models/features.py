"""Training-free retrieval features from a classifier's output (the Simplex paper; docs/design.md §5.8).

PSP (Eq. 2): h = P σ(z) / ‖P σ(z)‖; LSP (Eq. 6): h = P z / ‖P z‖, with the
centring projection P_(k,k) = I − J/C_k (Eq. 3) and, to compare a model with
C_t classes against a gallery of a model with C_k ≤ C_t classes,
P_(t,k) = [P_(k,k) | 0] (Eq. 4): keep the first C_k outputs (the old classes —
the class order must only ever extend), then centre and normalise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["simplex_features"]


def simplex_features(logits: np.ndarray, kind: str, num_classes: int | None = None) -> np.ndarray:
    """PSP / LSP features, float64. logits: (N, C_t) → (N, C_k) with C_k = num_classes or C_t.

    PSP applies the softmax over all C_t classes *before* dropping the new ones (P_(t,k) σ(z^t)).
    """
    z = np.asarray(logits, dtype=np.float64)
    c_t = z.shape[1]
    c_k = c_t if num_classes is None else int(num_classes)
    if not 0 < c_k <= c_t:
        raise ValueError(f"cannot project {c_t} classes onto {c_k}; the class order must only ever extend")
    if kind == "psp":
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        v = e / e.sum(axis=1, keepdims=True)
    elif kind == "lsp":
        v = z
    else:
        raise ValueError(f"unknown simplex feature kind {kind!r}; use 'psp' or 'lsp'")
    v = v[:, :c_k]
    v = v - v.mean(axis=1, keepdims=True)  # P_(k,k) = I − J/C_k
    return v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-300)
