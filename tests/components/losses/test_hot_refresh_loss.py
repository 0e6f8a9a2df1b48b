"""``hot_refresh`` RA-comp loss (components/losses/methods/hot_refresh.py, docs/design.md §5)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from components.errors import ConfigError
from components.losses import choose_alignment, create_alignment
from components.models import ModelOutput

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def _out(emb: torch.Tensor) -> ModelOutput:
    return ModelOutput(emb, emb, None, torch.zeros(len(emb), dtype=torch.bool))


def _batch():
    g = torch.Generator().manual_seed(0)
    new = torch.randn(4, 3, generator=g, dtype=torch.float64)
    old = torch.randn(4, 3, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1])
    return new, old, labels


def _hand_ra_comp(new, old, labels, tau):
    """Per anchor: −log softmax of the positive among [⟨n̂_i,ô_i⟩, ⟨n̂_i,ô_j⟩, ⟨n̂_i,n̂_j⟩ (y_j ≠ y_i)] / τ."""
    n = [v / math.sqrt(sum(float(a) ** 2 for a in v)) for v in new]
    o = [v / math.sqrt(sum(float(a) ** 2 for a in v)) for v in old]
    dot = lambda a, b: sum(float(x) * float(y) for x, y in zip(a, b))
    losses = []
    for i in range(len(n)):
        pos = dot(n[i], o[i]) / tau
        negs = []
        for j in range(len(n)):
            if int(labels[j]) != int(labels[i]):
                negs.append(dot(n[i], o[j]) / tau)
                negs.append(dot(n[i], n[j]) / tau)
        denom = math.exp(pos) + sum(math.exp(s) for s in negs)
        losses.append(-(pos - math.log(denom)))
    return sum(losses) / len(losses)


@pytest.mark.parametrize("tau", [0.5, 0.1])
def test_ra_comp_matches_hand_computation_on_two_class_batch(tau):
    new, old, labels = _batch()
    m = create_alignment("hot_refresh", tau=tau)
    out = m(_out(new.float()), _out(old.float()), labels)
    assert set(out.terms) == {"ra_comp"}
    assert float(out.terms["ra_comp"]) == pytest.approx(_hand_ra_comp(new, old, labels, tau), rel=1e-5)


def test_default_tau_is_half():
    new, old, labels = _batch()
    got = float(create_alignment("hot_refresh")(_out(new.float()), _out(old.float()), labels).terms["ra_comp"])
    assert got == pytest.approx(_hand_ra_comp(new, old, labels, 0.5), rel=1e-5)


def test_same_class_entries_are_masked():
    """Perturbing item 1's old embedding (same class as item 0) changes only item 1's positive:
    anchor 0's loss is unchanged, and the per-batch loss changes exactly by anchor 1's change."""
    new, old, labels = _batch()
    m = create_alignment("hot_refresh", tau=0.5)
    perturbed = old.clone()
    perturbed[1] = torch.tensor([-3.0, 0.5, 2.0], dtype=torch.float64)
    from components.losses.methods.hot_refresh import ra_comp

    nn_, oo, pp = F.normalize(new, dim=-1), F.normalize(old, dim=-1), F.normalize(perturbed, dim=-1)
    per_a = ra_comp(nn_, oo, labels, 0.5)
    per_b = ra_comp(nn_, pp, labels, 0.5)
    assert float(per_a[0]) == pytest.approx(float(per_b[0]), rel=1e-12)  # anchor 0 does not see ô_1
    assert float(per_a[1]) != pytest.approx(float(per_b[1]), rel=1e-3)  # anchor 1's positive moved
    # anchors 2, 3 (other class) do see ô_1 as a negative
    assert float(per_a[2]) != pytest.approx(float(per_b[2]), rel=1e-6)
    # the whole-batch value agrees with the hand computation after the perturbation too
    got = float(m(_out(new.float()), _out(perturbed.float()), labels).terms["ra_comp"])
    assert got == pytest.approx(_hand_ra_comp(new, perturbed, labels, 0.5), rel=1e-5)


def test_single_class_batch_has_only_the_positive():
    new, old, _ = _batch()
    labels = torch.zeros(4, dtype=torch.long)
    z = new.float().clone().requires_grad_(True)
    out = create_alignment("hot_refresh")(_out(z), _out(old.float()), labels)
    assert float(out.terms["ra_comp"]) == pytest.approx(0.0, abs=1e-6)  # −log softmax of a lone logit
    out.terms["ra_comp"].backward()
    assert torch.isfinite(z.grad).all()


def test_gradient_is_finite_and_pulls_towards_old():
    new, old, labels = _batch()
    z = new.float().clone().requires_grad_(True)
    loss = create_alignment("hot_refresh")(_out(z), _out(old.float()), labels).terms["ra_comp"]
    loss.backward()
    assert torch.isfinite(z.grad).all() and float(z.grad.abs().sum()) > 0
    # a small step against the gradient lowers the loss
    with torch.no_grad():
        z2 = z - 0.01 * z.grad
    loss2 = create_alignment("hot_refresh")(_out(z2), _out(old.float()), labels).terms["ra_comp"]
    assert float(loss2) < float(loss)


@pytest.mark.parametrize("tau", [0.0, -0.1])
def test_non_positive_tau_is_a_config_error(tau):
    with pytest.raises(ConfigError, match="tau"):
        create_alignment("hot_refresh", tau=tau)


def test_unknown_option_and_lorentz_refused():
    with pytest.raises(ConfigError, match="temperature"):
        create_alignment("hot_refresh", temperature=0.5)
    with pytest.raises(ConfigError):
        choose_alignment("hot_refresh").check_models("lorentz", 16, "lorentz", 16)
