"""HBCT alignment loss (components/losses/methods/hbct.py, docs/design.md §2 and §4)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from components.errors import ConfigError
from components.geometry import (
    expmap0,
    geodesic_distance,
    half_aperture,
    pairwise_geodesic_distance,
)
from components.losses import AlignmentContext, choose_alignment, create_alignment
from components.losses.methods.hbct import info_nce, rince
from components.models import ModelOutput, ModelSpec
from tests.helpers import tiny_spec

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def _spec(k: float = 1.0) -> ModelSpec:
    return tiny_spec(embed_dim=3, num_classes=4, class_order=(0, 1, 2, 3), curvature=k)


def _hbct(options=None, k: float = 1.0):
    m = create_alignment("hbct", **(options or {}))
    m.prepare(AlignmentContext(new_spec=_spec(k), device=torch.device("cpu")))
    return m


def _out(z: torch.Tensor, k: float = 1.0) -> ModelOutput:
    emb = expmap0(z, k)
    return ModelOutput(z, emb, None, torch.zeros(len(z), dtype=torch.bool))


def _rays(n: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, 3, generator=g)
    return u / u.norm(dim=-1, keepdim=True)


# --------------------------------------------------------------------------- RINCE / InfoNCE


def test_rince_hand_computed_2x2():
    s = torch.tensor([[-0.2, -1.0], [-1.5, -0.1]], dtype=torch.float64)
    q = torch.tensor([0.3, 0.7], dtype=torch.float64)
    beta = 0.01
    got = rince(s, q, beta)
    l0 = -math.exp(0.3 * -0.2) / 0.3 + (beta * (math.exp(-0.2) + math.exp(-1.0))) ** 0.3 / 0.3
    l1 = -math.exp(0.7 * -0.1) / 0.7 + (beta * (math.exp(-1.5) + math.exp(-0.1))) ** 0.7 / 0.7
    assert got.shape == (2,)
    assert float(got[0]) == pytest.approx(l0, rel=1e-12)
    assert float(got[1]) == pytest.approx(l1, rel=1e-12)
    # a negative mask removes entries from the sum (the positive stays)
    keep = torch.tensor([[True, False], [True, True]])
    got_m = rince(s, q, beta, keep)
    l0_m = -math.exp(0.3 * -0.2) / 0.3 + (beta * math.exp(-0.2)) ** 0.3 / 0.3
    assert float(got_m[0]) == pytest.approx(l0_m, rel=1e-12)
    assert float(got_m[1]) == pytest.approx(l1, rel=1e-12)


def test_rince_small_q_approaches_infonce_plus_log_beta():
    g = torch.Generator().manual_seed(0)
    s = -torch.rand(5, 5, generator=g, dtype=torch.float64) * 4.0
    beta = 0.01
    q = torch.full((5,), 1e-6, dtype=torch.float64)
    got = rince(s, q, beta)
    expected = info_nce(s) + math.log(beta)
    assert torch.allclose(got, expected, atol=1e-4)
    # InfoNCE itself is the cross-entropy with the positives on the diagonal
    assert torch.allclose(info_nce(s), F.cross_entropy(s, torch.arange(5), reduction="none"), atol=1e-12)
    # and q = 1 is the linear (robust) end: -exp(s_ii) + beta * sum_j exp(s_ij)
    q1 = torch.ones(5, dtype=torch.float64)
    assert torch.allclose(rince(s, q1, beta), -s.diagonal().exp() + beta * s.exp().sum(1), atol=1e-12)


def test_contrast_term_equals_rince_formula_with_uncertainty_weights():
    torch.manual_seed(0)
    z_o = torch.randn(4, 3) * 0.5
    z_n = torch.randn(4, 3) * 0.5
    labels = torch.tensor([0, 1, 2, 3])
    out = _hbct({"entailment": False})(_out(z_n), _out(z_o), labels)
    assert set(out.terms) == {"contrast"}
    h_n, h_o = expmap0(z_n.double(), 1.0), expmap0(z_o.double(), 1.0)
    dist = pairwise_geodesic_distance(h_n, h_o, 1.0)
    tau, beta = 0.5, 0.01
    q = (1.0 - torch.tanh(z_o.double().norm(dim=-1))).clamp_min(1e-3)
    total = 0.0
    for i in range(4):
        s_i = [-float(dist[i, j]) / tau for j in range(4)]
        qi = float(q[i])
        total += -math.exp(qi * s_i[i]) / qi + (beta * sum(math.exp(x) for x in s_i)) ** qi / qi
    assert float(out.terms["contrast"]) == pytest.approx(total / 4, rel=1e-4, abs=1e-5)
    assert out.stats["q_mean"] == pytest.approx(float(q.mean()), rel=1e-5)


def test_infonce_contrast_is_cross_entropy_over_negative_distances():
    torch.manual_seed(1)
    z_o, z_n = torch.randn(5, 3) * 0.4, torch.randn(5, 3) * 0.4
    out = _hbct({"contrast": "infonce", "entailment": False, "tau": 0.25})(_out(z_n), _out(z_o), torch.arange(5))
    s = -pairwise_geodesic_distance(expmap0(z_n.double()), expmap0(z_o.double())) / 0.25
    assert float(out.terms["contrast"]) == pytest.approx(float(F.cross_entropy(s, torch.arange(5))), rel=1e-4)


def test_distortion_is_mean_geodesic_distance():
    torch.manual_seed(2)
    z_o, z_n = torch.randn(5, 3) * 0.4, torch.randn(5, 3) * 0.4
    out = _hbct({"contrast": "distortion", "entailment": False})(_out(z_n), _out(z_o), torch.arange(5))
    assert set(out.terms) == {"distortion"}
    expected = geodesic_distance(expmap0(z_n.double()), expmap0(z_o.double())).mean()
    assert float(out.terms["distortion"]) == pytest.approx(float(expected), rel=1e-4)


@pytest.mark.parametrize(
    "options, names",
    [
        ({}, {"entail", "contrast"}),
        ({"contrast": "infonce"}, {"entail", "contrast"}),
        ({"contrast": "distortion"}, {"entail", "distortion"}),
        ({"contrast": "none"}, {"entail"}),
        ({"entailment": False}, {"contrast"}),
        ({"entailment": False, "contrast": "none"}, set()),
    ],
)
def test_term_names_follow_options(options, names):
    torch.manual_seed(3)
    z = torch.randn(4, 3) * 0.3
    out = _hbct(options)(_out(z + 0.1), _out(z), torch.arange(4))
    assert set(out.terms) == names
    for v in out.terms.values():
        assert v.ndim == 0 and torch.isfinite(v)
    assert ("in_cone_fraction" in out.stats) == ("entail" in names)


def test_fixed_q_replaces_uncertainty_weighting():
    torch.manual_seed(4)
    z_o, z_n = torch.randn(4, 3) * 0.5, torch.randn(4, 3) * 0.5
    a = _hbct({"entailment": False, "fixed_q": 0.5})(_out(z_n), _out(z_o), torch.arange(4))
    b = _hbct({"entailment": False})(_out(z_n), _out(z_o), torch.arange(4))
    assert a.stats["q_mean"] == pytest.approx(0.5)
    assert float(a.terms["contrast"]) != pytest.approx(float(b.terms["contrast"]), rel=1e-3)
    s = -pairwise_geodesic_distance(expmap0(z_n.double()), expmap0(z_o.double())) / 0.5
    expected = rince(s, torch.full((4,), 0.5, dtype=torch.float64), 0.01).mean()
    assert float(a.terms["contrast"]) == pytest.approx(float(expected), rel=1e-4)


def test_shuffle_q_weights_each_anchor_with_another_items_uncertainty():
    """shuffle_q (the control of the uncertainty weighting): RINCE with q permuted by the step's random permutation
    — the same weights, their mean unchanged, detached from their items."""
    torch.manual_seed(6)
    z_o = torch.randn(6, 3) * torch.linspace(0.1, 2.0, 6)[:, None]  # different radii: different q per item
    z_n = torch.randn(6, 3) * 0.5
    torch.manual_seed(11)
    a = _hbct({"entailment": False, "shuffle_q": True})(_out(z_n), _out(z_o), torch.arange(6))
    b = _hbct({"entailment": False})(_out(z_n), _out(z_o), torch.arange(6))
    torch.manual_seed(11)
    perm = torch.randperm(6)
    assert not torch.equal(perm, torch.arange(6))
    q = (1.0 - torch.tanh(z_o.double().norm(dim=-1))).clamp_min(1e-3)
    s = -pairwise_geodesic_distance(expmap0(z_n.double()), expmap0(z_o.double())) / 0.5
    assert float(a.terms["contrast"]) == pytest.approx(float(rince(s, q[perm], 0.01).mean()), rel=1e-4)
    assert float(a.terms["contrast"]) != pytest.approx(float(b.terms["contrast"]), rel=1e-3)
    assert a.stats["q_mean"] == pytest.approx(float(b.stats["q_mean"]), rel=1e-5)


def test_mask_same_class_changes_loss_only_with_shared_labels():
    torch.manual_seed(5)
    z_o, z_n = torch.randn(4, 3) * 0.5, torch.randn(4, 3) * 0.5
    plain, masked = _hbct({"entailment": False}), _hbct({"entailment": False, "mask_same_class": True})
    shared = torch.tensor([0, 0, 1, 2])
    a = float(plain(_out(z_n), _out(z_o), shared).terms["contrast"])
    b = float(masked(_out(z_n), _out(z_o), shared).terms["contrast"])
    assert a != pytest.approx(b, rel=1e-4)
    # masking removes positive terms from the sum of exponentials: it can only lower the loss
    assert b < a
    distinct = torch.tensor([0, 1, 2, 3])
    c = float(plain(_out(z_n), _out(z_o), distinct).terms["contrast"])
    d = float(masked(_out(z_n), _out(z_o), distinct).terms["contrast"])
    assert c == pytest.approx(d, rel=1e-6)


# --------------------------------------------------------------------------- entailment


def test_entailment_zero_when_new_points_further_along_old_rays():
    u = _rays(6)
    z_o, z_n = u * 0.6, u * 1.2
    out = _hbct({"contrast": "none"})(_out(z_n), _out(z_o), torch.arange(6))
    assert float(out.terms["entail"]) == 0.0
    assert out.stats["in_cone_fraction"] == 1.0


def test_entailment_positive_when_new_points_on_opposite_side():
    u = _rays(6)
    z_o, z_n = u * 0.6, -u * 0.6
    out = _hbct({"contrast": "none"})(_out(z_n), _out(z_o), torch.arange(6))
    assert out.stats["in_cone_fraction"] == 0.0
    # exterior angle is pi (h_n beyond the origin): loss = mean(pi - aper(h_o))
    expected = float((math.pi - half_aperture(expmap0(z_o.double()))).mean())
    assert float(out.terms["entail"]) == pytest.approx(expected, abs=5e-3)
    # entail_weight scales the term
    out2 = _hbct({"contrast": "none", "entail_weight": 2.0})(_out(z_n), _out(z_o), torch.arange(6))
    assert float(out2.terms["entail"]) == pytest.approx(2 * float(out.terms["entail"]), rel=1e-6)


def test_entailment_uses_the_model_curvature():
    u = _rays(6)
    z_o, z_n = u * 0.6, -u * 0.6
    outs = [
        float(_hbct({"contrast": "none"}, k=k)(_out(z_n, k), _out(z_o, k), torch.arange(6)).terms["entail"])
        for k in (0.5, 2.0)
    ]
    assert outs[0] != pytest.approx(outs[1], rel=1e-3)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize(
    "options",
    [{}, {"contrast": "infonce"}, {"contrast": "distortion"}, {"distance": "squared_lorentz"}, {"distance": "inner"}],
)
def test_hbct_gradient_finite_when_old_equals_new(options):
    torch.manual_seed(6)
    z = (torch.randn(5, 3) * 0.4).requires_grad_(True)
    z.data[0] = 0.0  # one embedding at the origin too
    new = _out(z)
    old = ModelOutput(z.detach(), new.emb.detach(), None, torch.zeros(5, dtype=torch.bool))
    out = _hbct(options)(new, old, torch.tensor([0, 0, 1, 2, 3]))
    loss = sum(out.terms.values())
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(z.grad).all(), z.grad
    assert float(out.terms["entail"].detach()) == 0.0


def test_hbct_gradient_reaches_new_embedding_only():
    torch.manual_seed(7)
    z_n = (torch.randn(4, 3) * 0.5).requires_grad_(True)
    z_o = (torch.randn(4, 3) * 0.5).requires_grad_(True)
    out = _hbct()(_out(z_n), _out(z_o), torch.arange(4))
    sum(out.terms.values()).backward()
    assert z_n.grad is not None and float(z_n.grad.abs().sum()) > 0
    assert z_o.grad is None  # the old embedding is detached inside the loss


# --------------------------------------------------------------------------- options and model checks


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"tau": 0}, "tau"),
        ({"tau": -1.0}, "tau"),
        ({"beta": 0}, "beta"),
        ({"beta": 2.0}, "beta"),
        ({"q_min": 0}, "q_min"),
        ({"fixed_q": 1.5}, "fixed_q"),
        ({"contrast": "triplet"}, "contrast"),
        ({"distance": "euclid"}, "distance"),
    ],
)
def test_invalid_option_values_are_config_errors(options, needle):
    with pytest.raises(ConfigError, match=needle):
        create_alignment("hbct", **options)


def test_hbct_refuses_euclidean_and_missing_or_mismatched_parent():
    m = choose_alignment("hbct")
    fix = "needs a lorentz model, got euclidean; set model.geometry: lorentz, or choose a method for euclidean models"
    with pytest.raises(ConfigError, match=fix):
        m.check_models("euclidean", 16, "euclidean", 16)
    with pytest.raises(ConfigError, match="parent"):
        m.check_models("lorentz", 16, None, None)
    with pytest.raises(ConfigError, match="d=8"):
        m.check_models("lorentz", 16, "lorentz", 8)
    m.check_models("lorentz", 16, "lorentz", 16)  # fine


def test_entailment_zero_when_new_equals_old_at_large_radius():
    u = _rays(32, seed=1)
    z = u * 3.0  # e.g. zeta = 3 after ten generations of +0.2
    out = _hbct({"contrast": "none"})(_out(z), _out(z), torch.arange(32))
    assert out.stats["in_cone_fraction"] == 1.0
    assert float(out.terms["entail"]) == 0.0
