"""Base losses (components/losses/base_losses.py): ``ce``, the mixed-geometry contrastive loss
(the HypMix paper, Eqs. 5, 10; supervised form) and ``ce+mixed``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from components.errors import ConfigError
from components.losses import create_alignment
from components.losses.base_losses import MixedOptions, base_loss, mixed_geometry_loss
from components.models import ModelOutput, build_model
from components.training import train_model
from tests.helpers import tiny_spec, train_config

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def _norm(v):
    return math.sqrt(sum(x * x for x in v))


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (_norm(a) * _norm(b))


def _tangent_distance(u, v, c):
    """Geodesic distance between exp_0(u) and exp_0(v) on the curvature −c hyperboloid
    (hyperbolic law of cosines): acosh(cosh a cosh b − sinh a sinh b cos θ)/√c, a = √c‖u‖, b = √c‖v‖."""
    a, b = math.sqrt(c) * _norm(u), math.sqrt(c) * _norm(v)
    arg = math.cosh(a) * math.cosh(b) - math.sinh(a) * math.sinh(b) * _cos(u, v)
    return math.acosh(max(arg, 1.0)) / math.sqrt(c)


def _poincare_point(v, c):
    """hypmix Eq. 3 at x = 0 (λ₀ = 2): exp_0(v) = tanh(√c‖v‖) v / (√c‖v‖)."""
    n = _norm(v)
    return [math.tanh(math.sqrt(c) * n) * x / (math.sqrt(c) * n) for x in v]


def _poincare_distance(x, y, c):
    """hypmix Eqs. 1–2: D = 2/√c · artanh(√c ‖(−x) ⊕_c y‖) with Möbius addition."""
    mx = [-a for a in x]
    xy = sum(a * b for a, b in zip(mx, y))
    nx, ny = sum(a * a for a in mx), sum(b * b for b in y)
    num = [(1 + 2 * c * xy + c * ny) * a + (1 - c * nx) * b for a, b in zip(mx, y)]
    den = 1 + 2 * c * xy + c * c * nx * ny
    return 2 / math.sqrt(c) * math.atanh(min(math.sqrt(c) * _norm([v / den for v in num]), 1 - 1e-15))


def _lorentz_distance(x, y, k):
    inner = sum(p * q for p, q in zip(x[1:], y[1:])) - x[0] * y[0]
    return math.acosh(max(-k * inner, 1.0)) / math.sqrt(k)


def _supcon(d_cos, d_hyp, labels, lam, tau):
    """Per anchor: −mean over same-class j ≠ i of log softmax_{k ≠ i}((−D_cos − λ D_hyp)/τ)[j]."""
    b = len(labels)
    per = []
    for i in range(b):
        logits = {k: (-d_cos[i][k] - lam * d_hyp[i][k]) / tau for k in range(b) if k != i}
        lse = math.log(sum(math.exp(v) for v in logits.values()))
        pos = [k for k in logits if labels[k] == labels[i]]
        if pos:
            per.append(-sum(logits[k] - lse for k in pos) / len(pos))
    return sum(per) / len(per)


Z = [[0.5, -1.0, 0.3], [0.4, -0.7, 1.0], [4.0, 3.0, 0.0], [-0.2, 0.1, 0.9]]  # item 2 has ‖z‖ = 5 > r


def _euclidean_out(z):
    zt = torch.tensor(z)
    return ModelOutput(zt, F.normalize(zt, dim=-1), None, torch.zeros(len(z), dtype=torch.bool))


def _hand_euclidean(z, labels, o: MixedOptions):
    """The paper's recipe: clip at r, Poincaré exp map (Eq. 3), Poincaré distance (Eq. 2)."""
    clipped = [[x * min(1.0, o.clip_radius / _norm(v)) for x in v] for v in z]
    d_cos = [[2 - 2 * _cos(a, b) for b in z] for a in z]
    pts = [_poincare_point(v, o.curvature) for v in clipped]
    d_hyp = [
        [0.0 if i == j else _poincare_distance(a, b, o.curvature) for j, b in enumerate(pts)] for i, a in enumerate(pts)
    ]
    return _supcon(d_cos, d_hyp, labels, o.lam, o.tau)


