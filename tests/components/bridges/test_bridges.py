"""Bridges between generations' spaces (components/bridges): each map kind recovers what it can represent, a
Lorentz bridge lands on the target's hyperboloid, chains compose, and a bridge's file is checked on load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from components.bridges import Bridge, BridgeChain
from components.errors import ConfigError, IndexIntegrityError
from components.geometry import expmap0
from components.indexing.gallery import GalleryEmbeddings

RNG = np.random.default_rng(0)


def _gallery(z: np.ndarray, geometry: str = "lorentz", k: float = 1.0, ids: np.ndarray | None = None):
    n = len(z)
    if geometry == "lorentz":
        emb = expmap0(torch.from_numpy(z), k).numpy()
    else:
        emb = z / np.linalg.norm(z, axis=1, keepdims=True)
    ids = np.arange(n) if ids is None else ids
    return GalleryEmbeddings(
        geometry, k, z.astype(np.float32), emb.astype(np.float32), ids, ids % 5, np.zeros(n, bool), np.zeros((n, 5))
    )


def _rotation(d: int, seed: int = 1) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_procrustes_recovers_a_rotation_and_scale_and_lands_on_the_target_hyperboloid():
    x = RNG.normal(size=(400, 16)) * 0.4
    y = 0.7 * x @ _rotation(16)
    b = Bridge.fit("procrustes", 1, 0, _gallery(x, k=1.0), _gallery(y, k=2.0))
    assert b.fit_error < 1e-5 and (b.source, b.target, b.sample) == (1, 0, 400)
    mapped = b.map_gallery(_gallery(x, k=1.0))
    np.testing.assert_allclose(mapped.z, y, atol=1e-5)
    h = mapped.emb.astype(np.float64)
    np.testing.assert_allclose(-(h[:, 0] ** 2) + (h[:, 1:] ** 2).sum(1), -1 / 2.0, atol=1e-4)  # K = 2: ⟨h,h⟩_L = −1/K
    assert mapped.curvature == 2.0


def test_the_low_rank_map_recovers_a_rank_2_correction_the_isometry_cannot():
    x = RNG.normal(size=(600, 12)) * 0.3  # tangent vectors: fitted as they are
    u, v = RNG.normal(size=(12, 2)), RNG.normal(size=(2, 12))
    y = 0.8 * x @ _rotation(12) + 0.3 * x @ u @ v + 0.1  # an isometry plus a rank-2 correction and a bias
    assert Bridge.fit("procrustes", 1, 0, _gallery(x), _gallery(y)).fit_error > 0.1
    low = Bridge.fit("low_rank", 1, 0, _gallery(x), _gallery(y), rank=2, ridge=0.0)
    assert low.fit_error < 1e-5
    rank1 = Bridge.fit("low_rank", 1, 0, _gallery(x), _gallery(y), rank=1, ridge=0.0)
    assert 1e-3 < rank1.fit_error < 0.5 * Bridge.fit("procrustes", 1, 0, _gallery(x), _gallery(y)).fit_error


def test_the_residual_mlp_fits_a_nonlinear_warp_better_than_the_isometry():
    x = RNG.normal(size=(800, 8)) * 0.5
    y = x @ _rotation(8) + 0.4 * np.tanh(2 * x) @ _rotation(8, seed=2)
    gx, gy = _gallery(x), _gallery(y)
    iso = Bridge.fit("procrustes", 1, 0, gx, gy)
    mlp = Bridge.fit("residual_mlp", 1, 0, gx, gy, hidden=64, epochs=60)
    assert mlp.fit_error < 0.5 * iso.fit_error, (mlp.fit_error, iso.fit_error)


@pytest.mark.parametrize("kind", ["procrustes", "low_rank", "residual_mlp"])
def test_a_saved_bridge_loads_back_the_same_map_and_a_tampered_or_foreign_file_is_refused(kind, tmp_path):
    x = RNG.normal(size=(200, 6)) * 0.3
    opts = {"epochs": 3} if kind == "residual_mlp" else {}
    b = Bridge.fit(kind, 2, 1, _gallery(x), _gallery(x @ _rotation(6)), **opts)
    sha = b.save(tmp_path / "b.npz")
    back = Bridge.load(tmp_path / "b.npz", sha256=sha, source=2, target=1)
    np.testing.assert_allclose(back.map_vectors(x), b.map_vectors(x))
    assert (back.kind, back.fit_error, back.sample) == (kind, b.fit_error, b.sample)
    with pytest.raises(ConfigError, match="maps generation 2 to 1, not 3 to 2; use the bridge fitted for g3→g2"):
        Bridge.load(tmp_path / "b.npz", source=3, target=2)
    with pytest.raises(ConfigError, match=r"maps 6-wide vectors of generation 2; got shape \(4, 7\)"):
        b.map_vectors(np.zeros((4, 7)))
    data = bytearray((tmp_path / "b.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "b.npz").write_bytes(bytes(data))
    with pytest.raises(IndexIntegrityError, match="not the file the lineage recorded"):
        Bridge.load(tmp_path / "b.npz", sha256=sha)
    (tmp_path / "c.npz").write_bytes(b"not a bridge")
    with pytest.raises(IndexIntegrityError, match=r"bridge .*c.npz is missing or damaged \(its bytes are not an .npz"):
        Bridge.load(tmp_path / "c.npz")


def test_a_chain_of_two_bridges_maps_g2_queries_to_g0_and_refuses_links_that_do_not_meet():
    x2 = RNG.normal(size=(300, 8)) * 0.3
    x1, x0 = x2 @ _rotation(8, 3), 0.5 * x2 @ _rotation(8, 4)
    b21 = Bridge.fit("procrustes", 2, 1, _gallery(x2), _gallery(x1))
    b10 = Bridge.fit("procrustes", 1, 0, _gallery(x1), _gallery(x0))
    chain = BridgeChain((b21, b10))
    assert chain.generations == [2, 1, 0] and str(chain) == "g2 → g1 → g0 (procrustes, procrustes)"
    np.testing.assert_allclose(chain.map_vectors(x2), x0, atol=1e-5)
    np.testing.assert_allclose(chain.map_gallery(_gallery(x2)).z, x0, atol=1e-5)
    with pytest.raises(ConfigError, match="cannot feed"):
        BridgeChain((b10, b21))


def test_unpaired_items_too_few_pairs_and_an_unknown_kind_are_refused_in_one_line():
    x = RNG.normal(size=(100, 8))
    with pytest.raises(ConfigError, match="same items in the same order"):
        Bridge.fit("procrustes", 1, 0, _gallery(x), _gallery(x, ids=np.arange(100)[::-1].copy()))
    with pytest.raises(ConfigError, match="at least 16 paired items"):
        Bridge.fit("procrustes", 1, 0, _gallery(x[:10]), _gallery(x[:10]))
    with pytest.raises(ConfigError, match="unknown bridge map 'affine'; available: low_rank, procrustes, residual_mlp"):
        Bridge.fit("affine", 1, 0, _gallery(x), _gallery(x))
    with pytest.raises(ConfigError, match="within one geometry"):
        Bridge.fit("procrustes", 1, 0, _gallery(x), _gallery(x, "euclidean"))


@pytest.mark.parametrize(
    ("kind", "opts", "words"),
    [
        ("low_rank", {"rank": 0}, "low_rank map: rank 0 and iterations 100 must be ≥ 1 and ridge 0.01 ≥ 0"),
        ("residual_mlp", {"lr": 0.0}, "residual_mlp map: hidden 256, epochs 200, batch 256 must be ≥ 1, lr 0.0 > 0"),
    ],
)
def test_map_options_out_of_range_are_refused_before_fitting(kind, opts, words):
    x = RNG.normal(size=(100, 8))
    with pytest.raises(ConfigError, match=words):
        Bridge.fit(kind, 1, 0, _gallery(x), _gallery(x), **opts)
