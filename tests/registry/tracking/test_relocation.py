"""A copied or moved workspace's MLflow store (registry/tracking/relocation.py): its artifact URIs follow it, in one
transaction, and the routine relocation is logged at INFO, not as a warning."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from registry.tracking.relocation import owns_tracking_store, relocate_artifacts


def test_uris_under_the_old_root_move_and_the_line_is_info(tmp_path: Path, caplog):
    db = tmp_path / "copy" / "mlflow.db"
    db.parent.mkdir()
    old, new = "file:///old/ws/mlartifacts", (tmp_path / "copy" / "mlartifacts").as_uri()
    with sqlite3.connect(db) as con:  # the two columns of MLflow's schema this store has (the others are skipped)
        con.execute("CREATE TABLE experiments (artifact_location TEXT)")
        con.execute("CREATE TABLE runs (artifact_uri TEXT)")
        con.executemany("INSERT INTO experiments VALUES (?)", [(old,), ("file:///elsewhere",)])
        con.executemany("INSERT INTO runs VALUES (?)", [(old + "/1/abc/artifacts",), (old + "-not-under",)])
    uri = f"sqlite:///{db}"
    assert owns_tracking_store(uri, db.parent / "mlartifacts")
    with caplog.at_level(logging.DEBUG, logger="registry.tracking.relocation"):
        assert relocate_artifacts(uri, old, new) == 2
    with sqlite3.connect(db) as con:
        assert [r for (r,) in con.execute("SELECT artifact_location FROM experiments")] == [new, "file:///elsewhere"]
        assert [r for (r,) in con.execute("SELECT artifact_uri FROM runs")] == [
            new + "/1/abc/artifacts",
            old + "-not-under",
        ]
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == f"this workspace was copied or moved: 2 MLflow artifact URIs now point under {new}"