@pytest.mark.parametrize("labels", [[0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 1, 2]])
def test_mixed_loss_by_hand_for_a_euclidean_model(labels):
    o = MixedOptions()
    assert (o.lam, o.tau, o.curvature, o.clip_radius) == (3.0, 0.2, 0.1, 2.3)  # paper: c = 0.1, r = 2.3
    got = mixed_geometry_loss(_euclidean_out(Z), torch.tensor(labels), torch.tensor(1.0))
    assert float(got) == pytest.approx(
        _hand_euclidean(Z, labels, o), rel=1e-4, abs=1e-6
    )  # float32 loss, some labelings give ~1e-4


def test_mixed_loss_by_hand_with_other_options():
    o = MixedOptions(lam=1.5, tau=0.5, curvature=0.7, clip_radius=1.0)
    labels = [1, 0, 1, 0]
    got = mixed_geometry_loss(_euclidean_out(Z), torch.tensor(labels), torch.tensor(1.0), o)
    assert float(got) == pytest.approx(
        _hand_euclidean(Z, labels, o), rel=1e-4, abs=1e-6
    )  # float32 loss, some labelings give ~1e-4
    # λ = 0 leaves the cosine part alone: only directions matter then
    o0 = MixedOptions(lam=0.0, tau=0.5)
    scaled = [[x * s for x in v] for v, s in zip(Z, [0.1, 3.0, 0.5, 7.0])]
    a = mixed_geometry_loss(_euclidean_out(Z), torch.tensor(labels), torch.tensor(1.0), o0)
    b = mixed_geometry_loss(_euclidean_out(scaled), torch.tensor(labels), torch.tensor(1.0), o0)
    assert float(a) == pytest.approx(float(b), rel=1e-5)
    # ...but the hyperbolic part sees the norms
    a3 = mixed_geometry_loss(_euclidean_out(Z), torch.tensor(labels), torch.tensor(1.0))
    b3 = mixed_geometry_loss(_euclidean_out(scaled), torch.tensor(labels), torch.tensor(1.0))
    assert float(a3) != pytest.approx(float(b3), rel=1e-3)


def test_mixed_loss_on_a_lorentz_model_uses_its_own_hyperboloid_points():
    """emb has d+1 columns: D_hyp is the geodesic distance of emb with the model's K; D_cos still uses z."""
    k = 0.5
    spaces = [[0.3, -0.2, 0.1], [1.0, 0.5, -0.4], [-0.6, 0.2, 0.8], [0.05, 0.0, -0.1]]
    emb = [[math.sqrt(1 / k + sum(x * x for x in s)), *s] for s in spaces]  # on ⟨x, x⟩_L = −1/K
    z = [[1.0, 0.0, 0.0], [0.7, 0.7, 0.1], [-0.3, 1.0, 0.0], [0.2, -0.9, 0.4]]  # deliberately not logmap(emb)
    labels = [0, 1, 1, 0]
    out = ModelOutput(torch.tensor(z), torch.tensor(emb), None, torch.zeros(4, dtype=torch.bool))
    o = MixedOptions()
    d_cos = [[2 - 2 * _cos(a, b) for b in z] for a in z]
    d_hyp = [[_lorentz_distance(a, b, k) for b in emb] for a in emb]
    expected = _supcon(d_cos, d_hyp, labels, o.lam, o.tau)
    got = mixed_geometry_loss(out, torch.tensor(labels), torch.tensor(k))
    assert float(got) == pytest.approx(expected, rel=1e-4)
    # not the Euclidean recipe (clip + lift z with c = 0.1)
    assert expected != pytest.approx(_hand_euclidean(z, labels, o), rel=1e-3)


def test_mixed_loss_without_positives_is_zero_and_gradients_are_finite():
    z = torch.tensor(Z, requires_grad=True)
    out = ModelOutput(z, F.normalize(z, dim=-1), None, torch.zeros(4, dtype=torch.bool))
    loss = mixed_geometry_loss(out, torch.tensor([0, 1, 2, 3]), torch.tensor(1.0))
    assert float(loss) == 0.0
    loss.backward()
    assert torch.isfinite(z.grad).all()
    z = torch.tensor([*Z, Z[0]], requires_grad=True)  # a duplicate item: a zero-distance positive pair
    out = ModelOutput(z, F.normalize(z, dim=-1), None, torch.zeros(5, dtype=torch.bool))
    loss = mixed_geometry_loss(out, torch.tensor([0, 1, 0, 1, 0]), torch.tensor(1.0))
    loss.backward()
    assert math.isfinite(float(loss)) and torch.isfinite(z.grad).all()


