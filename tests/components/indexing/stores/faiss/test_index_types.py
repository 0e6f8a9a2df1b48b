"""Index types built chunk by chunk, with recall measured at build time (docs/design.md §8.3)."""

from __future__ import annotations

import json
import os

import faiss
import numpy as np
import pytest

import components.indexing.stores.faiss.gallery_index as faiss_index_module
from components.errors import IndexIntegrityError
from components.geometry import create_space
from components.indexing.stores.faiss import INDEX_FILE, MANIFEST_FILE, GalleryIndex, IndexConfig
from components.indexing.stores.faiss.index_types import file_sha256
from components.indexing.stores.faiss.manifest import INDEX_TYPES, IVF_TYPES
from tests.components.indexing.gallery_data import MIN_RECALL, D, K, N, chunks_of, make_data


@pytest.fixture(scope="module")
def data():
    return make_data()


def _build(data, geometry, **cfg):
    gallery, _, ids = data[geometry]
    return GalleryIndex.build_streaming(
        chunks_of(gallery, ids), space=create_space(geometry, K), generation=1, config=IndexConfig(**cfg)
    )


@pytest.fixture(scope="module")
def flat(data):
    return {g: _build(data, g) for g in ("euclidean", "lorentz")}


# ------------------------------------------------------------ build + recall
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
@pytest.mark.parametrize("index_type", INDEX_TYPES)
def test_each_type_builds_from_chunks_and_records_its_recall(data, geometry, index_type):
    gallery, _, ids = data[geometry]
    cfg = IndexConfig(type=index_type, recall_queries=400, pq_nbits=6)
    chunks, progress = chunks_of(gallery, ids), []
    index = GalleryIndex.build_streaming(
        chunks, space=create_space(geometry, K), generation=1, config=cfg, on_progress=progress.append
    )
    m = index.manifest
    assert chunks.calls == (1 if index_type == "flat" else 2)
    assert progress == [700, 1800, 3000] and index.ntotal == m.count == N
    assert m.index_type == index_type and m.recall_queries == 400
    assert m.factory == cfg.factory_string(m.stored_dim, N)
    assert m.stored_dim == m.dim == gallery.shape[1]
    proxy = geometry == "lorentz" and index_type != "flat"
    assert m.metric == ("l2" if proxy else "inner_product")
    assert (m.params.get("lorentz_form"), m.params.get("rerank")) == (("proxy", 3) if proxy else (None, None))
    assert m.recall_at_10 >= MIN_RECALL[index_type] and m.search_qps > 0 and m.build_seconds > 0
    if index_type in IVF_TYPES:
        assert m.params["nlist"] == N // 39 and m.params["nprobe"] == 16 and m.params["train_size"] == N
    if index_type == "hnsw":
        assert (m.params["hnsw_m"], m.params["ef_search"], m.params["ef_construction"]) == (32, 96, 80)


def test_recorded_recall_agrees_with_search_and_can_be_low(data, flat):
    """A deliberately poor IVF (many lists, one probed): the recorded recall must show it."""
    gallery = data["euclidean"][0]
    poor = _build(data, "euclidean", type="ivf", nlist=200, nprobe=1, recall_queries=N)
    _, got = poor.search(gallery, 11)
    _, want = flat["euclidean"].search(gallery, 11)
    measured = np.mean([len(set(a[1:]) & set(b[1:])) / 10 for a, b in zip(got, want)])  # own item first in both
    assert poor.manifest.recall_at_10 < 0.9
    assert abs(poor.manifest.recall_at_10 - measured) < 0.03


def test_flat_build_and_streaming_agree_with_exact_search(data, flat):
    gallery, queries, ids = data["lorentz"]
    one = GalleryIndex.build(gallery, ids, space=create_space("lorentz", K), generation=1)
    for a, b in zip(one.search(queries, 10), flat["lorentz"].search(queries, 10)):
        np.testing.assert_array_equal(a, b)
    assert one.manifest.recall_at_10 == 1.0 and one.manifest.recall_queries == 1000
    assert (one.manifest.index_type, one.manifest.factory) == ("flat", "IDMap2,Flat")


@pytest.mark.parametrize(("geometry", "form"), [("euclidean", "proxy"), ("lorentz", "mips_l2")])
def test_exhaustive_ivf_equals_flat_and_hnsw_recalls_it(data, flat, geometry, form):
    """Exact FAISS ranking (cosine; the exact MIPS->L2 reduction): probing every list is exact search."""
    _, queries, _ = data[geometry]
    want_s, want_i = flat[geometry].search(queries, 10)
    ivf = _build(data, geometry, type="ivf", nlist=20, nprobe=20, lorentz_form=form)
    assert ivf.manifest.stored_dim == ivf.manifest.dim + (form == "mips_l2" and geometry == "lorentz")
    got_s, got_i = ivf.search(queries, 10)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, rtol=0, atol=1e-12)
    hnsw = _build(data, geometry, type="hnsw", ef_search=256, lorentz_form=form)
    got_s, got_i = hnsw.search(queries, 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got_i, want_i)]) >= 0.98
    same = got_i == want_i
    np.testing.assert_allclose(got_s[same], want_s[same], rtol=0, atol=1e-12)  # same vectors, same float64 score


