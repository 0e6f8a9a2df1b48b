"""Lineage paths are stored relative to the workspace (registry/paths.py, revision 0003), on SQLite and PostgreSQL:
a copy of the database opened at another workspace reads that workspace's files; db-upgrade relativises old rows."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from sqlalchemy import create_engine, text

from registry import schema_version
from registry.lineage import LineageDB
from registry.paths import WorkspacePaths
from registry.records import GenerationBundle, PointerRecord
from tests.helpers import generation_record


def _bundle(home: Path, gid: int = 0) -> GenerationBundle:
    gen = home / "generations" / f"gen_{gid:03d}"
    record = replace(
        generation_record(gid),
        data_snapshot=str(home / "data" / "manifest.json"),
        checkpoint_path=str(gen / "model.pt"),
        index_path=str(gen / "index"),
        reference_checkpoint_path="/datasets/elsewhere/ref.pt",  # outside the workspace: kept absolute
    )
    pointer = PointerRecord(generation_id=gid, index_path=str(gen / "index"), reason="g0", model_checkpoint=None)
    return GenerationBundle(record, pointer=pointer)


def _raw(url: str, column: str, table: str = "generations") -> str:
    engine = create_engine(url)
    with engine.connect() as conn:
        value = conn.execute(text(f"SELECT {column} FROM {table}")).scalar_one()
    engine.dispose()
    return value


def test_workspace_paths_round_trip(tmp_path: Path):
    paths = WorkspacePaths(tmp_path)
    inside = str(tmp_path / "generations" / "gen_000" / "model.pt")
    assert paths.stored(inside) == "generations/gen_000/model.pt"
    assert paths.usable("generations/gen_000/model.pt") == inside
    assert paths.stored("/elsewhere/x.pt") == "/elsewhere/x.pt" == paths.usable("/elsewhere/x.pt")
    assert paths.stored(None) is None and paths.usable("") == ""
    assert WorkspacePaths(None).stored(inside) == inside  # no root: as given


def test_paths_are_stored_relative_and_read_back_under_the_store_root(db_url, tmp_path: Path):
    home = tmp_path / "ws"
    store = LineageDB(db_url, root=home)
    store.commit_generation(_bundle(home))
    assert _raw(db_url, "checkpoint_path") == "generations/gen_000/model.pt"
    assert _raw(db_url, "data_snapshot") == "data/manifest.json"
    assert _raw(db_url, "reference_checkpoint_path") == "/datasets/elsewhere/ref.pt"
    assert _raw(db_url, "index_path", "gallery_pointers") == "generations/gen_000/index"
    g = store.generations()[0]
    assert g.checkpoint_path == str(home.resolve() / "generations/gen_000/model.pt")
    assert store.live_pointer().index_path == str(home.resolve() / "generations/gen_000/index")
    assert store.to_json()[0]["index"] == str(home.resolve() / "generations/gen_000/index")
    store.close()
    # the same rows read by a workspace elsewhere (a copy sharing the database, or a moved one) name its files
    moved = LineageDB(db_url, readonly=True, root=tmp_path / "moved")
    assert moved.generation(0).index_path == str((tmp_path / "moved").resolve() / "generations/gen_000/index")
    assert moved.generation(0).reference_checkpoint_path == "/datasets/elsewhere/ref.pt"
    moved.close()


def test_a_copied_sqlite_lineage_reads_the_copy(tmp_path: Path):
    home = tmp_path / "ws"
    LineageDB(f"sqlite:///{home / 'lineage.db'}").commit_generation(_bundle(home))
    shutil.copytree(home, tmp_path / "copy")
    copy = LineageDB(f"sqlite:///{tmp_path / 'copy' / 'lineage.db'}", readonly=True)  # root: the file's folder
    assert copy.generation(0).checkpoint_path == str((tmp_path / "copy").resolve() / "generations/gen_000/model.pt")


def test_db_upgrade_makes_old_absolute_paths_relative(db_url, tmp_path: Path):
    home = (tmp_path / "ws").resolve()
    store = LineageDB(db_url, root=tmp_path / "elsewhere")  # not under it: written absolute, as before 0003
    store.commit_generation(_bundle(home))
    store.close()
    assert _raw(db_url, "checkpoint_path") == str(home / "generations/gen_000/model.pt")
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0002_checkpoint_sha256")
    engine.dispose()
    upgraded = LineageDB(db_url, upgrade=True, root=home)
    assert upgraded.upgraded == [f"migrated 0002_checkpoint_sha256 → {schema_version.head_revision()}"]
    assert _raw(db_url, "checkpoint_path") == "generations/gen_000/model.pt"
    assert _raw(db_url, "model_checkpoint", "gallery_pointers") is None
    assert _raw(db_url, "reference_checkpoint_path") == "/datasets/elsewhere/ref.pt"
    assert upgraded.generation(0).checkpoint_path == str(home / "generations/gen_000/model.pt")
    upgraded.close()
    engine = create_engine(db_url)  # and back: the downgrade restores absolute paths under the root
    schema_version.downgrade(engine, "0002_checkpoint_sha256", root=home)
    engine.dispose()
    assert _raw(db_url, "checkpoint_path") == str(home / "generations/gen_000/model.pt")
