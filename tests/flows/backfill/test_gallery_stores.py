"""A chain of generations and a backfill on each database store — gallery.store milvus (a Milvus Lite file in the
workspace) and lancedb (a folder in it): every gallery version a collection / table of stamped rows, the live gallery
the store's alias, and lineage, live/CURRENT, doctor and the alias agreeing after each step."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from prefect.settings import PREFECT_API_URL

from components.errors import IndexIntegrityError
from components.faults import KILL_ENV
from components.indexing.backend import collection_at, open_index
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.stores.db_index import StoreManifest
from components.indexing.version import GalleryVersion
from flows.backfill.rollback import rollback
from flows.params import load_params
from flows.recovery.reconcile import inspect_workspace
from flows.runtime.workspace import Workspace
from tests.helpers import first_generation, run_backfill, run_generation
from tests.store_reads import store_reads

URIS = {"milvus": "milvus.db", "lancedb": "lance"}
CHUNK = 64  # backfill.chunk_size: the evaluation gallery in several parts


@pytest.fixture(scope="module", params=sorted(URIS))
def milvus_chain(request, prefect_harness, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file): g0 on digits 0–4, then g1 and g2 on every class, HBCT, all in one database store."""
    # exhaustive search (the ANN indexes' recall is tested on a clustered gallery in test_db_index.py: this tiny
    # model's gallery is a cloud of near-ties, on which FAISS's own hnsw and ivf recall about 0.5@10)
    store = [f"gallery.store={request.param}", f"gallery.uri={URIS[request.param]}", "gallery.name=chain"]
    exact = ["gallery.index_options={index_type: FLAT, rerank: 8}", "index.recall_queries=100"]
    exact += [f"backfill.chunk_size={CHUNK}", f"train.eval_batch_size={CHUNK}"]  # parts of whole batches
    home, params = first_generation(tmp_path_factory.mktemp(f"{request.param}_chain"), [*store, *exact])
    for name in ("g1", "g2"):
        run_generation(home, params, {"name": name, "classes": "all", "alignment": "hbct", "reference": False})
    return home, params


def _exact_top3(gallery: GalleryEmbeddings, q: np.ndarray) -> np.ndarray:
    """The 3 best scores of each query over the stored (float32) gallery rows, in float64 by brute force (FAISS's
    flat index ranks in float32, which mis-orders the near-ties of this gallery at ~1e-4 geodesic distance)."""
    g = gallery.vectors().astype(np.float32).astype(np.float64)
    space = gallery.retrieval_space
    s = space.candidate_scores(space.query_form(q), np.broadcast_to(g, (len(q), *g.shape)))
    return -np.sort(-s, axis=1)[:, :3]


def _agree(home: Path, params: Path, collection: str, generation: int) -> StoreManifest:
    """Lineage pointer (and the store, collection, rows and index it records), live/CURRENT, the Milvus alias and
    doctor agree on ``collection``; returns its manifest."""
    ws, p = Workspace(home), load_params(params)
    with ws.lineage(p, readonly=True) as lineage:
        ptr = lineage.live_pointer()
    index_dir = Path(ptr.index_path)
    m = StoreManifest.load(index_dir)
    assert (m.store, m.collection, m.generation) == (p.gallery.store, collection, generation)
    assert ptr.generation_id == generation
    assert m.uri == str(home / URIS[p.gallery.store])
    vectors = collection_at(index_dir)
    assert vectors.aliased() and vectors.store.live_collection(collection) == collection
    assert vectors.digest() == ptr.index_sha256
    # the lineage's pointer row records where the vectors live, their rows per generation and the index (rev. 0007)
    assert (ptr.store, ptr.collection, ptr.index_params) == (
        m.store,
        collection,
        {**m.params, "index_type": m.index_type},
    )
    assert ptr.rows_by_generation == {str(g): n for g, n in m.counts_by_generation.items()}
    rows = GalleryParts(GalleryVersion.of_index(index_dir).evaluation_gallery())
    gens, n = np.unique(rows.column("stamps"), return_counts=True)
    assert vectors.count_by_generation() == dict(zip(gens.tolist(), n.tolist())) == m.counts_by_generation
    assert inspect_workspace(ws, p) == []
    whole = rows.embeddings()
    q = whole.vectors()[:20]
    scores, _ = LivePointer(ws.live_dir).search(q, 3, query_generation=generation)
    np.testing.assert_allclose(scores, _exact_top3(whole, q), atol=1e-9)  # the scores of exact float64 search
    return m


def _record_rows(home: Path, rows: dict[str, int]) -> None:
    """Overwrite the rows per generation the lineage's live pointer row recorded."""
    with sqlite3.connect(home / "lineage.db") as db:
        newest = "(SELECT max(id) FROM gallery_pointers)"
        db.execute(f"UPDATE gallery_pointers SET rows_by_generation = ? WHERE id = {newest}", (json.dumps(rows),))


