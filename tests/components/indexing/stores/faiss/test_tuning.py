"""Search effort chosen from measured recall (components/indexing/stores/faiss/tuning.py, docs/design.md §8.3): the
cheapest nprobe / ef_search reaching the target on one half of the held-out queries, recall reported on the other
half."""

from __future__ import annotations

import numpy as np
import pytest

from components.errors import ConfigError
from components.geometry import create_space
from components.indexing.stores.faiss import GalleryIndex, IndexConfig
from components.indexing.stores.faiss.tuning import search_knob, tune
from tests.components.indexing.gallery_data import clustered, lift


def test_tune_stops_at_the_cheapest_value_that_reaches_the_target():
    seen = []

    def recall_with(p):
        seen.append(p["nprobe"])
        return {1: 0.5, 2: 0.8, 4: 0.93, 8: 0.97}.get(p["nprobe"], 0.99)

    out = tune({"nlist": 64, "nprobe": 16}, 0.95, recall_with)
    assert out["nprobe"] == 8 and seen == [1, 2, 4, 8]
    assert out["tuned_for"] == 0.95 and out["tuning_recall"] == 0.97
    # never reached: the largest value allowed by nlist, and the recall it got
    capped = tune({"nlist": 20, "nprobe": 16}, 0.999, lambda p: 0.9)
    assert capped["nprobe"] == 16 and capped["tuning_recall"] == 0.9
    assert search_knob({"ef_search": 96})[0] == "ef_search" and search_knob({"shards": 1}) is None


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_a_tuned_build_meets_its_target_on_queries_it_never_saw(kind, geometry, tmp_path):
    v = clustered(6000, 16)
    x = v if geometry == "euclidean" else lift(v)
    ids = np.arange(6000, dtype=np.int64) * 7
    cfg = dict(type=kind, recall_queries=600, seed=1)
    knob = "nprobe" if kind == "ivf" else "ef_search"
    built = {
        t: GalleryIndex.build(
            x, ids, space=create_space(geometry, 0.8), generation=0, config=IndexConfig(**cfg, target_recall=t)
        )
        for t in (0.8, 0.95)
    }
    low, high = built[0.8].manifest, built[0.95].manifest
    assert low.params[knob] <= high.params[knob]
    for t, m in ((0.8, low), (0.95, high)):
        assert m.params["tuned_for"] == t and m.recall_queries == 300  # reported on the other half
        assert m.params["tuning_recall"] >= t  # reachable on this gallery
    assert high.recall_at_10 >= 0.9  # the held-out half: close to the target it was tuned for
    # the chosen effort is what a reopened index searches with
    again = GalleryIndex.load(built[0.8].save(tmp_path / "ix"))
    assert again.manifest.params[knob] == low.params[knob]
    q = x[:50]
    np.testing.assert_array_equal(again.search(q, 10)[1], built[0.8].search(q, 10)[1])


def test_a_bad_target_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="target_recall"):
        IndexConfig(type="ivf", target_recall=1.5)
