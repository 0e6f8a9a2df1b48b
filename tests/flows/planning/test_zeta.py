"""ζ from data (flows/planning/zeta.py): the percentile rule picks the documented percentile of the parent's
pre-bound radii over the new generation's training images, plus Δζ, and says why."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.models import load_model
from flows.gallery.data import load_splits
from flows.params import GenerationSpec, load_params
from flows.planning import make_plan
from flows.planning.zeta import parent_radii, zeta_from_radii


def test_zeta_from_radii_is_the_percentile_plus_delta():
    radii = np.arange(1, 101) / 100.0  # 0.01 … 1.00
    assert zeta_from_radii(radii, 95.0, 0.2) == pytest.approx(0.9505 + 0.2)  # linear interpolation: 0.95 + 0.05·0.01
    assert zeta_from_radii(radii, 50.0, 0.0) == pytest.approx(0.505)
    assert zeta_from_radii(radii, 100.0, 0.1) == pytest.approx(1.1)


def test_the_percentile_rule_gives_the_next_generation_room_beyond_its_parents_radii(g0_workspace):
    home, params_file = g0_workspace
    fixed = make_plan(load_params(params_file), home, GenerationSpec(name="g1"))
    assert fixed.zeta == pytest.approx(1.2) and fixed.zeta_reason is None  # the default rule: ζ_prev + Δζ

    params = load_params(params_file, ["geometry.zeta_rule=percentile", "geometry.zeta_percentile=99"])
    plan = make_plan(params, home, GenerationSpec(name="g1"))
    split = load_splits(params, plan.workspace).train
    radii = parent_radii(plan.parent.model(), split, params.data.split_seed + plan.gen_id)
    assert len(radii) == min(2000, 1258) and (radii > 0).all()
    # the radius is the parent's projection, scaled by 1/√d, before its clip: recompute it by hand for a few images
    parent = load_model(plan.parent.checkpoint).eval()
    x = torch.from_numpy(split.decode().images[:4]).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        feats = parent.backbone((x - parent.norm_mean) / parent.norm_std)
        by_hand = parent.head.proj(feats).norm(dim=-1) / math.sqrt(parent.spec.embed_dim)
    out = parent(x, with_logits=False)
    assert torch.allclose(out.aux["radius"], by_hand, rtol=1e-5)
    expected = max(1.2, float(np.percentile(radii, 99)) + 0.2)
    assert plan.zeta == pytest.approx(expected, abs=1e-6)
    assert plan.delta_zeta == pytest.approx(plan.zeta - 1.0, abs=1e-6)  # the ζ step records the step data chose
    assert plan.zeta_reason is not None and "P99 of the parent's" in plan.zeta_reason
