"""The lineage schema's version, under Alembic (``registry/migrations/``).

* a new database is created by running every migration (never ``create_all``), so what the
  migrations build is what a fresh workspace gets — a test compares it with the ORM models;
* :func:`schema_state` reads where a database stands without changing it: ``empty``,
  ``current``, ``behind`` (an older revision, or a database written before Alembic:
  ``schema_info`` v1–v3 and no ``alembic_version``) or ``ahead`` (a newer bctflow wrote it);
* :func:`upgrade` is what ``bctflow db-upgrade`` runs: a pre-Alembic database is first
  brought to v3 by the additive legacy step and stamped with the baseline revision, then
  every pending revision runs, in one transaction where the database allows it.

Opening a store never migrates (docs/design.md §7.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, create_engine, inspect, text

from registry.orm import SCHEMA_VERSION, upgrade_schema

__all__ = [
    "BASELINE",
    "MIGRATIONS",
    "SchemaState",
    "create",
    "downgrade",
    "head_revision",
    "schema_state",
    "upgrade",
]

MIGRATIONS = Path(__file__).parent / "migrations"
#: the revision that is the schema as bctflow wrote it before Alembic (``schema_info`` v3)
BASELINE = "0001_baseline"


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str:
    """The newest revision this bctflow ships."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None  # the baseline always exists
    return head


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands: ``kind`` and its revision (``legacy vN`` before Alembic, None when empty)."""

    kind: Literal["empty", "current", "behind", "ahead"]
    revision: str | None


def schema_state(engine: Engine) -> SchemaState:
    """Read-only: the database's schema state against this bctflow's head revision."""
    tables = set(inspect(engine).get_table_names())
    if "generations" not in tables:
        return SchemaState("empty", None)
    if "alembic_version" not in tables:
        version = 1
        if "schema_info" in tables:
            with engine.connect() as conn:
                row = conn.execute(text("SELECT version FROM schema_info WHERE id = 1")).first()
            version = 1 if row is None else int(row[0])
        return SchemaState("ahead" if version > SCHEMA_VERSION else "behind", f"legacy v{version}")
    with engine.connect() as conn:
        rev = MigrationContext.configure(conn).get_current_revision()
    script = ScriptDirectory.from_config(_config())
    if rev == script.get_current_head():
        return SchemaState("current", rev)
    known = {s.revision for s in script.walk_revisions()}
    return SchemaState("behind" if rev in known else "ahead", rev)


def _run(engine: Engine, action: str, target: str, root: Path | None = None) -> None:
    cfg = _config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        cfg.attributes["workspace_root"] = root  # data migrations make paths under it relative (0003)
        getattr(command, action)(cfg, target)


def _baseline_metadata() -> MetaData:
    """The tables of the baseline revision, as the migration builds them (in a scratch in-memory SQLite)."""
    scratch = create_engine("sqlite://")
    _run(scratch, "upgrade", BASELINE)
    meta = MetaData()
    meta.reflect(scratch)
    meta.remove(meta.tables["alembic_version"])
    scratch.dispose()
    return meta


def create(engine: Engine) -> None:
    """Build the schema in an empty database by running every migration."""
    _run(engine, "upgrade", "head")


def downgrade(engine: Engine, revision: str, root: Path | None = None) -> None:
    """Undo every revision after ``revision`` (``"base"``: all of them). For maintainers and tests: bctflow never
    downgrades a database on its own. ``root``: the workspace (needed to undo 0003's relative paths)."""
    _run(engine, "downgrade", revision, root)


def upgrade(engine: Engine, root: Path | None = None) -> list[str]:
    """Migrate a database that is ``behind`` to the head revision; returns what was done, in order. ``root``: the
    workspace whose paths become relative (revision 0003); None leaves them absolute."""
    done: list[str] = []
    state = schema_state(engine)
    if state.revision is not None and state.revision.startswith("legacy"):
        added = upgrade_schema(engine, _baseline_metadata())  # additive: v1/v2 -> v3 tables and nullable columns
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM schema_info"))
            conn.execute(text("INSERT INTO schema_info (id, version) VALUES (1, :v)"), {"v": SCHEMA_VERSION})
        done += [f"added {a}" for a in added] + [f"stamped {BASELINE} ({state.revision} → v{SCHEMA_VERSION})"]
        _run(engine, "stamp", BASELINE)
    before = schema_state(engine).revision
    _run(engine, "upgrade", "head", root)
    after = schema_state(engine).revision
    if after != before:
        done.append(f"migrated {before} → {after}")
    return done
