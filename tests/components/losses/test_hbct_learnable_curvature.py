"""HBCT with a learnable curvature (HBCT Table 3 ablation): the new K moves, the alignment stays on the old
hyperboloid."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from components.data import create_dataset, select_training_data
from components.data.batches import to_image_tensor
from components.geometry import expmap0
from components.losses import AlignmentContext, create_alignment
from components.models import ModelOutput, build_model
from components.training import train_model
from tests.helpers import tiny_spec, train_config


def test_alignment_terms_use_the_old_curvature_when_k_is_learnable():
    old = build_model(tiny_spec(curvature=1.0)).eval()
    spec = tiny_spec(curvature=2.0, learn_curvature=True, zeta=1.2)
    m = create_alignment("hbct")
    m.prepare(AlignmentContext(new_spec=spec, device=torch.device("cpu"), old_model=old))
    torch.manual_seed(0)
    z_new, z_old = torch.randn(6, 16) * 0.2, torch.randn(6, 16) * 0.2
    # the new model's own points live on its K = 2 hyperboloid; the loss must re-lift them with K = 1
    new_out = ModelOutput(z_new, expmap0(z_new, 2.0), None, torch.zeros(6, dtype=torch.bool))
    same_space = ModelOutput(z_new, expmap0(z_new, 1.0), None, torch.zeros(6, dtype=torch.bool))
    old_out = ModelOutput(z_old, expmap0(z_old, 1.0), None, torch.zeros(6, dtype=torch.bool))
    labels = torch.arange(6)
    a = m(new_out, old_out, labels).terms
    fixed = create_alignment("hbct")
    fixed.prepare(
        AlignmentContext(new_spec=tiny_spec(curvature=1.0, zeta=1.2), device=torch.device("cpu"), old_model=old)
    )
    b = fixed(same_space, old_out, labels).terms
    assert {k: float(v) for k, v in a.items()} == pytest.approx({k: float(v) for k, v in b.items()}, rel=1e-5)


def test_training_moves_a_learnable_curvature(tmp_path: Path):
    s = create_dataset("digits", tmp_path)
    man = select_training_data(s.train, dataset="digits", fingerprint=s.fingerprint, class_order=list(range(10)))
    data = to_image_tensor(man.take(s.train).decode().images[:128], man.model_labels()[:128])
    torch.manual_seed(0)
    old = build_model(tiny_spec(zeta=1.0))
    model = build_model(tiny_spec(zeta=1.2, learn_curvature=True))
    res = train_model(
        model,
        data,
        train_config(epochs=2, batch_size=32, lr=0.05),
        create_alignment("hbct"),
        tmp_path / "ck",
        old_model=old,
    )
    k = float(res.model.curvature)
    assert k != pytest.approx(1.0, abs=1e-6) and k > 0  # it learned
    assert "contrast" in res.history[-1] and all(torch.isfinite(torch.tensor(v)) for v in res.history[-1].values())
