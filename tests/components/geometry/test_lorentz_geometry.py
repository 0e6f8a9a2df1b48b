"""Lorentz model geometry (components/geometry/lorentz.py, docs/design.md §2).

Reference points are built here with an independent float64 exp map
(``ref_expmap0``: x_s = sinh(√K‖v‖)·v/(√K‖v‖), x_t = cosh(√K‖v‖)/√K), so the
distance / angle / aperture functions are checked on their own even where the
library's exp map is wrong.
"""

from __future__ import annotations

import math

import pytest
import torch

from components.geometry import (
    MAX_TANGENT_NORM,
    aperture_epsilon,
    expmap0,
    exterior_angle,
    geodesic_distance,
    half_aperture,
    logmap0,
    lorentz_inner,
    origin,
    pairwise_geodesic_distance,
    pairwise_lorentz_inner,
    uncertainty,
    uncertainty_from_tangent,
)


def ref_expmap0(v: torch.Tensor, k: float) -> torch.Tensor:
    """Independent float64 exp map at the origin (docs/design.md §2). v: (..., d) → (..., d+1)."""
    v = v.double()
    sk = math.sqrt(k)
    n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    r = sk * n
    ratio = torch.where(r > 0, torch.sinh(r) / torch.where(r > 0, r, torch.ones_like(r)), torch.ones_like(r))
    x_s = ratio * v
    x_t = torch.cosh(r) / sk
    return torch.cat([x_t, x_s], dim=-1)


