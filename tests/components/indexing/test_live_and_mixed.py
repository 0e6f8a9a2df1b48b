"""The live-gallery pointer (atomic switch, query refusal) and mixed galleries for partial backfill."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from components.errors import IncompatibleQueryError, IndexIntegrityError
from components.geometry import create_space, expmap0
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.live import LivePointer
from components.indexing.mixed import backfill_order, item_uncertainty, mix_galleries
from components.indexing.stores.faiss import GalleryIndex


def lorentz_gallery(seed: int, n: int = 40, d: int = 8, scale: float = 1.0) -> GalleryEmbeddings:
    rng = np.random.default_rng(seed)
    z = (rng.normal(size=(n, d)) * scale * rng.uniform(0.1, 1.0, size=(n, 1))).astype(np.float32)
    emb = expmap0(torch.from_numpy(z).double()).float().numpy()
    return GalleryEmbeddings(
        "lorentz",
        1.0,
        z,
        emb,
        np.arange(n, dtype=np.int64),
        rng.integers(0, 4, n),
        np.zeros(n, bool),
        np.zeros((n, 4), np.float32),
    )


def build(tmp: Path, g: GalleryEmbeddings, gen: int) -> Path:
    return GalleryIndex.build(g.vectors(), g.ids, space=create_space("lorentz", 1.0), generation=gen).save(
        tmp / f"idx{gen}"
    )


def test_switch_is_atomic_and_restore_undoes_it(tmp_path: Path):
    live = LivePointer(tmp_path / "live")
    assert live.pointer() is None
    with pytest.raises(IndexIntegrityError, match="no live gallery"):
        live.index()
    a, b = build(tmp_path, lorentz_gallery(0), 0), build(tmp_path, lorentz_gallery(1), 1)
    p0 = live.switch(a, generation=0, compatible_generations=[0])
    assert p0["version"] == 0 and live.index().manifest.generation == 0
    p1 = live.switch(b, generation=1, compatible_generations=[1])
    assert p1["version"] == 1 and live.index().manifest.generation == 1
    assert not list((tmp_path / "live").glob(".*tmp"))  # no temp files left by the atomic writes
    live.restore(p0)
    assert live.pointer() == p0 and live.index().manifest.generation == 0


def test_queries_of_undeclared_generations_are_refused(tmp_path: Path):
    g = lorentz_gallery(0)
    live = LivePointer(tmp_path / "live")
    live.switch(build(tmp_path, g, 0), generation=0, compatible_generations=[0, 2])
    q = g.vectors()[:3].astype(np.float32)
    _, ids = live.search(q, 1, query_generation=2)  # declared compatible
    assert (ids[:, 0] == g.ids[:3]).all()
    with pytest.raises(IncompatibleQueryError, match="generation 1 is not compatible with the live gallery"):
        live.search(q, 1, query_generation=1)  # same dimension, never declared: the silent model swap


def test_prune_keeps_the_newest_versions_and_never_the_live_one(tmp_path: Path):
    live = LivePointer(tmp_path / "live")
    dirs = []
    for _i in range(4):
        v = live.next_version_dir()
        v.mkdir(parents=True)
        dirs.append(v)
    live.switch(dirs[0], generation=0)  # an old version is live
    removed = live.prune(keep=2)
    assert sorted(p.name for p in removed) == ["index-v002"]
    assert dirs[0].exists() and dirs[2].exists() and dirs[3].exists()
    live.switch(dirs[0] / "index", generation=0)  # as a backfill points: at the version's evaluation index
    for _i in range(2):
        live.next_version_dir().mkdir()
    assert sorted(p.name for p in live.prune(keep=2)) == ["index-v003", "index-v004"] and dirs[0].exists()


def test_uncertainty_order_puts_the_least_certain_items_first():
    g = lorentz_gallery(3, scale=2.0)
    u = item_uncertainty(g)
    order = backfill_order(g, "uncertainty", seed=0)
    assert sorted(order.tolist()) == list(range(len(g)))
    assert np.all(np.diff(u[order]) <= 1e-12)  # non-increasing uncertainty
    assert np.allclose(u, 1 - np.tanh(np.linalg.norm(g.z.astype(np.float64), axis=1)))
    r1, r2 = backfill_order(g, "random", seed=1), backfill_order(g, "random", seed=1)
    assert np.array_equal(r1, r2) and not np.array_equal(r1, order)
    stamps = np.array([2, 0, 1] * 13 + [0])
    oldest = backfill_order(g, "oldest", seed=0, stamps=stamps)
    assert np.all(np.diff(stamps[oldest]) >= 0)
    with pytest.raises(ValueError, match="unknown backfill order"):
        backfill_order(g, "newest")


def test_mix_takes_the_selected_items_from_the_new_gallery():
    old, new = lorentz_gallery(0), lorentz_gallery(1)
    pos = np.array([0, 5, 7])
    part = GalleryEmbeddings(
        new.geometry, 1.0, new.z[pos], new.emb[pos], new.ids[pos], new.labels[pos], new.clipped[pos], new.logits[pos]
    )
    mixed = mix_galleries(old, part, pos)
    assert np.array_equal(mixed.z[pos], new.z[pos])
    rest = np.setdiff1d(np.arange(len(old)), pos)
    assert np.array_equal(mixed.z[rest], old.z[rest]) and np.array_equal(mixed.ids, old.ids)
    eu = GalleryEmbeddings(
        "euclidean", 1.0, old.z[pos], old.z[pos], old.ids[pos], old.labels[pos], old.clipped[pos], old.logits[pos]
    )
    with pytest.raises(ValueError, match="full backfill"):
        mix_galleries(old, eu, pos)
    with pytest.raises(ValueError, match="not the selected gallery items"):
        mix_galleries(old, part, pos[::-1])


def test_the_live_pointer_stores_workspace_paths_relative_and_a_copy_points_at_its_own_index(tmp_path: Path):
    ws = tmp_path / "ws"
    index_dir = ws / "generations" / "gen_000" / "index"
    index_dir.mkdir(parents=True)
    live = LivePointer(ws / "live")
    live.switch(index_dir, generation=0, model_checkpoint=str(ws / "generations" / "gen_000" / "model.pt"))
    on_disk = json.loads((ws / "live" / "CURRENT").read_text())
    assert on_disk["index"] == "../generations/gen_000/index"
    assert on_disk["model_checkpoint"] == "../generations/gen_000/model.pt"
    assert live.pointer()["index"] == str(index_dir.resolve()) and live.matches(index_dir, generation=0)
    shutil.copytree(ws, tmp_path / "copy")
    copy = LivePointer(tmp_path / "copy" / "live")
    assert copy.pointer()["index"] == str((tmp_path / "copy" / "generations" / "gen_000" / "index").resolve())
    assert not copy.matches(index_dir)  # the original's index is not the copy's
    outside = tmp_path / "volume" / "index"
    outside.mkdir(parents=True)
    live.switch(outside, generation=0)  # outside the workspace: kept absolute
    assert json.loads((ws / "live" / "CURRENT").read_text())["index"] == str(outside.resolve())


def test_the_pointer_serves_the_index_it_records_and_an_old_pointer_reads_the_versions_record(tmp_path: Path):
    from components.indexing.version import GalleryVersion

    version = GalleryVersion(tmp_path / "ws" / "live" / "index-v001")
    evaluation, corpus = lorentz_gallery(0, n=40), lorentz_gallery(1, n=60)
    build(version.root, evaluation, 0).rename(version.evaluation_index)
    (version.root / "corpus").mkdir()
    build(version.root / "corpus", corpus, 0).rename(version.corpus_index)
    version.record_serving("eval_split")  # recorded: the evaluation split serves, though a corpus folder is there
    live = LivePointer(tmp_path / "ws" / "live")
    live.switch(version.evaluation_index, generation=0, serving_index=str(version.corpus_index))
    assert json.loads(live.pointer_path.read_text())["serving_index"] == "index-v001/corpus/index"
    assert live.serving_index() == version.corpus_index.resolve() and live.index().ntotal == 60  # as CURRENT says
    assert live.matches(version.evaluation_index, serving_index=version.corpus_index)
    assert not live.matches(version.evaluation_index, serving_index=version.evaluation_index)
    # a CURRENT written before serving_index: read through the version's record, until it is rewritten
    old = {k: v for k, v in live.pointer().items() if k != "serving_index"}
    live.restore(old)
    assert live.index().ntotal == 40 and live.serving_index() == version.evaluation_index.resolve()
    # so the roll-forward (any command, or doctor --repair) rewrites it with the key
    assert not live.matches(version.evaluation_index, serving_index=version.evaluation_index)


def test_merge_by_rank_interleaves_the_lists_by_rank_then_score():
    from components.indexing.mixed import merge_by_rank

    new = (np.array([0.9, 0.5, 0.1]), np.array([10, 11, 12]))
    old = (np.array([0.95, 0.2, -1.0]), np.array([20, 21, -1]))  # -1: no third item
    scores, ids, src = merge_by_rank([new, old], 5)
    assert ids.tolist() == [20, 10, 11, 21, 12]  # rank 1 of both (higher score first), then rank 2, …
    assert src.tolist() == [1, 0, 0, 1, 0] and scores[0] == 0.95
    assert merge_by_rank([new, old], 2)[1].tolist() == [20, 10]
