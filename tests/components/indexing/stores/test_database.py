"""The database stores (components/indexing/stores/database.py shared by gallery.store milvus, on a Milvus Lite file,
and lancedb, on a local folder): a version as a collection / table of the declared gallery rows with a stamp on every
row, idempotent writes, the same scores as the FAISS files, recall against exact search, the live alias, and the
refusals that leave everything as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from components.errors import IndexIntegrityError
from components.faults import KILL_ENV
from components.indexing.backend import (
    GalleryFacts,
    IndexOptions,
    collection_at,
    gallery_facts,
    open_index,
    vector_store,
)
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import StoredPart
from components.indexing.stores import db_index
from components.indexing.stores.db_index import StoreManifest
from components.indexing.stores.db_rows import facts_of
from tests.components.indexing.test_backend import stamped_store
from tests.store_reads import store_reads

NAMES = {"milvus": ("Milvus collection", "m.db"), "lancedb": ("LanceDB table", "lance")}


@pytest.fixture(scope="module", params=sorted(NAMES))
def db(request, tmp_path_factory):
    """Each database store once for the module, on a local file / folder (each test uses its own names)."""
    return vector_store(request.param, str(tmp_path_factory.mktemp(request.param) / NAMES[request.param][1]))


def _build(db, tmp_path, name: str, geometry: str = "euclidean", generation: int = 1, **kw):
    parts = stamped_store(tmp_path / name / "gallery", geometry=geometry, **kw)
    out = tmp_path / name / "index"
    options = IndexOptions({"type": "flat"}, recall_queries=100)
    return parts, out, db.collection(name, out).build(parts, generation=generation, options=options)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_a_version_is_a_collection_of_stamped_rows_searched_like_the_faiss_files(db, tmp_path, geometry, monkeypatch):
    parts, out, _ = _build(db, tmp_path, f"t_{geometry[:3]}_g1_v0", geometry, stamps=(0, 1))
    m = StoreManifest.load(out)
    assert (m.store, m.count, m.counts_by_generation) == (db.name, 300, {0: 150, 1: 150})
    assert db.collection(m.collection, out).count_by_generation() == {0: 150, 1: 150}
    name = f"t_{geometry[:3]}_g1_v0"  # the lineage records the collection, rows per generation and index it names
    assert gallery_facts(out) == GalleryFacts(db.name, name, {0: 150, 1: 150}, {**m.params, "index_type": m.index_type})
    flat = vector_store("faiss").collection(None, tmp_path / "flat").build(parts, generation=1, options=IndexOptions())
    q = np.concatenate([p.gallery.vectors()[:7] for p in parts.parts()])
    s_db, i_db = open_index(out).search(q, 5, query_generation=1)
    s_ff, i_ff = flat.search(q, 5, query_generation=1)
    assert (i_db[:, 0] == i_ff[:, 0]).all()  # each item finds itself first
    np.testing.assert_allclose(s_db[:, 0], s_ff[:, 0], atol=1e-6)
    assert type(collection_at(out).store) is type(db)
    q = np.concatenate([p.gallery.vectors()[:40] for p in parts.parts()])  # 80 queries
    whole = open_index(out).search(q, 5, query_generation=1)
    monkeypatch.setattr(db_index, "RESCORE_QUERIES", 7)  # re-scored 7 queries at a time: the same answers
    pieces = open_index(out).search(q, 5, query_generation=1)
    np.testing.assert_array_equal(pieces[1], whole[1])
    np.testing.assert_allclose(pieces[0], whole[0], rtol=0, atol=0)


@pytest.mark.parametrize("geometry", ["euclidean", "lorentz"])
def test_the_ann_index_recalls_at_least_095_of_the_exact_top_10(db, tmp_path, geometry):
    _, out, _ = _build(db, tmp_path, f"t_ann_{geometry[:3]}_g0_v0", geometry, generation=0, n=3000, stamps=(0,))
    m = StoreManifest.load(out)
    assert m.index_type in ("HNSW", "IVF_HNSW_SQ") and m.recall_queries == 100
    assert m.recall_at_10 >= 0.95, m


def test_a_rerun_upserts_so_a_killed_build_ends_with_one_row_per_item(db, tmp_path):
    parts, out, _ = _build(db, tmp_path, "t_rerun_g2_v1", generation=2, stamps=(2,))
    rerun = db.collection("t_rerun_g2_v1", out)
    again = rerun.build(parts, generation=2, options=IndexOptions(recall_queries=50))
    assert again.ntotal == 300 and rerun.count_by_generation() == {2: 300}


def test_the_alias_moves_to_known_generations_only(db, tmp_path):
    _, out1, _ = _build(db, tmp_path, "t_alias_g1_v0", generation=1, stamps=(1,))
    _, out2, _ = _build(db, tmp_path, "t_alias_g2_v1", generation=2, stamps=(2,))
    one, two = db.collection("t_alias_g1_v0", out1), db.collection("t_alias_g2_v1", out2)
    one.point_alias([0, 1])
    assert one.aliased() and not two.aliased()
    with pytest.raises(IndexIntegrityError, match="generation 2's gallery, which the lineage does not know"):
        two.point_alias([0, 1])
    assert one.aliased()  # nothing changed
    two.point_alias([0, 1, 2])
    assert two.aliased() and db.live_collection("t_alias_g0_v0") == "t_alias_g2_v1"
    one.drop()  # retention: not the live one
    with pytest.raises(IndexIntegrityError, match=f"{NAMES[db.name][0]} t_alias_g1_v0 does not exist"):
        one.verify()


def test_an_alias_move_reads_no_row_and_counts_only_where_the_holder_is_not_as_built(db, tmp_path):
    """Moving the live alias asks the store for the holder's description and the state its build recorded
    (:meth:`unchanged_since_built`): no row read, counted or loaded, at any size. An attachment that records no state
    (built before bctflow recorded one) is confirmed by the row count instead — the spy sees that read."""
    import json

    _, out1, _ = _build(db, tmp_path, "t_flip_g1_v0", generation=1, stamps=(1,))
    _, out2, _ = _build(db, tmp_path, "t_flip_g2_v1", generation=2, stamps=(2,))
    one, two = db.collection("t_flip_g1_v0", out1), db.collection("t_flip_g2_v1", out2)
    assert one.unchanged_since_built() is None and two.unchanged_since_built() is None
    with store_reads() as reads:
        for target in (one, two, one, two):
            target.point_alias([1, 2])
    assert two.aliased() and reads.rows_read() == []
    body = json.loads((out1 / "manifest.json").read_text())
    del body["extra"]["holder"]
    (out1 / "manifest.json").write_text(json.dumps(body))
    unknown = db.collection("t_flip_g1_v0", out1)
    assert unknown.unchanged_since_built() == (
        f"{out1}/manifest.json records no state of the {NAMES[db.name][0]} t_flip_g1_v0 (built before bctflow "
        "recorded one)"
    )
    with store_reads() as reads:
        unknown.point_alias([1, 2])
    counted = {"milvus": "milvus get_collection_stats t_flip_g1_v0", "lancedb": "lancedb count_rows t_flip_g1_v0"}
    assert counted[db.name] in reads.rows_read() and unknown.aliased()


def test_a_holder_changed_since_its_build_is_seen_by_lancedb_at_the_switch_and_by_milvus_when_opened(db, tmp_path):
    """A row deleted behind bctflow's back: LanceDB's table version moved, so the switch's check says so and the alias
    move counts the rows and refuses, the alias where it was. Milvus tells no O(1) state of a collection's rows: the
    switch's check (existence, facts, columns) passes, and the next open counts them and refuses. A holder gone is
    refused by both at the switch."""
    _, out, _ = _build(db, tmp_path, "t_gone_g1_v0", generation=1, stamps=(1,))
    _, live_out, _ = _build(db, tmp_path, "t_gone_g1_v1", generation=1, stamps=(1,))
    db.collection("t_gone_g1_v1", live_out).point_alias([1])
    changed = db.collection("t_gone_g1_v0", out)
    gone = 1000  # the first item's id (stamped_store)
    refusal = (
        f"the {NAMES[db.name][0]} t_gone_g1_v0 holds 299 rows, {out}/manifest.json says 300; rebuild that gallery "
        "version (bctflow backfill)"
    )
    if db.name == "lancedb":
        table = db._db().open_table("t_gone_g1_v0")
        built = table.version
        table.delete(f"id = {gone}")
        assert changed.unchanged_since_built() == (
            f"the LanceDB table t_gone_g1_v0 is at {{'version': {built + 1}}}, it was built at {{'version': {built}}}"
        )
        with pytest.raises(IndexIntegrityError) as err:
            changed.point_alias([1])
        assert str(err.value) == refusal and db.live_collection("t_gone_g1_v0") == "t_gone_g1_v1"
    else:
        db._db().delete("t_gone_g1_v0", ids=[gone])
        db._db().flush("t_gone_g1_v0")
        assert changed.unchanged_since_built() is None  # existence, facts and columns as built
        with pytest.raises(IndexIntegrityError) as err:
            open_index(out)
        assert str(err.value) == refusal
    db.collection("t_gone_g1_v0", out)._remove()
    with pytest.raises(IndexIntegrityError, match=f"{NAMES[db.name][0]} t_gone_g1_v0 does not exist"):
        changed.unchanged_since_built()


def _rows(n: int, d: int, generation: int, geometry: str = "euclidean") -> StoredPart:
    z = np.random.default_rng(3).normal(size=(n, d)).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    ids = np.arange(1000, 1000 + n, dtype=np.int64)
    g = GalleryEmbeddings(geometry=geometry, curvature=1.0, z=z, emb=z, ids=ids, labels=ids % 5,
                          clipped=np.zeros(n, bool), logits=np.zeros((n, 0), np.float32))  # fmt: skip
    return StoredPart(g, np.full(n, generation, np.int64))


def test_wrong_width_other_generation_live_and_unknown_collections_are_refused_with_nothing_changed(db, tmp_path):
    _, out, _ = _build(db, tmp_path, "t_refuse_g1_v0", generation=1, stamps=(1,))
    refuse = db.collection("t_refuse_g1_v0", out)
    before = refuse.count_by_generation()
    with pytest.raises(IndexIntegrityError, match="rows of width 9 .* cannot be written into .* of width 8"):
        refuse.write(_rows(5, 9, 1))
    with pytest.raises(IndexIntegrityError, match="stamped with generation 3 cannot be written .* accepts stamps"):
        refuse.write(_rows(5, 8, 3))
    with pytest.raises(IndexIntegrityError, match=f"{NAMES[db.name][0]} t_nowhere_g1_v0 does not exist"):
        db.collection("t_nowhere_g1_v0", tmp_path / "nowhere").write(_rows(5, 8, 1))
    refuse.point_alias([1])
    with pytest.raises(IndexIntegrityError, match="is the live gallery; a new gallery version is written to a new"):
        refuse.write(_rows(5, 8, 1))
    assert refuse.count_by_generation() == before
    refuse.verify()


def _killed_build(store: str, uri: str, name: str, out, parts, kill_at: str, setup: str = "") -> None:
    """The build of ``parts`` into collection ``name`` of ``store`` at ``uri``, in another process (after ``setup``,
    Python), killed by itself with SIGKILL at the crash point ``kill_at``: nothing attached."""
    build = (
        "from pathlib import Path; from components.indexing.backend import IndexOptions, vector_store; "
        f"from components.indexing.parts import GalleryParts; {setup}"
        f"vector_store({store!r}, {uri!r}).collection({name!r}, Path({str(out)!r})).build("
        f"GalleryParts(Path({str(parts.path)!r})), generation=0, options=IndexOptions(recall_queries=50))"
    )
    env = {**os.environ, KILL_ENV: kill_at}
    killed = subprocess.run([sys.executable, "-c", build], env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL and not (out / "manifest.json").exists()


def test_a_build_killed_after_its_first_part_then_run_again_holds_each_item_once_and_stamped(db, tmp_path):
    """SIGKILL (``BCTFLOW_KILL_AT=store.after_part``) in another process after one part is written, then the same
    build here: rows = items, none twice, none unstamped; and a new process opens the store's index."""
    parts = stamped_store(tmp_path / "gallery", n=900, geometry="euclidean", stamps=(0,))
    out, name = tmp_path / "index", "t_kill_g0_v0"
    db = vector_store(db.name, str(tmp_path / NAMES[db.name][1]))  # its own file: Milvus Lite serves one process
    _killed_build(db.name, db.uri, name, out, parts, "store.after_part")
    killed_one = db.collection(name, out)
    killed_one.build(parts, generation=0, options=IndexOptions(recall_queries=50))
    assert killed_one.count_by_generation() == {0: 900}  # each id once (the primary key), every row stamped
    assert killed_one.audit() == {"rows": 900, "duplicates": 0, "unstamped": 0}
    db.close()
    reader = f"from components.indexing.backend import open_index; print(open_index({str(out)!r}).ntotal)"
    opened = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, timeout=300)
    assert opened.stdout.strip().endswith("900"), opened.stderr[-3000:]


