"""One writer per workspace: a generation or a backfill holds ``<home>/.lock`` while it runs.

Two runs on one workspace would plan the same generation id and race on the
first initialisation of the MLflow store; the second one now stops at once
with a message naming the holder. (Advisory ``flock``: works for processes on
one host; for several hosts share a database server, not a folder.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from components.errors import LineageError

__all__ = ["workspace_lock"]


@contextlib.contextmanager
def workspace_lock(home: Path, what: str) -> Iterator[None]:
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
