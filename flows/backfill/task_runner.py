"""Where a backfill's chunks are embedded, from params ``backfill.cluster`` / ``workers`` / ``threads``: checked at
plan time, and the Prefect task runner that sends them there (:mod:`flows.backfill.cluster` runs them)."""

from __future__ import annotations

import logging
import socket
from typing import Any
from urllib.parse import urlsplit

from components.errors import ConfigError
from flows.params import Params

__all__ = ["check_cluster", "on_cluster", "task_runner"]

_CONNECT_S = 5.0


def on_cluster(p: Params) -> bool:
    """Whether the params send the backfill's chunks to a Dask cluster (not the command's own process)."""
    return p.backfill.cluster != "local" or p.backfill.workers is not None


def check_cluster(p: Params) -> None:
    """Plan-time check (before anything is embedded): a scheduler address answers on its port. ConfigError, one
    line, otherwise."""
    if p.backfill.cluster == "local":
        return
    url = urlsplit(p.backfill.cluster)
    if url.scheme != "tcp" or url.hostname is None or url.port is None:
        return  # tls / websocket / in-process addresses: the client's own connect reports them
    try:
        socket.create_connection((url.hostname, url.port), timeout=_CONNECT_S).close()
    except OSError as err:
        raise ConfigError(
            f"the Dask scheduler at {p.backfill.cluster} (backfill.cluster) does not answer ({err.strerror or err}); "
            "start it (`dask scheduler`, then `dask worker <address>` on each machine) or set backfill.cluster: local"
        ) from None


def _quiet_kill(record: logging.LogRecord) -> bool:
    """Drop the nanny's "Worker process still alive after … seconds, killing" at shutdown: a worker that loaded
    torch can take longer than that to exit on a busy machine; every part it wrote is on disk."""
    return "still alive after" not in record.getMessage()


def task_runner(p: Params) -> Any:
    """The DaskTaskRunner the params name (a LocalCluster of ``backfill.workers`` processes, or the scheduler at
    ``backfill.cluster``)."""
    from prefect_dask import DaskTaskRunner

    b = p.backfill
    if b.cluster != "local":
        return DaskTaskRunner(address=b.cluster)
    logging.getLogger("distributed.nanny").addFilter(_quiet_kill)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": b.workers,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
            "host": "127.0.0.1",
            "silence_logs": logging.WARNING,
        },
    )
