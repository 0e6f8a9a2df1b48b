"""The temporary Prefect server's database: a new one starts as a copy of an empty, migrated one.

Prefect's server creates a missing SQLite database by running every Alembic migration of its history — 6 s of an
11 s start on this repository's idle 2-core machine, 12 of 18 s under load — and the result depends only on the
Prefect release. So the first command that needs it migrates one empty database in a child process, keeps it as a
template in the user's cache (``$BCTFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/bctflow``, else ``~/.cache/bctflow``;
one file per Prefect release), and every new workspace's database starts as a copy; the server's own migration step
then finds it at the head revision and does nothing (docs/design.md §7.12). Anything unexpected (another database,
an existing file, a cache that cannot be written, a failed build) leaves the database to Prefect, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

__all__ = ["cache_dir", "prefect_database_file", "seed_prefect_database", "template_path"]

log = logging.getLogger(__name__)

#: run in a child process whose settings point Prefect's database at the template being built
_BUILD = (
    "import asyncio\n"
    "from prefect.server.database import provide_database_interface\n"
    "asyncio.run(provide_database_interface().create_db())\n"
)
_URL_KEYS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
_BUILD_TIMEOUT_S = 600


def cache_dir() -> Path:
    """Where bctflow keeps what depends only on the installed software (not on a workspace)."""
    chosen = os.environ.get("BCTFLOW_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "bctflow"


def template_path(cache: Path) -> Path:
    """The migrated, empty database of the installed Prefect release."""
    return cache / f"prefect-{version('prefect')}.db"


def prefect_database_file(url: str) -> Path | None:
    """The file behind Prefect's ``sqlite+aiosqlite:///path`` database URL (None for any other database)."""
    for prefix in ("sqlite+aiosqlite:///", "sqlite:///"):
        if url.startswith(prefix):
            path = url.removeprefix(prefix).split("?", 1)[0]
            return Path(path) if path and not path.startswith(":memory:") and "mode=memory" not in url else None
    return None


def _migrated(db: Path) -> bool:
    """The file is a SQLite database with an Alembic revision (a finished migration)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return bool(conn.execute("SELECT version_num FROM alembic_version").fetchall())
    except sqlite3.Error:
        return False


def _copy(src: Path, dst: Path) -> None:
    """A consistent copy of database ``src`` (read through its write-ahead log) as the one file ``dst``."""
    with contextlib.closing(sqlite3.connect(src)) as source, contextlib.closing(sqlite3.connect(dst)) as copy:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # no -wal beside the copy; Prefect's server turns WAL on again


def _build_template(target: Path) -> bool:
    """Migrate an empty database in a child process and store it at ``target`` as one self-contained file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bctflow-prefect-db-") as tmp:
        built = Path(tmp) / "prefect.db"
        env = {k: v for k, v in os.environ.items() if k not in _URL_KEYS}
        env[_URL_KEYS[0]] = f"sqlite+aiosqlite:///{built}"
        res = subprocess.run(
            [sys.executable, "-c", _BUILD], env=env, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S
        )
        if res.returncode != 0 or not _migrated(built):
            log.warning("could not prepare Prefect's database template: %s", (res.stderr or res.stdout)[-500:])
            return False
        part = target.with_name(f".{target.name}.{os.getpid()}.part")
        try:
            _copy(built, part)
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
    return True


def seed_prefect_database(url: str, cache: Path | None = None) -> bool:
    """Give a database that does not exist yet at ``url`` the migrated template's contents; True when it did.

    The copy appears under its name at once (a hard link of a finished copy), so a server of another command that
    starts on the same file meanwhile sees either no file or the whole database. Never raises for a cache or copy
    that fails: Prefect then creates the database itself.
    """
    db = prefect_database_file(url)
    if db is None or db.exists():
        return False
    try:
        template = template_path(cache or cache_dir())
        if not _migrated(template) and not _build_template(template):
            return False
        db.parent.mkdir(parents=True, exist_ok=True)
        part = db.with_name(f".{db.name}.{os.getpid()}.part")
        try:
            _copy(template, part)
            os.link(part, db)  # fails if the file appeared meanwhile: that one stays
        finally:
            part.unlink(missing_ok=True)
    except FileExistsError:
        return False
    except (OSError, sqlite3.Error, subprocess.SubprocessError) as err:
        log.warning("Prefect's database was not seeded from the template (%s); the server creates it", err)
        return False
    return True
