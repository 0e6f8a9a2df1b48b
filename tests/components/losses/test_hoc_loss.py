"""``hoc`` alignment (components/losses/methods/hoc.py, docs/design.md §5).

ℓ_i = −μ⟨ô_i, n̂_i⟩ + logsumexp_{j: y_j ≠ y_i} μ⟨ô_i, n̂_j⟩; anchors without other-class items give 0.
"""

from __future__ import annotations

import math

import pytest
import torch

from components.errors import ConfigError
from components.losses import choose_alignment, create_alignment
from components.models import ModelOutput

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def _out(emb: torch.Tensor) -> ModelOutput:
    return ModelOutput(emb, emb, None, torch.zeros(len(emb), dtype=torch.bool))


def _unit(v):
    n = math.sqrt(sum(float(a) ** 2 for a in v))
    return [float(a) / n for a in v]


def _hand_hoc(new, old, labels, mu):
    n = [_unit(v) for v in new]
    o = [_unit(v) for v in old]
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    per = []
    for i in range(len(n)):
        others = [mu * dot(o[i], n[j]) for j in range(len(n)) if int(labels[j]) != int(labels[i])]
        if not others:
            per.append(0.0)
            continue
        per.append(-mu * dot(o[i], n[i]) + math.log(sum(math.exp(s) for s in others)))
    return per


def _data(seed=0, b=5, d=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g), torch.randn(b, d, generator=g)


@pytest.mark.parametrize("mu", [10.0, 2.5])
def test_hoc_matches_hand_computation(mu):
    new, old = _data()
    labels = torch.tensor([0, 1, 0, 2, 1])
    m = create_alignment("hoc", mu=mu)
    out = m(_out(new), _out(old), labels)
    assert set(out.terms) == {"hoc"}
    expected = sum(_hand_hoc(new, old, labels, mu)) / 5
    assert float(out.terms["hoc"]) == pytest.approx(expected, rel=1e-5)


def test_default_mu_is_ten():
    new, old = _data(1)
    labels = torch.tensor([0, 1, 1, 0, 1])
    got = float(create_alignment("hoc")(_out(new), _out(old), labels).terms["hoc"])
    assert got == pytest.approx(sum(_hand_hoc(new, old, labels, 10.0)) / 5, rel=1e-5)


def test_same_class_items_are_not_negatives():
    """Anchor 0's term uses only other-class new embeddings: moving a same-class new embedding
    (item 2, not item 0 itself) changes its own term but not anchor 0's."""
    import torch.nn.functional as F

    from components.losses.methods.hoc import hoc_loss

    new, old = _data(2)
    labels = torch.tensor([0, 1, 0, 2, 1])
    moved = new.clone()
    moved[2] = torch.tensor([5.0, -1.0, 0.0, 2.0])
    a = hoc_loss(F.normalize(new, dim=-1), F.normalize(old, dim=-1), labels, 10.0)
    b = hoc_loss(F.normalize(moved, dim=-1), F.normalize(old, dim=-1), labels, 10.0)
    assert float(a[0]) == pytest.approx(float(b[0]), rel=1e-6)
    assert float(a[2]) != pytest.approx(float(b[2]), rel=1e-4)
    assert float(a[1]) != pytest.approx(float(b[1]), rel=1e-6)  # other class: n̂_2 is its negative


def test_anchor_without_other_class_contributes_zero_and_gradients_stay_finite():
    new, old = _data(3, b=4)
    # an anchor lacks other-class items only when the whole batch is its class: loss 0
    z = new.clone().requires_grad_(True)
    out = create_alignment("hoc")(_out(z), _out(old), torch.zeros(4, dtype=torch.long))
    assert float(out.terms["hoc"]) == 0.0
    out.terms["hoc"].backward()
    assert torch.isfinite(z.grad).all()
    # a singleton class (item 3) still has negatives (the other three)
    labels = torch.tensor([0, 0, 0, 1])
    z = new.clone().requires_grad_(True)
    loss = create_alignment("hoc")(_out(z), _out(old), labels).terms["hoc"]
    assert float(loss) == pytest.approx(sum(_hand_hoc(new, old, labels, 10.0)) / 4, rel=1e-5)
    loss.backward()
    assert torch.isfinite(z.grad).all()


def test_hoc_options_and_geometry():
    with pytest.raises(ConfigError, match="mu"):
        create_alignment("hoc", mu=0.0)
    with pytest.raises(ConfigError):
        choose_alignment("hoc").check_models("lorentz", 16, "lorentz", 16)
    choose_alignment("hoc").check_models("euclidean", 16, "euclidean", 16)
