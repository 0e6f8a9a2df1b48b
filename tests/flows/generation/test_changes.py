"""The nightly change check (flows/generation/changes.py): retrain when the model-shaping params or the data changed
since the newest generation, and only then."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.gallery.data import load_splits
from flows.generation.changes import detect_changes
from flows.params import Params, apply_overrides, params_digest
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.records import GenerationBundle, GenerationRecord
from tests.helpers import generation_record, write_params


def _record(gid: int, digest: str, fingerprint: str) -> GenerationRecord:
    return generation_record(
        gid,
        None if gid == 0 else gid - 1,
        architecture={},
        index_path=f"/i/{gid}",
        params_digest=digest,
        data_fingerprint=fingerprint,
    )


@pytest.fixture(scope="module")
def lineage(tmp_path_factory) -> tuple[Params, Workspace, LineageDB]:
    """A lineage whose generation 0 was made with other params and generation 1 with the current ones."""
    tmp = tmp_path_factory.mktemp("changes")
    params = write_params(tmp / "params.yaml")
    ws = Workspace(tmp / "ws")
    fingerprint = load_splits(params, ws).fingerprint
    store = ws.lineage(params)
    store.commit_generation(GenerationBundle(_record(0, "an-older-digest", fingerprint)))
    store.commit_generation(GenerationBundle(_record(1, params_digest(params), fingerprint)))
    yield params, ws, store
    store.close()


def test_an_empty_lineage_is_a_change(tmp_path: Path):
    params = write_params(tmp_path / "params.yaml")
    ws = Workspace(tmp_path / "ws")
    store = ws.lineage(params, readonly=True)
    report = detect_changes(params, ws, store)
    assert report.changed and "the lineage is empty" in report.reason and report.last_generation is None
    assert report.params_digest == params_digest(params)
    assert report.data_fingerprint == load_splits(params, ws).fingerprint
    assert not (tmp_path / "ws" / "lineage.db").exists()  # the check creates nothing


def test_same_params_and_data_are_no_change(lineage):
    params, ws, store = lineage
    report = detect_changes(params, ws, store)
    assert not report.changed and report.last_generation == 1  # compared with the newest generation
    assert "no change since generation 1" in report.reason and "nothing to train" in report.reason


@pytest.mark.parametrize("override", ["train.lr=0.05", "model.embed_dim=32", "alignment.weight=0.5"])
def test_a_model_shaping_change_is_a_change(lineage, override: str):
    params, ws, store = lineage
    changed = apply_overrides(params, [override])
    report = detect_changes(changed, ws, store)
    assert report.changed and report.last_generation == 1
    assert report.reason.startswith("parameters changed") and report.reason.endswith("since generation 1")
    assert params_digest(params)[:12] in report.reason and report.params_digest[:12] in report.reason
    assert "data changed" not in report.reason


@pytest.mark.parametrize(
    "override",
    [
        "train.device=cpu",
        "train.eval_batch_size=64",
        "data.download=false",
        "ROOT",
        "train.compile=off",
        "train.compile_mode=default",
    ],
)
def test_a_change_that_does_not_shape_the_model_is_no_change(lineage, tmp_path: Path, override: str):
    params, ws, store = lineage
    if override == "ROOT":  # another dataset cache holding the same data
        override = f"data.root={tmp_path / 'elsewhere'}"
    changed = apply_overrides(params, [override])
    assert changed != params
    report = detect_changes(changed, ws, store)
    assert not report.changed and report.params_digest == params_digest(params)


def test_a_data_change_is_a_change(tmp_path: Path):
    params = write_params(tmp_path / "params.yaml")
    ws = Workspace(tmp_path / "ws")
    store = ws.lineage(params)
    store.commit_generation(GenerationBundle(_record(0, params_digest(params), "fingerprint-of-other-data")))
    report = detect_changes(params, ws, store)
    store.close()
    assert report.changed and report.last_generation == 0
    assert report.reason == "the data changed (dataset fingerprint differs) since generation 0"


def test_a_changed_split_changes_both_the_params_and_the_data(lineage):
    params, ws, store = lineage
    report = detect_changes(apply_overrides(params, ["data.test_fraction=0.25"]), ws, store)
    assert report.changed and "parameters changed" in report.reason and "the data changed" in report.reason


def test_a_code_change_is_a_change_and_old_rows_without_a_code_digest_are_not(tmp_path: Path):
    params = write_params(tmp_path / "params.yaml")
    ws = Workspace(tmp_path / "ws")
    fingerprint = load_splits(params, ws).fingerprint
    store = ws.lineage(params)
    store.commit_generation(GenerationBundle(_record(0, params_digest(params), fingerprint)))  # before revision 0004
    unknown = detect_changes(params, ws, store, code="b" * 64)
    assert not unknown.changed and "code digest is unknown (recorded before lineage revision 0004)" in unknown.reason
    record = _record(1, params_digest(params), fingerprint)
    record.code_digest = "a" * 64
    store.commit_generation(GenerationBundle(record))
    assert store.generations()[-1].code_digest == "a" * 64  # recorded in the lineage
    same = detect_changes(params, ws, store, code="a" * 64)
    assert not same.changed and "same code" in same.reason
    fixed = detect_changes(params, ws, store, code="b" * 64)
    store.close()
    assert fixed.changed and fixed.code_digest == "b" * 64
    assert fixed.reason == f"code changed (digest {'a' * 12} → {'b' * 12}) since generation 1"
