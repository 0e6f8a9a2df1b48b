"""GalleryEmbeddings retrieval views (components/indexing/gallery.py) and gallery_metrics
(components/evaluation/retrieval.py): Lorentz curvature, the BT² prefix, PSP/LSP projections."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.errors import IndexIntegrityError
from components.evaluation.retrieval import gallery_metrics, retrieval_metrics
from components.geometry import create_space
from components.indexing.gallery import GalleryEmbeddings
from components.training.embed import Embeddings
from tests.helpers import tiny_spec

N = 12
IDS = np.array([50, 7, 31, 2, 99, 14, 63, 8, 21, 40, 77, 5], dtype=np.int64)  # not positions
LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2], dtype=np.int64)


def _rng(seed):
    return np.random.default_rng(seed)


def _lorentz(curvature, d=4, seed=0, ids=IDS):
    z = _rng(seed).normal(size=(len(ids), d)).astype(np.float32) * 0.5
    emb = np.zeros((len(ids), d + 1), np.float32)  # unused by the views: they lift z again in float64
    return GalleryEmbeddings(
        "lorentz",
        curvature,
        z,
        emb,
        ids,
        LABELS[: len(ids)],
        np.zeros(len(ids), bool),
        _rng(seed + 1).normal(size=(len(ids), 3)).astype(np.float32),
    )


def _euclid(width, seed=0, compat_dim=None, n_classes=3, features="embedding"):
    z = _rng(seed).normal(size=(N, width)).astype(np.float32)
    # cluster by label so retrieval has something to find
    z[:, 0] += 2.0 * LABELS
    emb = (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)
    logits = _rng(seed + 1).normal(size=(N, n_classes)).astype(np.float32)
    logits[np.arange(N), LABELS] += 2.0
    return GalleryEmbeddings("euclidean", 1.0, z, emb, IDS, LABELS, np.zeros(N, bool), logits, features, compat_dim)


def _hand_expmap0(z, k):
    out = []
    for v in z.astype(np.float64):
        r = math.sqrt(k) * float(np.linalg.norm(v))
        xs = (math.sinh(r) / r) * v
        out.append([math.cosh(r) / math.sqrt(k), *xs.tolist()])
    return np.array(out)


def _lorentz_norm(x):
    return (x[:, 1:] ** 2).sum(1) - x[:, 0] ** 2


def _hand_psp(logits, c_k):
    z = logits.astype(np.float64)
    e = np.exp(z - z.max(1, keepdims=True))
    p = (e / e.sum(1, keepdims=True))[:, :c_k]
    p = p - p.mean(1, keepdims=True)
    return p / np.linalg.norm(p, axis=1, keepdims=True)


# ------------------------------------------------------------------- Lorentz


def test_lorentz_query_is_lifted_onto_the_gallerys_hyperboloid():
    query, gallery = _lorentz(1.0, seed=0), _lorentz(0.5, seed=3)
    assert query.incompatibility(gallery) is None
    v = query.vectors_against(gallery)
    assert v.dtype == np.float64 and v.shape == (N, 5)
    assert np.allclose(_lorentz_norm(v), -1.0 / 0.5, rtol=1e-10)  # ⟨x, x⟩_L = −1/K_gallery
    assert np.allclose(v, _hand_expmap0(query.z, 0.5), rtol=1e-10, atol=1e-12)
    # its own view stays on its own K
    own = query.vectors()
    assert np.allclose(_lorentz_norm(own), -1.0, rtol=1e-10)
    assert np.allclose(own, _hand_expmap0(query.z, 1.0), rtol=1e-10, atol=1e-12)
    assert np.allclose(query.vectors(curvature=2.0), _hand_expmap0(query.z, 2.0), rtol=1e-10, atol=1e-12)
    assert not np.allclose(v, own)


# ------------------------------------------------------------------- BT²


def test_bt2_query_uses_the_compatible_prefix_against_the_parent_gallery():
    n, d = 6, 3
    parent = _euclid(n, seed=0)
    bt2 = _euclid(n + d, seed=5, compat_dim=n)
    assert bt2.incompatibility(parent) is None
    v = bt2.vectors_against(parent)
    expected = bt2.z[:, :n].astype(np.float64)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert v.shape == (N, n) and np.allclose(v, expected, atol=1e-12)
    # not the prefix of the normalised full embedding
    assert not np.allclose(v, bt2.emb[:, :n], atol=1e-3)
    # against itself it uses the whole (unit) embedding
    assert np.allclose(bt2.vectors_against(bt2), bt2.emb, atol=1e-6)
    # a compatible prefix narrower than the gallery is refused; without compat_dim the widths must agree
    assert "dimension" in _euclid(n + d, compat_dim=n - 1).incompatibility(parent)
    assert "dimension" in _euclid(n + d).incompatibility(parent)
    # nested BT² (a grandchild whose prefix covers its parent's BT² width): the first n dimensions
    grandchild = _euclid(n + d + 2, seed=7, compat_dim=n + d)
    assert grandchild.incompatibility(parent) is None and grandchild.incompatibility(bt2) is None
    for g, w in ((parent, n), (bt2, n + d)):
        e = grandchild.z[:, :w].astype(np.float64)
        assert np.allclose(grandchild.vectors_against(g), e / np.linalg.norm(e, axis=1, keepdims=True), atol=1e-12)
    # the parent cannot query the wider BT² gallery
    assert "dimension" in parent.incompatibility(bt2)


# ------------------------------------------------------------------- PSP / LSP


def test_psp_query_with_more_classes_is_projected_onto_the_old_classes():
    old = _euclid(4, seed=0, n_classes=3, features="psp")
    new = _euclid(4, seed=2, n_classes=5, features="psp")
    assert new.incompatibility(old) is None
    v = new.vectors_against(old)
    assert v.shape == (N, 3)
    assert np.allclose(v, _hand_psp(new.logits, 3), atol=1e-12)
    assert np.allclose(old.vectors(), _hand_psp(old.logits, 3), atol=1e-12)
    assert np.allclose(new.vectors(), _hand_psp(new.logits, 5), atol=1e-12)
    # the old model cannot query the newer gallery (3 classes cannot be projected onto 5)
    why = old.incompatibility(new)
    assert why is not None and "3 classes" in why
    with pytest.raises(ValueError, match="cannot query"):
        old.vectors_against(new)
    # LSP view of the same logits: centred, normalised, no softmax
    lsp = new.view("lsp").vectors_against(old.view("lsp"))
    ref = new.logits[:, :3].astype(np.float64)
    ref = ref - ref.mean(1, keepdims=True)
    assert np.allclose(lsp, ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-12)


def test_view_switches_features_without_touching_the_data():
    g = _lorentz(0.7, seed=0)
    psp = g.view("psp")
    assert psp.features == "psp" and g.features == "embedding"
    assert psp.retrieval_space.name == "euclidean" and g.retrieval_space.name == "lorentz"
    assert psp.width == 3 and g.width == 5
    assert psp.z is g.z and psp.logits is g.logits
    assert np.allclose(psp.vectors(), _hand_psp(g.logits, 3), atol=1e-12)
    back = psp.view("embedding")
    assert back.features == "embedding" and np.array_equal(back.vectors(), g.vectors())
    with pytest.raises(ValueError, match="features"):
        g.view("softmax")


# ------------------------------------------------------------------- incompatibility


def test_incompatibility_explains_each_mismatch():
    base = _euclid(4)
    assert base.incompatibility(base) is None
    other_items = GalleryEmbeddings(
        "euclidean", 1.0, base.z, base.emb, IDS[::-1].copy(), LABELS, base.clipped, base.logits
    )
    assert "different items" in other_items.incompatibility(base)
    assert "features" in base.view("psp").incompatibility(base)
    assert "features" in base.view("psp").incompatibility(base.view("lsp"))
    lor = _lorentz(1.0, d=4)
    assert "geometry" in lor.incompatibility(base)
    assert "geometry" in base.incompatibility(lor)
    assert "dimension" in _euclid(5).incompatibility(base)
    assert "dimension" in _lorentz(1.0, d=3).incompatibility(lor)
    for q, g in [(other_items, base), (lor, base), (_euclid(5), base)]:
        with pytest.raises(ValueError, match="cannot query that gallery"):
            q.vectors_against(g)
    # PSP views of different geometries are compatible (only the logits are compared)
    assert lor.view("psp").incompatibility(base.view("psp")) is None


# ------------------------------------------------------------------- persistence


@pytest.mark.parametrize(
    "make",
    [
        lambda: _euclid(7, compat_dim=4, features="lsp"),
        lambda: _euclid(4),
        lambda: _lorentz(0.6),
    ],
)
def test_save_load_round_trip(tmp_path, make):
    g = make()
    path = tmp_path / "sub" / "gallery.npz"
    g.save(path)
    back = GalleryEmbeddings.load(path)
    assert back.geometry == g.geometry and back.curvature == pytest.approx(g.curvature)
    assert back.features == g.features and back.compat_dim == g.compat_dim
    for name in ("z", "emb", "ids", "labels", "clipped", "logits"):
        assert np.array_equal(getattr(back, name), getattr(g, name)), name
    assert np.array_equal(back.vectors(), g.vectors())


def test_load_of_a_missing_or_incomplete_file_is_an_integrity_error(tmp_path):
    with pytest.raises(IndexIntegrityError, match="re-embed"):
        GalleryEmbeddings.load(tmp_path / "missing.npz")
    # an npz without the logits (written before PSP/LSP existed)
    path = tmp_path / "old.npz"
    g = _euclid(4)
    np.savez(
        path,
        geometry=np.array("euclidean"),
        curvature=np.array(1.0),
        z=g.z,
        emb=g.emb,
        ids=g.ids,
        labels=g.labels,
        clipped=g.clipped,
    )
    with pytest.raises(IndexIntegrityError, match="re-embed"):
        GalleryEmbeddings.load(path)


def test_load_of_a_truncated_file_is_an_integrity_error(tmp_path):
    path = tmp_path / "gallery.npz"
    _euclid(4).save(path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(IndexIntegrityError, match="re-embed"):
        GalleryEmbeddings.load(path)


def test_from_embeddings_records_features_and_the_bt2_prefix():
    e = Embeddings(
        np.ones((N, 9), np.float32), np.ones((N, 9), np.float32), np.zeros(N, bool), np.ones((N, 3), np.float32)
    )
    spec = tiny_spec(
        embed_dim=8,
        geometry="euclidean",
        num_classes=3,
        class_order=(0, 1, 2),
        head="bt2",
        compat_dim=6,
        extra_dims=1,
        features="lsp",
    )
    g = GalleryEmbeddings.from_embeddings(e, spec, 1.0, IDS, LABELS)
    assert g.compat_dim == 6 and g.features == "lsp" and g.geometry == "euclidean"
    std = tiny_spec(embed_dim=9, geometry="euclidean", num_classes=3, class_order=(0, 1, 2))
    assert GalleryEmbeddings.from_embeddings(e, std, 1.0, IDS, LABELS).compat_dim is None


# ------------------------------------------------------------------- metrics


def _hand_cmc1(q, g, q_ids, g_ids, q_lab, g_lab, score):
    hits, used = 0, 0
    for i in range(len(q)):
        cands = [(score(q[i], g[j]), -j, j) for j in range(len(g)) if g_ids[j] != q_ids[i]]
        if not any(g_lab[j] == q_lab[i] for _, _, j in cands):
            continue
        used += 1
        best = max(cands)[2]  # highest score, earliest index on ties
        hits += int(g_lab[best] == q_lab[i])
    return hits / used


@pytest.mark.parametrize(
    "make", [lambda: _euclid(5, seed=1), lambda: _lorentz(0.8, seed=1), lambda: _euclid(5, seed=1, features="psp")]
)
def test_gallery_metrics_of_a_gallery_with_itself(make):
    g = make()
    got = gallery_metrics(g, g, ks=(1, 3))
    direct = retrieval_metrics(
        g.vectors(),
        g.labels,
        g.ids,
        g.vectors(),
        g.labels,
        g.ids,
        g.retrieval_space,
        ks=(1, 3),
        leave_one_out=True,
    )
    assert set(got) == {"cmc@1", "cmc@3", "map"}
    for k in got:
        assert got[k] == pytest.approx(direct[k], abs=1e-12), k
    if g.retrieval_space.name == "lorentz":
        k = g.curvature
        score = lambda a, b: -math.acosh(max(1.0, -k * (float(a[1:] @ b[1:]) - a[0] * b[0]))) / math.sqrt(k)
    else:
        score = lambda a, b: float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))
    v = g.vectors()
    assert got["cmc@1"] == pytest.approx(_hand_cmc1(v, v, g.ids, g.ids, g.labels, g.labels, score))


def test_cross_gallery_metrics_use_the_query_in_the_gallerys_space():
    q, g = _lorentz(1.0, seed=0), _lorentz(0.5, seed=3)
    got = gallery_metrics(q, g)
    direct = retrieval_metrics(
        _hand_expmap0(q.z, 0.5), q.labels, q.ids, _hand_expmap0(g.z, 0.5), g.labels, g.ids, create_space("lorentz", 0.5)
    )
    for k in got:
        assert got[k] == pytest.approx(direct[k], abs=1e-9), k
    with pytest.raises(ValueError):
        gallery_metrics(_euclid(4), q)


def test_load_of_garbage_never_passes_on_numpys_pickle_advice(tmp_path):
    path = tmp_path / "gallery.npz"
    path.write_bytes(b"this is no gallery" * 50)  # numpy: "… load it unsafely using the allow_pickle= keyword …"
    with pytest.raises(IndexIntegrityError) as info:
        GalleryEmbeddings.load(path)
    msg = str(info.value)
    assert "allow_pickle" not in msg and "pickle.load" not in msg and "\n" not in msg, msg
    assert f"gallery embeddings {path} are missing or damaged (its bytes are not an .npz archive of arrays" in msg
