"""GenerationPlan.train_config (flows/plan.py): each role of each generation of a run trains from its own seed,
and the same run planned again trains from the same ones."""

from __future__ import annotations

from flows.params import Params, apply_overrides
from flows.plan import ROLES, GenerationPlan


def _plan(run_seed: int, gen_id: int) -> GenerationPlan:
    """A plan of generation ``gen_id`` of a run seeded ``run_seed`` (only what train_config reads is set)."""
    required = {f: None for f, info in GenerationPlan.model_fields.items() if info.is_required()}
    params = apply_overrides(Params(), {"train.seed": run_seed})
    return GenerationPlan.model_construct(**{**required, "params": params, "gen_id": gen_id, "epochs": 1})


def test_every_role_generation_and_run_seed_trains_from_its_own_seed():
    seeds = {(s, g, role): _plan(s, g).train_config(role).seed for s in (0, 7) for g in (0, 1, 2) for role in ROLES}
    twins = {seed: [k for k, v in seeds.items() if v == seed] for seed in seeds.values()}
    assert {seed: keys for seed, keys in twins.items() if len(keys) > 1} == {}  # no two models start alike
    assert all(0 <= seed < 2**31 for seed in seeds.values())
    # the same run planned again (a rerun, a resumed generation): the same starts
    assert {k: _plan(k[0], k[1]).train_config(k[2]).seed for k in seeds} == seeds
