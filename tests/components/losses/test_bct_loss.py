"""BCT influence loss (components/losses/methods/bct.py, docs/design.md §5)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from components.errors import ConfigError
from components.geometry import expmap0
from components.losses import AlignmentContext, create_alignment
from components.models import ModelOutput, ModelSpec, build_model
from tests.helpers import tiny_spec

TINY = {"channels": [8, 8, 16, 16]}


pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def _old_model(geometry: str, classifier: str = "cosine", mlr_scale: float = 1.0, classifier_scale: float = 16.0):
    torch.manual_seed(0)
    spec = tiny_spec(
        backbone_kwargs=TINY,
        geometry=geometry,
        num_classes=3,
        class_order=(4, 7, 1),
        classifier=classifier,
        mlr_scale=mlr_scale,
        classifier_scale=classifier_scale,
    )
    model = build_model(spec).eval()
    model.requires_grad_(False)  # as the training loop freezes it
    return model


def _new_spec(geometry: str) -> ModelSpec:
    return tiny_spec(backbone_kwargs=TINY, geometry=geometry, num_classes=4, class_order=(4, 7, 1, 9))


def _bct(old, geometry: str, label_map: torch.Tensor, batches=None):
    """BCT without synthesised rows unless a batch source is given (then with them)."""
    m = create_alignment("bct", synthesize_new_classes=batches is not None)
    m.prepare(
        AlignmentContext(
            new_spec=_new_spec(geometry),
            device=torch.device("cpu"),
            old_model=old,
            label_map=label_map,
            batches=batches,
        )
    )
    return m


def _new_output(geometry: str, n: int = 8):
    torch.manual_seed(1)
    z = torch.randn(n, 16, requires_grad=True)
    emb = F.normalize(z, dim=-1) if geometry == "euclidean" else expmap0(z / 4.0, 1.0)
    return z, ModelOutput(z, emb, None, torch.zeros(n, dtype=torch.bool))


@pytest.mark.parametrize(("geometry", "mlr_scale"), [("euclidean", 1.0), ("lorentz", 1.0), ("lorentz", 4.0)])
def test_influence_is_old_classifier_cross_entropy_on_known_samples(geometry, mlr_scale):
    """The old classifier as the old model applies it — a Lorentz parent's logit scale (model.mlr_scale) included."""
    old = _old_model(geometry, mlr_scale=mlr_scale)
    assert geometry == "euclidean" or old.classifier.scale == mlr_scale
    # new labels 0..3 → old labels; new label 3 is a class the old model never saw
    label_map = torch.tensor([1, 2, 0, -1])
    method = _bct(old, geometry, label_map)
    _z, new = _new_output(geometry)
    labels = torch.tensor([0, 1, 2, 3, 3, 1, 0, 2])
    out = method(new, None, labels)
    assert set(out.terms) == {"influence"}
    known = torch.tensor([True, True, True, False, False, True, True, True])
    mapped = torch.tensor([1, 2, 0, -1, -1, 2, 1, 0])
    expected = F.cross_entropy(old.classify(new.emb[known]).float(), mapped[known])
    assert float(out.terms["influence"]) == pytest.approx(float(expected), rel=1e-6)
    assert out.stats["bct_known_fraction"] == pytest.approx(6 / 8)
    # the label map matters: without the permutation the loss is different
    ident = _bct(old, geometry, torch.tensor([0, 1, 2, -1]))(new, None, labels)
    assert float(ident.terms["influence"]) != pytest.approx(float(expected), rel=1e-4)


@pytest.mark.parametrize("scale", [1.0, 16.0])
def test_a_linear_parent_is_applied_at_its_own_scale(scale):
    """The benchmark's linear head (linear + bias at model.classifier_scale 1): the influence loss scores the new
    embedding with the parent's rows and bias at the parent's scale, s·(ê W^T + b)."""
    old = _old_model("euclidean", classifier="linear", classifier_scale=scale)
    method = _bct(old, "euclidean", torch.tensor([1, 2, 0, -1]))
    _z, new = _new_output("euclidean")
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    w, b = old.classifier.fc.weight, old.classifier.fc.bias
    expected = F.cross_entropy(scale * (new.emb @ w.t() + b), torch.tensor([1, 2, 0, 1, 2, 0, 1, 2]))
    assert float(method(new, None, labels).terms["influence"]) == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_gradient_reaches_new_embedding_not_frozen_old_model(geometry):
    old = _old_model(geometry)
    method = _bct(old, geometry, torch.tensor([1, 2, 0, -1]))
    z, new = _new_output(geometry)
    labels = torch.tensor([0, 1, 2, 3, 3, 1, 0, 2])
    method(new, None, labels).terms["influence"].backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
    known = labels != 3
    assert float(z.grad[known].abs().sum(dim=1).min()) > 0  # every known sample is pulled
    assert float(z.grad[~known].abs().sum()) == 0.0  # unknown-class samples get no influence gradient
    assert all(p.grad is None for p in old.parameters())
    # the method does not own the old model's parameters (they are never optimised or saved with it)
    assert len(list(method.parameters())) == 0
    assert "label_map" not in method.state_dict()


