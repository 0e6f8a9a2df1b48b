"""The params schema (flows/params/schema.py): the one place for every default, and one parse per run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.errors import ConfigError
from components.losses import choose_alignment
from flows.params import Params, flatten_overrides, load_params
from tests.conftest import REPO


def test_params_yaml_spells_out_the_schema_defaults_except_the_demo_choices():
    """params.yaml and the schema never disagree on a default: only the deliberate demo settings differ."""
    schema, shipped = (
        flatten_overrides(Params().as_dict()),
        flatten_overrides(load_params(REPO / "params.yaml").as_dict()),
    )
    differ = {k for k in schema.keys() | shipped.keys() if schema.get(k) != shipped.get(k)}
    assert differ == {"model.backbone_kwargs", "alignment.options", "generations"}
    # the options it lists (the default method's and HBCT's) are the methods' own defaults
    options = load_params(REPO / "params.yaml").alignment.options
    assert set(options) == {"bct", "hbct"}
    for method in options:
        assert choose_alignment(method, options[method]).options == choose_alignment(method).options


def test_params_yaml_spells_out_every_key_of_the_schema():
    """DVC tracks parameters by their keys in params.yaml, so a new field (a new backfill rule too) gets its line."""
    written = flatten_overrides(yaml.safe_load((REPO / "params.yaml").read_text()))
    assert set(written) == set(flatten_overrides(Params().as_dict()))


def test_a_backfill_rule_directly_under_backfill_is_refused_naming_its_new_key(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("backfill:\n  clip_fraction_max: 0.9\n  chunk_size: 128\n")
    with pytest.raises(ConfigError) as err:
        load_params(path)
    assert str(err.value) == (
        f"invalid parameters in {path}: backfill: clip_fraction_max moved to backfill.rules.clip_fraction_max; write "
        "it under `rules:` in `backfill:` (--set backfill.rules.clip_fraction_max=…)"
    )
    with pytest.raises(ConfigError, match=r"overrides: backfill: metric moved to backfill\.rules\.metric; write it"):
        load_params(REPO / "params.yaml", ["backfill.metric=cmc@1"])
    # the rules under backfill.rules, how a backfill runs directly under backfill:
    p = load_params(REPO / "params.yaml", ["backfill.rules.clip_fraction_max=0.9", "backfill.chunk_size=128"])
    assert (p.backfill.rules.clip_fraction_max, p.backfill.chunk_size) == (0.9, 128)


def test_overrides_apply_before_the_one_validation(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  epochs: 0\n")  # invalid on its own ...
    fixed = load_params(path, ["train.epochs=3", "backfill.rules.p_com_floor=0.2"])  # ... fixed by --set
    assert (fixed.train.epochs, fixed.backfill.rules.p_com_floor) == (3, 0.2)
    with pytest.raises(
        ConfigError, match=r"invalid parameters in .*params.yaml: train.epochs: Input should be greater than 0"
    ):
        load_params(path)
    with pytest.raises(ConfigError, match=r"train\.epoch: unknown key"):
        load_params(path, ["train.epoch=3"])
    with pytest.raises(ConfigError, match="is not KEY=VALUE"):
        load_params(path, ["train.epochs"])


def test_declared_generations_need_names(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("generations:\n  - classes: all\n")
    with pytest.raises(ConfigError, match="every entry of `generations:` needs a name"):
        load_params(path)
    with pytest.raises(ConfigError, match="declares no `generations:`; add the chain to reproduce"):
        Params().declared_chain()
    assert [g.name for g in load_params(REPO / "params.yaml").declared_chain()] == ["g0", "g1"]


def test_multi_node_training_needs_a_rendezvous_endpoint(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  nproc: 2\n")
    assert load_params(path).train.nproc == 2
    with pytest.raises(ConfigError, match=r"train.nnodes 2 needs train.rdzv_endpoint, host:port"):
        load_params(path, ["train.nnodes=2"])
    p = load_params(path, ["train.nnodes=2", "train.rdzv_endpoint=node0.example:29400"])
    assert (p.train.nnodes, p.train.rdzv_endpoint) == (2, "node0.example:29400")


def test_backfill_retain_versions_is_refused_naming_gallery_keep_versions(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("backfill:\n  retain_versions: 3\n")
    with pytest.raises(ConfigError) as err:
        load_params(path)
    assert str(err.value) == (
        f"invalid parameters in {path}: backfill: retain_versions moved to gallery.keep_versions (the gallery "
        "versions every store keeps); write it under `gallery:` as keep_versions (--set gallery.keep_versions=…)"
    )
    assert load_params(REPO / "params.yaml", ["gallery.keep_versions=3"]).gallery.keep_versions == 3
