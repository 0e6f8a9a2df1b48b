"""An ingest (flows/backfill/make.py ingest_plan; `bctflow backfill --ingest`): the serving corpus's new items embedded
by the live gallery's own model into a new version that keeps every row it had and accepts the same queries; the
evaluation gallery carried as it is; refused in one line without a corpus or without anything new."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from components.data.sources.writer import encode_image, write_manifest
from components.errors import ConfigError
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.backfill.flow import backfill
from flows.backfill.make import plan_backfill
from flows.gallery.data import dataset_splits
from flows.params import load_params
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from tests.helpers import run_generation, write_params


def _corpus(params_path: Path, folder: Path, n: int) -> None:
    """The first ``n`` items of digits' training split as PNG files and the manifest the params name."""
    p = load_params(params_path)
    train = dataset_splits(p, folder.parent / "datasets").train.decode()
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        f = folder / "images" / f"{int(train.ids[i])}.png"
        if not f.exists():
            f.write_bytes(encode_image(train.images[i], "png"))
    write_manifest(folder / "corpus.csv", [f"images/{int(i)}.png" for i in train.ids[:n]], ids=train.ids[:n],
                   labels=train.labels[:n])  # fmt: skip


def _live(home: Path) -> tuple[GalleryVersion, LineageDB]:
    store = LineageDB(f"sqlite:///{home / 'lineage.db'}", readonly=True, root=home)
    return GalleryVersion.of_index(store.live_pointer().index_path), store


@pytest.mark.usefixtures("prefect_harness")
def test_new_corpus_items_are_embedded_by_the_live_model_and_added(tmp_path: Path):
    params = tmp_path / "params.yaml"
    corpus = tmp_path / "corpus"
    write_params(params, ["gallery.source=manifest", f"gallery.path={corpus / 'corpus.csv'}",
                          f"data.root={tmp_path / 'datasets'}"])  # fmt: skip
    _corpus(params, corpus, 120)
    home = tmp_path / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    before, store = _live(home)
    rows = GalleryParts(before.serving().gallery)
    held, evaluation = rows.column("ids"), GalleryParts(before.evaluation_gallery()).embeddings()
    ptr = store.live_pointer()
    store.close()
    p, ws = load_params(params), Workspace(home)
    with pytest.raises(ConfigError, match=r"the live gallery holds every one of the corpus's 120 items; nothing to"):
        plan_backfill(p, ws, ingest=True)

    _corpus(params, corpus, 170)  # 50 new items arrive
    plan = plan_backfill(p, ws, ingest=True)
    assert (plan.kind, plan.target, [g.selected for g in plan.galleries]) == ("ingest", 0, [0, 50])
    summary = backfill(plan)
    after, store = _live(home)
    grown = GalleryParts(after.serving().gallery)
    assert len(grown) == 170 and np.array_equal(grown.column("ids")[:120], held)
    assert (grown.column("stamps") == 0).all()  # embedded by the live gallery's own model, stamped with it
    assert np.array_equal(GalleryParts(after.evaluation_gallery()).embeddings().z, evaluation.z)  # carried as is
    new_ptr = store.live_pointer()
    assert new_ptr.generation_id == 0 and new_ptr.compatible_generations == (ptr.compatible_generations or [0])
    assert [b.kind for b in store.backfills()] == ["ingest"] and summary["event"] == store.backfills()[0].id
    assert store.to_json()[0]["backfill_done"] is None  # an ingest re-embeds nothing
    store.close()


def test_an_ingest_without_a_corpus_is_one_line(g0_template, tmp_path: Path):
    from tests.helpers import copy_workspace

    home, params = copy_workspace(g0_template, tmp_path)
    with pytest.raises(ConfigError, match=r"the live gallery serves the evaluation split .*: there is no corpus"):
        plan_backfill(load_params(params), Workspace(home), ingest=True)
