"""gallery.store milvus on a Milvus Lite file: a version as a collection with a stamp on every row, idempotent
writes, recall against exact search, the live alias, and the refusals that leave everything as it was."""

from __future__ import annotations

import numpy as np
import pytest

from components.errors import ConfigError, IndexIntegrityError
from components.indexing.backend import StoreManifest, open_index, store_of, vector_store
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.index_config import IndexConfig
from components.indexing.store import StoredPart
from components.indexing.stores.milvus import MilvusStore
from tests.components.indexing.test_backend import stamped_store


@pytest.fixture(scope="module")
def milvus(tmp_path_factory):
    """One Milvus Lite file for the module (each test uses its own collection names)."""
    return vector_store("milvus", str(tmp_path_factory.mktemp("milvus") / "m.db"), {"M": 16, "ef": 64})


def _build(milvus, tmp_path, name: str, geometry: str = "euclidean", generation: int = 1, **kw):
    parts = stamped_store(tmp_path / name / "gallery", geometry=geometry, **kw)
    out = tmp_path / name / "index"
    cfg = IndexConfig(type="flat", recall_queries=100)
    return parts, out, milvus.build(parts, out, collection=name, generation=generation, config=cfg)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_a_version_is_a_collection_of_stamped_rows_searched_like_the_faiss_files(milvus, tmp_path, geometry):
    parts, out, _ = _build(milvus, tmp_path, f"t_{geometry[:3]}_g1_v0", geometry, stamps=(0, 1))
    m = StoreManifest.load(out)
    assert (m.store, m.count, m.counts_by_generation) == ("milvus", 300, {0: 150, 1: 150})
    assert milvus.count_by_generation(out) == {0: 150, 1: 150}
    assert m.recall_at_10 >= 0.95  # HNSW against exact search on the same rows
    flat = vector_store("faiss").build(parts, tmp_path / "flat", collection="-", generation=1, config=IndexConfig())
    q = np.concatenate([p.gallery.vectors()[:7] for p in parts.parts()])
    s_db, i_db = open_index(out).search(q, 5, query_generation=1)
    s_ff, i_ff = flat.search(q, 5, query_generation=1)
    assert (i_db[:, 0] == i_ff[:, 0]).all()  # each item finds itself first
    np.testing.assert_allclose(s_db[:, 0], s_ff[:, 0], atol=1e-6)
    assert isinstance(store_of(out), MilvusStore)


def test_a_rerun_upserts_so_a_killed_build_ends_with_one_row_per_item(milvus, tmp_path):
    parts, out, _ = _build(milvus, tmp_path, "t_rerun_g2_v1", generation=2, stamps=(2,))
    again = milvus.build(parts, out, collection="t_rerun_g2_v1", generation=2, config=IndexConfig(recall_queries=50))
    assert again.ntotal == 300 and milvus.count_by_generation(out) == {2: 300}


def test_the_alias_moves_to_known_generations_only(milvus, tmp_path):
    _, out1, _ = _build(milvus, tmp_path, "t_alias_g1_v0", generation=1, stamps=(1,))
    _, out2, _ = _build(milvus, tmp_path, "t_alias_g2_v1", generation=2, stamps=(2,))
    milvus.point_alias(out1, [0, 1])
    assert milvus.aliased(out1) and not milvus.aliased(out2)
    with pytest.raises(IndexIntegrityError, match="generation 2's gallery, which the lineage does not know"):
        milvus.point_alias(out2, [0, 1])
    assert milvus.aliased(out1)  # nothing changed
    milvus.point_alias(out2, [0, 1, 2])
    assert milvus.aliased(out2) and milvus.live_collection("t_alias_g0_v0") == "t_alias_g2_v1"
    milvus.drop(out1)  # retention: not the live one
    with pytest.raises(IndexIntegrityError, match="collection t_alias_g1_v0 does not exist"):
        milvus.verify(out1)


def _rows(n: int, d: int, generation: int, geometry: str = "euclidean") -> StoredPart:
    z = np.random.default_rng(3).normal(size=(n, d)).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    ids = np.arange(1000, 1000 + n, dtype=np.int64)
    g = GalleryEmbeddings(geometry=geometry, curvature=1.0, z=z, emb=z, ids=ids, labels=ids % 5,
                          clipped=np.zeros(n, bool), logits=np.zeros((n, 0), np.float32))  # fmt: skip
    return StoredPart(g, np.full(n, generation, np.int64))


def test_wrong_width_other_generation_live_and_unknown_collections_are_refused_with_nothing_changed(milvus, tmp_path):
    _, out, _ = _build(milvus, tmp_path, "t_refuse_g1_v0", generation=1, stamps=(1,))
    before = milvus.count_by_generation(out)
    with pytest.raises(IndexIntegrityError, match="rows of width 9 .* cannot be written into .* of width 8"):
        milvus.write("t_refuse_g1_v0", _rows(5, 9, 1))
    with pytest.raises(IndexIntegrityError, match="stamped with generation 3 cannot be written .* accepts stamps"):
        milvus.write("t_refuse_g1_v0", _rows(5, 8, 3))
    with pytest.raises(IndexIntegrityError, match="collection t_nowhere_g1_v0 does not exist"):
        milvus.write("t_nowhere_g1_v0", _rows(5, 8, 1))
    milvus.point_alias(out, [1])
    with pytest.raises(IndexIntegrityError, match="is the live gallery; a new gallery version is written to a new"):
        milvus.write("t_refuse_g1_v0", _rows(5, 8, 1))
    assert milvus.count_by_generation(out) == before
    milvus.verify(out)


def test_an_unreachable_server_or_a_missing_uri_is_one_line_at_plan_time():
    with pytest.raises(ConfigError, match="gallery.store milvus needs gallery.uri"):
        vector_store("milvus").check()
    with pytest.raises(ConfigError, match=r"the Milvus at gallery.uri http://127.0.0.1:9 does not answer .*fix"):
        vector_store("milvus", "http://127.0.0.1:9", {"timeout": 1}).check()
