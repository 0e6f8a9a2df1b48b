"""Every model of a lineage starts from its own weights (components/training/seeds.py): the old model, its
successor and the independent reference φ* of a run differ at initialisation; a rerun starts from the same ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from components.models import build_model
from components.training.seeds import INIT_ROLES, init_seed
from tests.helpers import tiny_spec

#: init_seed of (0, 0, model), (0, 1, model), (0, 1, reference), (7, 3, reference), as every release has given them
GOLDEN = [1484405855, 1982462498, 450621607, 530400660]


def _initial_weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return build_model(tiny_spec(embed_dim=8, num_classes=3, class_order=(0, 1, 2))).state_dict()


def test_old_new_and_reference_models_start_from_different_weights():
    roles = {
        "old": init_seed(0, 0, "model"),
        "new": init_seed(0, 1, "model"),
        "reference": init_seed(0, 1, "reference"),
    }
    assert len(set(roles.values())) == 3
    weights = {name: _initial_weights(seed) for name, seed in roles.items()}
    for key, tensor in weights["old"].items():
        if tensor.is_floating_point() and tensor.numel() > 1 and tensor.std() > 0:  # initialised at random
            assert not torch.equal(tensor, weights["new"][key]), key
            assert not torch.equal(tensor, weights["reference"][key]), key
            assert not torch.equal(weights["new"][key], weights["reference"][key]), key
    again = _initial_weights(init_seed(0, 1, "model"))  # the same run, rerun: the same start
    assert all(torch.equal(v, again[k]) for k, v in weights["new"].items())


def test_init_seeds_are_distinct_across_seeds_generations_and_roles():
    seeds = {init_seed(s, g, r) for s in range(5) for g in range(5) for r in INIT_ROLES}
    assert len(seeds) == 50 and all(0 <= s < 2**31 for s in seeds)
    assert init_seed(-1, 0) == init_seed(2**32 - 1, 0)  # negative run seeds are accepted (taken mod 2³²)


def test_a_seed_is_the_same_number_in_every_process_and_every_release():
    """A rerun, in another process (another string-hash salt) or after an upgrade, starts from the same weights."""
    keys = [(0, 0, "model"), (0, 1, "model"), (0, 1, "reference"), (7, 3, "reference")]
    here = [init_seed(*k) for k in keys]
    code = f"from components.training.seeds import init_seed; print([init_seed(*k) for k in {keys!r}])"
    for salt in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": salt}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == here, salt
    assert here == GOLDEN, "init_seed gives other numbers than earlier releases: reruns would start from other weights"
