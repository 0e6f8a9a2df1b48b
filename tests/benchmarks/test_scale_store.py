"""What ``bctflow bench scale --store`` measures of a gallery store (benchmarks/scale_store.py), on small stamped
part stores: the params it writes, the cosine view, the speed and ingest keys, and the alias move."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.scale_store import (
    _unit_space,
    alias_flip,
    cosine_index,
    ingest_rate,
    search_speed,
    store_gallery,
    switch_check,
)
from components.errors import ConfigError
from components.geometry import create_space, expmap0
from components.indexing.backend import IndexOptions, vector_store
from tests.components.indexing.test_backend import stamped_store
from tests.components.indexing.test_seal import _version


def test_the_cosine_view_is_the_unit_spatial_part_of_lorentz_points():
    import torch

    z = np.random.default_rng(0).normal(size=(20, 6))
    points = expmap0(torch.from_numpy(z), 1.0).numpy()  # (20, 7): time first
    unit = _unit_space(points, create_space("lorentz", 1.0))
    assert unit.shape == (20, 6)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0)
    np.testing.assert_allclose(unit, z / np.linalg.norm(z, axis=1, keepdims=True), atol=1e-12)


def test_the_store_params_name_the_store_in_the_workspace_and_its_own_index_type():
    assert store_gallery("faiss", "hnsw") == {"store": "faiss"}
    assert store_gallery("milvus", "hnsw") == {
        "store": "milvus", "uri": "milvus.db", "name": "scale", "index_options": {"index_type": "HNSW"},
    }  # fmt: skip
    assert store_gallery("lancedb", "hnsw")["index_options"] == {"index_type": "IVF_HNSW_SQ"}
    with pytest.raises(ConfigError, match=r"^bench scale --store milvus has no ivfpq index; use --index flat or ivf "):
        store_gallery("milvus", "ivfpq")


@pytest.mark.parametrize("store", ["faiss", "lancedb"])
def test_the_store_keys_are_measured_through_the_store_and_the_alias_ends_where_it_was(tmp_path, store):
    """Search and flat queries/s, the cosine index built by the same store, the ingest rate from the store's own
    timing, and the alias moved to the older version and back (FAISS files: none of their own)."""
    db = vector_store(store, str(tmp_path / "lance") if store == "lancedb" else None)
    options = IndexOptions({"type": "flat"}, recall_queries=100)
    versions = []
    for g in (0, 1):
        parts = stamped_store(tmp_path / f"v{g}" / "gallery", stamps=(g,), n=600)
        out = tmp_path / f"v{g}" / "index"
        db.collection(f"scale_g{g}_v0", out).build(parts, generation=g, options=options)
        versions.append((parts, out))
    (parts, live), (_, old) = versions[1], versions[0]
    speed = search_speed(live, parts, queries=50)
    assert speed["search_qps"] > 0 and speed["flat_search_qps"] > 0
    cosine = cosine_index(live, parts, options, tmp_path)
    assert cosine["cosine_recall_at_10"] >= 0.95 and cosine["cosine_search_qps"] > 0
    assert cosine_index(live, parts, options, tmp_path)["cosine_recall_at_10"] >= 0.95  # a rerun in the same folder
    manifest = json.loads((live / "manifest.json").read_text())
    assert ingest_rate(manifest) > 0
    if store == "faiss":
        assert alias_flip(live, old, [0, 1]) is None
        return
    assert manifest["extra"]["rows_written"] == 600 and "scale_cos_g0_v0" not in db._tables()  # dropped after
    db.collection("scale_g1_v0", live).point_alias([0, 1])
    assert 0 < alias_flip(live, old, [0, 1], rounds=2) < 1.0
    assert db.collection("scale_g1_v0", live).aliased() and not db.collection("scale_g0_v0", old).aliased()


def test_an_unknown_store_is_refused_before_any_work(tmp_path):
    from benchmarks.scale import run_scale

    with pytest.raises(ConfigError, match=r"^unknown gallery store 'qdrant'; available: .*faiss.*lancedb.*milvus"):
        run_scale(1000, "hnsw", tmp_path / "out", work=tmp_path / "work", store="qdrant")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_the_switch_check_is_timed_on_a_sealed_version_and_says_when_its_seal_does_not_show_it_unchanged(tmp_path):
    import os

    from components.indexing.seal import seal_version

    version = _version(tmp_path / "index-v001")
    seal, _ = seal_version(version)
    checked = switch_check(version.root, rounds=3)
    # 2 × (the parts folder, store.json, index.faiss, manifest.json), serving.json
    assert checked["switch_check_sealed"] is True and checked["switch_check_files"] == len(seal.files) == 9
    assert 0 < checked["switch_check_s"] < 1.0
    store = version.corpus_store / "store.json"
    os.utime(store, ns=(store.stat().st_atime_ns, store.stat().st_mtime_ns + 1))
    assert switch_check(version.root, rounds=1)["switch_check_sealed"] is False
