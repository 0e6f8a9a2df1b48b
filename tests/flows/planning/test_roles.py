"""The role rules (flows/planning/roles.py), which the lifecycle's plan and the benchmark both apply: each role of
each generation of a run trains from its own seed, the same run resolved again trains from the same ones, and the
reference φ* trains independently in the method's retrieval space."""

from __future__ import annotations

import pytest

from components.data import create_dataset
from flows.params import Params, apply_overrides
from flows.planning.roles import ROLES, RoleRequest, resolve_role
from tests.helpers import tiny_spec

STATS = ((0.5,), (0.25,))


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    return create_dataset("digits", tmp_path_factory.mktemp("digits")).train


def _request(train, *, run_seed=0, gen=1, role="model", method="l2", parent=None, geometry="lorentz", options=None):
    params = apply_overrides(Params(), {"train.seed": run_seed, "model.embed_dim": 16})
    return RoleRequest(
        params=params,
        role=role,
        generation=gen,
        method=method,
        options=options,
        parent=parent,
        train=train,
        class_order=tuple(range(10)),
        class_names=tuple(str(c) for c in range(10)),
        geometry=geometry,
        zeta=1.2 if geometry == "lorentz" else None,
        stats=STATS,
    )


def test_every_role_generation_and_run_seed_trains_from_its_own_seed(train):
    seeds = {
        (s, g, role): resolve_role(_request(train, run_seed=s, gen=g, role=role)).config.seed
        for s in (0, 7)
        for g in (0, 1, 2)
        for role in ROLES
    }
    twins = {seed: [k for k, v in seeds.items() if v == seed] for seed in seeds.values()}
    assert {seed: keys for seed, keys in twins.items() if len(keys) > 1} == {}  # no two models start alike
    assert all(0 <= seed < 2**31 for seed in seeds.values())
    # the same run resolved again (a rerun, a resumed generation, the benchmark's cache): the same starts
    assert {k: resolve_role(_request(train, run_seed=k[0], gen=k[1], role=k[2])).config.seed for k in seeds} == seeds


def test_the_reference_trains_independently_in_the_methods_retrieval_space(train):
    parent = tiny_spec(geometry="lorentz", zeta=1.0, features="psp")
    model = resolve_role(_request(train, method="psp", parent=parent))
    ref = resolve_role(_request(train, method="psp", role="reference", parent=parent))
    assert model.alignment.name == "psp" and ref.alignment.name == "independent"
    assert model.spec.features == ref.spec.features == "psp"  # the view the method asks for, on both
    euclidean = tiny_spec(geometry="euclidean", zeta=None)
    bt2 = {"method": "bt2", "parent": euclidean, "geometry": "euclidean", "options": {"extra_dims": 4}}
    bt2_model, bt2_ref = resolve_role(_request(train, **bt2)), resolve_role(_request(train, role="reference", **bt2))
    assert bt2_model.spec.head == "bt2" and bt2_ref.spec.head != "bt2"  # the method's head is the model's alone
    assert bt2_model.spec.norm_mean == bt2_ref.spec.norm_mean == STATS[0]


def test_an_unknown_role_is_refused(train):
    with pytest.raises(ValueError, match="unknown role 'teacher'"):
        resolve_role(_request(train, role="teacher"))
