"""Index types built chunk by chunk, with recall measured at build time (docs/design.md §8.3)."""

from __future__ import annotations

import itertools
import json
import os

import faiss
import numpy as np
import pytest

import components.indexing.faiss_index as faiss_index_module
from components.errors import ConfigError, DataError, IndexIntegrityError
from components.indexing import INDEX_FILE, MANIFEST_FILE, GalleryIndex, IndexConfig
from components.indexing.build_inputs import BottomKSample
from components.indexing.index_types import file_sha256
from components.indexing.vectors import flip_time, lorentz_l2_queries, lorentz_l2_rows

N, D, K = 3000, 16, 0.8
TYPES = ("flat", "ivf", "hnsw", "ivfpq")
#: recall@10 each type must reach on the clustered test gallery with its default parameters
MIN_RECALL = {"flat": 1.0, "ivf": 0.95, "hnsw": 0.95, "ivfpq": 0.25}


def _clustered(n: int, d: int, seed: int = 0) -> np.ndarray:
    """float64 (n, d): 40 Gaussian clusters whose spread makes the 10 nearest neighbours non-trivial."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, d))
    return centres[rng.integers(0, 40, n)] + 0.4 * rng.normal(size=(n, d))


def _lift(v: np.ndarray, k: float = K) -> np.ndarray:
    """Tangent vectors (n, d) -> hyperboloid points (n, d+1), time first, radii spread over 0.3..2.5."""
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    r = 0.3 + 2.2 * (norm - norm.min()) / (norm.max() - norm.min())
    sk = np.sqrt(k)
    return np.concatenate([np.cosh(sk * r) / sk, np.sinh(sk * r) / sk * v / norm], axis=1)


@pytest.fixture(scope="module")
def data():
    v = _clustered(N + 200, D)
    ids = np.random.default_rng(7).choice(10**12, size=N, replace=False).astype(np.int64)
    return {"euclidean": (v[:N], v[N:], ids), "lorentz": (_lift(v)[:N], _lift(v)[N:], ids)}


def _chunks(x: np.ndarray, ids: np.ndarray, sizes=(700, 0, 1100, 1200)):
    """A chunks() callable over uneven pieces, one of them empty; counts its calls."""
    bounds = np.cumsum((0, *sizes))
    assert bounds[-1] == len(x)

    def chunks():
        chunks.calls += 1
        return ((x[a:b], ids[a:b]) for a, b in itertools.pairwise(bounds))

    chunks.calls = 0
    return chunks


def _build(data, geometry, **cfg):
    gallery, _, ids = data[geometry]
    return GalleryIndex.build_streaming(
        _chunks(gallery, ids), geometry=geometry, curvature=K, generation=1, config=IndexConfig(**cfg)
    )


@pytest.fixture(scope="module")
def flat(data):
    return {g: _build(data, g) for g in ("euclidean", "lorentz")}


# ------------------------------------------------------------ build + recall
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
@pytest.mark.parametrize("index_type", TYPES)
def test_each_type_builds_from_chunks_and_records_its_recall(data, geometry, index_type):
    gallery, _, ids = data[geometry]
    cfg = IndexConfig(type=index_type, recall_queries=400, pq_nbits=6)
    chunks, progress = _chunks(gallery, ids), []
    index = GalleryIndex.build_streaming(
        chunks, geometry=geometry, curvature=K, generation=1, config=cfg, on_progress=progress.append
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
    if index_type in ("ivf", "ivfpq"):
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
    one = GalleryIndex.build(gallery, ids, geometry="lorentz", curvature=K, generation=1)
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
        lambda: iter([(x, np.arange(len(x)))]), geometry="lorentz", curvature=K, generation=1, config=IndexConfig()
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
    index = GalleryIndex.build(gallery[:200], ids[:200], geometry="euclidean", curvature=1.0, generation=0, config=cfg)
    scores, found = index.search(gallery[:20], 200)  # one list of five: never all 200 items
    missing = found == -1
    assert missing.any() and not missing[:, 0].any()
    assert np.isneginf(scores[missing]).all() and np.isfinite(scores[~missing]).all()
    assert (np.diff(missing.astype(int), axis=1) >= 0).all()  # -1 only after the found items


# ------------------------------------------------------------- save / load
@pytest.mark.parametrize(
    ("index_type", "shards", "form"),
    [(t, 1, "proxy") for t in TYPES] + [("ivf", 2, "proxy"), ("hnsw", 3, "proxy"), ("ivf", 1, "mips_l2")],
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


@pytest.mark.parametrize(("index_type", "shards"), [("ivf", 1), ("hnsw", 1), ("ivfpq", 1), ("ivf", 2)])
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
    index = GalleryIndex.build(gallery, ids, geometry="lorentz", curvature=K, generation=4)
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


# --------------------------------------------------------- chunk checking
@pytest.mark.parametrize("index_type", ["flat", "ivf"])
def test_ids_must_be_unique_across_chunks(data, index_type):
    gallery, _, ids = data["euclidean"]
    dup = ids.copy()
    dup[2500] = dup[10]  # chunk 3 repeats an id of chunk 0
    build = dict(geometry="euclidean", curvature=1.0, generation=0, config=IndexConfig(type=index_type))
    with pytest.raises(DataError, match=f"not unique across chunks .*id {dup[10]}"):
        GalleryIndex.build_streaming(_chunks(gallery, dup), **build)


def test_bad_chunks_are_named(data):
    gallery, _, ids = data["lorentz"]
    build = dict(geometry="lorentz", curvature=K, generation=0, config=IndexConfig(type="hnsw"))
    nan = gallery.copy()
    nan[1805, 3] = np.nan
    with pytest.raises(DataError, match=r"gallery chunk 3 \(rows 1800..2999 overall\): 1 of 1200 .*NaN.*row 5"):
        GalleryIndex.build_streaming(_chunks(nan, ids), **build)
    narrow = lambda: iter([(gallery[:10], ids[:10]), (gallery[10:20, 1:], ids[10:20])])
    with pytest.raises(DataError, match="chunk 1 .*width 16 but earlier chunks have width 17"):
        GalleryIndex.build_streaming(narrow, **build)
    calls = []
    shrinking = lambda: calls.append(1) or iter([(gallery[: 1000 - len(calls)], ids[: 1000 - len(calls)])])
    with pytest.raises(DataError, match="chunks\\(\\) yielded different data on a later pass"):
        GalleryIndex.build_streaming(shrinking, **build)
    with pytest.raises(DataError, match="gallery is empty"):
        GalleryIndex.build_streaming(lambda: iter([]), **build)


def test_bottom_k_sample_is_independent_of_chunking():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, size=5000, dtype=np.uint64)
    rows = np.arange(5000, dtype=np.float32)[:, None]
    ids = np.arange(5000, dtype=np.int64)
    want = ids[np.argsort(keys)[:300]]
    for step in (1, 37, 5000):
        s = BottomKSample(300)
        for a in range(0, 5000, step):
            s.offer(keys[a : a + step], rows[a : a + step], ids[a : a + step])
            held = sum(len(p[0]) for p in s._pending) + len(s._keys)
            assert held <= 300 + max(150, 1024) + step
        got_rows, got_ids = s.result()
        np.testing.assert_array_equal(got_ids, want)
        np.testing.assert_array_equal(got_rows[:, 0], want)


# ------------------------------------------------------------------ config
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("type", "annoy", "field 'type' must be one of 'flat', 'ivf', 'hnsw', 'ivfpq'"),
        ("nprobe", 0, "field 'nprobe' must be an int >= 1, got 0"),
        ("hnsw_m", 1, "field 'hnsw_m' must be an int >= 2"),
        ("ef_search", 2.5, "field 'ef_search' must be an int >= 1"),
        ("nlist", 0, "field 'nlist' must be an int >= 1 or None.*leave it unset"),
        ("pq_m", -4, "field 'pq_m' must be an int >= 1 or None"),
        ("pq_nbits", 20, r"field 'pq_nbits' must be an int in \[1, 16\]"),
        ("recall_queries", True, "field 'recall_queries' must be an int >= 1, got True"),
        ("shards", 0, "field 'shards' must be an int >= 1.*use 1 for a single index"),
        ("seed", -1, "field 'seed' must be an int >= 0"),
    ],
)
def test_bad_config_is_named(field, value, message):
    with pytest.raises(ConfigError, match=message):
        IndexConfig(**{field: value})


def test_config_that_does_not_fit_the_gallery_is_refused(data):
    gallery, _, ids = data["lorentz"]
    build = dict(geometry="lorentz", curvature=K, generation=0)
    with pytest.raises(ConfigError, match="'nlist' is 5000 but only 3000 training vectors.*lower nlist"):
        GalleryIndex.build(gallery, ids, config=IndexConfig(type="ivf", nlist=5000), **build)
    with pytest.raises(
        ConfigError, match=r"'pq_m' is 4 but must divide the stored vector width 17.*use one of \[1, 17\]"
    ):
        GalleryIndex.build(gallery, ids, config=IndexConfig(type="ivfpq", pq_m=4), **build)
    with pytest.raises(ConfigError, match="PQ needs at least 256 training vectors, but only 100"):
        GalleryIndex.build(gallery, ids, config=IndexConfig(type="ivfpq", train_size=100), **build)
    with pytest.raises(ConfigError, match="config must be an IndexConfig"):
        GalleryIndex.build(gallery, ids, config={"type": "ivf"}, **build)
    with pytest.raises(ConfigError, match="unknown index config field.*nprob"):
        IndexConfig.from_dict({"type": "ivf", "nprob": 4})


def test_factory_strings_and_automatic_parameters():
    assert IndexConfig().factory_string(17, 10) == "IDMap2,Flat"
    assert IndexConfig(type="ivf").factory_string(64, 1_000_000) == "IDMap2,IVF2564,Flat"  # 100k samples / 39
    assert IndexConfig(type="ivf", train_size=10**6).factory_string(64, 1_000_000) == "IDMap2,IVF4000,Flat"
    assert IndexConfig(type="ivf").factory_string(64, 2000) == "IDMap2,IVF51,Flat"
    assert IndexConfig(type="ivf").factory_string(64, 20) == "IDMap2,IVF1,Flat"
    assert IndexConfig(type="hnsw", hnsw_m=16).factory_string(64, 10) == "IDMap2,HNSW16,Flat"
    for width, m in ((24, 6), (26, 13), (128, 32), (129, 43), (130, 26)):
        assert IndexConfig(type="ivfpq").factory_string(width, 50_000) == f"IDMap2,IVF894,PQ{m}x8np"
    p = IndexConfig(type="ivf", nprobe=500).params(64, 2000)
    assert p["nlist"] == 51 and p["nprobe"] == 51  # nprobe clamped to nlist


# --------------------------------------------------------------- geometry
def test_lorentz_mips_to_l2_reduction_is_exact():
    rng = np.random.default_rng(11)
    points = _lift(rng.normal(size=(2000, 12)), k=1.3)
    queries = _lift(rng.normal(size=(100, 12)), k=1.3)
    radius = float(np.linalg.norm(points.astype(np.float32).astype(np.float64), axis=1).max())
    stored = lorentz_l2_rows(points, radius)
    assert stored.shape == (2000, 14)
    np.testing.assert_allclose(np.linalg.norm(stored.astype(np.float64), axis=1), radius, rtol=1e-6)
    l2 = faiss.IndexFlatL2(14)
    l2.add(stored)
    _, by_l2 = l2.search(lorentz_l2_queries(flip_time(queries), radius), 10)
    ip = faiss.IndexFlatIP(13)
    ip.add(points.astype(np.float32))
    _, by_ip = ip.search(flip_time(queries).astype(np.float32), 10)
    np.testing.assert_array_equal(by_l2, by_ip)
    lorentz = flip_time(queries) @ points.T  # <q, g>_L in float64
    np.testing.assert_array_equal(by_ip, np.argsort(-lorentz, axis=1, kind="stable")[:, :10])
    q2 = lorentz_l2_queries(flip_time(queries), radius).astype(np.float64)
    lam = radius / np.linalg.norm(flip_time(queries), axis=1, keepdims=True)
    d2 = ((q2[:, None, :] - stored[None, :50, :].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_allclose(d2, 2 * radius**2 - 2 * lam * lorentz[:, :50], rtol=1e-5)
