"""The gallery-store seam (components/indexing/backend.py) with its first store, FAISS files: one catalog, the
attachment the lineage pins, the store an index folder was built by, counts by generation and verification."""

from __future__ import annotations

import numpy as np
import pytest

from components.errors import ConfigError, IndexIntegrityError
from components.indexing.backend import ATTACHMENT, STORES, gallery_facts, open_index, store_of, vector_store
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.index_config import IndexConfig
from components.indexing.parts import PartWriter, StoredPart
from components.indexing.stores.faiss_files import FaissFiles
from components.io import file_sha256
from tests.components.indexing.gallery_data import clustered


def stamped_store(directory, n: int = 300, d: int = 8, geometry: str = "lorentz", stamps=(0, 1), seed: int = 0):
    """A finished part store of ``n`` clustered items in 3 parts (Lorentz: tangent radii about 0.1..1, as a bounded
    head gives), their stamps cycling through ``stamps``."""
    z = (0.15 * clustered(n, d, seed)).astype(np.float32)
    if geometry == "euclidean":
        z /= np.linalg.norm(z, axis=1, keepdims=True)
    ids = np.arange(1000, 1000 + n, dtype=np.int64)
    g = GalleryEmbeddings(
        geometry=geometry, curvature=1.0, z=z, emb=z if geometry == "euclidean" else np.zeros((n, d + 1), np.float32),
        ids=ids, labels=ids % 5, clipped=np.zeros(n, bool), logits=np.zeros((n, 0), np.float32),
    )  # fmt: skip
    writer = PartWriter(directory, chunk_size=n // 3)
    writer.add(StoredPart(g, np.asarray(stamps, np.int64)[np.arange(n) % len(stamps)]))
    return writer.finish()


def test_the_catalog_knows_faiss_and_names_the_stores_for_an_unknown_one():
    assert "faiss" in STORES.names()
    assert isinstance(vector_store("faiss"), FaissFiles)
    with pytest.raises(ConfigError, match=r"unknown gallery store 'qdrant'; available: .*faiss.*gallery.store"):
        vector_store("qdrant")


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_faiss_files_build_attach_search_count_and_verify(tmp_path, geometry):
    parts = stamped_store(tmp_path / "v" / "gallery", geometry=geometry)
    out = tmp_path / "v" / "index"
    cfg = IndexConfig(type="flat")
    index = vector_store("faiss").build(parts, out, collection="b_g1_v0", generation=1, config=cfg, compatible=[1])
    assert index.ntotal == 300 and index.manifest.generation == 1
    store = store_of(out)
    assert isinstance(store, FaissFiles)
    assert store.digest(out) == file_sha256(out / ATTACHMENT)
    assert store.count_by_generation(out) == {0: 150, 1: 150}
    facts = gallery_facts(out)  # what the lineage's pointer row records: FAISS files have no collection
    assert (facts.store, facts.collection, facts.rows_by_generation) == ("faiss", None, {0: 150, 1: 150})
    assert facts.index_params == {**index.manifest.params, "index_type": "flat"}
    store.verify(out)
    q = next(parts.parts()).gallery.vectors()[:5]
    _, ids = open_index(out).search(q, 1, query_generation=1)
    assert ids[:, 0].tolist() == list(range(1000, 1005))  # each item finds itself first
    assert store.aliased(out)  # FAISS keeps no alias of its own: live/CURRENT is it
    (parts.path / "parts" / "part-00002.npz").unlink()
    with pytest.raises(IndexIntegrityError):
        store.verify(out)
    with pytest.raises(IndexIntegrityError, match=f"{tmp_path / 'nowhere' / ATTACHMENT} is missing or damaged"):
        gallery_facts(tmp_path / "nowhere")
