"""gallery.store milvus's own checks (components/indexing/stores/milvus.py); what it shares with the other database
stores is tested in tests/components/indexing/test_db_index.py."""

from __future__ import annotations

import pytest

from components.errors import ConfigError
from components.indexing.backend import vector_store


def test_an_unreachable_server_or_a_missing_uri_is_one_line_at_plan_time(tmp_path):
    with pytest.raises(ConfigError, match="gallery.store milvus needs gallery.uri"):
        vector_store("milvus").check()
    with pytest.raises(ConfigError, match=r"the Milvus at gallery.uri http://127.0.0.1:9 does not answer .*fix"):
        vector_store("milvus", "http://127.0.0.1:9", {"timeout": 1}).check()
    vector_store("milvus", str(tmp_path / "lite" / "m.db")).check()  # a Milvus Lite file is created where it lies
    assert (tmp_path / "lite" / "m.db").exists()


def test_a_search_asks_few_enough_queries_per_call_that_the_reply_fits_and_answers_the_same(tmp_path, monkeypatch):
    """Each call's reply (``limit`` stored vectors per query) stays under the reply budget — a corpus's top-101
    metrics, re-ranked 4×, once asked 2048 queries for 430 MB, over gRPC's 256 MiB — and the answers do not change."""
    import numpy as np

    from components.indexing.backend import open_index
    from components.indexing.index_config import IndexConfig
    from components.indexing.stores import milvus
    from tests.components.indexing.test_backend import stamped_store

    assert milvus.queries_per_call(404, 129) * 404 * (4 * 129 + 64) <= milvus._REPLY_BYTES
    assert milvus.queries_per_call(404, 129) < 2048 and milvus.queries_per_call(10, 16) == 2048
    assert milvus.queries_per_call(10**9, 129) == 1
    parts = stamped_store(tmp_path / "gallery", geometry="euclidean", stamps=(0,))
    store = vector_store("milvus", str(tmp_path / "m.db"), {"index_type": "FLAT"})
    store.build(parts, tmp_path / "index", collection="t_g0_v0", generation=0, config=IndexConfig(recall_queries=50))
    q = np.concatenate([p.gallery.vectors()[:20] for p in parts.parts()])
    whole = open_index(tmp_path / "index").search(q, 30)
    monkeypatch.setattr(milvus, "_REPLY_BYTES", 7 * 30 * (4 * 8 + 64))  # 7 queries per call
    assert milvus.queries_per_call(30, 8) == 7
    split = open_index(tmp_path / "index").search(q, 30)
    np.testing.assert_array_equal(split[1], whole[1])
    np.testing.assert_allclose(split[0], whole[0])
    store.close()


def test_a_create_index_retried_after_it_went_through_is_waited_for_and_must_be_the_one_asked(tmp_path):
    """pymilvus retries a create_index whose gRPC connection the server reset mid-build (GOAWAY, seen building HNSW
    over 1M rows) and the retry finds the index the first call built: that one is accepted when it is the index
    asked for, and a different one is one line."""
    from components.errors import IndexIntegrityError
    from components.indexing.index_config import IndexConfig
    from components.indexing.stores import milvus
    from tests.components.indexing.test_backend import stamped_store

    parts = stamped_store(tmp_path / "gallery", geometry="euclidean", stamps=(0,))
    store = vector_store("milvus", str(tmp_path / "m.db"), {"index_type": "HNSW"})
    store.build(parts, tmp_path / "index", collection="t_g0_v0", generation=0, config=IndexConfig(recall_queries=50))
    db = store._db()
    spec = db.prepare_index_params()
    spec.add_index("vector", index_type="HNSW", metric_type="IP", params={"M": 16, "efConstruction": 200})
    milvus.create_index(db, "t_g0_v0", spec, "HNSW", "IP")  # "index already exists": the retry's answer, accepted
    with pytest.raises(IndexIntegrityError, match=r"holds a HNSW index under IP, not the IVF_FLAT under IP asked for"):
        milvus.create_index(db, "t_g0_v0", spec, "IVF_FLAT", "IP")
    store.close()
