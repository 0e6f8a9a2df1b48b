"""Geometry: the Lorentz model of hyperbolic space (design §2)."""

from components.geometry.lorentz import (
    MAX_TANGENT_NORM,
    dtype_margin,
    expmap0,
    exterior_angle,
    geodesic_distance,
    half_aperture,
    logmap0,
    lorentz_inner,
    origin,
    pairwise_geodesic_distance,
    pairwise_lorentz_inner,
    time_from_space,
    uncertainty,
    uncertainty_from_tangent,
)

__all__ = [
    "MAX_TANGENT_NORM",
    "dtype_margin",
    "expmap0",
    "exterior_angle",
    "geodesic_distance",
    "half_aperture",
    "logmap0",
    "lorentz_inner",
    "origin",
    "pairwise_geodesic_distance",
    "pairwise_lorentz_inner",
    "time_from_space",
    "uncertainty",
    "uncertainty_from_tangent",
]
