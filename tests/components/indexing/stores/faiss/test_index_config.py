"""Index building refuses bad chunks and configurations, names the problem, and the Lorentz reductions are exact
(docs/design.md §8.1–§8.3)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from components.errors import ConfigError, DataError
from components.geometry import create_space
from components.geometry.spaces.lorentz import flip_time
from components.indexing.stores.faiss import GalleryIndex, IndexConfig
from components.indexing.stores.faiss.build_inputs import BottomKSample
from components.indexing.stores.faiss.index_types import lorentz_l2_queries, lorentz_l2_rows
from tests.components.indexing.gallery_data import K, chunks_of, lift, make_data


@pytest.fixture(scope="module")
def data():
    return make_data()


# --------------------------------------------------------- chunk checking
@pytest.mark.parametrize("index_type", ["flat", "ivf"])
def test_ids_must_be_unique_across_chunks(data, index_type):
    gallery, _, ids = data["euclidean"]
    dup = ids.copy()
    dup[2500] = dup[10]  # chunk 3 repeats an id of chunk 0
    build = dict(space=create_space("euclidean", 1.0), generation=0, config=IndexConfig(type=index_type))
    with pytest.raises(DataError, match=f"not unique across chunks .*id {dup[10]}"):
        GalleryIndex.build_streaming(chunks_of(gallery, dup), **build)


def test_bad_chunks_are_named(data):
    gallery, _, ids = data["lorentz"]
    build = dict(space=create_space("lorentz", K), generation=0, config=IndexConfig(type="hnsw"))
    nan = gallery.copy()
    nan[1805, 3] = np.nan
    with pytest.raises(DataError, match=r"gallery chunk 3 \(rows 1800..2999 overall\): 1 of 1200 .*NaN.*row 5"):
        GalleryIndex.build_streaming(chunks_of(nan, ids), **build)
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
        ("type", "annoy", "field 'type' must be one of 'flat', 'ivf', 'hnsw', 'ivfpq', 'ivfsq'"),
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
    build = dict(space=create_space("lorentz", K), generation=0)
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
    assert IndexConfig(type="ivfsq").factory_string(129, 50_000) == "IDMap2,IVF894,SQ8"
    assert set(IndexConfig(type="ivfsq").params(129, 50_000)) == {"shards", "seed", "nlist", "nprobe", "train_size"}
    p = IndexConfig(type="ivf", nprobe=500).params(64, 2000)
    assert p["nlist"] == 51 and p["nprobe"] == 51  # nprobe clamped to nlist


# --------------------------------------------------------------- geometry
def test_lorentz_mips_to_l2_reduction_is_exact():
    rng = np.random.default_rng(11)
    points = lift(rng.normal(size=(2000, 12)), k=1.3)
    queries = lift(rng.normal(size=(100, 12)), k=1.3)
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
