"""``l2`` alignment (components/losses/methods/l2.py, docs/design.md §5): mean_i ‖n̂_i − ô_i‖²."""

from __future__ import annotations

import pytest
import torch

from components.errors import ConfigError
from components.losses import choose_alignment, create_alignment
from components.models import ModelOutput


def _out(emb: torch.Tensor) -> ModelOutput:
    return ModelOutput(emb, emb, None, torch.zeros(len(emb), dtype=torch.bool))


def test_l2_equals_hand_computed_mean_squared_distance_of_unit_vectors():
    new = torch.tensor([[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]])
    old = torch.tensor([[1.0, 0.0], [0.0, 5.0], [0.0, -0.5]])
    # n̂ = (0.6, 0.8), (1, 0), (0, -1);  ô = (1, 0), (0, 1), (0, -1)
    d0 = (0.6 - 1.0) ** 2 + 0.8**2  # 0.16 + 0.64 = 0.8
    d1 = 1.0 + 1.0
    d2 = 0.0
    expected = (d0 + d1 + d2) / 3
    out = create_alignment("l2")(_out(new), _out(old), torch.tensor([0, 1, 2]))
    assert set(out.terms) == {"l2"}
    assert float(out.terms["l2"]) == pytest.approx(expected, rel=1e-6)


def test_l2_is_scale_invariant_and_zero_for_identical_directions():
    torch.manual_seed(0)
    x = torch.randn(6, 5)
    m = create_alignment("l2")
    labels = torch.arange(6)
    assert float(m(_out(x), _out(x.clone()), labels).terms["l2"]) == pytest.approx(0.0, abs=1e-7)
    # only directions matter: rescaling either side per row changes nothing
    scale = torch.tensor([0.1, 2.0, 7.0, 1.0, 0.5, 3.0])[:, None]
    assert float(m(_out(x * scale), _out(x), labels).terms["l2"]) == pytest.approx(0.0, abs=1e-6)
    # opposite directions: ‖n̂ − ô‖² = 4 for every row
    assert float(m(_out(-x), _out(x), labels).terms["l2"]) == pytest.approx(4.0, rel=1e-6)


def test_l2_gradient_is_finite_and_reaches_only_new_embedding():
    torch.manual_seed(1)
    z = torch.randn(8, 16, requires_grad=True)
    old = torch.randn(8, 16)
    loss = create_alignment("l2")(_out(z), _out(old), torch.zeros(8, dtype=torch.long)).terms["l2"]
    loss.backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
    assert float(z.grad.abs().sum(1).min()) > 0
    # the gradient of ‖n̂ − ô‖² wrt z is tangent to the sphere at n̂: ⟨grad_i, z_i⟩ = 0
    assert torch.allclose((z.grad * z.detach()).sum(1), torch.zeros(8), atol=1e-6)


def test_l2_refuses_lorentz_models_and_missing_parent():
    m = choose_alignment("l2")
    with pytest.raises(ConfigError, match="euclidean"):
        m.check_models("lorentz", 16, "lorentz", 16)
    with pytest.raises(ConfigError, match="parent"):
        m.check_models("euclidean", 16, None, None)
    with pytest.raises(ConfigError):
        m.check_models("euclidean", 16, "euclidean", 32)
    m.check_models("euclidean", 16, "euclidean", 16)  # accepted
    assert m.requires_old and m.trains and not m.needs_reference
