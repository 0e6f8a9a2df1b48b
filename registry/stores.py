"""Where a workspace's stores live, and how to open them.

The lineage database and the MLflow store are addressed by URL (params
``lineage.db_url`` / ``tracking.mlflow_uri``). When none is configured they
default to SQLite files inside the workspace; this module is the only code
outside the stores themselves that knows those defaults.
"""

from __future__ import annotations

from pathlib import Path

from registry.lineage import LineageStore, NoLineageError, sqlite_path
from registry.tracking import MlflowStore

__all__ = ["STORE_ENTRIES", "lineage_url", "open_lineage", "open_tracking", "tracking_uri"]

LINEAGE_FILE = "lineage.db"
TRACKING_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
#: what the default stores put in a workspace
STORE_ENTRIES = (LINEAGE_FILE, TRACKING_FILE, ARTIFACTS_DIR)
#: an empty lineage: stands in for one that does not exist yet, so read-only callers see "no generations"
EMPTY_LINEAGE_URL = "sqlite://"


def lineage_url(configured: str | None, home: Path) -> str:
    """``lineage.db_url``, or the workspace's own SQLite lineage."""
    return configured or f"sqlite:///{Path(home) / LINEAGE_FILE}"


def tracking_uri(configured: str | None, home: Path) -> str:
    """``tracking.mlflow_uri``, or the workspace's own SQLite MLflow store."""
    return configured or f"sqlite:///{Path(home) / TRACKING_FILE}"


def open_lineage(configured: str | None, home: Path, *, readonly: bool = False, upgrade: bool = False) -> LineageStore:
    """The lineage store. ``readonly``: no schema change and no file created; an empty lineage when there is none yet.
    ``upgrade``: migrate an older schema first (see :class:`~registry.lineage.LineageStore`)."""
    url = lineage_url(configured, home)
    if not readonly:
        return LineageStore(url, upgrade=upgrade, root=home)
    path = sqlite_path(url)
    if path is not None and (not path.is_file() or path.stat().st_size == 0):  # connecting would create the file
        return LineageStore(EMPTY_LINEAGE_URL)
    try:
        return LineageStore(url, readonly=True, root=home)
    except NoLineageError:
        return LineageStore(EMPTY_LINEAGE_URL)


def open_tracking(configured: str | None, home: Path, experiment: str, model_name: str) -> MlflowStore:
    """The MLflow tracking + model registry store; artifacts go to the workspace."""
    return MlflowStore(tracking_uri(configured, home), experiment, model_name, Path(home) / ARTIFACTS_DIR)
