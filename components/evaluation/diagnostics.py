"""Health diagnostics of hyperbolic generations (docs/design.md §4 "Diagnostics").

They tell whether the HBCT mechanism is alive: if most embeddings sit on the
clip radius ζ, every uncertainty and every cone aperture is the same number;
if almost no new embedding is inside its old embedding's cone, the
entailment term is a constant pull. All computed in float64 from tangent
vectors (N, d).
"""

from __future__ import annotations

import numpy as np
import torch

from components.geometry import (
    expmap0,
    exterior_angle,
    half_aperture,
    uncertainty_from_tangent,
)

__all__ = ["clip_fraction", "entailment_angles", "in_cone_fraction", "uncertainty_seen_unseen", "uncertainty_std"]


def clip_fraction(clipped: np.ndarray) -> float:
    """Share of embeddings whose norm hit the clip radius. (N,) bool → float."""
    return float(np.mean(clipped)) if len(clipped) else float("nan")


def _cone(z_old: np.ndarray, z_new: np.ndarray, curvature: float, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(ext(h_o, h_n), aper(h_o)) per item, (N,) float64 radians (HBCT Eq. (11)); z_old, z_new: (N, d) tangent
    vectors of the same items, row-aligned."""
    h_o = expmap0(torch.from_numpy(np.asarray(z_old)).double(), curvature)
    h_n = expmap0(torch.from_numpy(np.asarray(z_new)).double(), curvature)
    return exterior_angle(h_o, h_n, curvature), half_aperture(h_o, curvature, epsilon)


def in_cone_fraction(z_old: np.ndarray, z_new: np.ndarray, curvature: float, epsilon: float = 0.1) -> float:
    """Share of items whose new embedding lies in the entailment cone of its old one (HBCT Eq. (11)).

    z_old, z_new: (N, d) tangent vectors of the same items, row-aligned.
    """
    ext, aper = _cone(z_old, z_new, curvature, epsilon)
    return float((ext <= aper).double().mean())


def entailment_angles(
    z_old: np.ndarray, z_new: np.ndarray, curvature: float, epsilon: float = 0.1
) -> tuple[float, float]:
    """(median exterior angle ext(h_o, h_n), median half-aperture aper(h_o)) in degrees (HBCT Eq. (11)): how far the
    new embeddings are from their old embeddings' cones, and how wide those cones are. z_old, z_new: (N, d)."""
    ext, aper = _cone(z_old, z_new, curvature, epsilon)
    return float(torch.rad2deg(ext).median()), float(torch.rad2deg(aper).median())


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
