"""The tag of each params field (flows/params/tags.py): every field carries one, and the key lists derived from the
tags are the hand-kept lists they replaced (written out below as they were), so params digests, run keys, the nightly
change check and the generated dvc.yaml stay what they were."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from pydantic import BaseModel

from flows.params import Params, apply_overrides, load_params, params_digest
from flows.params.lifecycle import LifecycleParams
from flows.params.moved_keys import MOVED_KEYS
from flows.params.serve import ServeParams
from flows.params.tags import Model, RunOption, Shapes, leaf_tags, pick, sections, select
from flows.params.upgrade import UpgradeParams
from tests.conftest import REPO

# --- the lists as they were hand-kept before the tags (flows/params/schema.py, flows/pipeline/dvc_yaml.py) ---
#: flows/params/schema.py MODEL_SHAPING: the sections the params digest covers
OLD_MODEL_SHAPING = ("data", "model", "geometry", "train", "alignment")
#: flows/params/schema.py NOT_SHAPING: keys of those sections the digest leaves out
OLD_NOT_SHAPING = {
    ("data", "root"),
    ("data", "download"),
    ("train", "device"),
    ("train", "compile"),
    ("train", "compile_mode"),
    ("train", "nproc"),
    ("train", "nnodes"),
    ("train", "rdzv_endpoint"),
    ("train", "job_dir"),
    ("train", "keep_checkpoints"),
    ("train", "eval_batch_size"),
    ("train", "cache_dir"),  # the trained-model cache (added with it): where a model comes from, not what it is
}
#: flows/pipeline/dvc_yaml.py SECTIONS: the sections a generation stage reads
OLD_SECTIONS = (*OLD_MODEL_SHAPING, "gallery", "index", "evaluation", "backfill", "tracking")
OLD_RULES = (
    *(m.new.removeprefix("backfill.rules.") for m in MOVED_KEYS.values() if m.new.startswith("backfill.rules.")),
    "require_not_worse",  # added with the lifecycle's judgement of the rules
)
#: flows/pipeline/dvc_yaml.py ALIGNED_ONLY (the backfill rules now under backfill.rules), with the alignment section
#: that
#: param_keys left out of generation 0 by name
OLD_ALIGNED_ONLY = {
    "geometry.delta_zeta",
    "geometry.zeta_rule",
    "geometry.zeta_percentile",
    "evaluation.reference",
    *(f"backfill.rules.{k}" for k in OLD_RULES),
    "backfill.gate",  # which checks gate promotion (added with the lifecycle's judgement of the rules)
    "alignment.method",
    "alignment.weight",
    "alignment.options",
}
#: flows/pipeline/dvc_yaml.py NEVER, with NOT_SHAPING and the sections outside SECTIONS: keys no generation stage tracks
OLD_NEVER = {
    "tracking.mlflow_uri",
    *(f"backfill.{k}" for k in ("restart_zeta", "chunk_size", "throttle_seconds", "order")),
    *(f"backfill.{k}" for k in ("cluster", "workers", "threads", "chunks_per_task")),  # where a backfill's chunks run
    *(f"{s}.{k}" for s, k in OLD_NOT_SHAPING),
    "lineage.db_url",
    "schedule.cron",
    "schedule.timezone",
    *(f"serve.{k}" for k in ServeParams.model_fields),  # the query service's settings (added with it)
    "gallery.keep_versions",  # was backfill.retain_versions (every store keeps versions for rollback)
    "backfill.plan_sample",  # the backfill's plan (added with it): run options
    "backfill.target_map",
    *(f"upgrade.{k}" for k in UpgradeParams.model_fields),  # a bridge's fit (added with it): run options
    *(f"lifecycle.{k}" for k in LifecycleParams.model_fields),  # what the nightly run does (added with it)
}
#: flows/pipeline/dvc_yaml.py _data_stage: the data keys but NOT_SHAPING, augment and workers
OLD_DATA_STAGE = [
    "data.dataset",
    "data.path",
    "data.test_fraction",
    "data.split_seed",
    "data.image_size",
    "data.max_train_per_class",
    "data.max_test_per_class",
]


def _tags() -> dict[str, Shapes]:
    return {k: t for name, section in sections(Params).items() for k, t in leaf_tags(section, name).items()}


def _old_digest(params: Params) -> str:
    """flows/params/schema.py params_digest as it was."""
    raw = params.as_dict()
    shaped = {s: {k: v for k, v in raw[s].items() if (s, k) not in OLD_NOT_SHAPING} for s in OLD_MODEL_SHAPING}
    return hashlib.sha256(json.dumps(shaped, sort_keys=True).encode()).hexdigest()


def test_every_field_of_every_section_carries_one_tag_and_generations_is_no_section():
    tags = _tags()  # TypeError names a field without exactly one tag
    assert list(sections(Params)) == [n for n in Params.model_fields if n != "generations"]
    assert {"data.augment.hflip", "backfill.rules.zeta_ceiling", "backfill.order"} <= set(tags)
    assert "data.augment" not in tags and "backfill.rules" not in tags  # a nested model's fields carry the tags

    class Untagged(BaseModel):
        fine: Model[int] = 1
        bare: int = 2

    with pytest.raises(TypeError, match=r"params field x\.bare carries 0 Shapes tags, not one; declare it with one"):
        leaf_tags(Untagged, "x")


def test_the_derived_lists_are_the_hand_kept_lists_they_replace():
    tags = _tags()
    section_of = [k.split(".")[0] for k in tags]
    model_sections = tuple(dict.fromkeys(s for s, t in zip(section_of, tags.values(), strict=True) if t.model))
    assert model_sections == OLD_MODEL_SHAPING
    field = {k: tuple(k.split(".")[:2]) for k in tags}  # (section, field): NOT_SHAPING named a section's own fields
    shaping = {field[k] for k, t in tags.items() if t.model}
    assert {field[k] for k in tags if field[k][0] in OLD_MODEL_SHAPING} - shaping == OLD_NOT_SHAPING
    read = tuple(dict.fromkeys(s for s, t in zip(section_of, tags.values(), strict=True) if t.generations != "none"))
    assert read == OLD_SECTIONS
    assert {k for k, t in tags.items() if t.generations == "aligned"} == OLD_ALIGNED_ONLY
    assert {k for k, t in tags.items() if t.generations == "none"} == OLD_NEVER
    assert [k for k, t in tags.items() if t.data_stage] == OLD_DATA_STAGE
    # a tag that shapes the model or the data stage shapes every (aligned) generation's stage too
    assert all(t.generations != "none" for t in tags.values() if t.model or t.data_stage)


@pytest.mark.parametrize(
    "override",
    [
        [],
        ["train.device=cpu", "train.nproc=4", "data.root=/elsewhere", "train.eval_batch_size=7"],
        ["data.workers=5"],
        ["data.augment.hflip=true", "geometry.delta_zeta=0.5", "alignment.weight=0.9"],
        ["evaluation.reference=false", "index.type=ivf", "backfill.rules.zeta_ceiling=1.5", "backfill.chunk_size=9"],
    ],
)
def test_the_params_digest_is_what_the_hand_kept_lists_gave(override: list[str]):
    p = apply_overrides(load_params(REPO / "params.yaml"), override)
    assert params_digest(p) == _old_digest(p)
    assert params_digest(Params()) == _old_digest(Params())


def test_select_names_a_node_whole_when_every_key_under_it_is_kept_and_pick_takes_those_keys():
    data = sections(Params)["data"]
    assert select(data, "data", lambda t: False) == []
    assert select(data, "data", lambda t: True) == ["data"]
    assert select(data, "data", lambda t: t.model)[-1] == "data.augment"  # its two fields, named as one key
    raw: dict[str, Any] = {"a": {"b": 1, "c": {"d": 2, "e": 3}}, "f": 4}
    assert pick(raw, ["a.c.d", "f"]) == {"a": {"c": {"d": 2}}, "f": 4}

    class Options(BaseModel):
        when: RunOption[str] = "now"

    assert leaf_tags(Options, "o") == {"o.when": Shapes("none")}
