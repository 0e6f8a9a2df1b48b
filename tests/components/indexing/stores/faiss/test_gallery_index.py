"""GalleryIndex (flat, the default): exact FAISS search, manifest checks, atomic save (docs/design.md §7, §8)."""

from __future__ import annotations

import json
import os

import faiss
import numpy as np
import pytest
import torch

import components.indexing.stores.faiss.gallery_index as faiss_index_module
from components.errors import DataError, IncompatibleQueryError, IndexIntegrityError
from components.geometry import create_space, expmap0, pairwise_geodesic_distance
from components.indexing.stores.faiss import INDEX_FILE, MANIFEST_FILE, GalleryIndex
from components.indexing.stores.faiss.gallery_index import _maybe_to_gpu
from components.io import atomic_path


def _lorentz_points(n: int, d: int = 16, k: float = 1.0, seed: int = 0) -> np.ndarray:
    """float64 hyperboloid points (n, d+1) from tangent vectors of norm 0.5..2."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, d))
    v *= rng.uniform(0.5, 2.0, size=(n, 1)) / np.linalg.norm(v, axis=1, keepdims=True)
    return expmap0(torch.from_numpy(v), k).numpy()


def _ids(n: int, seed: int = 0) -> np.ndarray:
    """Non-contiguous caller ids, so a position-vs-id mix-up shows."""
    rng = np.random.default_rng(seed)
    return rng.choice(10**12, size=n, replace=False).astype(np.int64)


@pytest.fixture(scope="module")
def lorentz_data():
    x = _lorentz_points(400, k=0.7)
    return x[:300], x[300:], _ids(300)


@pytest.fixture()
def lorentz_index(lorentz_data):
    gallery, _, ids = lorentz_data
    return GalleryIndex.build(gallery, ids, space=create_space("lorentz", 0.7), generation=2)


# ------------------------------------------------------------------- search
def test_lorentz_search_is_exact_geodesic_knn(lorentz_data, lorentz_index):
    gallery, queries, ids = lorentz_data
    scores, found = lorentz_index.search(queries, 10, query_generation=2)
    dist = pairwise_geodesic_distance(torch.from_numpy(queries), torch.from_numpy(gallery), 0.7).numpy()
    order = np.argsort(dist, axis=1, kind="stable")[:, :10]
    assert scores.dtype == np.float64 and found.dtype == np.int64
    np.testing.assert_array_equal(found, ids[order])
    np.testing.assert_allclose(scores, -np.take_along_axis(dist, order, axis=1), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all()


def test_euclidean_search_is_cosine_brute_force():
    rng = np.random.default_rng(1)
    gallery = rng.normal(size=(250, 12)) * rng.uniform(0.1, 10, size=(250, 1))
    queries = rng.normal(size=(40, 12))
    ids = _ids(250, seed=1)
    index = GalleryIndex.build(gallery, ids, space=create_space("euclidean", 1.0), generation=0)
    scores, found = index.search(queries, 8)
    gn = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    cos = qn @ gn.T
    order = np.argsort(-cos, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(found, ids[order])
    np.testing.assert_allclose(scores, np.take_along_axis(cos, order, axis=1), atol=1e-6)
    assert index.dim == 12 and index.ntotal == 250


def test_k_larger_than_gallery_is_clamped():
    x = _lorentz_points(5)
    index = GalleryIndex.build(x, np.arange(5), space=create_space("lorentz", 1.0), generation=0)
    scores, found = index.search(x[:2], 50)
    assert scores.shape == found.shape == (2, 5)
    np.testing.assert_array_equal(found[:, 0], [0, 1])  # a point is its own nearest
    np.testing.assert_allclose(scores[:, 0], 0.0, atol=2e-3)


def test_maybe_to_gpu_keeps_cpu_index_without_gpus():
    if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        pytest.skip("this machine has GPUs; the CPU fallback is not what runs here")
    cpu = faiss.IndexFlatIP(4)
    assert _maybe_to_gpu(cpu) is cpu


# ------------------------------------------------------------ query checks
def test_query_from_incompatible_generation_is_refused(lorentz_data, lorentz_index):
    _, queries, _ = lorentz_data
    with pytest.raises(IncompatibleQueryError) as e:
        lorentz_index.search(queries, 5, query_generation=3)
    msg = str(e.value)
    assert "generation 3" in msg and "accepts generations [2]" in msg and "backfill" in msg
    widened = lorentz_index.with_compatible_generations([2, 3])
    _, found = widened.search(queries, 5, query_generation=3)
    assert found.shape == (100, 5)


def test_query_width_nan_and_geometry_are_checked(lorentz_data, lorentz_index):
    _, queries, _ = lorentz_data
    with pytest.raises(IncompatibleQueryError, match="width 16 but .* stores width 17"):
        lorentz_index.search(queries[:, 1:], 5)
    bad = queries.copy()
    bad[3, 4] = np.nan
    with pytest.raises(IncompatibleQueryError, match="1 of 100 queries contain NaN.*row 3"):
        lorentz_index.search(bad, 5)
    other_k = _lorentz_points(4, k=2.0)  # same width, wrong curvature
    with pytest.raises(IncompatibleQueryError, match="not on the hyperboloid"):
        lorentz_index.search(other_k, 5)
    time_last = np.roll(queries, -1, axis=1)
    with pytest.raises(IncompatibleQueryError, match="time coordinate first"):
        lorentz_index.search(time_last, 5)


# ------------------------------------------------------------- build checks
def test_build_refuses_bad_galleries():
    x = _lorentz_points(20)
    build = dict(space=create_space("lorentz", 1.0), generation=0)
    nan = x.copy()
    nan[7, 2] = np.nan
    with pytest.raises(DataError, match="1 of 20 gallery vectors contain NaN.*row 7"):
        GalleryIndex.build(nan, np.arange(20), **build)
    with pytest.raises(DataError, match="2-D"):
        GalleryIndex.build(x[0], np.arange(1), **build)
    with pytest.raises(DataError, match="empty"):
        GalleryIndex.build(x[:0], np.arange(0), **build)
    with pytest.raises(DataError, match="not unique"):
        GalleryIndex.build(x, np.r_[np.arange(19), 3], **build)
    with pytest.raises(DataError, match="one id per gallery vector"):
        GalleryIndex.build(x, np.arange(19), **build)
    with pytest.raises(DataError, match="not on the hyperboloid"):
        GalleryIndex.build(np.roll(x, -1, axis=1), np.arange(20), **build)
    with pytest.raises(DataError, match="all zeros"):
        GalleryIndex.build(np.zeros((3, 4)), np.arange(3), space=create_space("euclidean", 1.0), generation=0)


# ------------------------------------------------------- save / load / files
def test_save_load_round_trip(tmp_path, lorentz_data, lorentz_index):
    _, queries, _ = lorentz_data
    lorentz_index.save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [INDEX_FILE, MANIFEST_FILE]
    loaded = GalleryIndex.load(tmp_path)
    assert loaded.manifest == lorentz_index.manifest
    assert loaded.manifest.dim == 17 and loaded.manifest.count == 300
    for a, b in zip(loaded.search(queries, 7), lorentz_index.search(queries, 7)):
        np.testing.assert_array_equal(a, b)


def test_truncated_index_file_is_detected(tmp_path, lorentz_index):
    lorentz_index.save(tmp_path)
    path = tmp_path / INDEX_FILE
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(IndexIntegrityError) as e:
        GalleryIndex.load(tmp_path)
    assert str(path) in str(e.value) and "rebuild the index" in str(e.value)


def test_flipped_byte_is_detected(tmp_path, lorentz_index):
    lorentz_index.save(tmp_path)
    path = tmp_path / INDEX_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit inside the stored vectors: FAISS would load it happily
    path.write_bytes(bytes(data))
    with pytest.raises(IndexIntegrityError, match="does not match the sha256"):
        GalleryIndex.load(tmp_path)


def test_missing_files_are_detected(tmp_path, lorentz_index):
    lorentz_index.save(tmp_path)
    (tmp_path / INDEX_FILE).unlink()
    with pytest.raises(IndexIntegrityError, match="index.faiss is missing"):
        GalleryIndex.load(tmp_path)
    (tmp_path / MANIFEST_FILE).unlink()
    with pytest.raises(IndexIntegrityError, match="no manifest.json.*rebuild the index"):
        GalleryIndex.load(tmp_path)


def test_manifest_that_lies_about_the_file_is_detected(tmp_path, lorentz_index):
    lorentz_index.save(tmp_path)
    mpath = tmp_path / MANIFEST_FILE
    original = json.loads(mpath.read_text())
    for field, value, pattern in (
        ("count", 299, "holds 300 vectors of width 17 but its manifest says 299"),
        ("geometry", "euclidean", "do not fit the manifest's geometry 'euclidean'"),
        ("curvature", 3.0, "do not fit the manifest's geometry"),
    ):
        mpath.write_text(json.dumps({**original, field: value}))
        with pytest.raises(IndexIntegrityError, match=pattern):
            GalleryIndex.load(tmp_path)
    mpath.write_text(json.dumps({k: v for k, v in original.items() if k != "dim"}))
    with pytest.raises(IndexIntegrityError, match="missing field.*dim"):
        GalleryIndex.load(tmp_path)
    mpath.write_text(json.dumps(original))
    with pytest.raises(IncompatibleQueryError, match="is lorentz but euclidean was requested"):
        GalleryIndex.load(tmp_path, geometry="euclidean")


def test_failed_save_leaves_previous_index_intact(tmp_path, monkeypatch, lorentz_data, lorentz_index):
    _, queries, _ = lorentz_data
    lorentz_index.save(tmp_path)
    before = GalleryIndex.load(tmp_path).search(queries, 5)

    def crash_mid_write(path, index):  # real atomic_path, killed half-way through the bytes
        data = faiss.serialize_index(index).tobytes()
        with atomic_path(path) as tmp:
            tmp.write_bytes(data[: len(data) // 2])
            raise OSError("No space left on device")

    other = GalleryIndex.build(
        _lorentz_points(50, k=0.7, seed=9), np.arange(50), space=create_space("lorentz", 0.7), generation=2
    )
    monkeypatch.setattr(faiss_index_module, "_write_index_file", crash_mid_write)
    with pytest.raises(OSError, match="No space left"):
        other.save(tmp_path)
    monkeypatch.undo()

    assert sorted(os.listdir(tmp_path)) == [INDEX_FILE, MANIFEST_FILE]  # no temp debris
    after = GalleryIndex.load(tmp_path).search(queries, 5)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_crash_between_index_and_manifest_is_detected(tmp_path, monkeypatch, lorentz_index):
    lorentz_index.save(tmp_path)
    real_write = faiss_index_module.atomic_write_bytes

    def fail_on_manifest(path, data):
        if path.name == MANIFEST_FILE:
            raise OSError("killed before the manifest")
        real_write(path, data)

    other = GalleryIndex.build(
        _lorentz_points(50, k=0.7, seed=9), np.arange(50), space=create_space("lorentz", 0.7), generation=2
    )
    monkeypatch.setattr(faiss_index_module, "atomic_write_bytes", fail_on_manifest)
    with pytest.raises(OSError):
        other.save(tmp_path)
    monkeypatch.undo()
    with pytest.raises(IndexIntegrityError, match="does not match the sha256"):
        GalleryIndex.load(tmp_path)
