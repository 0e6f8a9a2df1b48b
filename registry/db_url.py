"""How bctflow names and opens a lineage database URL: the file behind a SQLite URL, a URL with its password
masked for messages, and the SQLite pragmas every connection gets (foreign keys on, a 30 s busy timeout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, make_url
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError

__all__ = ["masked_url", "sqlite_path", "sqlite_pragmas", "store_label"]


def sqlite_path(url: str) -> Path | None:
    """The file behind a ``sqlite:///path`` URL (None for other databases and in-memory SQLite)."""
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def masked_url(url: str) -> str:
    """``url`` with its password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def store_label(url: str) -> str:
    """How messages name a database: the file of a SQLite URL, else the URL with its password masked."""
    path = sqlite_path(url)
    return str(path) if path is not None else masked_url(url)


def sqlite_pragmas(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _: Any) -> None:  # pragma: no cover - trivial
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()
