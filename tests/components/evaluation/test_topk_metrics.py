"""Top-k metrics from kNN lists (components/evaluation/topk.py, docs/design.md §6) against exact evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.evaluation import retrieval_metrics, topk_metrics
from components.geometry import create_space, expmap0
from components.indexing.stores.faiss import GalleryIndex


def _items(seed: int, n: int = 240, d: int = 8, geometry: str = "euclidean", quantised: bool = False):
    """Two "models" embedding the same n items: (queries, gallery) (n, D), labels (n,), ids (n,)."""
    rng = np.random.default_rng(seed)
    sizes = [90, 60, 50, 39, 1]  # unbalanced, plus a class of one (no relevant item left under leave-one-out)
    y = np.repeat(np.arange(len(sizes)), sizes)
    g = rng.normal(size=(n, d)) + 1.2 * rng.normal(size=(len(sizes), d))[y]
    q = g + 0.4 * rng.normal(size=(n, d))
    if quantised:  # many exactly tied scores
        g, q = np.round(g), np.round(q)
    if geometry == "lorentz":
        g = expmap0(torch.from_numpy(0.3 * g)).numpy()
        q = expmap0(torch.from_numpy(0.3 * q)).numpy()
    perm = rng.permutation(n)
    ids = rng.choice(10**9, size=n, replace=False).astype(np.int64)
    return q, g[perm], y, y[perm], ids, ids[perm]


def _exact_lists(q, g, g_ids, geometry: str, k: int) -> np.ndarray:
    """Neighbour ids (Nq, k) of an exact search whose ties keep gallery order (the CMC rule)."""
    order = np.argsort(-create_space(geometry).scores(q, g), axis=1, kind="stable")[:, :k]
    return g_ids[order]


def _reference(lists, q_ids, q_lab, g_ids, g_lab, ks, leave_one_out):
    """Per-query loop: the metric definitions of topk_metrics' docstring, spelled out."""
    label_of = dict(zip(g_ids.tolist(), g_lab.tolist()))
    rows = []
    for i in range(lists.shape[0]):
        own = q_ids[i] if leave_one_out else None
        found = [x for x in lists[i].tolist() if x >= 0 and x != own]
        r = int((g_lab == q_lab[i]).sum()) - int(own is not None and label_of.get(own) == q_lab[i])
        if r == 0:
            continue
        rel = [label_of[x] == q_lab[i] for x in found]
        prec = [sum(rel[: j + 1]) / (j + 1) for j in range(len(rel))]
        row = {f"cmc@{k}": float(any(rel[:k])) for k in ks}
        row |= {f"recall@{k}": sum(rel[:k]) / r for k in ks}
        row["map@R"] = sum(p for j, p in enumerate(prec) if rel[j] and j < r) / r
        row["map@100"] = sum(p for j, p in enumerate(prec) if rel[j] and j < 100) / min(r, 100)
        rows.append(row)
    out = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
    out["n_queries"] = len(rows)
    return out


# ------------------------------------------------------------ agreement with exact
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
@pytest.mark.parametrize("quantised", [False, True])
@pytest.mark.parametrize("leave_one_out", [True, False])
def test_cmc_from_exact_lists_equals_exact_cmc(geometry, quantised, leave_one_out):
    q, g, q_lab, g_lab, q_ids, g_ids = _items(1, geometry=geometry, quantised=quantised)
    ks = (1, 3, 5, 10)
    lists = _exact_lists(q, g, g_ids, geometry, max(ks) + 1)
    top = topk_metrics(lists, q_ids, q_lab, g_ids, g_lab, ks=ks, leave_one_out=leave_one_out)
    exact = retrieval_metrics(
        q, q_lab, q_ids, g, g_lab, g_ids, create_space(geometry), ks=ks, leave_one_out=leave_one_out
    )
    assert top["n_queries"] == exact["n_queries"] == (239 if leave_one_out else 240)
    for k in ks:
        assert top[f"cmc@{k}"] == exact[f"cmc@{k}"]


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_cmc_from_the_flat_gallery_index_equals_exact_cmc(geometry):
    q, g, q_lab, g_lab, q_ids, g_ids = _items(2, geometry=geometry)
    index = GalleryIndex.build(g, g_ids, space=create_space(geometry, 1.0), generation=0)
    _, lists = index.search(q, 6)
    top = topk_metrics(lists, q_ids, q_lab, g_ids, g_lab, ks=(1, 5))
    exact = retrieval_metrics(q, q_lab, q_ids, g, g_lab, g_ids, create_space(geometry), ks=(1, 5))
    assert (top["cmc@1"], top["cmc@5"], top["n_queries"]) == (exact["cmc@1"], exact["cmc@5"], exact["n_queries"])


