"""Health diagnostics of hyperbolic generations, whatever method trained them (docs/design.md §4.5).

They tell whether the radius carries information: if most embeddings sit on the clip radius ζ, every uncertainty
(and every cone aperture) is the same number. All computed in float64 from tangent vectors (N, d). A method's own
numbers (HBCT's cones) are the method's: ``AlignmentLoss.diagnostics``.
"""

from __future__ import annotations

import numpy as np
import torch

from components.geometry import uncertainty_from_tangent

__all__ = ["clip_fraction", "uncertainty_seen_unseen", "uncertainty_std"]


def clip_fraction(clipped: np.ndarray) -> float:
    """Share of embeddings whose norm hit the clip radius. (N,) bool → float."""
    return float(np.mean(clipped)) if len(clipped) else float("nan")


def uncertainty_seen_unseen(
    z: np.ndarray, labels: np.ndarray, seen_classes: list[int] | tuple[int, ...], curvature: float
) -> tuple[float | None, float | None]:
    """Mean uncertainty u = 1 − tanh(√K‖z‖) (HBCT Eq. (10)) of items whose class is in
    ``seen_classes`` vs not (paper Fig. 2). z: (N, d), labels: (N,). None for an empty group."""
    u = uncertainty_from_tangent(torch.from_numpy(np.asarray(z)).double(), curvature).numpy()
    seen = np.isin(labels, np.asarray(list(seen_classes), dtype=np.int64))
    s = float(u[seen].mean()) if seen.any() else None
    n = float(u[~seen].mean()) if (~seen).any() else None
    return s, n


def uncertainty_std(z: np.ndarray, curvature: float) -> float:
    """Standard deviation of the uncertainty u = 1 − tanh(√K‖z‖) (HBCT Eq. (10)) over a gallery, z: (N, d): near 0
    when the radius is saturated (every point at ζ has the same u), larger when radius carries information."""
    return float(uncertainty_from_tangent(torch.from_numpy(np.asarray(z)).double(), curvature).numpy().std())
