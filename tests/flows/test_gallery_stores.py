"""A chain of generations and a backfill on gallery.store milvus (a Milvus Lite file in the workspace): every gallery
version a collection of stamped rows, the live gallery the Milvus alias, and lineage, live/CURRENT, doctor and the
alias agreeing after each step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from components.indexing.backend import StoreManifest, store_of
from components.indexing.live import LivePointer
from components.indexing.store import GalleryStore
from components.indexing.version import GalleryVersion
from flows.params import load_params
from flows.steps.reconcile import inspect_workspace
from flows.workspace import Workspace
from tests.helpers import run_backfill, run_generation, write_params


@pytest.fixture(scope="module")
def milvus_chain(prefect_harness, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file): g0 on digits 0–4, then g1 and g2 on every class, HBCT, all on one Milvus Lite file."""
    tmp = tmp_path_factory.mktemp("milvus_chain")
    params = tmp / "params.yaml"
    write_params(params, ["gallery.store=milvus", "gallery.uri=milvus.db", "gallery.name=chain"])
    home = tmp / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    for name in ("g1", "g2"):
        run_generation(home, params, {"name": name, "classes": "all", "alignment": "hbct", "reference": False})
    return home, params


def _agree(home: Path, params: Path, collection: str, generation: int) -> StoreManifest:
    """Lineage pointer, live/CURRENT, the Milvus alias and doctor agree on ``collection``; returns its manifest."""
    ws, p = Workspace(home), load_params(params)
    with ws.lineage(p, readonly=True) as lineage:
        ptr = lineage.live_pointer()
    index_dir = Path(ptr.index_path)
    m = StoreManifest.load(index_dir)
    assert (m.store, m.collection, m.generation, ptr.generation_id) == ("milvus", collection, generation, generation)
    assert m.uri == str(home / "milvus.db")
    store = store_of(index_dir)
    assert store.aliased(index_dir) and store.live_collection(collection) == collection
    assert store.digest(index_dir) == ptr.index_sha256
    rows = GalleryStore(GalleryVersion.of_index(index_dir).evaluation_gallery())
    gens, n = np.unique(rows.column("stamps"), return_counts=True)
    assert store.count_by_generation(index_dir) == dict(zip(gens.tolist(), n.tolist())) == m.counts_by_generation
    assert inspect_workspace(ws, p) == []
    q = next(rows.parts()).gallery.vectors()[:4]
    _, found = LivePointer(ws.live_dir).search(q, 3, query_generation=generation)
    assert (found[:, 0] == next(rows.parts()).gallery.ids[:4]).all()  # each item finds itself first
    return m


def test_a_chain_of_three_generations_runs_on_milvus_with_lineage_alias_and_doctor_agreeing(milvus_chain):
    home, params = milvus_chain
    m = _agree(home, params, "chain_g0_v0", 0)
    # measured and recorded (the tiny one-epoch model's gallery is full of near-ties: FAISS's hnsw and ivf, and
    # Milvus FLAT, all measure about 0.5 on it; tests/components/indexing/stores/test_milvus.py holds the ≥ 0.95)
    assert m.recall_at_10 is not None and m.recall_queries == m.count
    for g in (1, 2):  # every generation's evaluation gallery is a collection of its own, stamped with it
        own = StoreManifest.load(home / "generations" / f"gen_{g:03d}" / "index")
        assert own.collection == f"chain_g{g}_v0" and set(own.counts_by_generation) == {g}


def test_a_backfill_on_milvus_writes_a_new_collection_and_moves_the_alias_and_doctor_repairs_a_moved_alias(
    milvus_chain,
):
    home, params = milvus_chain
    run_backfill(home, params, target=2, fraction=1.0)
    m = _agree(home, params, "chain_g2_v1", 2)
    assert m.counts_by_generation == {2: m.count}
    store = store_of(home / "generations" / "gen_000" / "index")
    old = home / "generations" / "gen_000" / "index"
    store.point_alias(old, [0, 1, 2])  # someone moves the alias by hand
    ws, p = Workspace(home), load_params(params)
    found = inspect_workspace(ws, p)
    assert len(found) == 1 and not found[0].repaired
    what = found[0].what
    assert what.startswith("the milvus store's live alias does not name") and "live/index-v001" in what
    inspect_workspace(ws, p, repair=True)
    _agree(home, params, "chain_g2_v1", 2)
