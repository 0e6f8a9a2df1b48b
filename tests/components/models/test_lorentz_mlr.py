"""Lorentz MLR classifier (components/models/classifiers.py, docs/design.md §3) and the linear classifier."""

from __future__ import annotations

import math

import pytest
import torch

from components.geometry import expmap0
from components.models.classifiers import LinearClassifier, LorentzMLR, lorentz_mlr_logits


def _points(n: int, d: int, k: float, scale: float = 0.6, seed: int = 0) -> torch.Tensor:
    """Hyperboloid points (float64) built with the closed-form exp map of docs/design.md §2."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
    r = math.sqrt(k) * z.norm(dim=-1, keepdim=True)
    return torch.cat([torch.cosh(r) / math.sqrt(k), torch.sinh(r) * z / r], dim=-1)


def _reference_logits(h: torch.Tensor, a: list[float], w: torch.Tensor, k_curv: float) -> torch.Tensor:
    """docs/design.md §3, scalar float64 arithmetic: k = 1/K,
    alpha_c = cosh(a_c/sqrt(k)) <h_s, w_c> - sinh(a_c/sqrt(k)) |w_c| h_t,
    logit_c = |w_c| sqrt(k) asinh(alpha_c / (sqrt(k) |w_c|))."""
    k = 1.0 / k_curv
    sk = math.sqrt(k)
    out = torch.empty(h.shape[0], len(a), dtype=torch.float64)
    for i in range(h.shape[0]):
        for c in range(len(a)):
            wn = math.sqrt(sum(float(x) ** 2 for x in w[c]))
            dot = sum(float(h[i, 1 + j]) * float(w[c, j]) for j in range(w.shape[1]))
            alpha = math.cosh(a[c] / sk) * dot - math.sinh(a[c] / sk) * wn * float(h[i, 0])
            out[i, c] = wn * sk * math.asinh(alpha / (sk * wn))
    return out


def _mlr(d: int, a: list[float], seed: int = 0) -> LorentzMLR:
    torch.manual_seed(seed)
    m = LorentzMLR(d, len(a))
    with torch.no_grad():
        m.a.copy_(torch.tensor(a))
        m.w.mul_(3.0)
    return m


@pytest.mark.parametrize("k", [0.5, 1.0])
def test_logits_match_design_formula(k):
    a = [-0.7, 0.0, 0.3, 1.1]
    m = _mlr(5, a)
    h = _points(6, 5, k)
    got = m(h, k)
    assert got.shape == (6, 4)
    expected = _reference_logits(h, [float(x) for x in m.a.detach()], m.w.detach().double(), k)
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-5)
    # the curvature is an input: other K, other logits
    other = m(h, 2.0 if k == 1.0 else 1.0)
    assert not torch.allclose(other, got, atol=1e-3)


@pytest.mark.parametrize("k", [0.5, 1.0])
def test_float32_logits_stay_close_to_float64_for_large_a(k):
    a = [-10.0, -9.0, 8.0, 9.5, 10.0]
    m = _mlr(4, a, seed=1)
    h = _points(6, 4, k, scale=0.5, seed=1)
    got = m(h.float(), k)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    expected = _reference_logits(h, a, m.w.detach().double(), k)
    assert torch.allclose(got.double(), expected, rtol=1e-4, atol=1e-4)
    # the trap docs/design.md §3 warns about: the reference code's |w| = sqrt(|cosh(a) w|^2 - (sinh(a)|w|)^2)
    # is meaningless in float32 once a/sqrt(k) ~ 10 (this is what the direct |w| avoids)
    if k == 1.0:
        w = m.w.detach()
        arg = m.a.detach()
        naive = torch.sqrt(
            ((torch.cosh(arg)[:, None] * w).pow(2).sum(-1) - (torch.sinh(arg) * w.norm(dim=-1)).pow(2)).clamp_min(0)
        )
        assert not torch.allclose(naive, w.norm(dim=-1), rtol=0.1)


def test_logit_sign_follows_side_of_the_hyperplane():
    """a = 0: alpha = <h_s, w>, so the logit has the sign of <h_s, w>."""
    m = LorentzMLR(3, 1)
    with torch.no_grad():
        m.w.copy_(torch.tensor([[1.0, 0.0, 0.0]]))
    h = _points(8, 3, 1.0, seed=3).float()
    logits = m(h, 1.0)[:, 0]
    assert torch.equal(torch.sign(logits), torch.sign(h[:, 1]))
    # and logit = asinh(<h_s, w>) exactly for |w| = 1, K = 1
    assert torch.allclose(logits, torch.asinh(h[:, 1]), atol=1e-6)


def test_gradients_reach_a_and_w():
    m = _mlr(4, [0.5, -0.5])
    h = _points(5, 4, 1.0).float()
    m(h, 1.0).sum().backward()
    assert torch.isfinite(m.a.grad).all() and float(m.a.grad.abs().sum()) > 0
    assert torch.isfinite(m.w.grad).all() and float(m.w.grad.abs().sum()) > 0


def test_mlr_scale_multiplies_eq9_logits():
    """model.mlr_scale s: logits are s × Eq. (9) (1 by default); s ≤ 0 is refused with the parameter's name. (BCT's
    frozen old classifier applies the parent's s: tests/components/losses/test_bct_loss.py.)"""
    h = _points(6, 4, 1.0).float()
    plain = _mlr(4, [0.3, -0.2, 0.0])
    scaled = _mlr(4, [0.3, -0.2, 0.0])
    scaled.scale = 8.0
    assert plain.scale == 1.0
    torch.testing.assert_close(scaled(h), 8.0 * plain(h))
    torch.testing.assert_close(plain(h), lorentz_mlr_logits(h, plain.a, plain.w))
    with pytest.raises(ValueError, match="mlr_scale"):
        LorentzMLR(4, 3, scale=0.0)


def test_linear_classifier_scales_logits():
    torch.manual_seed(0)
    c = LinearClassifier(4, 3, scale=16.0, cosine=False)
    e = torch.nn.functional.normalize(torch.randn(5, 4), dim=-1)
    assert torch.allclose(c(e), 16.0 * (e @ c.weight.t() + c.fc.bias), atol=1e-5)


def test_cosine_classifier_uses_unit_rows_and_no_bias():
    torch.manual_seed(0)
    c = LinearClassifier(4, 3, scale=16.0)  # the default
    assert c.cosine and c.fc.bias is None
    e = torch.nn.functional.normalize(torch.randn(5, 4), dim=-1)
    w = c.weight / c.weight.norm(dim=-1, keepdim=True)
    assert torch.allclose(c(e), 16.0 * (e @ w.t()), atol=1e-5)
    assert float(c(e).abs().max()) <= 16.0 + 1e-4  # cosine logits are bounded by the scale


def test_logits_stay_float32_inside_bf16_autocast():
    """The MLR is a hyperbolic op: bf16 autocast (the GPU training path, and CPU bf16) must not reach it."""
    g = torch.Generator().manual_seed(0)
    h = expmap0(torch.randn(32, 16, generator=g) * 0.5)
    a, w = torch.randn(10, generator=g), torch.randn(10, 16, generator=g)
    plain = lorentz_mlr_logits(h, a, w)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        inside = lorentz_mlr_logits(h, a, w)
    assert inside.dtype == torch.float32 and torch.equal(inside, plain)
