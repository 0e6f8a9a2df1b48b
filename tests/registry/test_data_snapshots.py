"""DVC snapshots of data manifests (registry/data_snapshots.py) with a real DVC repository."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from components.data import DataManifest, load_dataset, select_training_data
from registry.data_snapshots import DataSnapshotStore


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    d = load_dataset("digits", tmp_path_factory.mktemp("digits"))

    def sel(seed):
        return select_training_data(
            d.train, dataset="digits", fingerprint=d.fingerprint, class_order=[0, 1, 2], fraction=0.5, seed=seed
        )

    return sel(0), sel(1)


def _cache_file(root, md5):
    return root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def test_snapshot_is_stable_and_versioned_in_the_dvc_cache(tmp_path, manifests):
    m0, m1 = manifests
    root = tmp_path / "data"
    store = DataSnapshotStore(root)
    first = store.snapshot("gen0", m0)
    assert (root / ".dvc").is_dir()
    dvc_file = root / "snapshots" / "gen0" / "manifest.json.dvc"
    assert dvc_file.is_file() and first.path == root / "snapshots" / "gen0" / "manifest.json"
    meta = yaml.safe_load(dvc_file.read_text())
    assert meta["outs"][0]["md5"] == first.data_hash
    assert first.data_hash == hashlib.md5(m0.to_json().encode()).hexdigest()

    again = store.snapshot("gen0", m0)
    assert again.data_hash == first.data_hash
    assert store.read_hash("gen0") == first.data_hash

    cached = _cache_file(root, first.data_hash)
    assert cached.is_file() and cached.read_text() == m0.to_json()

    changed = store.snapshot("gen0", m1)
    assert changed.data_hash != first.data_hash
    assert _cache_file(root, changed.data_hash).read_text() == m1.to_json()
    # the earlier version is still in the cache
    assert cached.is_file() and cached.read_text() == m0.to_json()

    loaded = store.load("gen0")
    assert isinstance(loaded, DataManifest) and loaded.sha256 == m1.sha256

    other = store.snapshot("gen1", m0)  # another name, same content: same hash
    assert other.data_hash == first.data_hash
    assert store.load("gen1").sha256 == m0.sha256
    assert not list((root / "snapshots" / "gen0").glob("*.tmp"))
