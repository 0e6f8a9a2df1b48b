"""A workspace that owns its MLflow store, copied or moved: point that store's artifact URIs at the new place.

MLflow keeps artifact locations as absolute ``file://`` URIs (the experiment's
root, each run's, each logged model's and model version's). When the workspace
holds its own SQLite MLflow store and the experiment's root is not the
workspace's ``mlartifacts/`` any more, the workspace was copied or moved: every
URI under the old root is rewritten to the same place under the new root, in
one transaction, before anything is logged, so a copy never reads or writes the
original's artifacts. A shared tracking store (PostgreSQL, a SQLite file outside
the workspace) is never rewritten: its artifacts belong to all its workspaces. A relocation is routine (every DVC
stage runs in a copy of its parent's workspace), so its line is logged at INFO.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import create_engine, inspect, text

from registry.db_url import sqlite_path

__all__ = ["URI_COLUMNS", "owns_tracking_store", "relocate_artifacts"]

log = logging.getLogger(__name__)

#: MLflow's columns that hold artifact URIs (those a given MLflow version lacks are skipped)
URI_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
    ("trace_tags", "value"),
)


def owns_tracking_store(tracking_uri: str, artifact_root: Path) -> bool:
    """True when the tracking store is a SQLite file in the same workspace as ``artifact_root``."""
    db = sqlite_path(tracking_uri)
    return db is not None and db.resolve().parent == Path(artifact_root).resolve().parent


def relocate_artifacts(tracking_uri: str, old_root: str, new_root: str) -> int:
    """Rewrite every URI equal to ``old_root`` or under ``old_root/`` to the same place under ``new_root``.

    One transaction; returns the number of values rewritten.
    """
    engine = create_engine(tracking_uri)
    try:
        found = inspect(engine)
        tables = set(found.get_table_names())
        changed = 0
        with engine.begin() as conn:
            for table, col in URI_COLUMNS:
                if table not in tables or col not in {c["name"] for c in found.get_columns(table)}:
                    continue
                res = conn.execute(
                    text(
                        f"UPDATE {table} SET {col} = :new || substr({col}, :cut) "
                        f"WHERE {col} = :old OR substr({col}, 1, :n) = :prefix"
                    ),
                    {
                        "new": new_root,
                        "old": old_root,
                        "cut": len(old_root) + 1,
                        "n": len(old_root) + 1,
                        "prefix": old_root + "/",
                    },
                )
                changed += res.rowcount or 0
    finally:
        engine.dispose()
    log.info("this workspace was copied or moved: %d MLflow artifact URIs now point under %s", changed, new_root)
    return changed
