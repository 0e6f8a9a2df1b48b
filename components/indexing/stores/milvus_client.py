"""The connection to Milvus (``gallery.store: milvus``): one client per URI and process, a Milvus Lite file's server
log, calls whose miss is expected, and an index build waited for by bctflow.

A Milvus Lite file's server runs inside the process that opens it (gRPC server threads): what it logs — the engine's
warnings, the gRPC server's report of a request it could not serve, with its traceback — goes to its own log,
``<gallery.uri>.log`` beside the file (:func:`server_log`), as a Milvus server's goes to the server's, never to the
command's console. Its clients send no keepalive pings (:data:`_LITE_CHANNEL`) and wait for an index themselves
(:func:`create_index`): both asked the server for what it answers with an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.errors import ConfigError, IndexIntegrityError

__all__ = ["POLL_S", "STALLED_S", "client", "create_index", "forget", "may_miss", "release", "server_log"]

_CLIENTS: dict[str, Any] = {}
_QUIET = threading.local()


def _not_expected(_record: logging.LogRecord) -> bool:
    """A logging filter: drops pymilvus's report of a failed call made inside :func:`may_miss` on this thread."""
    return not getattr(_QUIET, "on", False)


@contextlib.contextmanager
def may_miss() -> Iterator[None]:
    """A call tried first because it usually succeeds (the alias or collection exists; each check first costs a
    round trip, 70-120 ms in Milvus Lite): pymilvus logs every failed call at ERROR with its traceback, so its miss
    is kept out of the log here (this thread only) and the caller decides what the miss means."""
    logging.getLogger("pymilvus.decorators").addFilter(_not_expected)  # once: a filter already there is not added again
    _QUIET.on = True
    try:
        yield
    finally:
        _QUIET.on = False


#: create_index: seconds between looks at a building index, and without a newly indexed row before it gives up
POLL_S, STALLED_S = 0.5, 600.0


#: the gRPC channel options of a Milvus Lite file's client: no keepalive pings (gRPC's own default). pymilvus pings
#: every 10 s, with no call in flight too; the Lite server (this process, loopback) keeps gRPC's default policy, which
#: answers the third such ping with GOAWAY "too_many_pings": printed by gRPC on the console and the connection dropped
#: (a backfill's command sat idle while its cluster embedded)
_LITE_CHANNEL = {"grpc.keepalive_time_ms": 2**31 - 1, "grpc.keepalive_permit_without_calls": False}
#: the loggers of a Milvus Lite server (its engine, its gRPC server), written to :func:`server_log`
_SERVER_LOGGERS = ("milvus_lite", "grpc._server")
_SERVER_LOG: list[logging.FileHandler] = []


def server_log(uri: str | Path) -> Path:
    """The log of the Milvus Lite file ``uri``'s server: ``<uri>.log`` beside it."""
    return Path(f"{uri}.log")


def _log_server_to(path: Path) -> None:
    """Send what this process's Milvus Lite server logs to ``path`` (appended; created at its first line), not to
    the console: the loggers stop passing records up to the root's handlers. The process's latest Lite file's log."""
    if _SERVER_LOG and _SERVER_LOG[0].baseFilename == os.path.abspath(path):
        return
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [pid %(process)d] %(message)s"))
    for name in _SERVER_LOGGERS:
        logger = logging.getLogger(name)
        for old in _SERVER_LOG:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    for old in _SERVER_LOG:
        old.close()
    _SERVER_LOG[:] = [handler]


def client(uri: str, timeout: float) -> Any:
    """One MilvusClient per URI and process (Milvus Lite serves one file per process); ``timeout`` seconds per call."""
    if uri not in _CLIENTS:
        from pymilvus import MilvusClient

        if "://" in uri:
            _CLIENTS[uri] = MilvusClient(uri, timeout=timeout)
        else:  # Milvus Lite: its server starts in this process now
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            _log_server_to(server_log(uri))
            _CLIENTS[uri] = _lite_client(uri, timeout)
    return _CLIENTS[uri]


def _lite_client(uri: str, timeout: float) -> Any:
    """A client of the Milvus Lite file ``uri``, whose server starts in this process; ConfigError in one line when it
    cannot (pymilvus says only "Open local milvus failed": the server's log has why, most often the file's lock,
    which one process holds at a time — a second `bctflow serve` replica, or a backfill beside a serving one)."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import ConnectionConfigException

    try:
        return MilvusClient(uri, timeout=timeout, grpc_options=_LITE_CHANNEL)
    except ConnectionConfigException as err:
        raise ConfigError(
            f"cannot open the Milvus Lite file {uri} ({err.message}; its server's log: {server_log(uri)}): Milvus "
            "Lite serves a file to one process at a time, and another one (a `bctflow serve` replica, a backfill) may "
            "hold it; stop that process, or put the gallery in a Milvus server (gallery.uri: http://host:19530) or "
            "LanceDB to share it between processes"
        ) from None


def create_index(db: Any, collection: str, spec: Any, kind: str, metric: str) -> None:
    """Create ``collection``'s vector index (``kind`` under ``metric``) and wait until it covers every row. The gRPC
    connection can be reset while the server builds (GOAWAY "too many pings", seen building HNSW over 1M rows in
    Milvus Lite before its clients stopped pinging) and pymilvus then retries a create that went through: the index
    the retry finds must be the one asked for (IndexIntegrityError in one line otherwise), and is waited for — as long
    as its indexed rows grow: a build that indexes no row for :data:`STALLED_S` seconds ends in one line (the written
    rows are kept; the same command builds the index again). Waited for here, not by pymilvus (``sync=False``), whose
    wait first asks the server for a timestamp: Milvus Lite does not implement that call, and its gRPC server logged
    the refusal at ERROR with a traceback."""
    from pymilvus.exceptions import MilvusException

    try:
        db.create_index(collection, spec, sync=False)
    except MilvusException as err:
        if "already exists" not in str(err):
            raise
    indexed, since = -1, time.monotonic()
    while True:
        found = db.describe_index(collection, "vector")
        if (found.get("index_type"), found.get("metric_type")) != (kind, metric):
            raise IndexIntegrityError(
                f"the Milvus collection {collection} holds a {found.get('index_type')} index under "
                f"{found.get('metric_type')}, not the {kind} under {metric} asked for; rebuild that gallery version"
            )
        if found.get("state", "Finished") == "Finished" and not found.get("pending_index_rows"):
            return
        if int(found.get("indexed_rows", 0)) > indexed:
            indexed, since = int(found.get("indexed_rows", 0)), time.monotonic()
        elif time.monotonic() - since > STALLED_S:
            raise IndexIntegrityError(
                f"the Milvus collection {collection}'s {kind} index has indexed {indexed} of "
                f"{found.get('total_rows', '?')} rows and none more for {STALLED_S:g} s (state "
                f"{found.get('state', '?')}); check the Milvus server and its logs, then run the same command again "
                "(the rows written are kept)"
            )
        time.sleep(POLL_S)


def forget(uri: str) -> None:
    """Drop ``uri``'s client without closing it (a client that did not answer): the next :func:`client` makes one."""
    _CLIENTS.pop(uri, None)


def release(uri: str) -> None:
    """Close ``uri``'s client, and for a Milvus Lite file stop this process's server (it holds the file's lock)."""
    db = _CLIENTS.pop(uri, None)
    if db is None:
        return
    db.close()
    if "://" not in uri:
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(uri)