def test_zero_and_finite_when_no_class_is_known():
    old = _old_model("euclidean")
    method = _bct(old, "euclidean", torch.tensor([1, 2, 0, -1]))
    z, new = _new_output("euclidean", 4)
    out = method(new, None, torch.tensor([3, 3, 3, 3]))
    loss = out.terms["influence"]
    assert float(loss) == 0.0 and torch.isfinite(loss)
    assert out.stats["bct_known_fraction"] == 0.0
    loss.backward()
    assert torch.isfinite(z.grad).all() and float(z.grad.abs().sum()) == 0.0


def test_bct_needs_old_model_and_label_map():
    m = create_alignment("bct")
    with pytest.raises(ConfigError, match="parent model"):
        m.prepare(AlignmentContext(new_spec=_new_spec("euclidean"), device=torch.device("cpu")))
    with pytest.raises(ConfigError, match="parent"):
        m.check_models("euclidean", 16, None, None)
    with pytest.raises(ConfigError, match="geometry"):
        m.check_models("euclidean", 16, "lorentz", 16)


@pytest.mark.parametrize(
    ("geometry", "classifier"), [("euclidean", "cosine"), ("euclidean", "linear"), ("lorentz", "cosine")]
)
def test_new_classes_get_a_synthesised_row_from_old_class_means(geometry, classifier):
    """Design §5: a class the old model never saw gets the (scaled) class mean of old features as its row."""
    old = _old_model(geometry, classifier)
    label_map = torch.tensor([1, 2, 0, -1])
    torch.manual_seed(3)
    x = torch.rand(12, 1, 8, 8)
    y = torch.tensor([0, 1, 2, 3] * 3)
    method = _bct(old, geometry, label_map, batches=lambda: iter([(x[:6], y[:6]), (x[6:], y[6:])]))
    with torch.no_grad():
        out_old = old(x, with_logits=False)
    feats = out_old.z if geometry == "lorentz" else out_old.emb
    mean3 = feats[y == 3].mean(0)
    if geometry == "lorentz":
        w_old, b_old = old.classifier.w, old.classifier.a
    else:
        w_old, b_old = old.classifier.fc.weight, old.classifier.fc.bias
    row = F.normalize(mean3, dim=0) * w_old.norm(dim=-1).mean()
    assert torch.allclose(method.old_weight[3], row, atol=1e-5)
    assert torch.allclose(method.old_weight[:3], w_old)
    expected_bias = 0.0 if b_old is None or geometry == "lorentz" else float(b_old.mean())
    assert float(method.old_bias[3]) == pytest.approx(expected_bias, abs=1e-6)
    # every sample now contributes, unseen ones through the synthesised row (old index 3)
    z, new = _new_output(geometry)
    labels = torch.tensor([0, 1, 2, 3, 3, 1, 0, 2])
    out = method(new, None, labels)
    assert out.stats["bct_known_fraction"] == 6 / 8  # classes the old model really saw; synthesised rows do not count
    from components.models.classifiers import linear_logits, lorentz_mlr_logits

    if geometry == "lorentz":
        logits = lorentz_mlr_logits(new.emb, method.old_bias, method.old_weight, old.curvature)
    else:
        logits = linear_logits(new.emb, method.old_weight, method.old_bias, old.classifier.scale, old.classifier.cosine)
    expected = F.cross_entropy(logits, torch.tensor([1, 2, 0, 3, 3, 2, 1, 0]))
    assert float(out.terms["influence"]) == pytest.approx(float(expected), rel=1e-5)
    out.terms["influence"].backward()
    assert float(z.grad[labels == 3].abs().sum()) > 0  # unseen-class samples are pulled too
