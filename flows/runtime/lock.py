"""One writer per workspace: a generation or a backfill holds ``<home>/.lock`` while it runs.

Two runs on one workspace would plan the same generation id and race on the
first initialisation of the MLflow store; the second one now stops at once
with a message naming the holder. (Advisory ``flock``: works for processes on
one host.) Workspaces that share one PostgreSQL lineage database — on one host or
several — also serialise through the database: the run holds a session-level
advisory lock (``pg_try_advisory_lock``) on a connection of its own, which the
server releases by itself if the process dies.

A command takes its workspace's lock before it starts its Prefect server (a second
command is refused at once, before a server of its own loads the machine), and the
flow it then runs takes it again in the same thread: the thread holding a workspace
re-enters its lock; any other thread or process is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from components.errors import LineageError

__all__ = ["BACKFILL", "LINEAGE_LOCK_KEY", "NEW_GENERATION", "ROLLBACK", "UPGRADE", "database_lock", "workspace_lock"]


#: the advisory-lock key of a bctflow lineage (any 64-bit constant shared by every bctflow)
LINEAGE_LOCK_KEY = 0x6263_7466_6C6F_77  # "bctflow"

#: what a holder of the lock is doing, as a second command's refusal names it
NEW_GENERATION = "a new generation is being created"
BACKFILL = "a backfill is running"
ROLLBACK = "a rollback is moving the live gallery"
UPGRADE = "a bridge between generations is being fitted"

#: the workspaces this process holds (resolved home), each with the thread that holds it
_HELD: dict[Path, int] = {}


@contextlib.contextmanager
def database_lock(db_url: str | None, what: str) -> Iterator[None]:
    """Hold the lineage database's advisory lock (PostgreSQL) while the block runs; other databases: no-op."""
    if not db_url or not db_url.startswith("postgresql"):
        yield
        return
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            held = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LINEAGE_LOCK_KEY}).scalar()
            if not held:
                raise LineageError(
                    f"the lineage database {db_url} is busy: another bctflow run (another workspace sharing it) holds "
                    f"its lock; wait for it to finish, then run again ({what})"
                )
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LINEAGE_LOCK_KEY})
    finally:
        engine.dispose()


@contextlib.contextmanager
def workspace_lock(home: Path, what: str, db_url: str | None = None) -> Iterator[None]:
    """The workspace's lock file, then (``db_url``: a PostgreSQL lineage) the database's advisory lock; re-entered by
    the thread that holds them."""
    key, me = Path(home).resolve(), threading.get_ident()
    if _HELD.get(key) == me:
        yield
        return
    with _file_lock(home, what), database_lock(db_url, what):
        _HELD[key] = me
        try:
            yield
        finally:
            del _HELD[key]


@contextlib.contextmanager
def _file_lock(home: Path, what: str) -> Iterator[None]:
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    path = home / ".lock"
    with open(path, "a+") as fh:  # closing the file releases the lock
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise LineageError(
                f"workspace {home} is busy: {holder}; wait for it to finish or use another --home"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"what": what, "pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S")}))
        fh.flush()
        yield
