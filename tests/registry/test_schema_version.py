"""The lineage schema under Alembic (registry/schema_version.py, registry/migrations/), on SQLite and a real PostgreSQL:
migrations build exactly the ORM models, are reversible, and a database written before Alembic is refused until
`bctflow db-upgrade`, which stamps it and keeps its rows."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from components.errors import LineageError
from registry import schema_version
from registry.lineage import LineageDB
from registry.orm import Base
from registry.records import GenerationBundle, PointerRecord
from tests.helpers import generation_record


def test_a_new_database_is_built_by_the_migrations_and_matches_the_models(db_url):
    LineageDB(db_url).close()
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert MigrationContext.configure(conn).get_current_revision() == schema_version.head_revision()
    assert schema_version.schema_state(engine).kind == "current"
    engine.dispose()


def test_the_migrations_are_reversible(db_url):
    engine = create_engine(db_url)
    schema_version.create(engine)
    schema_version.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    assert schema_version.schema_state(engine).kind == "empty"
    schema_version.create(engine)
    assert schema_version.schema_state(engine).kind == "current"
    engine.dispose()


def _pre_alembic(url: str, version: int = 3) -> None:
    """The database as bctflow wrote it before Alembic: the baseline tables (the later revisions undone, rows
    kept), schema_info vN, no alembic_version."""
    store = LineageDB(url)
    store.commit_generation(GenerationBundle(generation_record(0)))
    store.close()
    engine = create_engine(url)
    schema_version.downgrade(engine, schema_version.BASELINE)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("UPDATE schema_info SET version = :v"), {"v": version})
    engine.dispose()


def test_a_pre_alembic_database_is_refused_then_stamped_by_db_upgrade(db_url):
    _pre_alembic(db_url)
    for readonly in (True, False):
        with pytest.raises(LineageError, match=r"schema legacy v3, older than .*run `bctflow db-upgrade`"):
            LineageDB(db_url, readonly=readonly)
    assert "alembic_version" not in inspect(create_engine(db_url)).get_table_names()  # nothing migrated unasked
    store = LineageDB(db_url, upgrade=True)
    assert store.upgraded == [
        f"stamped {schema_version.BASELINE} (legacy v3 → v3)",
        f"migrated {schema_version.BASELINE} → {schema_version.head_revision()}",
    ]
    g0 = store.generations()[0]
    assert g0.name == "g0" and g0.checkpoint_sha256 is None  # kept, and the new column is empty for old rows
    assert store.schema_version() == schema_version.head_revision()
    store.close()
    assert LineageDB(db_url, upgrade=True).upgraded is None  # current: nothing to do


def test_revision_0004_adds_the_code_digest_and_rows_before_it_read_none(db_url):
    store = LineageDB(db_url)
    store.commit_generation(GenerationBundle(generation_record(0, code_digest="c" * 64)))
    assert store.generations()[0].code_digest == "c" * 64
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0003_relative_paths")  # the lineage as the previous bctflow wrote it
    assert "code_digest" not in {c["name"] for c in inspect(engine).get_columns("generations")}
    engine.dispose()
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0003_relative_paths → {schema_version.head_revision()}"]  # through 0004
    assert upgraded.generations()[0].code_digest is None  # unknown: the nightly check does not retrain for that
    upgraded.close()


def test_a_database_from_a_newer_bctflow_is_refused(db_url):
    LineageDB(db_url).close()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff_from_the_future'"))
    engine.dispose()
    with pytest.raises(LineageError, match="schema ffff_from_the_future, newer than this bctflow"):
        LineageDB(db_url, readonly=True)


def test_revision_0005_pins_the_live_index_and_rows_before_it_read_none(db_url):
    store = LineageDB(db_url)
    pointer = PointerRecord(0, "/i/0/index", "g0", compatible_generations=[0], index_sha256="d" * 64)
    store.commit_generation(GenerationBundle(generation_record(0), pointer=pointer))
    assert store.live_pointer().index_sha256 == "d" * 64
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0004_code_digest")  # the lineage as the previous bctflow wrote it
    assert "index_sha256" not in {c["name"] for c in inspect(engine).get_columns("gallery_pointers")}
    engine.dispose()
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0004_code_digest → {schema_version.head_revision()}"]
    assert upgraded.live_pointer().index_sha256 is None  # unknown: the manifest's own checksums still apply
    upgraded.close()


def test_revision_0006_pins_each_evaluation_gallery_and_rows_before_it_read_none(db_url):
    store = LineageDB(db_url)
    pointer = PointerRecord(0, "/i/0/index", "g0", compatible_generations=[0], gallery_sha256="e" * 64)
    store.commit_generation(GenerationBundle(generation_record(0, gallery_sha256="e" * 64), pointer=pointer))
    assert store.live_pointer().gallery_sha256 == "e" * 64 and store.generation(0).gallery_sha256 == "e" * 64
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0005_index_sha256")  # the lineage as the previous bctflow wrote it
    assert "gallery_sha256" not in {c["name"] for c in inspect(engine).get_columns("gallery_pointers")}
    assert "gallery_sha256" not in {c["name"] for c in inspect(engine).get_columns("generations")}
    engine.dispose()
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0005_index_sha256 → {schema_version.head_revision()}"]
    assert upgraded.live_pointer().gallery_sha256 is None  # unknown: the parts' own digests still apply
    assert upgraded.generation(0).gallery_sha256 is None
    upgraded.close()


def test_revision_0007_records_where_the_live_vectors_live_and_rows_before_it_read_none(db_url):
    store = LineageDB(db_url)
    facts = {"store": "milvus", "collection": "demo_g0_v0", "rows_by_generation": {0: 539}}
    pointer = PointerRecord(
        0, "/i/0/index", "g0", compatible_generations=[0], index_params={"index_type": "FLAT"}, **facts
    )
    store.commit_generation(GenerationBundle(generation_record(0), pointer=pointer))
    row = store.live_pointer()
    assert (row.store, row.collection, row.rows_by_generation, row.index_params) == (
        "milvus",
        "demo_g0_v0",
        {"0": 539},  # JSON object keys: the record keeps them so too
        {"index_type": "FLAT"},
    )
    assert PointerRecord.of_row(row) == pointer  # every field copied (what a rollback's new pointer row starts from)
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0006_gallery_sha256")  # the lineage as the previous bctflow wrote it
    columns = {c["name"] for c in inspect(engine).get_columns("gallery_pointers")}
    assert not columns & {"store", "collection", "rows_by_generation", "index_params"}
    engine.dispose()
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0006_gallery_sha256 → {schema_version.head_revision()}"]
    old = upgraded.live_pointer()
    assert (old.store, old.collection, old.rows_by_generation, old.index_params) == (None, None, None, None)
    upgraded.close()


def test_revision_0008_adds_the_bridges_table_and_a_lineage_before_it_has_none(db_url):
    from registry.records import BridgeRecord

    store = LineageDB(db_url)
    store.commit_generation(GenerationBundle(generation_record(0)))
    store.commit_generation(GenerationBundle(generation_record(1, parent=0)))
    store.record_bridge(BridgeRecord(1, 0, "adapter", "procrustes", "/b.npz", "a" * 64, 100, 0.1))
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0007_pointer_store")  # the lineage as the previous bctflow wrote it
    assert "bridges" not in inspect(engine).get_table_names()
    engine.dispose()
    with pytest.raises(LineageError, match=r"older than .*run `bctflow db-upgrade`"):
        LineageDB(db_url)
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0007_pointer_store → {schema_version.head_revision()}"]
    assert upgraded.bridges() == [] and [g.id for g in upgraded.generations()] == [0, 1]
    upgraded.close()


def test_revision_0009_adds_the_route_choices_table_and_a_lineage_before_it_has_none(db_url):
    from registry.records import RouteChoiceRecord

    store = LineageDB(db_url)
    store.commit_generation(GenerationBundle(generation_record(0)))
    store.commit_generation(GenerationBundle(generation_record(1, parent=0)))
    store.record_route_choice(RouteChoiceRecord(1, 0, "adapter", "auto", 0.5, True, "upgrade route adapter", []))
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0008_bridges")  # the lineage as the previous bctflow wrote it
    assert "route_choices" not in inspect(engine).get_table_names()
    engine.dispose()
    with pytest.raises(LineageError, match=r"older than .*run `bctflow db-upgrade`"):
        LineageDB(db_url)
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0008_bridges → {schema_version.head_revision()}"]
    assert upgraded.route_choices() == [] and [g.id for g in upgraded.generations()] == [0, 1]
    upgraded.close()


def test_revision_0011_pins_each_versions_seal_and_rows_before_it_read_none(db_url):
    store = LineageDB(db_url)
    pointer = PointerRecord(0, "/i/0/index", "g0", compatible_generations=[0], seal_sha256="f" * 64)
    store.commit_generation(GenerationBundle(generation_record(0), pointer=pointer))
    assert store.live_pointer().seal_sha256 == "f" * 64
    assert PointerRecord.of_row(store.live_pointer()).seal_sha256 == "f" * 64  # a rollback's new row pins it too
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0010_nights")  # the lineage as the previous bctflow wrote it
    assert "seal_sha256" not in {c["name"] for c in inspect(engine).get_columns("gallery_pointers")}
    engine.dispose()
    with pytest.raises(LineageError, match=r"older than .*run `bctflow db-upgrade`"):
        LineageDB(db_url)
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0010_nights → {schema_version.head_revision()}"]
    assert upgraded.live_pointer().seal_sha256 is None  # unknown: a rollback to it verifies it in full
    upgraded.close()
