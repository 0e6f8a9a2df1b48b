"""The gallery-store seam (components/indexing/backend.py) with its first store, FAISS files: one catalog, a
connection handing out collections, the attachment the lineage pins, the store an index folder was built by, counts
by generation and verification."""

from __future__ import annotations

import ast
import inspect
import re

import numpy as np
import pytest

from components.errors import ConfigError, IndexIntegrityError
from components.geometry import create_space
from components.indexing.backend import (
    ATTACHMENT,
    STORES,
    IndexOptions,
    collection_at,
    gallery_facts,
    open_index,
    vector_store,
)
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import PartWriter, StoredPart
from components.indexing.stores.faiss import FaissFiles
from components.io import file_sha256
from tests.components.indexing.gallery_data import clustered
from tests.conftest import REPO


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
    options = IndexOptions({"type": "flat"})
    index = vector_store("faiss").collection("b_g1_v0", out).build(parts, generation=1, options=options, compatible=[1])
    assert index.ntotal == 300 and index.manifest.generation == 1
    vectors = collection_at(out)
    assert isinstance(vectors.store, FaissFiles)
    assert vectors.digest() == file_sha256(out / ATTACHMENT)
    assert vectors.count_by_generation() == {0: 150, 1: 150}
    facts = gallery_facts(out)  # what the lineage's pointer row records: FAISS files have no collection
    assert (facts.store, facts.collection, facts.rows_by_generation) == ("faiss", None, {0: 150, 1: 150})
    assert facts.index_params == {**index.manifest.params, "index_type": "flat"}
    vectors.verify()
    q = next(parts.parts()).gallery.vectors()[:5]
    _, ids = open_index(out).search(q, 1, query_generation=1)
    assert ids[:, 0].tolist() == list(range(1000, 1005))  # each item finds itself first
    assert vectors.aliased()  # FAISS keeps no alias of its own: live/CURRENT is it
    (parts.path / "parts" / "part-00002.npz").unlink()
    with pytest.raises(IndexIntegrityError):
        vectors.verify()
    with pytest.raises(IndexIntegrityError, match=f"{tmp_path / 'nowhere' / ATTACHMENT} is missing or damaged"):
        gallery_facts(tmp_path / "nowhere")


def test_the_seam_takes_store_neutral_index_options_and_each_store_reads_what_it_knows(tmp_path):
    """IndexOptions name the index in no store's terms: the FAISS files read them as their IndexConfig (refusing at
    plan time what the build would, and saying the width they store); a database store reads none of them (its own
    index options are its connection's, params gallery.index_options)."""
    lorentz = create_space("lorentz")
    faiss_files = vector_store("faiss")
    assert faiss_files.check_index(IndexOptions({"type": "hnsw", "lorentz_form": "mips_l2"}), lorentz, 9, 100) == 10
    with pytest.raises(ConfigError, match="index config field 'nlist' is 500 but only 100 training vectors"):
        faiss_files.check_index(IndexOptions({"type": "ivf", "nlist": 500}), lorentz, 9, 100)
    with pytest.raises(ConfigError, match="unknown index config field"):
        faiss_files.check_index(IndexOptions({"nlists": 5}), lorentz, 9, 100)
    database = vector_store("lancedb", str(tmp_path / "lance"))
    assert database.check_index(IndexOptions({"type": "ivf", "nlist": 500}), lorentz, 9, 100) == 9


def test_the_seams_signatures_name_no_faiss_type_and_the_database_stores_import_nothing_of_faiss():
    """What the flows call (components/indexing/backend.py) is store-neutral; FAISS lives in its own store package,
    which neither the database stores nor what they share import."""
    from components.indexing import backend

    faiss_names = {"IndexConfig", "IndexManifest", "GalleryIndex", "FaissFiles", "FaissCollection"}
    for cls in (backend.VectorStore, backend.Collection, backend.SearchIndex):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            hints = set(re.findall(r"\w+", str(inspect.signature(member))))
            assert not hints & faiss_names, f"{cls.__name__}.{name}"
    for function in (backend.vector_store, backend.collection_at, backend.open_index, backend.gallery_facts):
        assert not set(re.findall(r"\w+", str(inspect.signature(function)))) & faiss_names
    stores = REPO / "components" / "indexing" / "stores"
    for path in [
        *stores.glob("milvus*.py"),
        *stores.glob("lance*.py"),
        *stores.glob("db_*.py"),
        stores / "database.py",
    ]:
        imported = [
            node.module or "" for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
        ] + [
            a.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Import) for a in node.names
        ]
        assert not [m for m in imported if "faiss" in m], path
