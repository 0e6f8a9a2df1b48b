"""ε from data (components/losses/cone_epsilon.py, docs/design.md §4.6): the entailment cone wide enough for the
parent's own view-to-view disagreement, at the documented percentile, never narrower than the configured ε."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from components.data.batches import ImageTensor, augment_batch
from components.errors import ConfigError
from components.geometry import expmap0, exterior_angle, half_aperture
from components.losses import AlignmentContext, create_alignment
from components.losses.cone_epsilon import item_epsilons, view_epsilon
from components.models import build_model
from components.training import train_model
from tests.helpers import tiny_spec, train_config


def _plane(r: float, angle: float) -> torch.Tensor:
    """A tangent vector of radius r at ``angle`` (radians) from e1, in the (e1, e2) plane of R^4. → (1, 4)"""
    return torch.tensor([[r * math.cos(angle), r * math.sin(angle), 0.0, 0.0]], dtype=torch.float64)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("angle_deg", [2.0, 5.0, 10.0])
def test_an_items_epsilon_puts_its_modelled_successor_on_the_cone_boundary(k, angle_deg):
    r, room = 1.0, 0.2
    z_a, z_b = _plane(r, 0.0), _plane(0.7, math.radians(angle_deg))  # view b's radius does not matter, only its way
    eps = float(item_epsilons(z_a, z_b, k, room)[0])
    h_o, h_n = expmap0(z_a, k), expmap0(_plane(r + room, math.radians(angle_deg)), k)
    ext = exterior_angle(h_o, h_n, k)
    assert float(ext[0]) < math.pi / 2  # reachable: a cone of some ε < ½√K‖h_o,s‖ holds it
    assert float(half_aperture(h_o, k, eps)[0]) == pytest.approx(float(ext[0]), abs=1e-9)


def test_item_epsilons_grow_with_the_view_angle_and_shrink_with_room():
    z_a = _plane(1.0, 0.0).repeat(4, 1)
    z_b = torch.cat([_plane(1.0, math.radians(a)) for a in (0.0, 5.0, 15.0, 30.0)])
    eps = item_epsilons(z_a, z_b, 1.0, 0.2)
    assert float(eps[0]) == pytest.approx(0.0, abs=1e-5)  # the same direction, further out: on the cone's axis
    assert torch.all(eps[1:] > eps[:-1])
    assert torch.all(item_epsilons(z_a, z_b, 1.0, 0.5)[1:] < eps[1:])  # more radial room: a narrower cone holds it
    # no room at all: a successor at the apex's radius is outside every cone narrower than π/2, so it needs that one
    flat = item_epsilons(z_a[1:], z_b[1:], 1.0, 0.0)
    assert torch.allclose(flat, torch.full_like(flat, 0.5 * math.sinh(1.0)), atol=1e-9)


@pytest.fixture(scope="module")
def parent(digits64: ImageTensor, tmp_path_factory) -> torch.nn.Module:
    """A parent trained for a few epochs (an untrained one maps every image to almost the same direction)."""
    torch.manual_seed(0)
    model = build_model(tiny_spec(zeta=1.0))
    cfg = train_config(epochs=4, batch_size=16, lr=0.05)
    return train_model(model, digits64, cfg, create_alignment("independent"), tmp_path_factory.mktemp("p")).model


def _batches(data: ImageTensor, size: int = 24):
    for i in range(0, len(data.labels), size):
        yield data.images[i : i + size].float() / 255.0, data.labels[i : i + size]


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return augment_batch(x, crop_padding=1, hflip=True, generator=gen)


@pytest.mark.parametrize("percentile", [50.0, 90.0])
def test_view_epsilon_is_the_documented_percentile_of_the_items_epsilons(digits64: ImageTensor, parent, percentile):
    got = view_epsilon(parent, _batches(digits64), _augment, room=0.2, percentile=percentile, floor=1e-6, seed=7)
    # by hand: the same two views (one generator seeded 7, view a then view b per batch), then NumPy's percentile
    gen = torch.Generator().manual_seed(7)
    za, zb = [], []
    with torch.no_grad():
        for x, _ in _batches(digits64):
            za.append(parent(_augment(x, gen), with_logits=False).z.double())
            zb.append(parent(_augment(x, gen), with_logits=False).z.double())
    eps_i = item_epsilons(torch.cat(za), torch.cat(zb), 1.0, 0.2).numpy()
    assert got.items == 64 and got.percentile == percentile
    assert got.from_data == pytest.approx(float(np.percentile(eps_i, percentile)), rel=1e-12)
    assert got.epsilon == got.from_data
    assert f"P{percentile:g} of the parent's view-to-view ε over 64 training images" in got.reason
    assert 0.0 < got.view_angle_deg < 90.0


def test_view_epsilon_never_narrows_the_configured_cone(digits64: ImageTensor, parent):
    got = view_epsilon(parent, _batches(digits64), _augment, room=0.2, percentile=50.0, floor=5.0, seed=0)
    assert got.epsilon == 5.0 and got.from_data < 5.0
    assert "< the configured ε 5, kept" in got.reason


def test_hbct_trains_with_the_epsilon_it_chose_from_the_parent(tmp_path: Path, digits64: ImageTensor, parent):
    old = parent
    cfg = train_config(epochs=1, batch_size=32, lr=0.05)

    def train(options: dict, run: str):
        torch.manual_seed(1)
        model = build_model(tiny_spec(zeta=1.2))
        loss = create_alignment("hbct", **options)
        return train_model(model, digits64, cfg, loss, tmp_path / run, old_model=old), loss

    fixed, _ = train({}, "fixed")
    assert fixed.choices == {}  # the configured ε, nothing chosen
    chosen, loss = train({"epsilon_rule": "view_angle", "epsilon": 0.05}, "view")
    eps = chosen.choices["epsilon"]
    assert eps >= 0.05 and loss.epsilon == eps  # the cones trained with the chosen ε
    assert "over 64 training images" in chosen.choices["epsilon_reason"]
    assert "room Δζ = 0.2" in chosen.choices["epsilon_reason"]  # ζ 1.0 → 1.2
    again, _ = train({"epsilon_rule": "view_angle", "epsilon": 0.05}, "view-again")
    assert again.choices == chosen.choices  # seeded: the same sample and views every time (a resumed run too)


def test_the_view_angle_rule_refuses_a_context_without_training_data():
    loss = create_alignment("hbct", epsilon_rule="view_angle")
    ctx = AlignmentContext(tiny_spec(zeta=1.2), torch.device("cpu"), old_model=build_model(tiny_spec()).eval())
    with pytest.raises(ConfigError, match="epsilon_rule view_angle needs the training data"):
        loss.prepare(ctx)


@pytest.mark.parametrize(
    "options, needle", [({"epsilon_rule": "angle"}, "epsilon_rule"), ({"epsilon_percentile": 0}, "epsilon_percentile")]
)
def test_invalid_epsilon_rule_options_are_config_errors(options, needle):
    with pytest.raises(ConfigError, match=needle):
        create_alignment("hbct", **options)
