"""Every model of a lineage starts from its own weights (components/training/seeds.py): the old model, its
successor and the independent reference φ* of a run differ at initialisation; a rerun starts from the same ones."""

from __future__ import annotations

import torch

from components.models import build_model
from components.training.seeds import INIT_ROLES, init_seed
from flows.params import load_params
from flows.planning import GenerationPlan
from tests.helpers import tiny_spec


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


def test_the_pipeline_trains_each_role_from_its_own_seed(tiny_params_file):
    params = load_params(tiny_params_file)
    fields = {f: None for f in GenerationPlan.model_fields if GenerationPlan.model_fields[f].is_required()}
    plan = GenerationPlan.model_construct(**{**fields, "params": params, "gen_id": 1, "epochs": 1})
    assert plan.train_config("model").seed == init_seed(params.train.seed, 1, "model")
    assert plan.train_config("reference").seed == init_seed(params.train.seed, 1, "reference")
    assert plan.train_config("model").seed != plan.train_config("reference").seed
