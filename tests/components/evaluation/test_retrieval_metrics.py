"""Retrieval scores, AP and CMC/mAP (components/evaluation/retrieval.py, docs/design.md §6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from components.evaluation import average_precision, retrieval_metrics
from components.geometry import create_space, expmap0, pairwise_geodesic_distance


def _sklearn_ap(scores, relevant, valid):
    out = []
    for s, r, v in zip(scores, relevant, valid):
        out.append(average_precision_score(r[v], s[v]) if r[v].any() else np.nan)
    return np.array(out)


def _unit(deg) -> np.ndarray:
    """2-D unit vectors at the given angles (degrees): cosine ranks by angle."""
    t = np.deg2rad(np.asarray(deg, dtype=np.float64))
    return np.stack([np.cos(t), np.sin(t)], axis=1)


# ----------------------------------------------------------------- AP vs sklearn
@pytest.mark.parametrize("tied", [False, True])
def test_average_precision_matches_sklearn_row_by_row(tied):
    rng = np.random.default_rng(0 if tied else 1)
    nq, ng = 300, 60
    # tied: integer scores 0..3, huge tie groups
    scores = rng.integers(0, 4, size=(nq, ng)).astype(np.float64) if tied else rng.normal(size=(nq, ng))
    relevant = rng.random((nq, ng)) < 0.25
    valid = rng.random((nq, ng)) < 0.85
    # make sure exclusions hit relevant items too
    valid[:, 0] = False
    relevant[:, 0] = True

    ap = average_precision(scores, relevant, valid)
    ref = _sklearn_ap(scores, relevant, valid)
    assert ap.dtype == np.float64 and ap.shape == (nq,)
    assert np.array_equal(np.isnan(ap), np.isnan(ref))
    np.testing.assert_allclose(ap[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=0, atol=1e-12)


def test_average_precision_ties_are_one_threshold_by_hand():
    # ranking 3 | 2 2 | 1 with relevance 1 | 0 1 | 0:
    # group 1: recall +1/2 at precision 1; group {2,2}: recall +1/2 at precision 2/3.
    scores = np.array([[3.0, 2.0, 2.0, 1.0], [3.0, 2.0, 2.0, 1.0]])
    relevant = np.array([[1, 0, 1, 0], [1, 1, 0, 0]], dtype=bool)
    ap = average_precision(scores, relevant)
    expected = 0.5 * 1.0 + 0.5 * 2.0 / 3.0
    np.testing.assert_allclose(ap, [expected, expected], atol=1e-15)  # order inside a tie is irrelevant
    assert ap[0] == pytest.approx(average_precision_score(relevant[0], scores[0]))


def test_average_precision_nan_without_relevant_and_excluded_relevant():
    scores = np.array([[0.9, 0.1, 0.5]])
    relevant = np.array([[True, False, False]])
    assert np.isnan(average_precision(scores, relevant, ~relevant))[0]
    assert average_precision(scores, relevant)[0] == 1.0


def test_average_precision_rejects_mismatched_shapes_and_nan():
    with pytest.raises(ValueError, match="shape"):
        average_precision(np.zeros((2, 3)), np.zeros((2, 4), dtype=bool))
    with pytest.raises(ValueError, match="NaN"):
        average_precision(np.array([[np.nan, 1.0]]), np.array([[True, False]]))


# ------------------------------------------------------------- the space's scores
def test_euclidean_scores_are_float64_cosine_and_scale_free():
    rng = np.random.default_rng(2)
    q = rng.normal(size=(7, 5)).astype(np.float32)
    g = rng.normal(size=(9, 5)).astype(np.float32)
    q64, g64 = q.astype(np.float64), g.astype(np.float64)
    s = create_space("euclidean").scores(q, g64 * 3.0)  # float32 queries are cast, not rounded further
    ref = (q64 @ g64.T) / np.outer(np.linalg.norm(q64, axis=1), np.linalg.norm(g64, axis=1))
    assert s.dtype == np.float64 and s.shape == (7, 9)
    np.testing.assert_allclose(s, ref, atol=1e-12)


def test_lorentz_scores_are_minus_geodesic_distance():
    rng = np.random.default_rng(3)
    k = 0.5
    q = expmap0(torch.from_numpy(rng.normal(size=(6, 8))), k)
    g = expmap0(torch.from_numpy(rng.normal(size=(10, 8))), k)
    s = create_space("lorentz", k).scores(q.numpy(), g.numpy())
    ref = pairwise_geodesic_distance(q, g, k).numpy()
    np.testing.assert_allclose(s, -ref, rtol=1e-10, atol=1e-10)


def test_lorentz_scores_keep_close_pairs_far_from_origin():
    # Design §2: in float32 the distance of close pairs at x_t ~ 1e3 collapses to 0.
    v = torch.zeros(2, 4, dtype=torch.float64)
    v[0, 0] = 8.0
    v[1, 0] = 8.0
    v[1, 1] = 8.0 * 1e-3 / math.sinh(8.0)  # angle 1e-3/sinh(8) at radius 8: distance ≈ 1e-3
    x = expmap0(v)  # x_t = cosh(8) ≈ 1490
    d32 = -create_space("lorentz").scores(x.float().numpy()[:1], x.float().numpy()[1:])[0, 0]
    d64 = -create_space("lorentz").scores(x.numpy()[:1], x.numpy()[1:])[0, 0]
    assert d64 == pytest.approx(1e-3, rel=1e-2)
    assert abs(d32 - 1e-3) > 1e-4  # float32 coordinates genuinely lose this pair


def test_unknown_geometry_names_valid_values():
    with pytest.raises(ValueError, match="available: euclidean, lorentz"):
        create_space("poincare").scores(np.ones((1, 2)), np.ones((1, 2)))


def test_scores_reject_width_mismatch_and_nan():
    with pytest.raises(ValueError, match="width"):
        create_space("euclidean").scores(np.ones((1, 3)), np.ones((1, 2)))
    with pytest.raises(ValueError, match="NaN"):
        create_space("euclidean").scores(np.array([[np.nan, 1.0]]), np.ones((1, 2)))


# ------------------------------------------------------------ retrieval_metrics
def test_toy_cmc_and_map_by_hand():
    # gallery at 0,10,20,30,40,50,90 degrees, labels A B A B B A C
    g = _unit([0, 10, 20, 30, 40, 50, 90])
    g_lab = np.array(list("ABABBAC"))
    g_ids = np.arange(10, 17)
    # q0 @1° A: ranking 0A 10B 20A 30B 40B 50A 90C -> hits at 1,3,6: AP=(1+2/3+3/6)/3, top1 hit
    # q1 @41° A: 40B 50A 30B 20A 10B 0A 90C -> hits at 2,4,6: AP=(1/2+2/4+3/6)/3=1/2, top5 hit only
    # q2 @4° C: 0 10 20 30 40 50 90 -> hit at 7: AP=1/7, no top5 hit
    # q3 @60° D: no relevant item -> skipped
    q = _unit([1, 41, 4, 60])
    q_lab = np.array(list("AACD"))
    q_ids = np.arange(100, 104)
    m = retrieval_metrics(q, q_lab, q_ids, g, g_lab, g_ids, create_space("euclidean"), ks=(1, 5))
    assert m["n_queries"] == 3
    assert m["cmc@1"] == pytest.approx(1 / 3)
    assert m["cmc@5"] == pytest.approx(2 / 3)
    assert m["map"] == pytest.approx((13 / 18 + 1 / 2 + 1 / 7) / 3)


_LOO_ANGLES = [0, 5, 40, 45, 90]
_LOO_LABELS = np.array(list("ABABC"))


def test_leave_one_out_excludes_the_query_itself():
    x = _unit(_LOO_ANGLES)
    ids = np.arange(5)
    loo = retrieval_metrics(x, _LOO_LABELS, ids, x, _LOO_LABELS, ids, create_space("euclidean"))
    # each query's nearest *other* item has the other label; the single C is skipped
    assert loo["n_queries"] == 4
    assert loo["cmc@1"] == 0.0
    assert loo["map"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 3 + 1 / 2) / 4)
    keep = retrieval_metrics(x, _LOO_LABELS, ids, x, _LOO_LABELS, ids, create_space("euclidean"), leave_one_out=False)
    assert keep["n_queries"] == 5 and keep["cmc@1"] == 1.0  # a query finds itself first


def test_cross_retrieval_excludes_by_id_not_position():
    # queries by "model A", gallery = same items by "model B" (rotated 0.5°), stored reversed
    q = _unit(_LOO_ANGLES)
    g = _unit(np.array(_LOO_ANGLES) + 0.5)[::-1]
    ids = np.arange(5)
    m = retrieval_metrics(q, _LOO_LABELS, ids, g, _LOO_LABELS[::-1], ids[::-1], create_space("euclidean"))
    assert m["n_queries"] == 4
    assert m["cmc@1"] == 0.0
    assert m["map"] == pytest.approx(5 / 12)


def test_cmc_ties_are_broken_by_gallery_order():
    q = _unit([0])
    g = _unit([10, 10])  # identical scores
    for g_lab, expected in ((np.array(["B", "A"]), 0.0), (np.array(["A", "B"]), 1.0)):
        m = retrieval_metrics(
            q, np.array(["A"]), np.array([0]), g, g_lab, np.array([1, 2]), create_space("euclidean"), ks=(1,)
        )
        assert m["cmc@1"] == expected
    # long ties mixed with other scores (an unstable sort scrambles them): among the
    # 100 gallery items at 10°, only gallery order decides which come first
    angles = np.tile([10.0, 20.0, 30.0], 100)
    g = _unit(angles)
    g_ids = np.arange(1, 301)
    at10 = np.flatnonzero(angles == 10.0)
    for pos, expected in ((at10[0], 1.0), (at10[4], 1.0), (at10[5], 0.0), (at10[-1], 0.0)):
        g_lab = np.full(300, "B")
        g_lab[pos] = "A"
        m = retrieval_metrics(q, np.array(["A"]), np.array([0]), g, g_lab, g_ids, create_space("euclidean"), ks=(5,))
        assert m["cmc@5"] == expected


def test_metrics_match_reference_and_do_not_depend_on_chunking():
    rng = np.random.default_rng(4)
    n, d, n_cls = 240, 6, 5
    x = rng.normal(size=(n, d))
    y = rng.integers(0, n_cls, size=n)
    ids = rng.permutation(n) + 1000
    a = retrieval_metrics(x, y, ids, x, y, ids, create_space("euclidean"), ks=(1, 5, 10), chunk_size=1024)
    b = retrieval_metrics(x, y, ids, x, y, ids, create_space("euclidean"), ks=(1, 5, 10), chunk_size=7)
    assert a == pytest.approx(b, rel=1e-12)

    # reference: per-query loop with sklearn and an explicit stable ranking
    s = create_space("euclidean").scores(x, x)
    rel = y[:, None] == y[None, :]
    valid = ~np.eye(n, dtype=bool)
    aps, hits = [], {1: [], 5: [], 10: []}
    for i in range(n):
        v = valid[i]
        if not rel[i][v].any():
            continue
        aps.append(average_precision_score(rel[i][v], s[i][v]))
        order = np.argsort(-s[i][v], kind="stable")
        for k in hits:
            hits[k].append(rel[i][v][order][:k].any())
    assert a["n_queries"] == len(aps)
    assert a["map"] == pytest.approx(np.mean(aps), abs=1e-12)
    for k in hits:
        assert a[f"cmc@{k}"] == pytest.approx(np.mean(hits[k]))


def test_lorentz_metrics_rank_by_geodesic_distance():
    rng = np.random.default_rng(5)
    n = 120
    v = rng.normal(size=(n, 8))
    x = expmap0(torch.from_numpy(v)).numpy()
    y = rng.integers(0, 4, size=n)
    ids = np.arange(n)
    m = retrieval_metrics(x, y, ids, x, y, ids, create_space("lorentz"), ks=(1,))
    d = pairwise_geodesic_distance(torch.from_numpy(x), torch.from_numpy(x)).numpy()
    np.fill_diagonal(d, np.inf)
    nn = np.argmin(d, axis=1)
    assert m["cmc@1"] == pytest.approx(np.mean(y[nn] == y))


def test_no_usable_queries_gives_nan():
    x = _unit([0, 10])
    m = retrieval_metrics(
        x, np.array([1, 2]), np.arange(2), x, np.array([1, 2]), np.arange(2), create_space("euclidean")
    )
    assert m["n_queries"] == 0 and math.isnan(m["map"]) and math.isnan(m["cmc@1"])


def test_duplicate_gallery_ids_are_refused_for_leave_one_out():
    x = _unit([0, 10])
    with pytest.raises(ValueError, match="not unique"):
        retrieval_metrics(
            x, np.array([1, 1]), np.arange(2), x, np.array([1, 1]), np.array([3, 3]), create_space("euclidean")
        )


# ------------------------------------------- fast ranking == the original lexsort path
def _hyperboloid(v: np.ndarray, k: float) -> np.ndarray:
    return expmap0(torch.from_numpy(v), k).numpy()


def _equality_case(seed: int, geometry: str, k: float, ties: str) -> tuple:
    """Cross retrieval data: gallery and queries are the same items by two "models" (different vectors, same
    ids), unbalanced classes plus a class of one item, the gallery stored in shuffled order."""
    rng = np.random.default_rng(seed)
    n_g, d = 260, 6
    sizes = [120, 70, 40, 29, 1]  # unbalanced, and a single-item class (skipped under leave-one-out)
    y_g = np.repeat(np.arange(len(sizes)), sizes)
    g = rng.normal(size=(n_g, d)) + 1.5 * rng.normal(size=(len(sizes), d))[y_g]
    if ties == "duplicates":  # exact copies of other gallery rows, across and within classes
        src = rng.choice(n_g, size=60, replace=False)
        g[src[:30]] = g[src[30:]]
    elif ties == "quantised":  # few distinct directions / points: huge tie groups of scores
        g = np.round(g)
    q = g + 0.3 * rng.normal(size=g.shape)
    if ties == "quantised":
        q = np.round(q)
    if ties == "duplicates":
        q[:40] = g[src[:40] % n_g]  # some queries coincide with gallery vectors of other items
    if geometry == "euclidean":
        g[5] = 0.0  # an all-zero row scores 0 against everything
    else:
        g, q = _hyperboloid(0.4 * g, k), _hyperboloid(0.4 * q, k)
    ids = rng.permutation(n_g) + 500
    perm = rng.permutation(n_g)
    # queries: a subset of the items, the single-item class (the last item) among them
    keep = np.append(np.sort(rng.choice(n_g - 1, size=199, replace=False)), n_g - 1)
    return q[keep], y_g[keep], ids[keep], g[perm], y_g[perm], ids[perm]


@pytest.mark.parametrize("ties", ["none", "duplicates", "quantised"])
@pytest.mark.parametrize("geometry, k", [("euclidean", 1.0), ("lorentz", 1.0), ("lorentz", 0.5)])
@pytest.mark.parametrize("leave_one_out", [True, False])
def test_metrics_equal_the_original_lexsort_implementation(ties, geometry, k, leave_one_out):
    from tests.components.evaluation.reference_ranking import reference_retrieval_metrics

    seed = ["none", "duplicates", "quantised"].index(ties) + 10 * int(geometry == "lorentz") + int(100 * k)
    data = _equality_case(seed, geometry, k, ties)
    kw = dict(ks=(1, 2, 5, 10, 400), leave_one_out=leave_one_out)
    for chunk in (37, 1024):
        fast = retrieval_metrics(*data, create_space(geometry, k), chunk_size=chunk, **kw)
        ref = reference_retrieval_metrics(*data, geometry, k, chunk_size=chunk, **kw)
        assert fast["n_queries"] == ref["n_queries"] == (199 if leave_one_out else 200)
        for key in ("cmc@1", "cmc@2", "cmc@5", "cmc@10", "cmc@400"):
            assert fast[key] == ref[key], key
        assert abs(fast["map"] - ref["map"]) <= 1e-12


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_every_query_equals_the_original_implementation(geometry):
    """Query by query (one-query chunks): each AP and each CMC hit, not only their means."""
    from tests.components.evaluation.reference_ranking import reference_retrieval_metrics

    data = _equality_case(7, geometry, 1.0, "quantised")
    q, y, ids = data[:3]
    for i in range(0, q.shape[0], 9):
        one = (q[i : i + 1], y[i : i + 1], ids[i : i + 1], *data[3:])
        fast = retrieval_metrics(*one, create_space(geometry), ks=(1, 3))
        ref = reference_retrieval_metrics(*one, geometry, ks=(1, 3))
        assert fast["n_queries"] == ref["n_queries"]
        if ref["n_queries"]:
            assert (fast["cmc@1"], fast["cmc@3"]) == (ref["cmc@1"], ref["cmc@3"])
            assert abs(fast["map"] - ref["map"]) <= 1e-12


def test_thread_count_does_not_change_the_numbers(monkeypatch):
    import components.evaluation.ranking as ranking

    data = _equality_case(3, "euclidean", 1.0, "duplicates")
    monkeypatch.setattr(ranking, "_THREADS", 1)
    one = retrieval_metrics(*data, create_space("euclidean"), chunk_size=16)
    monkeypatch.setattr(ranking, "_THREADS", 3)
    assert retrieval_metrics(*data, create_space("euclidean"), chunk_size=16) == one


def test_chunk_ranking_handles_signed_zeros_ties_and_exclusions():
    """Scores -0.0 and +0.0 are one tie group; the excluded item never counts; CMC ties keep gallery order."""
    from components.evaluation.ranking import chunk_counts
    from tests.components.evaluation.reference_ranking import reference_average_precision

    values = np.array(
        [
            [-0.0, 0.0, 0.5, -0.5, 0.0, 1.0],  # relevant -0.0 tied with non-relevant +0.0 (positions 1, 4)
            [0.1, 0.3, 0.3, 0.3, -1.0, 0.2],  # best relevant (position 2) tied with a non-relevant before it
            [0.2, 0.9, 0.2, -0.0, 0.0, 0.1],  # the best item is the excluded own item (relevant)
        ]
    )
    q_lab = np.array([0, 0, 1])
    g_lab = np.array([0, 1, 0, 1, 1, 1])
    excluded = np.array([-1, 4, 1])
    relevant = q_lab[:, None] == g_lab[None, :]
    valid = np.ones_like(relevant)
    valid[[1, 2], [4, 1]] = False
    n_rel = (relevant & valid).sum(axis=1)
    ref_ap = reference_average_precision(values, relevant, valid)
    np.testing.assert_allclose(ref_ap, _sklearn_ap(values, relevant, valid), atol=1e-12)

    def same(block):
        return block

    ap, hits = chunk_counts(values.copy(), same, q_lab, g_lab, excluded, n_rel, (1, 2, 3))
    # first relevant item in the stable order: row 0 -> 0.5 after 1.0; row 1 -> position 2 after position 1;
    # row 2 -> 0.1 after 0.2, 0.2 (the excluded 0.9 does not count)
    assert hits == {1: 0, 2: 2, 3: 3}
    np.testing.assert_allclose(ap, ref_ap, rtol=0, atol=1e-15)

    # the same ranking given as distances (lower = nearer)
    dist = 1.0 - values  # exact for these values, ties kept
    ap, hits = chunk_counts(dist.copy(), same, q_lab, g_lab, excluded, n_rel, (1, 2, 3), distance_of=same)
    assert hits == {1: 0, 2: 2, 3: 3}
    np.testing.assert_allclose(ap, reference_average_precision(-dist, relevant, valid), rtol=0, atol=1e-15)


def test_blas_thread_limit_is_restored_after_concurrent_evaluations():
    """Evaluations run BLAS single-threaded (one matmul per core); the process's setting comes back after."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import ThreadpoolController

    before = [lib["num_threads"] for lib in ThreadpoolController().info() if lib["user_api"] == "blas"]
    data = _equality_case(5, "euclidean", 1.0, "none")
    with ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda _: retrieval_metrics(*data, create_space("euclidean"), chunk_size=20), range(3)))
    assert runs[0] == runs[1] == runs[2]
    assert [lib["num_threads"] for lib in ThreadpoolController().info() if lib["user_api"] == "blas"] == before