def _tangents(n: int, d: int, max_norm: float, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    norms = torch.linspace(0.0, max_norm, n, dtype=torch.float64)[:, None]
    return (u * norms).to(dtype)


# --------------------------------------------------------------------------- exp / log maps


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_expmap0_points_lie_on_hyperboloid_float64(k):
    v = _tangents(50, 5, 3.0)
    x = expmap0(v, k)
    assert x.dtype == torch.float64 and x.shape == (50, 6)
    assert torch.all(x[:, 0] > 0)
    err = (lorentz_inner(x, x) + 1.0 / k).abs()
    assert float(err.max()) < 1e-12


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_expmap0_points_lie_on_hyperboloid_float32(k):
    v = _tangents(50, 5, 1.5, dtype=torch.float32)
    x = expmap0(v, k)
    assert x.dtype == torch.float32
    inner = lorentz_inner(x.double(), x.double())
    rel = ((inner + 1.0 / k) / (1.0 / k)).abs()
    assert float(rel.max()) < 1e-5


def test_origin_is_on_hyperboloid_and_is_expmap_of_zero():
    for k in (0.5, 1.0, 2.0):
        o = origin(4, k)
        assert o.shape == (5,)
        assert float(lorentz_inner(o, o)) == pytest.approx(-1.0 / k, abs=1e-15)
        assert torch.allclose(expmap0(torch.zeros(4, dtype=torch.float64), k), o, atol=1e-15)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_expmap0_time_coordinate_is_cosh(k):
    v = _tangents(30, 4, 3.0)
    x = expmap0(v, k)
    expected = torch.cosh(math.sqrt(k) * v.norm(dim=-1)) / math.sqrt(k)
    assert torch.allclose(x[:, 0], expected, rtol=1e-12, atol=1e-12)
    assert torch.allclose(x, ref_expmap0(v, k), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_logmap0_inverts_expmap0(k):
    v = _tangents(30, 4, 3.0)
    assert torch.allclose(logmap0(expmap0(v, k), k), v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_logmap0_inverts_reference_expmap(k):
    v = _tangents(30, 4, 3.0)
    assert torch.allclose(logmap0(ref_expmap0(v, k), k), v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_distance_from_origin_equals_tangent_norm(k):
    v = _tangents(30, 4, 3.0)[1:]  # skip the zero vector (distance clamps at the dtype margin)
    d = geodesic_distance(origin(4, k).expand(len(v), 5), expmap0(v, k), k)
    assert torch.allclose(d, v.norm(dim=-1), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_geodesic_distance_from_origin_on_reference_points(k):
    v = _tangents(30, 4, 3.0)[1:]
    d = geodesic_distance(origin(4, k).expand(len(v), 5), ref_expmap0(v, k), k)
    assert torch.allclose(d, v.norm(dim=-1), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_collinear_distances_float64(k):
    u = torch.tensor([0.6, 0.0, -0.8], dtype=torch.float64)
    a = torch.tensor([0.1, 0.5, 1.0, 2.0, 3.0], dtype=torch.float64)
    b = torch.tensor([1.3, 0.0, 2.5, 0.7, 0.2], dtype=torch.float64)
    x, y = expmap0(a[:, None] * u, k), expmap0(b[:, None] * u, k)
    assert torch.allclose(geodesic_distance(x, y, k), (a - b).abs(), rtol=1e-9, atol=1e-9)
    # pairwise agrees with the aligned version and with |a_i - b_j|
    pw = pairwise_geodesic_distance(x, y, k)
    assert torch.allclose(pw.diagonal(), geodesic_distance(x, y, k), atol=1e-12)
    assert torch.allclose(pw, (a[:, None] - b[None, :]).abs(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_collinear_distances_on_reference_points(k):
    u = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    a = torch.tensor([0.1, 0.5, 1.0, 2.0, 3.0], dtype=torch.float64)
    b = torch.tensor([1.3, 0.0, 2.5, 0.7, 0.2], dtype=torch.float64)
    x, y = ref_expmap0(a[:, None] * u, k), ref_expmap0(b[:, None] * u, k)
    assert torch.allclose(geodesic_distance(x, y, k), (a - b).abs(), rtol=1e-9, atol=1e-9)
    assert torch.allclose(pairwise_geodesic_distance(x, y, k), (a[:, None] - b[None, :]).abs(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_collinear_distances_float32_agree_with_float64(k):
    u = torch.tensor([0.6, 0.0, -0.8], dtype=torch.float64)
    a = torch.tensor([0.2, 0.5, 1.0, 1.5, 2.0], dtype=torch.float64)
    b = torch.tensor([1.0, 1.2, 0.3, 0.6, 1.4], dtype=torch.float64)  # |a - b| >= 0.5: away from acosh(1)
    d64 = geodesic_distance(expmap0(a[:, None] * u, k), expmap0(b[:, None] * u, k), k)
    d32 = geodesic_distance(expmap0((a[:, None] * u).float(), k), expmap0((b[:, None] * u).float(), k), k)
    assert d32.dtype == torch.float32
    assert torch.allclose(d32.double(), d64, rtol=1e-4, atol=1e-4)
    if k == 1.0:
        assert torch.allclose(d32.double(), (a - b).abs(), rtol=1e-4, atol=1e-4)


def test_pairwise_lorentz_inner_matches_aligned_inner():
    g = torch.Generator().manual_seed(3)
    x = ref_expmap0(torch.randn(4, 3, generator=g, dtype=torch.float64), 1.0)
    y = ref_expmap0(torch.randn(5, 3, generator=g, dtype=torch.float64), 1.0)
    pw = pairwise_lorentz_inner(x, y)
    assert pw.shape == (4, 5)
    for i in range(4):
        for j in range(5):
            expected = float((x[i, 1:] * y[j, 1:]).sum() - x[i, 0] * y[j, 0])
            assert float(pw[i, j]) == pytest.approx(expected, abs=1e-12)


def test_expmap0_huge_vector_is_finite():
    v = torch.zeros(2, 3)
    v[0, 0] = 1e4
    v[1] = torch.tensor([3e3, -4e3, 5e3])
    v.requires_grad_(True)
    x = expmap0(v, 1.0)
    assert torch.isfinite(x).all()
    # the clamp at MAX_TANGENT_NORM: |x_s| = sinh(15)
    assert float(x[0, 1:].detach().norm()) == pytest.approx(math.sinh(MAX_TANGENT_NORM), rel=1e-5)
    x.sum().backward()
    assert torch.isfinite(v.grad).all()
    x64 = expmap0(v.detach().double() * 10, 2.0)
    assert torch.isfinite(x64).all()


# --------------------------------------------------------------------------- uncertainty


@pytest.mark.parametrize("k", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_uncertainty_in_unit_interval(k):
    norms = torch.cat([torch.zeros(1), torch.logspace(-4, math.log10(50.0), 40)])
    u = torch.randn(len(norms), 6, generator=torch.Generator().manual_seed(1))
    z = u / u.norm(dim=-1, keepdim=True) * norms[:, None]
    for dtype in (torch.float32, torch.float64):
        zz = z.to(dtype)
        vals = [uncertainty(expmap0(zz, k)), uncertainty_from_tangent(zz, k)]
        if dtype == torch.float64:  # reference points overflow float32 (cosh(100))
            vals.append(uncertainty(ref_expmap0(zz, k)))
        for val in vals:
            assert torch.isfinite(val).all()
            assert float(val.min()) >= 0.0 and float(val.max()) <= 1.0
        # zero tangent vector: full uncertainty
        assert float(uncertainty_from_tangent(zz[:1], k)) == 1.0
        assert float(uncertainty(expmap0(zz[:1], k))) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("k", [0.25, 0.5, 1.0, 2.0])
def test_uncertainty_of_reference_points_is_one_minus_tanh(k):
    norms = torch.linspace(0.0, 50.0, 41, dtype=torch.float64)
    u = torch.randn(len(norms), 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    z = u / u.norm(dim=-1, keepdim=True) * norms[:, None]
    z = z[norms * math.sqrt(k) < 300]  # cosh overflows float64 beyond ~710
    expected = 1.0 - torch.tanh(math.sqrt(k) * z.norm(dim=-1))
    assert torch.allclose(uncertainty_from_tangent(z, k), expected, atol=1e-12)
    assert torch.allclose(uncertainty(ref_expmap0(z, k)), expected, atol=1e-12)


@pytest.mark.parametrize("k", [0.25, 0.5, 1.0, 2.0])
def test_uncertainty_of_expmap_equals_uncertainty_from_tangent(k):
    norms = torch.linspace(0.0, 50.0, 41, dtype=torch.float64)
    u = torch.randn(len(norms), 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    z = u / u.norm(dim=-1, keepdim=True) * norms[:, None]
    expected = 1.0 - torch.tanh(math.sqrt(k) * z.norm(dim=-1))
    assert torch.allclose(uncertainty(expmap0(z, k)), expected, atol=1e-9)
    assert torch.allclose(uncertainty(expmap0(z, k)), uncertainty_from_tangent(z, k), atol=1e-9)


# --------------------------------------------------------------------------- entailment cone


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_half_aperture_closed_form(k):
    eps = 0.1
    s = torch.tensor([0.5, 1.5, 4.0], dtype=torch.float64)  # |h_s|, all with 2eps/(sqrt(K)|h_s|) < 1
    h = torch.zeros(3, 4, dtype=torch.float64)
    h[:, 2] = s
    h[:, 0] = torch.sqrt(1.0 / k + s * s)
    got = half_aperture(h, k, eps)
    expected = torch.asin(2 * eps / (math.sqrt(k) * s))
    assert torch.allclose(got, expected, atol=1e-12)
    # a bigger epsilon widens the cone
    assert torch.all(half_aperture(h, k, 0.2) > got)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_aperture_epsilon_inverts_the_half_aperture(k):
    h = expmap0(torch.tensor([[0.4, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.5]], dtype=torch.float64), k)
    theta = torch.tensor([0.05, 0.6, 1.2], dtype=torch.float64)
    eps = aperture_epsilon(h, theta, k)
    # ε = √K‖h_s‖·sin θ / 2 (HBCT Eq. (11) solved for ε), and the cone of that ε has exactly that half-aperture
    assert torch.allclose(eps, 0.5 * math.sqrt(k) * h[:, 1:].norm(dim=-1) * torch.sin(theta), atol=1e-12)
    got = torch.stack([half_aperture(h[i : i + 1], k, float(eps[i]))[0] for i in range(3)])
    assert torch.allclose(got, theta, atol=1e-9)
    # an angle beyond π/2 needs the widest cone: its ε is the one at π/2
    wide = aperture_epsilon(h, torch.full((3,), 2.0, dtype=torch.float64), k)
    assert torch.allclose(wide, 0.5 * math.sqrt(k) * h[:, 1:].norm(dim=-1), atol=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_half_aperture_near_origin_is_clamped_to_right_angle(k):
    h64 = ref_expmap0(torch.tensor([[1e-9, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64), k)
    a64 = half_aperture(h64, k)
    assert torch.isfinite(a64).all()
    assert torch.allclose(a64, torch.full_like(a64, math.pi / 2), atol=1e-5)
    a32 = half_aperture(h64.float(), k)
    assert torch.isfinite(a32).all()
    assert torch.allclose(a32.double(), torch.full_like(a64, math.pi / 2), atol=2e-3)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_half_aperture_of_model_embedding_uses_sinh_norm(k):
    """docs/design.md §2: |h_o,s| = sinh(sqrt(K)|z|)/sqrt(K), so aper = asin(min(1, 2eps/sinh(sqrt(K)|z|)))."""
    z = torch.tensor([[0.0, 1.0, 0.0], [0.6, 0.0, 0.8], [0.0, 0.0, 2.0]], dtype=torch.float64)
    expected = torch.asin((0.2 / torch.sinh(math.sqrt(k) * z.norm(dim=-1))).clamp(max=1.0))
    assert torch.allclose(half_aperture(expmap0(z, k), k), expected, atol=1e-9)


def _ref_exterior_angle(h_o: torch.Tensor, h_n: torch.Tensor, k: float) -> float:
    """pi minus the angle at h_o between the log-map directions to the origin and to h_n."""

    def linner(a, b):
        return float((a[1:] * b[1:]).sum() - a[0] * b[0])

    def proj(y):  # tangent projection at p = h_o of the curvature -K hyperboloid
        return y + k * linner(h_o, y) * h_o

    o = origin(len(h_o) - 1, k)
    po, pn = proj(o), proj(h_n)
    cos = linner(po, pn) / math.sqrt(linner(po, po) * linner(pn, pn))
    return math.pi - math.acos(max(-1.0, min(1.0, cos)))


@pytest.mark.parametrize("k", [0.5, 1.0, 1.7])
def test_exterior_angle_matches_tangent_space_angle(k):
    g = torch.Generator().manual_seed(7)
    zo = torch.randn(20, 3, generator=g, dtype=torch.float64)
    zn = torch.randn(20, 3, generator=g, dtype=torch.float64) * 1.5
    h_o, h_n = ref_expmap0(zo, k), ref_expmap0(zn, k)
    got = exterior_angle(h_o, h_n, k)
    assert got.dtype == torch.float64
    expected = torch.tensor([_ref_exterior_angle(h_o[i], h_n[i], k) for i in range(20)], dtype=torch.float64)
    assert torch.allclose(got, expected, atol=1e-8)
    assert float(expected.min()) < 1.5 and float(expected.max()) > 2.5  # the sample spans a range of angles


@pytest.mark.parametrize("k", [0.5, 1.0, 1.7])
def test_exterior_angle_along_and_against_the_ray(k):
    u = torch.tensor([0.0, 0.6, 0.8], dtype=torch.float64)
    h_o = ref_expmap0(u[None] * 0.8, k)
    further = ref_expmap0(u[None] * 1.5, k)
    opposite = ref_expmap0(-u[None] * 0.5, k)
    assert float(exterior_angle(h_o, further, k)) == pytest.approx(0.0, abs=1e-5)
    assert float(exterior_angle(h_o, further, k)) < float(half_aperture(h_o, k))  # inside the cone
    assert float(exterior_angle(h_o, opposite, k)) == pytest.approx(math.pi, abs=1e-5)


def test_exterior_angle_of_identical_points_is_zero():
    h = ref_expmap0(torch.tensor([[0.3, 0.4, 0.0]], dtype=torch.float64), 1.0)
    assert float(exterior_angle(h, h.clone(), 1.0)) == 0.0
    assert float(exterior_angle(h.float(), h.float().clone(), 1.0)) == 0.0


# --------------------------------------------------------------------------- gradients at identical points


def _leaf_points(dtype=torch.float32):
    z = torch.tensor([[0.3, -0.2, 0.5], [0.0, 0.0, 0.0], [0.7, 0.1, -0.1]], dtype=dtype, requires_grad=True)
    return z, expmap0(z, 1.0)


@pytest.mark.parametrize(
    "fn",
    [
        lambda h: geodesic_distance(h, h, 1.0),
        lambda h: pairwise_geodesic_distance(h, h, 1.0),
        lambda h: exterior_angle(h, h, 1.0),
        lambda h: half_aperture(h, 1.0),
        lambda h: exterior_angle(h.detach(), h, 1.0) - half_aperture(h.detach(), 1.0),
    ],
    ids=["geodesic", "pairwise", "exterior_angle", "half_aperture", "entail_new_only"],
)
def test_finite_gradients_at_identical_points_float32(fn):
    z, h = _leaf_points()
    out = fn(h)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert z.grad is not None
    assert torch.isfinite(z.grad).all(), z.grad


def test_finite_gradients_for_separate_identical_leaves():
    a = expmap0(torch.tensor([[0.4, 0.1]]), 1.0).detach().requires_grad_(True)
    b = a.detach().clone().requires_grad_(True)
    for out in (geodesic_distance(a, b), pairwise_geodesic_distance(a, b), exterior_angle(a, b)):
        a.grad = b.grad = None
        out.sum().backward()
        assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_margin_survives_rounding_near_one(dtype):
    """docs/design.md §2: in float32 1 + 1e-8 == 1, so a clamp margin must be representable in the dtype."""
    from components.geometry import dtype_margin

    m = dtype_margin(dtype)
    one = torch.ones((), dtype=dtype)
    assert float(one + m) > 1.0
    assert float(torch.acosh(one + m)) > 0.0
    assert m <= 1e-2


def test_identical_points_have_margin_sized_distance():
    from components.geometry import dtype_margin

    for k in (0.5, 1.0, 2.0):
        h = ref_expmap0(torch.tensor([[0.3, -0.4, 0.2], [0.0, 0.0, 0.0]], dtype=torch.float64), k)
        d = geodesic_distance(h, h, k)
        bound = math.sqrt(2 * dtype_margin(torch.float64)) / math.sqrt(k)
        assert torch.all(d >= 0) and float(d.max()) <= 1.01 * bound
        d32 = geodesic_distance(h.float(), h.float(), k)
        assert float(d32.max()) <= 1.01 * math.sqrt(2 * dtype_margin(torch.float32)) / math.sqrt(k) + 1e-3


def test_exterior_angle_of_identical_float32_points_far_from_origin_is_zero():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(64, 16, generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    for radius in (2.5, 3.0):
        h = expmap0(u * radius, 1.0)  # float32, like the HBCT loss (zeta reaches 2.6 at generation 8)
        assert float(exterior_angle(h, h.clone(), 1.0).max()) == 0.0
