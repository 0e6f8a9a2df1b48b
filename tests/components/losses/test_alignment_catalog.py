"""The alignment-method catalog (components/losses/catalog.py, base.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.data import create_dataset
from components.data.batches import to_image_tensor
from components.errors import ConfigError
from components.losses import (
    AlignmentLoss,
    LossOutput,
    create_alignment,
    list_alignments,
    register_alignment,
)
from components.losses import catalog as catalog_module
from components.losses.catalog import ALIGNMENTS
from components.models import build_model
from components.training import train_model
from tests.helpers import tiny_spec, train_config


def test_builtin_methods_are_registered():
    names = list_alignments()
    assert {"independent", "bct", "hbct"} <= set(names)
    assert names == sorted(names)
    assert ALIGNMENTS.get("hbct").name == "hbct"
    assert create_alignment("independent").requires_old is False


def test_unknown_method_lists_available_names():
    with pytest.raises(ConfigError) as info:
        create_alignment("no_such_method")
    msg = str(info.value)
    assert "no_such_method" in msg
    for name in ("independent", "bct", "hbct"):
        assert name in msg


def test_unknown_option_is_named():
    with pytest.raises(ConfigError) as info:
        create_alignment("hbct", taus=0.5, tau=0.5)
    assert "taus" in str(info.value)
    assert "tau" in str(info.value)  # the valid options are listed too
    with pytest.raises(ConfigError, match="lr"):
        create_alignment("independent", lr=1.0)


def test_invalid_option_value():
    with pytest.raises(ConfigError, match="tau"):
        create_alignment("hbct", tau=0)


def test_options_are_applied():
    m = create_alignment("hbct", tau=0.25, entailment=False)
    assert m.options.tau == 0.25 and m.options.entailment is False
    assert m.options.beta == 0.01  # defaults kept


def test_registering_a_different_class_under_a_taken_name_is_refused():
    class Other(AlignmentLoss):
        requires_old = False

    with pytest.raises(ValueError, match="twice"):
        register_alignment("hbct")(Other)
    assert ALIGNMENTS.get("hbct").__name__ == "HBCT"


@pytest.fixture
def unregister_test_pull():
    yield "test_pull_alignment_registry"
    catalog_module.ALIGNMENTS.unregister("test_pull_alignment_registry")


def test_new_method_trains_without_touching_the_loop(tmp_path, unregister_test_pull):
    name = unregister_test_pull

    @register_alignment(name)
    class Pull(AlignmentLoss):
        requires_old = False
        calls = 0

        def forward(self, new, old, labels):
            Pull.calls += 1
            return LossOutput({"pull": new.z.pow(2).sum(dim=1).mean()}, {"pull_stat": 1.5})

    assert name in list_alignments()
    method = create_alignment(name)
    assert isinstance(method, Pull) and method.name == name

    splits = create_dataset("digits", tmp_path / "raw")
    train = splits.train.subset(np.arange(48)).decode()
    data = to_image_tensor(train.images, train.labels)
    torch.manual_seed(0)
    spec = tiny_spec()
    cfg = train_config(epochs=1, batch_size=16, lr=0.05, device="cpu", keep_checkpoints=1)
    result = train_model(build_model(spec), data, cfg, method, tmp_path / "ckpt")
    assert Pull.calls == 3  # 48 images / batch 16
    rec = result.history[-1]
    assert "pull" in rec and math.isfinite(rec["pull"]) and rec["pull"] > 0
    assert rec["pull_stat"] == pytest.approx(1.5)
    # the term is part of the loss with weight align_weight
    assert rec["loss"] == pytest.approx(rec["base"] + cfg.align_weight * rec["pull"], rel=1e-5)