def test_lorentz_proxy_reranks_candidates_exactly(data, flat):
    """Proxy form: exhaustive IVF finds the proxy's best rerank*k; their exact re-ranking recovers geodesic kNN."""
    _, queries, _ = data["lorentz"]
    want_s, want_i = flat["lorentz"].search(queries, 10)
    recalls = []
    for rerank in (1, 3, 300):
        ivf = _build(data, "lorentz", type="ivf", nlist=20, nprobe=20, rerank=rerank)
        got_s, got_i = ivf.search(queries, 10)
        recalls.append(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got_i, want_i)]))
        assert (np.diff(got_s, axis=1) <= 0).all()
        same = got_i == want_i
        np.testing.assert_allclose(got_s[same], want_s[same], rtol=0, atol=1e-12)
    assert 0.7 <= recalls[0] < recalls[1] < recalls[2] == 1.0 and recalls[1] >= 0.95
    gallery, _, ids = data["lorentz"]
    stored = ivf._shards[0].reconstruct_batch(ids[:5])  # [2^-8 g_t, g_s]: the original float32 values
    np.testing.assert_array_equal(stored[:, 1:], gallery[:5, 1:].astype(np.float32))
    np.testing.assert_array_equal(stored[:, 0], gallery[:5, 0].astype(np.float32) * np.float32(2.0**-8))