def test_a_chain_of_three_generations_runs_on_a_database_store_with_lineage_alias_and_doctor_agreeing(milvus_chain):
    home, params = milvus_chain
    m = _agree(home, params, "chain_g0_v0", 0)
    assert m.recall_at_10 is not None and m.recall_queries == 100  # measured and recorded
    for g in (1, 2):  # every generation's evaluation gallery is a collection of its own, stamped with it
        own = StoreManifest.load(home / "generations" / f"gen_{g:03d}" / "index")
        assert own.collection == f"chain_g{g}_v0" and set(own.counts_by_generation) == {g}


def _bctflow(args: list[str], home: Path, params: Path, kill_at: str | None = None) -> str:
    """``bctflow ARGS`` as a child process (SIGKILLed at the crash point ``kill_at``); its output, unwrapped."""
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COLUMNS": "300"}  # the test's Prefect server
    env.pop(KILL_ENV, None)
    env |= {KILL_ENV: kill_at} if kill_at else {}
    cmd = [sys.executable, "-m", "bctflow.cli", *args, "--home", str(home), "--params", str(params)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode == (-signal.SIGKILL if kill_at else 0), out[-3000:]
    return out


def test_a_backfill_killed_in_its_embedding_and_its_store_write_ends_with_each_item_once_and_doctor_repairs_the_alias(
    milvus_chain,
):
    """kill -9 half-way through the embedding (``embed.half_parts``), the same command killed half-way through the
    store's row writing (``store.half_written``), then the same backfill (in this process): the new version's
    collection holds one stamped row per item (read from the store), the rerun embedded only the items outside
    finished parts, the last run none, and lineage, CURRENT, the alias and doctor agree; an alias moved by hand is
    named by doctor and moved back by ``--repair``. The two killed commands run on Milvus Lite only (on LanceDB too
    they took another ~70 s of one CI worker): a LanceDB build killed half-way and resumed is
    tests/components/indexing/stores/test_database.py's; on LanceDB the backfill runs once, whole, in this process."""
    home, params = milvus_chain
    killed = load_params(params).gallery.store == "milvus"
    if killed:
        collection_at(home / "generations" / "gen_000" / "index").store.close()  # Milvus Lite: one process per file
        work = home / "backfills" / "in_progress"
        _bctflow(["backfill", "--generation", "2"], home, params, kill_at="embed.half_parts")
        done = len(list((work / "gallery" / "parts").glob("part-*.npz"))) * CHUNK  # parts of whole batches: none lost
        out = _bctflow(["backfill", "--generation", "2"], home, params, kill_at="store.half_written")
        items, now = (int(n) for n in re.search(r"evaluation gallery: (\d+) of (\d+) selected", out).groups()[::-1])
        assert items / 2 <= done < items and now == items - done  # the finished parts kept, nothing embedded twice
        assert (work / "gallery" / "store.json").is_file()  # the embedding finished: the kill was in the store write
        assert not (home / "live" / "index-v001" / "index" / "manifest.json").exists()  # killed before its attachment
    summary = run_backfill(home, params, target=2, fraction=1.0)  # the same command, in this process
    if killed:
        assert summary["parts_resumed"] == summary["parts"] == -(-items // CHUNK)  # nothing embedded a third time
    else:
        items = summary["reembedded"]
    m = _agree(home, params, "chain_g2_v1", 2)
    assert m.counts_by_generation == {2: items} and m.extra["rows_written"] == items
    index_dir = home / "live" / "index-v001" / "index"
    assert collection_at(index_dir).audit() == {"rows": items, "duplicates": 0, "unstamped": 0}
    # someone moves the alias by hand: doctor names it, --repair moves it back
    collection_at(home / "generations" / "gen_000" / "index").point_alias([0, 1, 2])
    ws, p = Workspace(home), load_params(params)
    found = inspect_workspace(ws, p)
    assert len(found) == 1 and not found[0].repaired
    what = found[0].what
    assert what.startswith(f"the {p.gallery.store} store's live alias does not name") and "live/index-v001" in what
    inspect_workspace(ws, p, repair=True)
    m = _agree(home, params, "chain_g2_v1", 2)
    _record_rows(home, {"2": m.count - 1})  # the lineage recorded other rows than the collection holds
    try:
        found = inspect_workspace(ws, p)
    finally:
        _record_rows(home, {"2": m.count})  # the module's workspace as it was
    assert [f.what for f in found] == [
        f"the live gallery ({p.gallery.store} collection chain_g2_v1) holds rows per generation {{2: {m.count}}}, "
        f"the lineage recorded {{2: {m.count - 1}}}"
    ]


def test_a_rollback_on_a_database_store_moves_its_alias_back_and_forth_with_the_lineage(milvus_chain):
    """After the backfill above (version 1, generation 2 production): back to generation 0's collection, making g0
    production with it, then forward again; the store's alias, live/CURRENT, lineage and doctor agree each time."""
    home, params = milvus_chain
    ws, p = Workspace(home), load_params(params)
    with ws.lineage(p, readonly=True) as lineage:
        assert Path(lineage.live_pointer().index_path).parent.name == "index-v001"  # the backfill test ran first
    with store_reads() as reads:  # the gate and the switch: no row of the store read, counted or loaded
        back = rollback(p, ws, to=0, promote=0, by="t")
    assert (back.previous, back.version, back.generation, back.checked) == (1, 0, 0, "by its seal")
    assert reads.rows_read() == [] and home / "generations" / "gen_000" / "seal.json" in reads.opened  # the spy was on
    _agree(home, params, "chain_g0_v0", 0)
    with store_reads() as reads:
        forward = rollback(p, ws, promote=2, by="t")
    assert (forward.previous, forward.version, forward.compatible_generations) == (0, 1, [2])
    assert forward.checked == "by its seal" and reads.rows_read() == []
    _agree(home, params, "chain_g2_v1", 2)


def _pointers(ws: Workspace, p) -> tuple[int, dict]:
    """(the lineage's pointer rows, live/CURRENT): what a refused rollback leaves as it was."""
    with ws.lineage(p, readonly=True) as lineage:
        return len(lineage.live_pointers()), LivePointer(ws.live_dir).pointer()


def test_a_row_deleted_from_a_retained_version_is_refused_by_lancedb_at_the_switch_and_by_milvus_when_opened(
    milvus_chain,
):
    """One row of version 0's holder deleted behind bctflow's back. LanceDB: the table's version moved from the one its
    build recorded, so the rollback counts its rows and refuses it, nothing changed; restored to the built version (a
    new version again), the rollback verifies it in full and restores it. Milvus tells no such state in O(1) (its
    Lite statistics walk every primary key): the switch checks the collection's existence and description only and
    passes; the first open of the version — the query service's load — counts its rows and refuses it, and doctor
    names it; the row written back, everything agrees."""
    home, params = milvus_chain
    ws, p = Workspace(home), load_params(params)
    g0 = home / "generations" / "gen_000" / "index"
    vectors = collection_at(g0)
    m = StoreManifest.load(g0)
    before = _pointers(ws, p)
    gone = int(GalleryParts(GalleryVersion(g0.parent).evaluation_gallery()).column("ids")[0])
    if p.gallery.store == "lancedb":
        table = vectors.store._db().open_table("chain_g0_v0")
        built = m.extra["holder"]["version"]
        table.delete(f"id = {gone}")
        with pytest.raises(IndexIntegrityError) as err:
            rollback(p, ws, to=0, promote=0, by="t")
        assert str(err.value) == (
            f"gallery version 0 cannot serve again: the LanceDB table chain_g0_v0 holds {m.count - 1} rows, "
            f"{g0}/manifest.json says {m.count}; rebuild that gallery version (bctflow backfill)"
        )
        assert _pointers(ws, p) == before  # nothing changed
        table.restore(built)  # the rows as built, in a new version of the table
        back = rollback(p, ws, to=0, promote=0, by="t")
        moved = vectors.store._db().open_table("chain_g0_v0").version
        assert back.checked == (
            f"in full: the LanceDB table chain_g0_v0 is at {{'version': {moved}}}, it was built at "
            f"{{'version': {built}}}"
        )
    else:
        row = vectors.store._db().get("chain_g0_v0", ids=[gone], output_fields=["id", "generation", "model", "vector"])
        vectors.store._db().delete("chain_g0_v0", ids=[gone])
        vectors.store._db().flush("chain_g0_v0")
        back = rollback(p, ws, to=0, promote=0, by="t")
        assert back.checked == "by its seal"  # existence, facts and columns: as built
        with pytest.raises(IndexIntegrityError, match=f"the Milvus collection chain_g0_v0 holds {m.count - 1} rows, "):
            open_index(g0)  # what the query service's load runs before it serves the version
        found = [f.what for f in inspect_workspace(ws, p)]
        assert found == [
            f"the live gallery's vectors are not what their manifest says: the Milvus collection chain_g0_v0 holds "
            f"{m.count - 1} rows, {g0}/manifest.json says {m.count}; rebuild that gallery version (bctflow backfill)"
        ]
        vectors.store._db().upsert("chain_g0_v0", row)
        vectors.store._db().flush("chain_g0_v0")
    _agree(home, params, "chain_g0_v0", 0)
    rollback(p, ws, promote=2, by="t")  # the module's workspace as it was
    _agree(home, params, "chain_g2_v1", 2)
