"""Dotted-key overrides and the one-line validation message (flows/params/overrides.py): an unknown key is refused with
the key it was probably meant to be, whether it came from `--set` or from params.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.errors import ConfigError
from flows.params import Params, load_params
from flows.params.overrides import closest_key, schema_keys
from tests.conftest import REPO


def test_a_typo_in_set_or_in_params_yaml_names_the_key_it_meant(tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        load_params(REPO / "params.yaml", ["train.epoch=3"])
    assert str(err.value) == (
        f"invalid parameters in {REPO / 'params.yaml'} with --set overrides: train.epoch: unknown key; did you mean "
        "`train.epochs`?"
    )
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  epoch: 3\n")
    with pytest.raises(ConfigError) as err:
        load_params(path)
    assert str(err.value) == f"invalid parameters in {path}: train.epoch: unknown key; did you mean `train.epochs`?"
    with pytest.raises(
        ConfigError, match=r"overrides: train\.embed_dim: unknown key; did you mean `model\.embed_dim`\?$"
    ):
        load_params(REPO / "params.yaml", ["train.embed_dim=16"])  # the right name in the wrong section


@pytest.mark.parametrize(
    "loc, meant",
    [
        (("trian",), "train"),  # a section's name
        (("backfill", "rules", "p_com_flor"), "backfill.rules.p_com_floor"),  # a nested model's field
        (("generations", 1, "epoch"), "generations.1.epochs"),  # an entry of the chain
        (("train", "embed_dim"), "model.embed_dim"),  # the right name in the wrong section
        (("train", "foo"), None),  # nothing close: no guess
    ],
)
def test_the_closest_key_beside_the_typo_else_of_that_name_elsewhere(loc, meant):
    assert closest_key(Params, loc) == meant


def test_schema_keys_cover_sections_nested_models_and_the_chain():
    keys = schema_keys(Params)
    assert {"train", "train.epochs", "backfill.rules", "backfill.rules.metric", "generations.alignment"} <= set(keys)
    assert "alignment.options.hbct" not in keys  # a mapping's keys are its own (the method checks its options)


def test_an_unknown_key_without_a_close_one_keeps_the_general_fix():
    with pytest.raises(ConfigError, match=r"train\.foo: unknown key \(typo\?\); remove it or check the spelling"):
        load_params(REPO / "params.yaml", ["train.foo=1"])