def test_lorentz_rescoring_is_exact_for_an_item_and_its_near_neighbours():
    """An item is its own nearest neighbour (distance 0), ahead of a neighbour 4e-4 away, although both are stored
    in float32 off the hyperboloid by ~1e-7 (design §2.5); far pairs keep HBCT Eq. (3)'s acosh value."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(200, D))
    space = np.concatenate([base, base + 4e-4 * rng.normal(size=base.shape) / np.sqrt(D)])
    x = np.concatenate([np.sqrt(1 / K + (space * space).sum(1, keepdims=True)), space], axis=1)
    index = GalleryIndex.build_streaming(
        lambda: iter([(x, np.arange(len(x)))]), space=create_space("lorentz", K), generation=1, config=IndexConfig()
    )
    stored = x.astype(np.float32).astype(np.float64)
    scores, ids = index.search(stored[:200], 2)
    assert (ids[:, 0] == np.arange(200)).all() and (scores[:, 0] == 0).all()
    assert (ids[:, 1] == np.arange(200) + 200).all() and (scores[:, 1] < 0).all()
    far_s, far_i = index.search(stored[:5], 50)
    g = stored[far_i]
    inner = -stored[:5, None, 0] * g[..., 0] + np.einsum("nd,nkd->nk", stored[:5, 1:], g[..., 1:])
    acosh = np.arccosh(np.maximum(-K * inner, 1.0)) / np.sqrt(K)
    far = acosh > 0.1
    np.testing.assert_allclose(-far_s[far], acosh[far], rtol=1e-6)


def test_sharded_index_searches_like_one(data, flat):
    _, queries, _ = data["euclidean"]
    sharded = _build(data, "euclidean", shards=3)
    assert sharded.manifest.shards == 3 and len(sharded.manifest.shard_checksums) == 3
    for a, b in zip(sharded.search(queries, 10), flat["euclidean"].search(queries, 10)):
        np.testing.assert_array_equal(a, b)


def test_search_chunks_do_not_change_results(data, monkeypatch):
    _, queries, _ = data["lorentz"]
    index = _build(data, "lorentz", type="hnsw")
    whole = index.search(queries, 10)
    monkeypatch.setattr(faiss_index_module, "_SEARCH_CHUNK", 7)
    monkeypatch.setattr(faiss_index_module, "_RESCORE_ELEMS", 50)
    for a, b in zip(index.search(queries, 10), whole):
        np.testing.assert_array_equal(a, b)


def test_missing_neighbours_are_minus_one_and_last(data):
    gallery, _, ids = data["euclidean"]
    cfg = IndexConfig(type="ivf", nlist=5, nprobe=1, recall_queries=50)
    index = GalleryIndex.build(gallery[:200], ids[:200], space=create_space("euclidean", 1.0), generation=0, config=cfg)
    scores, found = index.search(gallery[:20], 200)  # one list of five: never all 200 items
    missing = found == -1
    assert missing.any() and not missing[:, 0].any()
    assert np.isneginf(scores[missing]).all() and np.isfinite(scores[~missing]).all()
    assert (np.diff(missing.astype(int), axis=1) >= 0).all()  # -1 only after the found items


# ------------------------------------------------------------- save / load
@pytest.mark.parametrize(
    ("index_type", "shards", "form"),
    [(t, 1, "proxy") for t in INDEX_TYPES] + [("ivf", 2, "proxy"), ("hnsw", 3, "proxy"), ("ivf", 1, "mips_l2")],
)
def test_save_load_round_trip(tmp_path, data, index_type, shards, form):
    geometry = "lorentz"
    _, queries, _ = data[geometry]
    index = _build(
        data, geometry, type=index_type, shards=shards, nprobe=7, ef_search=40, pq_nbits=6, lorentz_form=form
    )
    index.save(tmp_path)
    names = [INDEX_FILE] if shards == 1 else [f"index-{i:03d}-of-{shards:03d}.faiss" for i in range(shards)]
    assert sorted(os.listdir(tmp_path)) == sorted([*names, MANIFEST_FILE])
    loaded = GalleryIndex.load(tmp_path)
    assert loaded.manifest == index.manifest
    for a, b in zip(loaded.search(queries, 10), index.search(queries, 10)):
        np.testing.assert_array_equal(a, b)


def test_search_parameters_come_from_the_manifest(tmp_path, data):
    _build(data, "euclidean", type="ivf", nprobe=7).save(tmp_path)
    mpath = tmp_path / MANIFEST_FILE
    d = json.loads(mpath.read_text())
    d["params"]["nprobe"] = 3
    mpath.write_text(json.dumps(d))
    loaded = GalleryIndex.load(tmp_path)
    assert faiss.extract_index_ivf(loaded._shards[0]).nprobe == 3


def test_resaving_with_fewer_shards_removes_stale_files(tmp_path, data):
    _build(data, "euclidean", shards=2).save(tmp_path)
    _build(data, "euclidean").save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [INDEX_FILE, MANIFEST_FILE]
    assert GalleryIndex.load(tmp_path).manifest.shards == 1


@pytest.mark.parametrize(("index_type", "shards"), [("ivf", 1), ("hnsw", 1), ("ivfpq", 1), ("ivfsq", 1), ("ivf", 2)])
def test_corrupted_index_file_is_detected(tmp_path, data, index_type, shards):
    _build(data, "euclidean", type=index_type, shards=shards, pq_nbits=6).save(tmp_path)
    path = tmp_path / (INDEX_FILE if shards == 1 else "index-001-of-002.faiss")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(IndexIntegrityError, match=f"{path.name} .*does not match the sha256"):
        GalleryIndex.load(tmp_path)
    path.unlink()
    with pytest.raises(IndexIntegrityError, match=f"{path.name} is missing"):
        GalleryIndex.load(tmp_path)


def _replace_index_file(directory, index: faiss.Index, **manifest_changes) -> None:
    """Put another FAISS index in the directory with a manifest that vouches for its bytes."""
    path = directory / INDEX_FILE
    faiss.write_index(index, str(path))
    mpath = directory / MANIFEST_FILE
    mpath.write_text(json.dumps({**json.loads(mpath.read_text()), "checksum": file_sha256(path), **manifest_changes}))


def test_wrong_structure_with_a_valid_checksum_is_detected(tmp_path, data):
    gallery, _, ids = data["euclidean"]
    _build(data, "euclidean", type="hnsw").save(tmp_path)
    flat_ip = faiss.index_factory(D, "IDMap2,Flat", faiss.METRIC_INNER_PRODUCT)
    flat_ip.add_with_ids(gallery.astype(np.float32), ids)
    _replace_index_file(tmp_path, flat_ip)
    with pytest.raises(IndexIntegrityError, match="holds a 'IDMap2,Flat' index but its manifest says 'IDMap2,HNSW32"):
        GalleryIndex.load(tmp_path)
    _replace_index_file(tmp_path, flat_ip, factory="IDMap2,Flat")
    with pytest.raises(IndexIntegrityError, match="factory 'IDMap2,Flat' does not fit its index_type 'hnsw'"):
        GalleryIndex.load(tmp_path)


def test_off_geometry_vectors_in_an_approximate_index_are_detected(tmp_path, data):
    gallery, _, ids = data["euclidean"]
    _build(data, "euclidean", type="hnsw").save(tmp_path)
    bad = faiss.index_factory(D, "IDMap2,HNSW32,Flat", faiss.METRIC_INNER_PRODUCT)
    bad.add_with_ids(gallery.astype(np.float32), ids)  # not unit-normalised
    _replace_index_file(tmp_path, bad)
    with pytest.raises(IndexIntegrityError, match="sampled vectors .* do not fit the manifest's geometry 'euclidean'"):
        GalleryIndex.load(tmp_path)


def test_version_1_index_directory_still_loads(tmp_path, data):
    gallery, queries, ids = data["lorentz"]
    index = GalleryIndex.build(gallery, ids, space=create_space("lorentz", K), generation=4)
    index.save(tmp_path)
    m = index.manifest
    v1 = {
        "generation": 4, "geometry": "lorentz", "curvature": K, "dim": D + 1, "count": N, "checksum": m.checksum,
        "index_type": "flat_ip", "compatible_generations": [4], "created_at": m.created_at, "format_version": 1,
    }  # fmt: skip
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(v1))
    loaded = GalleryIndex.load(tmp_path)
    assert (loaded.manifest.index_type, loaded.manifest.format_version) == ("flat", 2)
    for a, b in zip(loaded.search(queries, 5), index.search(queries, 5)):
        np.testing.assert_array_equal(a, b)
