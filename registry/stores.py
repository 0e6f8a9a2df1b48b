"""Where a workspace's stores live, and how to open them.

The lineage database and the MLflow store are addressed by URL (params
``lineage.db_url`` / ``tracking.mlflow_uri``). When none is configured they
default to SQLite files inside the workspace; this module is the only code
outside the stores themselves that knows those defaults.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from components.errors import ConfigError
from registry.db_url import masked_url, sqlite_path, store_label
from registry.lineage import LineageDB, NoLineageError
from registry.tracking.registered_model import MlflowRegistry

__all__ = ["STORE_ENTRIES", "check_tracking_store", "lineage_url", "open_lineage", "open_tracking", "tracking_uri"]

LINEAGE_FILE = "lineage.db"
TRACKING_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
#: what the default stores put in a workspace
STORE_ENTRIES = (LINEAGE_FILE, TRACKING_FILE, ARTIFACTS_DIR)
#: the SQLite file header (https://www.sqlite.org/fileformat.html)
_SQLITE_MAGIC = b"SQLite format 3\x00"


def lineage_url(configured: str | None, home: Path) -> str:
    """``lineage.db_url``, or the workspace's own SQLite lineage."""
    return configured or f"sqlite:///{Path(home) / LINEAGE_FILE}"


def tracking_uri(configured: str | None, home: Path) -> str:
    """``tracking.mlflow_uri``, or the workspace's own SQLite MLflow store."""
    return configured or f"sqlite:///{Path(home) / TRACKING_FILE}"


def open_lineage(configured: str | None, home: Path, *, readonly: bool = False, upgrade: bool = False) -> LineageDB:
    """The lineage store. ``readonly``: no schema change and no file created; an empty lineage when there is none yet.
    ``upgrade``: migrate an older schema first (see :class:`~registry.lineage.LineageDB`)."""
    url = lineage_url(configured, home)
    if not readonly:
        return LineageDB(url, upgrade=upgrade, root=home)
    path = sqlite_path(url)
    if path is not None and (not path.is_file() or path.stat().st_size == 0):  # connecting would create the file
        return LineageDB.empty(store_label(url))
    try:
        return LineageDB(url, readonly=True, root=home)
    except NoLineageError:
        return LineageDB.empty(store_label(url))


def open_tracking(
    configured: str | None, home: Path, experiment: str, model_name: str, *, readonly: bool = False
) -> MlflowRegistry:
    """The MLflow tracking + model registry store; artifacts go to the workspace. ``readonly``: a caller that only
    reads (a copied workspace's artifact URIs are reported, not rewritten: :meth:`MlflowRegistry.moved_from`)."""
    return MlflowRegistry(
        tracking_uri(configured, home), experiment, model_name, Path(home) / ARTIFACTS_DIR, readonly=readonly
    )


def check_tracking_store(configured: str | None, home: Path) -> None:
    """The MLflow tracking store answers (a database URL) or is a SQLite file (the workspace's default); ConfigError
    naming the store and the fix otherwise. Connects read-only: creates nothing."""
    uri = tracking_uri(configured, home)
    db = sqlite_path(uri)
    if db is not None:
        if db.is_file() and db.stat().st_size > 0:
            with open(db, "rb") as fh:
                head = fh.read(len(_SQLITE_MAGIC))
            if head != _SQLITE_MAGIC:
                raise ConfigError(
                    f"the MLflow tracking store {db} is not a SQLite database (it is damaged or another file); "
                    "restore it from a backup, or set tracking.mlflow_uri to the right store"
                )
        return
    if "://" not in uri or uri.split("://", 1)[0].split("+")[0] in ("http", "https", "databricks", "file"):
        return  # a tracking server or another MLflow scheme: MLflow itself reports it
    try:
        engine = create_engine(uri, connect_args={"connect_timeout": 10} if uri.startswith("postgres") else {})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except (SQLAlchemyError, ValueError, ImportError) as err:
        raise ConfigError(
            f"cannot reach the MLflow tracking store {masked_url(uri)} ({type(err).__name__}: "
            f"{str(err).splitlines()[0]}); start the database or fix tracking.mlflow_uri"
        ) from None
