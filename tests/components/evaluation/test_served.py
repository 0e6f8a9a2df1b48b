"""The served mAP@R of a partially backfilled gallery (components/evaluation/served.py): the gallery a partial
backfill leaves, and what the query service answers over it with and without the merge by rank."""

from __future__ import annotations

import numpy as np
import pytest

from components.evaluation.served import backfilled, served_maps
from components.indexing.gallery import GalleryEmbeddings

N, C = 60, 4


def _gallery(z: np.ndarray, labels: np.ndarray) -> GalleryEmbeddings:
    n = len(z)
    unit = (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)
    return GalleryEmbeddings(
        "euclidean", 1.0, z.astype(np.float32), unit, np.arange(100, 100 + n), labels, np.zeros(n, bool),
        np.zeros((n, C), np.float32),
    )  # fmt: skip


@pytest.fixture
def old_new() -> tuple[GalleryEmbeddings, GalleryEmbeddings]:
    """The same items: ``new`` embeds each at its class's direction (perfect retrieval), ``old`` at random."""
    rng = np.random.default_rng(0)
    labels = np.arange(N) % C
    centres = np.eye(8)[:C] * 5
    new = _gallery(centres[labels] + 0.1 * rng.normal(size=(N, 8)), labels)
    old = _gallery(rng.normal(size=(N, 8)), labels)
    return old, new


def test_backfilled_swaps_in_the_new_rows_of_the_chosen_items_only(old_new):
    old, new = old_new
    pos = np.array([1, 5, 40])
    mixed = backfilled(old, new, pos)
    rest = np.setdiff1d(np.arange(N), pos)
    assert np.array_equal(mixed.z[pos], new.z[pos]) and np.array_equal(mixed.z[rest], old.z[rest])
    assert np.array_equal(mixed.ids, old.ids)


def test_served_map_rises_from_the_old_gallery_to_the_new_models_own(old_new):
    old, new = old_new
    every, none = np.arange(N), np.array([], dtype=np.int64)
    full = served_maps(old, new, backfilled(old, new, every), every)
    assert full["served_map"] == pytest.approx(1.0) and full["served_map_rank"] == pytest.approx(1.0)
    half = np.arange(0, N, 2)
    maps = [served_maps(old, new, backfilled(old, new, p), p, ("none",)) for p in (none, half)]
    assert all(set(m) == {"served_map"} for m in maps)
    assert maps[0]["served_map"] < maps[1]["served_map"] < full["served_map"]


def test_a_gallery_the_new_model_embeds_as_the_old_one_serves_the_same_at_every_fraction(old_new):
    _, new = old_new
    maps = {served_maps(new, new, backfilled(new, new, p), p)["served_map"] for p in (np.arange(0), np.arange(30))}
    assert len(maps) == 1
