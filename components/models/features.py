"""Training-free retrieval features from a classifier's output (the Simplex paper; docs/design.md §5.8).

PSP (Eq. 2): h = P σ(z) / ‖P σ(z)‖; LSP (Eq. 6): h = P z / ‖P z‖, with the
centring projection P_(k,k) = I − J/C_k (Eq. 3) and, to compare a model with
C_t classes against a gallery of a model with C_k ≤ C_t classes,
P_(t,k) = [P_(k,k) | 0] (Eq. 4): keep the first C_k outputs (the old classes —
the class order must only ever extend), then centre and normalise.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from components.geometry import Euclidean, Space

__all__ = ["features_space", "simplex_features", "simplex_project"]


def features_space(space: Space, features: str) -> Space:
    """The space retrieval compares a model's ``features`` in: the model's own ``space`` for its embedding; PSP /
    LSP features are unit vectors (cosine) whatever the model's geometry (the space's K kept, for the record)."""
    return space if features == "embedding" else Euclidean(space.curvature)


def simplex_project(logits: Tensor, kind: str, num_classes: int) -> Tensor:
    """PSP / LSP of logits (N, C_t) onto the first ``num_classes`` = C_k classes → (N, C_k), in the logits' dtype.

    PSP applies the softmax over all C_t classes *before* dropping the new ones (P_(t,k) σ(z^t)). Plain torch
    operations only, so the exported serving graph (docs/design.md §7.16) computes the same features.
    """
    if kind == "psp":
        v = torch.softmax(logits, dim=1)
    elif kind == "lsp":
        v = logits
    else:
        raise ValueError(f"unknown simplex feature kind {kind!r}; use 'psp' or 'lsp'")
    v = v[:, :num_classes]
    v = v - v.mean(dim=1, keepdim=True)  # P_(k,k) = I − J/C_k
    return v / torch.linalg.vector_norm(v, dim=1, keepdim=True).clamp_min(1e-300)


def simplex_features(logits: np.ndarray, kind: str, num_classes: int | None = None) -> np.ndarray:
    """PSP / LSP features, float64. logits: (N, C_t) → (N, C_k) with C_k = num_classes or C_t."""
    z = np.asarray(logits, dtype=np.float64)
    c_t = z.shape[1]
    c_k = c_t if num_classes is None else int(num_classes)
    if not 0 < c_k <= c_t:
        raise ValueError(f"cannot project {c_t} classes onto {c_k}; the class order must only ever extend")
    return simplex_project(torch.from_numpy(z), kind, c_k).numpy()
