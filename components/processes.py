"""This process's descendants, stopped: what a command that ends at once (a signal, its Prefect server lost) does
before ``os._exit`` — Prefect's temporary server, DataLoader workers, a Milvus Lite server, a local Dask cluster."""

from __future__ import annotations

import contextlib

import psutil

__all__ = ["GRACE_S", "stop_descendants"]

#: seconds the descendants get to end after SIGTERM before they are killed
GRACE_S = 3.0


def stop_descendants(grace_s: float = GRACE_S) -> None:
    """SIGTERM every descendant of this process, wait up to ``grace_s`` seconds, SIGKILL what is left."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