def test_base_loss_lookup():
    z = torch.tensor(Z)
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 3.0]])
    out = ModelOutput(z, F.normalize(z, dim=-1), logits, torch.zeros(4, dtype=torch.bool))
    y = torch.tensor([0, 1, 0, 1])
    ce = -sum(math.log(math.exp(r[t]) / sum(math.exp(v) for v in r)) for r, t in zip(logits.tolist(), y.tolist())) / 4
    k = torch.tensor(1.0)
    assert float(base_loss("ce")(out, y, k)) == pytest.approx(ce, rel=1e-6)
    mixed = _hand_euclidean(Z, y.tolist(), MixedOptions(tau=0.3))
    assert float(base_loss("mixed", {"tau": 0.3})(out, y, k)) == pytest.approx(mixed, rel=1e-4)
    assert float(base_loss("ce+mixed", {"tau": 0.3})(out, y, k)) == pytest.approx(ce + mixed, rel=1e-4)
    with pytest.raises(ConfigError, match="unknown base loss"):
        base_loss("supcon")
    with pytest.raises(ConfigError, match="temperature"):
        base_loss("mixed", {"temperature": 0.1})


def test_label_smoothing_mixes_the_target_with_uniform_and_caps_the_reward_for_a_larger_logit_gap():
    y = torch.tensor([0])
    k = torch.tensor(1.0)
    eps, c = 0.1, 4

    def smoothed(gap: float) -> float:
        logits = torch.tensor([[gap, 0.0, 0.0, 0.0]])
        out = ModelOutput(torch.zeros(1, 2), torch.zeros(1, 2), logits, torch.zeros(1, dtype=torch.bool))
        return float(base_loss("ce", label_smoothing=eps)(out, y, k))

    # by hand: (1 − ε)·CE(one-hot) + ε·mean over classes of −log p
    logp = torch.log_softmax(torch.tensor([2.0, 0.0, 0.0, 0.0]), 0)
    assert smoothed(2.0) == pytest.approx(float(-(1 - eps) * logp[0] - eps * logp.mean()), rel=1e-6)
    best = math.log(1 + c * (1 - eps) / eps)  # the gap where softmax equals the smoothed target
    gaps = [0.5 * i for i in range(1, 30)]
    losses = [smoothed(g) for g in gaps]
    assert losses[-1] > min(losses)  # a larger gap (a larger radius) stops paying: the optimum is finite...
    assert abs(gaps[losses.index(min(losses))] - best) <= 0.25  # ...at log(1 + C(1 − ε)/ε) = log 37
    with pytest.raises(ConfigError, match="label_smoothing must be in"):
        base_loss("ce", label_smoothing=1.0)


def test_poincare_and_lorentz_recipes_agree():
    """The code lifts 2v onto the Lorentz model; that is the paper's Poincaré point of v (λ₀ = 2)."""
    u, v, c = [0.3, -0.2, 0.5], [-0.4, 0.1, 0.2], 0.1
    assert _poincare_distance(_poincare_point(u, c), _poincare_point(v, c), c) == pytest.approx(
        _tangent_distance([2 * x for x in u], [2 * x for x in v], c), rel=1e-9
    )


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_train_model_with_ce_plus_mixed(tmp_path, digits64, geometry):
    torch.manual_seed(0)
    model = build_model(tiny_spec(geometry=geometry))
    cfg = train_config(epochs=1, batch_size=16, lr=0.05, device="cpu", seed=0, base_loss="ce+mixed")
    res = train_model(model, digits64, cfg, create_alignment("independent"), tmp_path / "ck")
    rec = res.history[-1]
    assert math.isfinite(rec["base"]) and rec["loss"] == pytest.approx(rec["base"])
    # the mixed part is really there: ce alone on the same run start is smaller than ce+mixed's base
    torch.manual_seed(0)
    model_ce = build_model(tiny_spec(geometry=geometry))
    res_ce = train_model(
        model_ce,
        digits64,
        train_config(epochs=1, batch_size=16, lr=0.05, device="cpu", seed=0),
        create_alignment("independent"),
        tmp_path / "ce",
    )
    assert rec["base"] > res_ce.history[-1]["base"] + 0.1
