"""The one gallery pipeline (flows/gallery/pipeline.py) on a serving corpus: generation 0 embeds a WebDataset
corpus in parts and serves it from its own index, as recorded; a killed embedding resumes without redoing finished
parts; partial and full backfills re-embed it through the same code as the evaluation gallery."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from components.data.sources import write_webdataset
from components.data.sources.base import ImageSource
from components.errors import ConfigError
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts, PartWriter
from components.indexing.stores.faiss import GalleryIndex
from components.indexing.version import GalleryVersion
from flows.gallery.data import load_splits, open_corpus
from flows.gallery.pipeline import Embedded, check_index_recall, embed_gallery, embed_some
from flows.params import load_params
from flows.runtime.workspace import Workspace
from tests.helpers import run_backfill, run_generation, write_params

CHUNK = 64


def _corpus(folder: Path, n: int, images: np.ndarray, labels: np.ndarray) -> ImageSource:
    """``n`` digits images (cycled) as WebDataset shards, ids 1000.., labels kept."""
    pick = np.arange(n) % len(images)

    def batches():
        for s in range(0, n, 100):
            sl = pick[s : s + 100]
            yield images[sl], labels[sl], 1000 + np.arange(s, s + len(sl))

    return write_webdataset(folder, batches(), shard_size=120)


@pytest.fixture(scope="module")
def corpus_ws(tmp_path_factory, prefect_harness) -> tuple[Path, Path, ImageSource]:
    tmp = tmp_path_factory.mktemp("corpus")
    params = tmp / "params.yaml"
    p = write_params(params)
    train = load_splits(p, Workspace(tmp / "ws")).train
    source = _corpus(tmp / "shards", 300, train.decode().images, train.labels)
    write_params(
        params,
        [
            "gallery.source=webdataset",
            f"gallery.path={tmp / 'shards'}",
            "gallery.workers=0",
            f"backfill.chunk_size={CHUNK}",
            "index.type=hnsw",
        ],
    )
    home = tmp / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    return home, params, source


def test_generation_0_serves_the_corpus_from_its_own_index(corpus_ws):
    home, _, source = corpus_ws
    version = GalleryVersion(home / "generations" / "gen_000")
    store = GalleryParts(version.corpus_store)
    assert len(store) == len(source) == 300
    assert [len(p) for p in store.parts()] == [64, 64, 64, 64, 44]
    np.testing.assert_array_equal(np.sort(store.column("ids")), np.sort(source.ids))
    served = version.serving()
    assert (served.source, served.index, served.gallery) == ("webdataset", version.corpus_index, version.corpus_store)
    manifest = GalleryIndex.load(version.corpus_index).manifest
    assert manifest.index_type == "hnsw" and manifest.count == 300
    # measured against exact search (the 1-epoch tiny model packs points within float32 ties: recall is low)
    assert manifest.recall_at_10 is not None and 0.0 < manifest.recall_at_10 <= 1.0
    live = LivePointer(home / "live")
    assert live.serving_index() == version.corpus_index.resolve()  # recorded in CURRENT by the commit
    assert live.index().ntotal == 300  # the corpus index serves, not the evaluation split's
    q = store.load_all().gallery.vectors()[:5]
    scores, ids = live.search(q, 3, query_generation=0)
    assert np.isin(ids, store.column("ids")).all() and (np.diff(scores, axis=1) <= 0).all()


def test_a_killed_corpus_embedding_resumes_without_redoing_finished_parts(corpus_ws, tmp_path):
    home, params, _source = corpus_ws
    p = load_params(params)
    ws = Workspace(home)
    corpus = open_corpus(p, ws)
    ckpt = home / "generations" / "gen_000" / "model.pt"
    out = tmp_path / "store"
    whole = embed_gallery(p, corpus, ckpt, tmp_path / "whole", generation=0)
    full = whole.store
    assert (whole.items, whole.parts_resumed, whole.parts) == (300, 0, 5)
    # a run killed after two finished parts: its parts are on disk, the buffered rows are lost
    first = PartWriter(out, CHUNK, producer=(tmp_path / "whole" / "producer.txt").read_text())
    for i, part in enumerate(full.parts()):
        if i < 2:
            first.add(part)
    resumed = embed_gallery(p, corpus, ckpt, out, generation=0)
    again = resumed.store
    assert (resumed.items, resumed.parts_resumed, resumed.parts) == (300 - 2 * CHUNK, 2, 5)
    assert len(again) == 300
    a, b = full.load_all().gallery, again.load_all().gallery
    order_a, order_b = np.argsort(a.ids), np.argsort(b.ids)
    np.testing.assert_allclose(a.z[order_a], b.z[order_b], atol=1e-5)


def test_parts_outlive_a_corpus_that_grows_but_not_one_whose_items_changed(corpus_ws, tmp_path):
    """A re-embedding spread over runs (embed_some: a night's budget) while new items are appended to the corpus
    keeps the parts it wrote; the same positions holding other items start over."""
    home, params, _ = corpus_ws
    train = load_splits(load_params(params), Workspace(home)).train
    images, labels = train.decode().images, train.labels
    ckpt, out, selected = home / "generations" / "gen_000" / "model.pt", tmp_path / "store", np.arange(200)

    def some(n: int, max_items: int, labels_of=labels) -> tuple[int, int]:
        _corpus(tmp_path / f"shards{n}", n, images, labels_of)
        p = load_params(params, [f"gallery.path={tmp_path / f'shards{n}'}"])
        return embed_some(p, open_corpus(p, Workspace(home)), ckpt, out, generation=0, positions=selected,
                          max_items=max_items)  # fmt: skip

    assert some(200, 2 * CHUNK) == (2 * CHUNK, 200 - 2 * CHUNK)
    assert some(300, 1000) == (200 - 2 * CHUNK, 0)  # 100 items appended: the two parts kept
    assert some(300, 1000, labels_of=np.roll(labels, 1)) == (200, 0)  # other items at those positions: all again


def test_the_recall_floor_and_a_channel_mismatch_are_refused(corpus_ws, tmp_path):
    home, params, _ = corpus_ws
    p = load_params(params, ["index.min_recall=1.0"])
    index = GalleryIndex.load(GalleryVersion(home / "generations" / "gen_000").corpus_index)
    if index.manifest.recall_at_10 < 1.0:
        with pytest.raises(ConfigError, match=r"below index.min_recall 1.0; raise index.nprobe / index.ef_search"):
            check_index_recall(p, index, tmp_path)
    rgb = np.repeat(load_splits(p, Workspace(home)).train.decode().images[:20], 3, axis=3)
    write_webdataset(tmp_path / "rgb", [(rgb, np.zeros(20, np.int64), np.arange(20))], shard_size=50)
    q = load_params(params, [f"gallery.path={tmp_path / 'rgb'}"])
    with pytest.raises(Exception, match="3-channel images but the models are trained on 1-channel"):
        open_corpus(q, Workspace(home))


def test_backfills_reembed_the_corpus_partial_then_full(corpus_ws):
    home, params, _source = corpus_ws
    run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    partial = run_backfill(home, params, target=1, fraction=0.25, order="uncertainty", force=True)
    assert partial["metrics"]["corpus/share_embedded_by_target"] == pytest.approx(75 / 300)
    assert partial["metrics"]["share_embedded_by_target"] == pytest.approx(round(0.25 * 539) / 539)
    live = LivePointer(home / "live")
    version = GalleryVersion.of_index(live.pointer()["index"])
    assert live.serving_index() == version.corpus_index.resolve()
    served = GalleryParts(version.corpus_store)
    stamps = served.column("stamps")
    assert (stamps == 1).sum() == 75 and (stamps == 0).sum() == 225
    evaluation = GalleryParts(version.evaluation_gallery()).column("stamps")  # kept current the same way
    assert (evaluation == 1).sum() == round(0.25 * 539) and (evaluation == 0).sum() == 539 - round(0.25 * 539)
    full = run_backfill(home, params, target=1, fraction=1.0)
    assert full["metrics"]["corpus/share_embedded_by_target"] == 1.0
    assert "corpus/map" in full["metrics"]  # a small labelled corpus: exact metrics
    version = GalleryVersion.of_index(live.pointer()["index"])
    served = GalleryParts(version.corpus_store)
    assert (served.column("stamps") == 1).all() and len(served) == 300
    assert (GalleryParts(version.evaluation_gallery()).column("stamps") == 1).all()
    assert live.index().manifest.generation == 1 and live.index().ntotal == 300


def test_the_embedding_rate_leaves_out_the_start_up():
    """10 000 items after a first batch of 512 in 10 s, past 2 s of start-up: 1 000 items/s, whatever the start-up
    (the same for a 10% backfill and a full one); a call of one batch has only its items over its seconds."""
    e = Embedded(None, 10_512, 12.0, 0, 2, startup_s=2.0, first_batch=512)  # type: ignore[arg-type]
    assert e.items_per_s == pytest.approx(1000.0)
    one = Embedded(None, 300, 3.0, 0, 1, startup_s=2.5, first_batch=300)  # type: ignore[arg-type]
    assert one.items_per_s == pytest.approx(100.0)
