"""This process's descendants, stopped: what a command that ends at once (a signal, its Prefect server lost) does
before ``os._exit`` — Prefect's temporary server, DataLoader workers, a Milvus Lite server, a local Dask cluster."""

from __future__ import annotations

import contextlib
import threading

import psutil

__all__ = ["GRACE_S", "stop_descendants", "stopping_descendants"]

#: seconds the descendants get to end after SIGTERM before they are killed
GRACE_S = 3.0

_STOPPING = threading.Event()


def stopping_descendants(within_s: float = 0.0) -> bool:
    """Whether this process has begun stopping its descendants (waiting up to ``within_s`` seconds for it): a child
    that dies from then on was stopped by the command, not lost (a watcher of Prefect's server must not report the
    command's own stop as a loss). A terminal's Ctrl-C reaches the whole group at once, so the child can die before
    the command's own handler has run: a watcher gives that handler ``within_s``."""
    return _STOPPING.wait(within_s) if within_s > 0 else _STOPPING.is_set()


def stop_descendants(grace_s: float = GRACE_S) -> None:
    """SIGTERM every descendant of this process, wait up to ``grace_s`` seconds, SIGKILL what is left."""
    _STOPPING.set()
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
