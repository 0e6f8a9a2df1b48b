"""``bt2`` alignment (components/losses/methods/bt2.py; the BT² paper §3.4, docs/design.md §5.7)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from components.errors import CheckpointMismatchError, ConfigError
from components.losses import AlignmentContext, choose_alignment, create_alignment
from components.models import ModelOutput, build_model
from components.training import train_model
from tests.helpers import tiny_spec, train_config

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def _old_model(num_classes=3, seed=0):
    torch.manual_seed(seed)
    spec = tiny_spec(geometry="euclidean", num_classes=num_classes, class_order=tuple(range(num_classes)))
    m = build_model(spec).eval()
    m.requires_grad_(False)
    return m


def _new_spec(num_classes=4, compat_dim=16, extra_dims=4):
    return tiny_spec(
        geometry="euclidean",
        head="bt2",
        compat_dim=compat_dim,
        extra_dims=extra_dims,
        num_classes=num_classes,
        class_order=tuple(range(num_classes)),
    )


def _prepared(old, label_map, options=None):
    m = create_alignment("bt2", synthesize_new_classes=False, **(options or {}))
    m.prepare(AlignmentContext(_new_spec(), torch.device("cpu"), old, label_map))
    return m


def _new_output(b=6, seed=1, width=16, m=16):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(b, width + 4, generator=g)
    compat = F.normalize(torch.randn(b, width, generator=g), dim=-1).requires_grad_(True)
    phi3 = F.normalize(torch.randn(b, m, generator=g), dim=-1).requires_grad_(True)
    out = ModelOutput(
        z, F.normalize(z, dim=-1), None, torch.zeros(b, dtype=torch.bool), {"compat": compat, "independent": phi3}
    )
    return out, compat, phi3


def _hand_influence(old, compat, labels, label_map):
    """CE of the old classifier on the compatible prefix; a cosine classifier has unit rows and no bias."""
    w = old.classifier.fc.weight.tolist()
    if old.classifier.cosine:
        w = [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in w]
    b = old.classifier.fc.bias.tolist() if old.classifier.fc.bias is not None else [0.0] * len(w)
    s = old.classifier.scale
    losses = []
    for x, y in zip(compat.tolist(), labels.tolist()):
        t = int(label_map[y])
        if t < 0:
            continue
        logits = [s * (sum(xi * wi for xi, wi in zip(x, row)) + bi) for row, bi in zip(w, b)]
        lse = math.log(sum(math.exp(v) for v in logits))
        losses.append(lse - logits[t])
    return sum(losses) / len(losses)


def test_model_overrides_ask_for_the_bt2_head_on_the_parent_width():
    m = choose_alignment("bt2", {"extra_dims": 8})
    parent = tiny_spec(geometry="euclidean", embed_dim=12)
    over = m.model_overrides(parent)
    assert {k: over[k] for k in ("head", "compat_dim", "extra_dims")} == {
        "head": "bt2",
        "compat_dim": 12,
        "extra_dims": 8,
    }
    assert set(over) <= {"head", "compat_dim", "extra_dims", "embed_dim", "bt2_scale"}
    # Algorithm 1 needs n − d ≤ m: the overridden spec must be buildable
    spec = tiny_spec(geometry="euclidean", **over)
    assert spec.output_dim == spec.embed_dim + 8 and spec.compat_dim == 12
    assert (
        choose_alignment("bt2").model_overrides(tiny_spec(geometry="euclidean", embed_dim=64))["extra_dims"] == 32
    )  # default
    # a BT² parent: the compatible prefix is its whole (m + d)-wide output
    bt2_parent = tiny_spec(geometry="euclidean", embed_dim=12, head="bt2", compat_dim=12, extra_dims=8)
    over2 = m.model_overrides(bt2_parent)
    assert over2["compat_dim"] == 20
    child = tiny_spec(geometry="euclidean", **over2)
    assert child.compat_dim - child.extra_dims <= child.embed_dim
    with pytest.raises(ConfigError, match="parent"):
        m.model_overrides(None)
    with pytest.raises(ConfigError, match="extra_dims"):
        create_alignment("bt2", extra_dims=-1)


def test_flags_and_geometry_checks():
    m = choose_alignment("bt2")
    assert m.requires_old and m.trains and m.needs_reference
    assert choose_alignment("bt2", {"use_reference": False}).needs_reference is False
    with pytest.raises(ConfigError, match="[Ee]uclidean"):
        m.check_models("lorentz", 16, "lorentz", 16)
    with pytest.raises(ConfigError, match="[Ee]uclidean"):
        m.check_models("euclidean", 16, "lorentz", 16)
    with pytest.raises(ConfigError, match="parent"):
        m.check_models("euclidean", 16, None, None)
    m.check_models("euclidean", 24, "euclidean", 16)  # the new model may be wider than the parent


def test_prepare_refuses_a_new_model_without_the_bt2_head():
    m = create_alignment("bt2", synthesize_new_classes=False)
    with pytest.raises(ConfigError, match="head"):
        m.prepare(
            AlignmentContext(
                tiny_spec(geometry="euclidean", num_classes=4, class_order=(0, 1, 2, 3)),
                torch.device("cpu"),
                _old_model(),
                torch.tensor([0, 1, 2, -1]),
            )
        )


def test_forward_applies_the_old_classifier_to_the_compatible_prefix():
    old = _old_model()
    label_map = torch.tensor([2, 0, 1, -1])  # new label → old label; new label 3 is unseen
    m = _prepared(old, label_map, {"use_reference": False})
    new, compat, _ = _new_output()
    labels = torch.tensor([0, 1, 2, 3, 1, 0])
    out = m(new, None, labels)
    assert set(out.terms) == {"influence"}
    assert float(out.terms["influence"]) == pytest.approx(
        _hand_influence(old, compat.detach(), labels, label_map), rel=1e-5
    )
    assert out.stats["bct_known_fraction"] == pytest.approx(5 / 6)
    # it is the compat prefix, not the full embedding, that the old classifier judges
    out.terms["influence"].backward()
    assert compat.grad is not None and float(compat.grad[labels != 3].abs().sum(1).min()) > 0
    assert float(compat.grad[labels == 3].abs().sum()) == 0.0


def test_mimic_term_pulls_phi3_to_the_reference_model():
    old = _old_model()
    label_map = torch.tensor([0, 1, 2, -1])
    m = _prepared(old, label_map)
    new, compat, phi3 = _new_output()
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    g = torch.Generator().manual_seed(7)
    ref_emb = torch.randn(6, 16, generator=g) * 3  # not unit: the method normalises it
    ref = ModelOutput(ref_emb, ref_emb, None, torch.zeros(6, dtype=torch.bool))
    out = m(new, None, labels, ref=ref)
    assert set(out.terms) == {"influence", "mimic"}
    p, r = phi3.detach().tolist(), ref_emb.tolist()
    expected = sum(1 - sum(a * b for a, b in zip(x, y)) / math.sqrt(sum(b * b for b in y)) for x, y in zip(p, r)) / 6
    assert float(out.terms["mimic"]) == pytest.approx(expected, rel=1e-5)
    assert float(out.terms["influence"]) == pytest.approx(
        _hand_influence(old, compat.detach(), labels, label_map), rel=1e-5
    )
    # φ3 equal to the reference direction: mimic 0
    same = ModelOutput(phi3.detach() * 2.0, phi3.detach() * 2.0, None, torch.zeros(6, dtype=torch.bool))
    assert float(m(new, None, labels, ref=same).terms["mimic"]) == pytest.approx(0.0, abs=1e-6)
    # no reference given / reference switched off: no mimic term
    assert "mimic" not in m(new, None, labels).terms
    off = _prepared(old, label_map, {"use_reference": False})
    assert "mimic" not in off(new, None, labels, ref=ref).terms


def test_train_model_with_old_and_reference_models(tmp_path, digits64):
    old = _old_model(num_classes=5)
    torch.manual_seed(2)
    ref = build_model(tiny_spec(geometry="euclidean")).eval()
    choice = choose_alignment("bt2", {"extra_dims": 4})
    method = choice.build()
    spec = tiny_spec(geometry="euclidean", **choice.model_overrides(old.spec))
    assert spec.output_dim == 20 and spec.compat_dim == 16
    torch.manual_seed(1)
    model = build_model(spec)
    cfg = train_config(epochs=1, batch_size=16, lr=0.05, device="cpu", seed=0)
    with pytest.raises(CheckpointMismatchError, match="independently trained"):
        train_model(model, digits64, cfg, method, tmp_path / "noref", old_model=old)
    res = train_model(model, digits64, cfg, method, tmp_path / "ck", old_model=old, reference_model=ref)
    rec = res.history[-1]
    for key in ("influence", "mimic", "base", "loss"):
        assert key in rec and math.isfinite(rec[key]), key
    assert rec["loss"] == pytest.approx(rec["base"] + cfg.align_weight * (rec["influence"] + rec["mimic"]), rel=1e-5)
    with torch.no_grad():
        out = res.model(digits64.images[:4].float() / 255.0)
    assert out.emb.shape == (4, 20) and out.aux["compat"].shape == (4, 16)
    # synthesised rows for the 5 classes the old model never saw
    assert method.old_weight.shape == (10, 16) and (method.label_map >= 0).all()


def test_bt2_parent_is_judged_by_prototypes_of_its_embedding():
    """A BT² parent's classifier reads its φ3, not its (m+d)-wide embedding, so the influence loss of its
    child uses unit class means of the parent's embedding as the old classifier (no bias, the spec's scale)."""
    torch.manual_seed(0)
    parent = build_model(_new_spec(num_classes=3, compat_dim=16, extra_dims=4)).eval()  # output_dim 20
    parent.requires_grad_(False)
    g = torch.Generator().manual_seed(3)
    images = torch.rand(9, 1, 8, 8, generator=g)
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0])  # new labels; new label 3 is unseen by the parent
    label_map = torch.tensor([1, 2, 0, -1])
    choice = choose_alignment("bt2", {"synthesize_new_classes": False, "use_reference": False, "extra_dims": 4})
    method = choice.build()
    child_spec = tiny_spec(
        geometry="euclidean", num_classes=4, class_order=(0, 1, 2, 3), **choice.model_overrides(parent.spec)
    )
    assert child_spec.compat_dim == 20
    method.prepare(
        AlignmentContext(child_spec, torch.device("cpu"), parent, label_map, lambda: iter([(images, labels)]))
    )

    with torch.no_grad():
        emb = parent(images, with_logits=False).emb.double()
    protos = {}
    for new_label in (0, 1, 2):
        mean = emb[labels == new_label].mean(0)
        protos[int(label_map[new_label])] = (mean / mean.norm()).tolist()
    scale = parent.spec.classifier_scale

    new, compat, _ = _new_output(b=5, width=20)
    batch = torch.tensor([0, 1, 2, 3, 2])
    out = method(new, None, batch)
    losses = []
    for x, y in zip(compat.detach().double().tolist(), batch.tolist()):
        t = int(label_map[y])
        if t < 0:
            continue
        logits = [scale * sum(a * b for a, b in zip(x, protos[c])) for c in range(3)]
        losses.append(math.log(sum(math.exp(v) for v in logits)) - logits[t])
    assert float(out.terms["influence"]) == pytest.approx(sum(losses) / len(losses), rel=1e-4)
