"""``psp`` / ``lsp``: training-free simplex projections (components/losses/methods/simplex.py, docs/design.md §5)."""

from __future__ import annotations

import math

import pytest
import torch

from components.errors import ConfigError
from components.losses import choose_alignment, create_alignment
from components.models import build_model
from components.training import train_model
from tests.helpers import tiny_spec, train_config


def _parent(order=(3, 1, 4), features="psp", **kw):
    return tiny_spec(num_classes=len(order), class_order=tuple(order), features=features, **kw)


@pytest.mark.parametrize("kind", ["psp", "lsp"])
def test_flags_and_model_overrides(kind):
    m = choose_alignment(kind)
    assert m.trains is False and m.requires_old is False and m.needs_reference is False
    assert m.model_overrides(None) == {"features": kind}
    assert m.model_overrides(_parent(features=kind)) == {"features": kind}
    # any geometry and dimension: only the logits are used
    m.check_models("lorentz", 16, "euclidean", 64)
    m.check_models("euclidean", 8, None, None)
    assert m.build()(None, None, torch.zeros(2, dtype=torch.long)).terms == {}


@pytest.mark.parametrize("kind", ["psp", "lsp"])
def test_check_lineage_accepts_extensions(kind):
    m = choose_alignment(kind)
    parent = _parent(features=kind)
    m.check_lineage((3, 1, 4), parent)  # same classes
    m.check_lineage((3, 1, 4, 0, 9), parent)  # new classes appended
    m.check_lineage((5, 2), None)  # generation 0: anything


@pytest.mark.parametrize("kind", ["psp", "lsp"])
@pytest.mark.parametrize("order", [(1, 3, 4, 0), (3, 1), (0, 3, 1, 4), (3, 4, 1, 9)])
def test_check_lineage_refuses_orders_that_do_not_extend_the_parent(kind, order):
    with pytest.raises(ConfigError, match="extends"):
        choose_alignment(kind).check_lineage(order, _parent(features=kind))


@pytest.mark.parametrize("kind,other", [("psp", "embedding"), ("psp", "lsp"), ("lsp", "psp"), ("lsp", "embedding")])
def test_check_lineage_refuses_a_parent_with_other_features(kind, other):
    with pytest.raises(ConfigError, match=other):
        choose_alignment(kind).check_lineage((3, 1, 4, 7), _parent(features=other))


def test_train_model_with_psp_trains_the_base_loss_only(tmp_path, digits64):
    torch.manual_seed(0)
    model = build_model(tiny_spec(geometry="euclidean", features="psp"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = train_config(epochs=1, batch_size=16, lr=0.05, device="cpu", seed=0)
    # no parent model is needed (or used) by a training-free method
    res = train_model(model, digits64, cfg, create_alignment("psp"), tmp_path / "ck")
    rec = res.history[-1]
    terms = set(rec) - {"loss", "base", "clip_fraction", "train_accuracy", "lr", "epoch"}
    assert terms == set(), terms
    assert math.isfinite(rec["loss"]) and rec["loss"] == pytest.approx(rec["base"], rel=1e-9)
    key = "backbone.layer1.0.conv1.weight"
    assert not torch.equal(res.model.state_dict()[key], before[key])  # the base loss did train it
