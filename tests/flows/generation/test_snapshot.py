"""Step 1 (flows/generation/snapshot.py): the generation's training data is a deterministic, seeded selection, and its
manifest is snapshotted with DVC; a dataset that changed since planning is refused before anything is written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from components.data import DataManifest
from components.errors import DataError
from flows.gallery.data import load_splits, select_generation_data
from flows.generation.snapshot import snapshot_data
from flows.params import GenerationSpec, Params, apply_overrides
from flows.planning import make_plan
from flows.runtime.workspace import Workspace
from registry.data_snapshots import DataSnapshots
from tests.helpers import write_params


@pytest.fixture(scope="module")
def params(tmp_path_factory) -> Params:
    return write_params(tmp_path_factory.mktemp("snapshot") / "params.yaml")


@pytest.fixture(scope="module")
def splits(params: Params, tmp_path_factory):
    return load_splits(params, Workspace(tmp_path_factory.mktemp("snapshot-ws")))


def test_parent_classes_keep_their_positions_and_come_first(params: Params, splits):
    m = select_generation_data(params, splits, 1, [7, 0, 5, 3], 1.0, parent_order=[3, 1, 0])
    # class 1 of the parent is not requested: dropped; 3 and 0 keep the parent's order, 7 and 5 follow as requested
    assert m.class_order == (3, 0, 7, 5)
    assert m.class_names == tuple(splits.train.class_names[c] for c in (3, 0, 7, 5))
    assert set(np.unique(m.labels).tolist()) == {0, 3, 5, 7}
    assert sorted(m.ids.tolist()) == sorted(splits.train.ids[np.isin(splits.train.labels, [0, 3, 5, 7])].tolist())
    assert m.model_labels()[m.labels == 3].tolist() == [0] * int((m.labels == 3).sum())  # position 0 = parent's
    without_parent = select_generation_data(params, splits, 1, [7, 0, 5, 3], 1.0, parent_order=None)
    assert without_parent.class_order == (7, 0, 5, 3)


def test_the_sample_seed_is_split_seed_plus_generation(params: Params, splits):
    classes = [0, 1, 2, 3]
    g1 = select_generation_data(params, splits, 1, classes, 0.5, None)
    g1_again = select_generation_data(params, splits, 1, classes, 0.5, None)
    g2 = select_generation_data(params, splits, 2, classes, 0.5, None)
    assert g1.seed == params.data.split_seed + 1 and g2.seed == params.data.split_seed + 2
    assert np.array_equal(g1.ids, g1_again.ids)  # deterministic
    assert len(g1) == len(g2) == round(0.5 * int(np.isin(splits.train.labels, classes).sum()))
    assert not np.array_equal(g1.ids, g2.ids)  # each generation draws its own sample
    # only the sum matters: split_seed 2 + generation 1 draws what split_seed 0 + generation 3 draws
    shifted = apply_overrides(params, {"data.split_seed": params.data.split_seed + 2})
    g3 = select_generation_data(params, splits, 3, classes, 0.5, None)
    assert np.array_equal(select_generation_data(shifted, splits, 1, classes, 0.5, None).ids, g3.ids)
    assert np.all(np.diff(g1.ids) > 0)  # ids sorted, no duplicates


def test_snapshot_writes_a_dvc_tracked_manifest_whose_md5_is_the_data_hash(params: Params, tmp_path: Path):
    home = tmp_path / "ws"
    plan = make_plan(params, home, GenerationSpec(name="g0", classes=[2, 0, 1], fraction=0.5))
    snap = snapshot_data(plan)

    manifest = Path(snap.manifest)
    assert manifest == home / "data" / "snapshots" / "gen_000" / "manifest.json"
    body = manifest.read_bytes()
    assert snap.data_hash == hashlib.md5(body).hexdigest()  # DVC's md5 of a file is the md5 of its bytes
    dvc_file = yaml.safe_load(manifest.with_name("manifest.json.dvc").read_text())
    assert dvc_file["outs"][0]["md5"] == snap.data_hash and dvc_file["outs"][0]["path"] == "manifest.json"
    cached = home / "data" / ".dvc" / "cache" / "files" / "md5" / snap.data_hash[:2] / snap.data_hash[2:]
    assert cached.read_bytes() == body  # the DVC cache keeps this version
    assert DataSnapshots(home / "data").read_hash("gen_000") == snap.data_hash

    m = DataManifest.from_json(body.decode())
    assert snap.name == "gen_000" and snap.class_order == m.class_order == (2, 0, 1)
    assert snap.n_train == len(m) and m.seed == params.data.split_seed + 0 and m.fraction == 0.5
    assert snap.data_fingerprint == m.fingerprint == load_splits(params, plan.workspace).fingerprint

    again = snapshot_data(plan)  # idempotent: the same selection, the same hash
    assert again.data_hash == snap.data_hash


def test_a_dataset_changed_since_planning_is_refused_before_anything_is_written(params: Params, tmp_path: Path):
    home = tmp_path / "ws"
    plan = make_plan(params, home, GenerationSpec(name="g0", classes=[0, 1]), data_fingerprint="0" * 64)
    with pytest.raises(DataError) as info:
        snapshot_data(plan)
    msg = str(info.value)
    assert "changed since this run was planned" in msg and "fingerprint differs" in msg and "digits" in msg
    assert not (home / "data").exists()


def test_the_planned_fingerprint_is_accepted_when_it_matches(params: Params, splits, tmp_path: Path):
    plan = make_plan(params, tmp_path / "ws", GenerationSpec(classes=[0, 1]), data_fingerprint=splits.fingerprint)
    snap = snapshot_data(plan)
    assert snap.data_fingerprint == splits.fingerprint and snap.class_order == (0, 1)
