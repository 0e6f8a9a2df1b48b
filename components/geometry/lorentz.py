"""Lorentz (hyperboloid) model of hyperbolic space with curvature -K, K > 0.

Points are ``x = [x_t, x_s]`` in R^(d+1) stored with the *time* coordinate
first: tensors of shape ``(..., d+1)``; tangent vectors at the origin are
given by their space part, shape ``(..., d)``.

Equations cite the HBCT paper (docs/design.md §10) and docs/design.md §2:

* Lorentz inner product, HBCT Eq. (1):  <x, y>_L = x_s·y_s - x_t·y_t
* hyperboloid, HBCT Eq. (2):            <x, x>_L = -1/K, x_t > 0
* geodesic distance, HBCT Eq. (3):      d(x, y) = acosh(-K <x, y>_L) / sqrt(K)
* exp / log map at the origin, HBCT Eqs. (5)-(6) with p = o = [1/sqrt(K), 0]
* uncertainty, HBCT Eq. (10), in the normalised form of docs/design.md §2:
  u = 1 - ||h_s|| / h_t = 1 - tanh(sqrt(K) ||z||), always in [0, 1]
* half-aperture of the entailment cone, HBCT Eq. (11)
* exterior angle of the triangle (origin, h_o, h_n), HBCT §4.2

Numerics (docs/design.md §2): float32 cannot represent 1 + 1e-8, so every clamp
below uses a margin that exists in the tensor's dtype (:func:`dtype_margin`).
Training code may call these in float32; reported distances and metrics must
be computed in float64 (callers cast first).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "MAX_TANGENT_NORM",
    "aperture_epsilon",
    "distance_from_inner",
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

#: Largest sqrt(K)*||v|| the exp map accepts before clamping. sinh(15) ≈ 1.6e6,
#: so squared coordinates stay far from float32 overflow (3.4e38) and inner
#: products of two such points (≈1e13) keep ~6 significant digits.
MAX_TANGENT_NORM = 15.0


def dtype_margin(dtype: torch.dtype) -> float:
    """A clamp margin that survives rounding near 1 in ``dtype``.

    float32 spacing near 1 is 1.19e-7, so 1e-8 vanishes (docs/design.md §2); 1e-6 is
    ~8 ulps. float64 spacing is 2.2e-16, so 1e-12 is safe.
    """
    if dtype == torch.float64:
        return 1e-12
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2
    return 1e-6


def _sqrt_k(k: float | Tensor, like: Tensor) -> Tensor:
    return torch.as_tensor(k, dtype=like.dtype, device=like.device).sqrt()


def lorentz_inner(x: Tensor, y: Tensor, keepdim: bool = False) -> Tensor:
    """HBCT Eq. (1). ``x, y``: (..., d+1) → (...) (or (..., 1) with keepdim)."""
    xy = x * y
    out = xy[..., 1:].sum(dim=-1, keepdim=keepdim) - xy[..., :1].sum(dim=-1, keepdim=keepdim)
    return out


def pairwise_lorentz_inner(x: Tensor, y: Tensor) -> Tensor:
    """All-pairs Lorentz inner products as one matmul.

    ``x``: (N, d+1), ``y``: (M, d+1) → (N, M). Negating the query's time
    coordinate turns the Lorentz product into a Euclidean one (docs/design.md §8).
    """
    x_neg = torch.cat([-x[..., :1], x[..., 1:]], dim=-1)
    return x_neg @ y.transpose(-1, -2)


def time_from_space(x_s: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """x_t = sqrt(1/K + ||x_s||^2) (HBCT Eq. (2)). ``x_s``: (..., d) → (..., 1)."""
    k_t = torch.as_tensor(k, dtype=x_s.dtype, device=x_s.device)
    return torch.sqrt(1.0 / k_t + (x_s * x_s).sum(dim=-1, keepdim=True))


def _safe_norm(v: Tensor) -> Tensor:
    """||v|| over the last dim, (..., 1), with a finite gradient at v = 0."""
    tiny = torch.finfo(v.dtype).tiny
    return torch.sqrt((v * v).sum(dim=-1, keepdim=True).clamp_min(tiny))


def expmap0(v: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """Exponential map at the origin, HBCT Eq. (5) with p = o.

    ``v``: (..., d), the space part of the tangent vector [0, v].
    Returns (..., d+1): x_s = sinh(√K‖v‖)·v/(√K‖v‖), x_t = sqrt(1/K + ‖x_s‖²)
    (equal to cosh(√K‖v‖)/√K, but exactly on the hyperboloid in any dtype).
    √K‖v‖ is clamped at :data:`MAX_TANGENT_NORM` to guard sinh against overflow.
    """
    sk = _sqrt_k(k, v)
    r = sk * _safe_norm(v)  # (..., 1)
    r_c = r.clamp_max(MAX_TANGENT_NORM)
    # x_s = sinh(√K‖v‖)·v/(√K‖v‖) = (sinh(r)/r)·v; sinh(r)/r → 1 as r → 0 and r ≥ sqrt(tiny) keeps it finite.
    x_s = (torch.sinh(r_c) / r) * v
    return torch.cat([time_from_space(x_s, k), x_s], dim=-1)


def logmap0(x: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """Logarithmic map at the origin (inverse of :func:`expmap0`), HBCT Eq. (6).

    ``x``: (..., d+1) → (..., d). Uses ‖v‖ = asinh(√K‖x_s‖)/√K, which is
    better conditioned near the origin than acosh(√K x_t).
    """
    sk = _sqrt_k(k, x)
    x_s = x[..., 1:]
    s = _safe_norm(x_s)
    return torch.asinh(sk * s) / (sk * s) * x_s


def distance_from_inner(inner: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """HBCT Eq. (3) from Lorentz inner products ⟨x, y⟩_L (any shape): acosh(−K⟨x, y⟩_L)/√K.

    The acosh argument is clamped at 1 + margin(dtype): identical points get
    distance ≈ sqrt(2·margin)/√K instead of a NaN gradient (docs/design.md §2.5).
    """
    kk = torch.as_tensor(k, dtype=inner.dtype, device=inner.device)
    return torch.acosh((-kk * inner).clamp_min(1.0 + dtype_margin(inner.dtype))) / kk.sqrt()


def geodesic_distance(x: Tensor, y: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """HBCT Eq. (3) for aligned pairs. ``x, y``: (..., d+1) → (...)."""
    return distance_from_inner(lorentz_inner(x, y), k)


def pairwise_geodesic_distance(x: Tensor, y: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """HBCT Eq. (3) for all pairs. ``x``: (N, d+1), ``y``: (M, d+1) → (N, M)."""
    return distance_from_inner(pairwise_lorentz_inner(x, y), k)


def uncertainty(h: Tensor) -> Tensor:
    """HBCT Eq. (10), normalised form: u = 1 - ‖h_s‖/h_t. ``h``: (..., d+1) → (...).

    Independent of K because ‖h_s‖/h_t = tanh(√K‖z‖) for h = expmap0(z).
    Lies in [0, 1] (docs/design.md §2 explains why the paper's 1 - tanh/√K is not used).
    """
    ratio = torch.linalg.vector_norm(h[..., 1:], dim=-1) / h[..., 0]
    return (1.0 - ratio).clamp(0.0, 1.0)


def uncertainty_from_tangent(z: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """u = 1 - tanh(√K‖z‖) from the tangent vector. ``z``: (..., d) → (...)."""
    sk = _sqrt_k(k, z)
    return 1.0 - torch.tanh(sk * torch.linalg.vector_norm(z, dim=-1))


def half_aperture(h_o: Tensor, k: float | Tensor = 1.0, eps: float = 0.1) -> Tensor:
    """Half-aperture of the entailment cone at ``h_o``, HBCT Eq. (11).

    aper = asin(min(1, 2ε / (√K ‖h_o,s‖))), with ‖h_o,s‖ the norm of the space
    part of the *hyperboloid point* (docs/design.md §2). ``h_o``: (..., d+1) → (...).
    Points nearer the origin than 2ε/√K get the full aperture π/2.
    """
    sk = _sqrt_k(k, h_o)
    s = _safe_norm(h_o[..., 1:]).squeeze(-1)
    m = dtype_margin(h_o.dtype)
    arg = (2.0 * eps / (sk * s)).clamp(max=1.0 - m)
    return torch.asin(arg)


def aperture_epsilon(h_o: Tensor, angle: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """The cone constant ε at which the half-aperture at ``h_o`` equals ``angle``: HBCT Eq. (11) solved for ε.

    aper(h_o) = asin(min(1, 2ε/(√K‖h_o,s‖))) = θ  ⇔  ε = √K‖h_o,s‖·sin(θ)/2, for θ ∈ [0, π/2]; an ``angle``
    beyond π/2 (a point no further out than the apex) needs the widest cone, π/2, and gets its ε.
    ``h_o``: (..., d+1), ``angle``: (...) radians → (...).
    """
    sk = _sqrt_k(k, h_o)
    s = _safe_norm(h_o[..., 1:]).squeeze(-1)
    return 0.5 * sk * s * torch.sin(angle.clamp(0.0, math.pi / 2))


def exterior_angle(h_o: Tensor, h_n: Tensor, k: float | Tensor = 1.0) -> Tensor:
    """Exterior angle at ``h_o`` of the triangle (origin, h_o, h_n), HBCT §4.2.

    ext = acos( (h_n,t + h_o,t·c) / (‖h_o,s‖·sqrt(c² − 1)) ),  c = K⟨h_o, h_n⟩_L.

    Verified for every K against the angle between log_{h_o}(o) and
    log_{h_o}(h_n) (tests/components/geometry). ``h_o, h_n``: (..., d+1) → (...).

    Computed without cancellation: with Δ = h_n − h_o, c + 1 = −(K/2)⟨Δ, Δ⟩_L, so
    c² − 1 = (c + 1)(c − 1) and the numerator Δ_t + h_o,t·(c + 1) are both formed
    from small differences instead of differences of large products (which in
    float32 leave c² − 1 ≈ 1e-4 for identical points at ‖z‖ ≈ 3). At the apex
    (h_n = h_o, or closer than float rounding) the angle is undefined and is
    reported as 0 (inside the cone) with zero gradient, keeping identical pairs
    out of the gradient path (docs/design.md §2).
    """
    kk = torch.as_tensor(k, dtype=h_o.dtype, device=h_o.device)
    m = dtype_margin(h_o.dtype)
    delta = h_n - h_o
    cp1 = (-0.5 * kk * lorentz_inner(delta, delta)).clamp(max=0.0)  # c + 1 ≤ 0
    c2m1 = cp1 * (cp1 - 2.0)  # (c + 1)(c − 1) ≥ 0
    degenerate = c2m1 <= m * m
    safe_c2m1 = torch.where(degenerate, torch.ones_like(c2m1), c2m1)
    s_o = _safe_norm(h_o[..., 1:]).squeeze(-1)
    num = delta[..., 0] + h_o[..., 0] * cp1
    cos_ext = (num / (s_o * torch.sqrt(safe_c2m1))).clamp(-1.0 + m, 1.0 - m)
    ext = torch.acos(cos_ext)
    return torch.where(degenerate, torch.zeros_like(ext), ext)


def origin(d: int, k: float = 1.0, dtype: torch.dtype = torch.float64) -> Tensor:
    """The hyperboloid origin o = [1/√K, 0, …, 0], shape (d+1,)."""
    o = torch.zeros(d + 1, dtype=dtype)
    o[0] = 1.0 / math.sqrt(k)
    return o
