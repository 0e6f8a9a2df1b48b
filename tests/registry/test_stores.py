"""Opening the stores (registry/stores.py, registry/lineage.py): read-only opens never create or migrate,
an older schema is refused until `bctflow db-upgrade`, which migrates it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from bctflow.cli import app
from components.errors import LineageError
from registry import schema_version
from registry.lineage import LineageDB
from registry.records import GenerationBundle, GenerationRecord
from registry.schema_version import head_revision
from registry.stores import lineage_url, open_lineage, tracking_uri
from tests.helpers import generation_record


def _record() -> GenerationRecord:
    return generation_record(0)


def _older_schema(home: Path) -> Path:
    """A lineage database as schema v2 (before Alembic) left it: no generations.compatible_with_live."""
    store = open_lineage(None, home)
    store.commit_generation(GenerationBundle(_record()))
    store.close()
    db = home / "lineage.db"
    engine = create_engine(f"sqlite:///{db}")
    schema_version.downgrade(engine, schema_version.BASELINE)  # the Alembic revisions undone, rows kept
    engine.dispose()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE generations DROP COLUMN compatible_with_live")
    con.execute("UPDATE schema_info SET version = 2")
    con.execute("DROP TABLE alembic_version")
    con.commit()
    con.close()
    return db


def _columns(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {row[1] for row in con.execute("PRAGMA table_info(generations)")}
    finally:
        con.close()


def test_default_urls_live_in_the_workspace_and_configured_ones_win(tmp_path: Path):
    assert lineage_url(None, tmp_path) == f"sqlite:///{tmp_path / 'lineage.db'}"
    assert tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert lineage_url("postgresql+psycopg://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"


def test_readonly_open_of_a_missing_lineage_creates_nothing(tmp_path: Path):
    store = open_lineage(None, tmp_path / "ws", readonly=True)
    assert store.count() == 0 and store.live_pointer() is None and store.next_generation_id() == 0
    store.close()
    assert not (tmp_path / "ws").exists()


def test_readonly_open_issues_no_ddl_and_refuses_writes(tmp_path: Path):
    open_lineage(None, tmp_path).close()  # a current database
    statements: list[str] = []

    def record(conn, cursor, statement, *args) -> None:
        statements.append(statement.split()[0].upper())

    event.listen(Engine, "before_cursor_execute", record)  # every engine, the opening included
    try:
        store = open_lineage(None, tmp_path, readonly=True)
        assert store.count() == 0
        with pytest.raises(LineageError, match="read-only"):
            store.commit_generation(GenerationBundle(_record()))
        store.close()
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert statements and set(statements) <= {"SELECT", "PRAGMA"}


def test_an_older_schema_is_refused_until_db_upgrade(tmp_path: Path):
    db = _older_schema(tmp_path)
    for readonly in (True, False):
        with pytest.raises(
            LineageError,
            match=r"schema legacy v2, older than this bctflow's \S+; back it up, then run `bctflow db-upgrade`",
        ):
            open_lineage(None, tmp_path, readonly=readonly)
    assert "compatible_with_live" not in _columns(db)  # nothing was migrated behind the user's back
    res = CliRunner().invoke(app, ["db-upgrade", "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "generations.compatible_with_live" in res.output
    assert "compatible_with_live" in _columns(db)
    store = open_lineage(None, tmp_path, readonly=True)
    assert [g.name for g in store.generations()] == ["g0"] and store.generations()[0].compatible_with_live is None
    assert store.schema_version() == head_revision()
    store.close()
    again = CliRunner().invoke(app, ["db-upgrade", "--home", str(tmp_path)])
    assert "already at this bctflow's schema" in again.output


def test_a_newer_schema_is_refused(tmp_path: Path):
    open_lineage(None, tmp_path).close()
    con = sqlite3.connect(tmp_path / "lineage.db")
    con.execute("UPDATE alembic_version SET version_num = 'ffff_newer'")
    con.commit()
    con.close()
    with pytest.raises(LineageError, match="newer than this bctflow"):
        LineageDB(lineage_url(None, tmp_path), readonly=True)


@pytest.mark.parametrize("state", ["missing", "zero bytes", "damaged"])
def test_a_lineage_file_is_named_by_its_path_in_every_message(tmp_path: Path, state: str):
    """A SQLite lineage is named by its file, never by a URL — nor by ``sqlite://``, the empty in-memory lineage that
    stands in for a missing or zero-byte file in a read-only open."""
    db = tmp_path / "lineage.db"
    if state == "zero bytes":
        db.write_bytes(b"")
    if state == "damaged":
        db.write_bytes(b"this is not a database" * 10)
        with pytest.raises(LineageError) as info:
            open_lineage(None, tmp_path, readonly=True)
        msg = str(info.value)
    else:
        store = open_lineage(None, tmp_path, readonly=True)
        with pytest.raises(LineageError) as info:
            store.commit_generation(GenerationBundle(_record()))
        store.close()
        msg = str(info.value)
        assert store.label == str(db)
    assert f"lineage database {db} " in msg and "sqlite:" not in msg, msg