def test_lancedb_appends_whole_parts_in_bulk_and_a_killed_bulk_build_resumes_from_the_first_part_it_lacks(tmp_path):
    """LanceDB's bulk path: groups of whole parts, one commit each. SIGKILL (``store.half_written``) in another
    process after the group that takes the rows past half, then the same build here: the table held whole groups,
    this build appends only the rest (``rows_resumed``), and ends with each item once, stamped."""
    parts = stamped_store(tmp_path / "gallery", n=900, d=8, geometry="euclidean", stamps=(0,))
    sizes = [len(p) for p in parts.parts()]
    out, name, uri = tmp_path / "index", "t_bulk_g0_v0", str(tmp_path / "lance")
    setup = "from components.indexing.stores.lance_tables import LanceTable; LanceTable.bulk_rows = 300; "
    _killed_build("lancedb", uri, name, out, parts, "store.half_written", setup)
    db = vector_store("lancedb", uri)
    held = db.collection(name, out)._total()
    assert held in np.cumsum(sizes)[:-1] and 2 * held >= 900  # whole parts, at least half of them
    again = db.collection(name, out)
    again.build(parts, generation=0, options=IndexOptions(recall_queries=50))
    extra = again.manifest.extra
    assert (extra["write_path"], extra["rows_resumed"], extra["rows_written"]) == ("bulk", held, 900 - held)
    assert again.audit() == {"rows": 900, "duplicates": 0, "unstamped": 0}


