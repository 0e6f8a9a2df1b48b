"""The params.yaml keys a generation depends on (flows/params/keys.py): one rule for its DVC stage (no run options)
and its MLflow run (with them)."""

from __future__ import annotations

from flows.params import load_params
from flows.params.keys import generation_keys
from tests.conftest import REPO


def test_generation_0_depends_on_no_alignment_key_whatever_alignment_method_says():
    p = load_params(REPO / "params.yaml")
    assert p.alignment.method == "bct"
    keys = generation_keys(p, aligned=False, method="independent", named=False, run_options=True)
    assert not [k for k in keys if k.startswith("alignment")]
    assert "geometry.delta_zeta" not in keys and "backfill.rules" not in keys and "evaluation.reference" not in keys
    assert {"train", "lineage", "schedule", "tracking", "backfill.chunk_size"} <= set(keys)  # the run options too
    stage = generation_keys(p, aligned=False, method="independent", named=False, run_options=False)
    assert "train" not in stage and "train.epochs" in stage and "lineage" not in stage


def test_an_aligned_generation_depends_on_its_own_methods_keys():
    p = load_params(REPO / "params.yaml", ["alignment.options.bct={}"])
    follows = generation_keys(p, aligned=True, method="hbct", named=False, run_options=True)
    assert [k for k in follows if k.startswith("alignment")] == [
        "alignment.method",
        "alignment.weight",
        "alignment.options.hbct",
    ]
    own = generation_keys(p, aligned=True, method="bct", named=True, run_options=True)  # its entry names bct
    assert [k for k in own if k.startswith("alignment")] == ["alignment.weight", "alignment.options.bct"]
    assert not [
        k
        for k in generation_keys(p, aligned=True, method="independent", named=True, run_options=True)
        if k.startswith("alignment")
    ]
    assert {"geometry", "evaluation", "backfill"} <= set(follows)
