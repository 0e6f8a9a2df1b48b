"""ModelSpec, the standard heads and the assembled embedding model (components/models/spec.py, heads/standard.py,
encoder.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from components.geometry import lorentz_inner
from components.models import ModelSpec, build_model
from components.models.heads.standard import LorentzHead
from tests.helpers import tiny_spec

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def test_spec_round_trip_through_plain_dict():
    spec = tiny_spec(
        class_names=tuple(str(i) for i in range(10)), zeta=1.2, curvature=0.7, norm_mean=(0.1,), norm_std=(0.3,)
    )
    d = spec.to_dict()
    assert isinstance(d["class_order"], list) and isinstance(d["class_names"], list)
    assert ModelSpec.from_dict(d) == spec
    assert spec.mismatches(ModelSpec.from_dict(d)) == []
    # survives torch's safe loader (only plain types inside)
    import io

    buf = io.BytesIO()
    torch.save(d, buf)
    buf.seek(0)
    assert ModelSpec.from_dict(torch.load(buf, weights_only=True)) == spec


def test_spec_validation():
    with pytest.raises(ValueError, match="unknown model metadata"):
        ModelSpec.from_dict({**tiny_spec().to_dict(), "colour": "blue"})
    with pytest.raises(ValueError, match="num_classes"):
        tiny_spec(num_classes=3)
    with pytest.raises(ValueError, match="zeta"):
        tiny_spec(zeta=0.0)
    with pytest.raises(ValueError, match="curvature"):
        tiny_spec(curvature=-1.0)
    with pytest.raises(ValueError, match="geometry"):
        tiny_spec(geometry="spherical")
    tiny_spec(geometry="euclidean", zeta=None)  # Euclidean models need no clip radius


def test_spec_mismatches_name_the_fields():
    a = tiny_spec()
    b = replace(a, zeta=1.2, class_order=(1, 0, 2, 3, 4, 5, 6, 7, 8, 9))
    diffs = a.mismatches(b)
    assert len(diffs) == 2
    assert any(d.startswith("zeta") for d in diffs) and any(d.startswith("class_order") for d in diffs)
    assert a.mismatches(replace(a, curvature=1.0 + 1e-12)) == []  # float noise is not a mismatch
    assert a.mismatches(replace(a, class_names=("x",) * 10)) == []  # not an identity field
    assert tiny_spec().stored_dim == 17 and tiny_spec(geometry="euclidean").stored_dim == 16


def test_the_lorentz_head_rescales_then_clips():
    head = LorentzHead(4, 4, zeta=1.0, curvature=1.0)
    with torch.no_grad():  # the projection passes the features through
        head.proj.weight.copy_(torch.eye(4))
        head.proj.bias.zero_()
    out = head(torch.tensor([[6.0, 8.0, 0.0, 0.0], [0.2, 0.0, 0.0, 0.0]]))
    # d = 4: z / 2 = [3, 4, 0, 0] (norm 5) → clipped to norm 1; [0.1, 0, 0, 0] kept
    assert torch.allclose(out.z, torch.tensor([[0.6, 0.8, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0]]))
    assert out.clipped.tolist() == [True, False]
    assert torch.allclose(out.aux["radius"], torch.tensor([5.0, 0.1]))


def test_lorentz_model_forward():
    torch.manual_seed(0)
    model = build_model(tiny_spec(zeta=1.0)).eval()
    x = torch.rand(5, 1, 8, 8)
    out = model(x)
    assert out.z.shape == (5, 16) and out.emb.shape == (5, 17) and out.logits.shape == (5, 10)
    assert out.clipped.shape == (5,) and out.clipped.dtype == torch.bool
    assert out.emb.dtype == torch.float32
    inner = lorentz_inner(out.emb.double(), out.emb.double())
    assert torch.allclose(inner, torch.full_like(inner, -1.0), atol=1e-5)
    assert torch.all(out.emb[:, 0] >= 1.0)
    assert float(out.z.norm(dim=-1).max()) <= 1.0 + 1e-5
    assert model(x, with_logits=False).logits is None
    # classify() is what produced the logits
    assert torch.allclose(model.classify(out.emb), out.logits)


def test_lorentz_model_clip_radius():
    torch.manual_seed(0)
    x = torch.rand(6, 1, 8, 8)
    small = build_model(tiny_spec(zeta=1e-3)).eval()
    out = small(x)
    assert out.clipped.all()
    assert torch.allclose(out.z.norm(dim=-1), torch.full((6,), 1e-3), rtol=1e-4)
    torch.manual_seed(0)
    big = build_model(tiny_spec(zeta=1e3)).eval()
    assert not big(x).clipped.any()


def test_curvature_of_the_model():
    model = build_model(tiny_spec(curvature=0.5))
    assert float(model.curvature) == pytest.approx(0.5)
    assert not any(n.endswith("log_k") for n, _ in model.named_parameters())
    learn = build_model(tiny_spec(curvature=0.5, learn_curvature=True))
    assert any(n.endswith("log_k") for n, _ in learn.named_parameters())
    out = learn.eval()(torch.rand(2, 1, 8, 8))
    assert torch.allclose(
        lorentz_inner(out.emb.double(), out.emb.double()), torch.full((2,), -2.0, dtype=torch.float64), atol=1e-5
    )


def test_euclidean_model_forward():
    torch.manual_seed(0)
    model = build_model(tiny_spec(geometry="euclidean")).eval()
    out = model(torch.rand(4, 1, 8, 8))
    assert out.emb.shape == (4, 16) and out.logits.shape == (4, 10)
    assert torch.allclose(out.emb.norm(dim=-1), torch.ones(4), atol=1e-5)
    assert not out.clipped.any()
    assert math.isclose(float(model.curvature), 1.0)


def test_input_normalisation_is_part_of_the_model():
    torch.manual_seed(0)
    a = build_model(tiny_spec(norm_mean=(0.5,), norm_std=(0.25,))).eval()
    assert "norm_mean" in a.state_dict() and "norm_std" in a.state_dict()
    torch.manual_seed(0)
    b = build_model(tiny_spec(norm_mean=(0.0,), norm_std=(1.0,))).eval()
    x = torch.rand(2, 1, 8, 8)
    # same weights, different normalisation → different embeddings
    assert not torch.allclose(a(x).emb, b(x).emb)


def test_model_resizes_inputs_to_its_input_size():
    """A ViT fed 8×8 images resizes them itself (ModelSpec.input_size), like it normalises them."""
    torch.manual_seed(0)
    spec = tiny_spec(
        backbone="vit_tiny_patch16_224",
        backbone_kwargs={"img_size": 32, "patch_size": 8},
        small_stem=False,
        input_size=32,
    )
    model = build_model(spec).eval()
    x = torch.rand(2, 1, 8, 8)
    out = model(x)
    assert out.emb.shape == (2, 17)
    big = torch.nn.functional.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    assert torch.allclose(model(big).emb, out.emb, atol=1e-6)  # identical to feeding pre-resized images


def test_the_tanh_squash_keeps_a_radial_gradient_beyond_zeta_where_the_clip_has_none():
    from components.models.radial import SATURATION_TOL, bound_radius

    direction = torch.tensor([[0.6, 0.8]])
    for r in (0.5, 1.0, 2.0, 5.0):  # inside, at and beyond ζ = 1
        radius = torch.tensor(r, requires_grad=True)
        out, sat = bound_radius(direction * radius, zeta=1.0, radial="tanh")
        (g,) = torch.autograd.grad(out.norm(), radius)
        assert out.norm().item() == pytest.approx(math.tanh(r))  # r ↦ ζ·tanh(r/ζ)
        assert g.item() == pytest.approx(1.0 / math.cosh(r) ** 2, rel=1e-3) and g.item() > 0  # sech²(r/ζ), float32
        assert bool(sat) == (math.tanh(r) >= 1 - SATURATION_TOL)
        radius = torch.tensor(r, requires_grad=True)
        out, sat = bound_radius(direction * radius, zeta=1.0, radial="clip")
        (g,) = torch.autograd.grad(out.norm(), radius)
        assert g.item() == pytest.approx(1.0 if r <= 1.0 else 0.0, abs=1e-6) and bool(sat) == (
            r >= 1.0
        )  # none beyond ζ


def test_the_bound_commutes_with_rescaling_zeta():
    from components.models.radial import bound_radius

    z = torch.randn(64, 8) * 3
    for radial in ("clip", "tanh"):
        big, _ = bound_radius(z, 1.2, radial)
        small, _ = bound_radius(z * (1.0 / 1.2), 1.0, radial)  # a ζ-restarting backfill's rescaled model
        assert torch.allclose(small, big / 1.2, atol=1e-6)


def test_a_learned_scale_starts_at_one_over_sqrt_d_and_stays_at_most_one():
    from components.models.radial import LearnableScale

    s = LearnableScale(16)
    assert s.alpha.item() == pytest.approx(0.25)
    with torch.no_grad():
        s.u.fill_(-50.0)
    assert 0 < s.alpha.item() <= 1.0
    spec = replace(tiny_spec(embed_dim=8, num_classes=3, class_order=(0, 1, 2)), radial="tanh", learn_scale=True)
    model = build_model(spec)
    out = model(torch.zeros(4, 1, 8, 8, dtype=torch.uint8))
    assert out.emb.shape == (4, 9) and not out.clipped.any()