def test_rows_the_bulk_path_did_not_append_are_upserted_not_resumed(tmp_path):
    """A LanceDB table holding a prefix of the parts marked by another model is not a bulk build's to resume: the
    build upserts every part by id (``write_path`` rows) and each row ends marked by this build's model."""
    parts = stamped_store(tmp_path / "gallery", n=900, d=8, geometry="euclidean", stamps=(0,))
    (parts.path / "producer.txt").write_text("model sha256 " + "ab" * 32 + "; data")
    db = vector_store("lancedb", str(tmp_path / "lance"))
    c = db.collection("t_other_g0_v0", tmp_path / "index")
    c._create(facts_of(parts, 0))
    first = next(parts.parts())
    c.write(first, "sha256:" + "cd" * 8)  # the first part, marked by another model
    c.build(parts, generation=0, options=IndexOptions(recall_queries=50))
    assert c.manifest.extra["write_path"] == "rows" and c.manifest.extra["rows_written"] == 900
    ids, _, marks = c._columns()
    assert len(ids) == 900 and set(marks) == {"sha256:" + "ab" * 8}


def test_the_audit_reads_duplicate_ids_and_unstamped_rows_from_the_database_itself(db, tmp_path):
    """A row written behind bctflow's back (an id the table has, a stamp the version does not hold, no model mark) is
    counted from what the database returns: LanceDB keeps both rows of the id, Milvus answers the primary key once."""
    import pyarrow as pa

    parts, out, _ = _build(db, tmp_path, "t_audit_g1_v0", stamps=(0, 1))
    m = StoreManifest.load(out)
    assert m.extra["rows_written"] == 300 and m.extra["write_seconds"] > 0
    audited = db.collection("t_audit_g1_v0", out)
    assert audited.audit() == {"rows": 300, "duplicates": 0, "unstamped": 0}
    taken = int(next(parts.parts()).gallery.ids[3])
    row = {"id": taken, "generation": 7, "model": "", "vector": [0.5] * 8}
    if db.name == "milvus":
        db._db().insert("t_audit_g1_v0", [row])
        db._db().flush("t_audit_g1_v0")
    else:
        table = db._db().open_table("t_audit_g1_v0")
        vector = pa.FixedSizeListArray.from_arrays(pa.array(row.pop("vector"), pa.float32()), 8)
        table.add(pa.table({k: [v] for k, v in row.items()} | {"vector": vector}, schema=table.schema))
    twice = 1 if db.name == "lancedb" else 0
    assert audited.audit() == {"rows": 300 + twice, "duplicates": twice, "unstamped": 1}