@pytest.mark.parametrize("leave_one_out", [True, False])
def test_all_metrics_match_a_per_query_reference_when_every_r_fits_in_k(leave_one_out):
    q, g, q_lab, g_lab, q_ids, g_ids = _items(3, quantised=True)
    lists = _exact_lists(q, g, g_ids, "euclidean", 120)  # every R (<= 89) fits in the list: exact map@R
    ks = (1, 5, 20)
    top = topk_metrics(lists, q_ids, q_lab, g_ids, g_lab, ks=ks, leave_one_out=leave_one_out)
    ref = _reference(lists, q_ids, q_lab, g_ids, g_lab, ks, leave_one_out)
    assert top.keys() == ref.keys()
    assert top["n_queries"] == ref["n_queries"]
    for key in ref:
        assert top[key] == pytest.approx(ref[key], abs=1e-12), key


def test_map_at_r_by_hand():
    # one query of class A with R = 3 relevant gallery items (its own item excluded):
    # list (own removed): A B A B A -> precision at ranks 1, 3, 5 = 1, 2/3, 3/5; only ranks <= R = 3 count
    g_ids = np.array([10, 11, 12, 13, 14, 15, 16])
    g_lab = np.array(list("AABABAB"))  # 10 is the query's own item
    lists = np.array([[10, 11, 12, 13, 14, 15, 16]])  # A(own) A B A B A B
    top = topk_metrics(lists, np.array([10]), np.array(["A"]), g_ids, g_lab, ks=(1, 2))
    assert top["map@R"] == pytest.approx((1 + 2 / 3) / 3)
    assert top["map@100"] == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)
    assert top["cmc@1"] == 1.0 and top["recall@2"] == pytest.approx(1 / 3)
    assert top["n_queries"] == 1


def test_short_lists_give_lower_bounds_and_missing_neighbours_are_misses():
    q, g, q_lab, g_lab, q_ids, g_ids = _items(4)
    full = topk_metrics(_exact_lists(q, g, g_ids, "euclidean", 240), q_ids, q_lab, g_ids, g_lab)
    short_lists = _exact_lists(q, g, g_ids, "euclidean", 20)
    short = topk_metrics(short_lists, q_ids, q_lab, g_ids, g_lab)
    assert short["map@R"] < full["map@R"] and short["map@100"] < full["map@100"]
    assert short["cmc@5"] == full["cmc@5"]
    padded = np.where(np.arange(20)[None, :] < 8, short_lists, -1)  # an approximate index found only 8
    cut = topk_metrics(padded, q_ids, q_lab, g_ids, g_lab)
    assert cut["cmc@5"] == short["cmc@5"] and cut["map@R"] <= short["map@R"]


def test_own_id_missing_from_its_list_keeps_the_list_whole():
    g_ids = np.array([1, 2, 3])
    g_lab = np.array([0, 0, 1])
    # the query (id 1) is not among its neighbours: nothing is removed, rank 1 is item 2 (relevant)
    top = topk_metrics(np.array([[2, 3]]), np.array([1]), np.array([0]), g_ids, g_lab, ks=(1,))
    assert top["cmc@1"] == 1.0 and top["map@R"] == 1.0 and top["recall@1"] == 1.0


def test_no_usable_query_gives_nan():
    top = topk_metrics(np.array([[5, 6]]), np.array([5]), np.array([0]), np.array([5, 6]), np.array([0, 1]), ks=(1,))
    assert top["n_queries"] == 0 and math.isnan(top["cmc@1"]) and math.isnan(top["map@R"])


def test_bad_inputs_are_refused_with_a_fix():
    ids, lab = np.array([1, 2, 3]), np.array([0, 0, 1])
    with pytest.raises(ValueError, match="search at least 6 neighbours"):
        topk_metrics(np.array([[1, 2, 3]]), np.array([1]), np.array([0]), ids, lab, ks=(1, 5))
    with pytest.raises(ValueError, match="not in gallery_ids"):
        topk_metrics(np.array([[1, 9]]), np.array([1]), np.array([0]), ids, lab, ks=(1,))
    with pytest.raises(ValueError, match="2-D integer"):
        topk_metrics(np.array([1, 2]), np.array([1]), np.array([0]), ids, lab, ks=(1,))
    with pytest.raises(ValueError, match="one per row"):
        topk_metrics(np.array([[1, 2]]), np.array([1, 2]), np.array([0]), ids, lab, ks=(1,))