def test_the_light_verify_checks_the_row_total_and_the_full_one_the_rows_per_generation(db, tmp_path):
    """``verify(by_generation=False)`` (a rollback's gate where the version's seal does not show it unchanged) reads
    the holder's row total only: a row restamped behind bctflow's back passes it and fails the full verify
    (doctor's); a row deleted fails both."""
    parts, out, _ = _build(db, tmp_path, "t_light_g1_v0", stamps=(0, 1))
    first = next(parts.parts())
    restamp = int(first.gallery.ids[np.flatnonzero(first.stamps == 1)[0]])
    gone = int(first.gallery.ids[np.flatnonzero(first.stamps == 0)[0]])
    if db.name == "milvus":
        row = db._db().get("t_light_g1_v0", ids=[restamp], output_fields=["id", "generation", "model", "vector"])[0]
        db._db().upsert("t_light_g1_v0", [{**row, "generation": 0}])
    else:
        db._db().open_table("t_light_g1_v0").update(where=f"id = {restamp}", values={"generation": 0})
    light = db.collection("t_light_g1_v0", out)
    light.verify(by_generation=False)
    with pytest.raises(IndexIntegrityError) as err:
        light.verify()
    says = f"holds rows per generation {{0: 151, 1: 149}}, {out}/manifest.json says {{0: 150, 1: 150}}"
    assert says in str(err.value)
    if db.name == "milvus":  # flushed, as a deletion is once persisted (the row total reads the statistics first)
        db._db().delete("t_light_g1_v0", ids=[gone])
        db._db().flush("t_light_g1_v0")
    else:
        db._db().open_table("t_light_g1_v0").delete(f"id = {gone}")
    with pytest.raises(IndexIntegrityError) as err:
        light.verify(by_generation=False)
    assert str(err.value) == (
        f"the {NAMES[db.name][0]} t_light_g1_v0 holds 299 rows, {out}/manifest.json says 300; "
        "rebuild that gallery version (bctflow backfill)"
    )


def test_a_holder_whose_columns_are_not_the_declared_gallery_rows_is_refused_when_opened(db, tmp_path):
    """Each store makes its holders from the one declared row (id, generation stamp, model, vector) and checks a
    holder's columns against it when the collection is opened: a table of the same name and facts whose ``model``
    column is a number is refused in one line."""
    import json

    from components.indexing.stores.db_rows import GALLERY_ROW, row_kinds

    assert [f.name for f in GALLERY_ROW] == ["id", "generation", "model", "vector"]
    name = "t_schema_g1_v0"
    _, out, _ = _build(db, tmp_path, name, stamps=(1,))
    facts, columns = db.collection(name, out)._described()
    assert columns == row_kinds()
    metadata = {"bctflow.facts": json.dumps(facts)}
    if db.name == "milvus":
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("generation", DataType.INT64)
        schema.add_field("model", DataType.INT64)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
        db._db().drop_collection(name)
        db._db().create_collection(name, schema=schema, properties=metadata)
    else:
        import pyarrow as pa

        fields = [pa.field(k, pa.int64()) for k in ("id", "generation", "model")]
        schema = pa.schema([*fields, pa.field("vector", pa.list_(pa.float32(), 8))], metadata=metadata)
        db._db().drop_table(name)
        db._db().create_table(name, schema=schema)
    with pytest.raises(IndexIntegrityError, match=r"holds the columns \{.*'model': 'int64'.*\}, not bctflow's gallery"):
        open_index(out)
