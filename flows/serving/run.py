"""Start the service: check where it may bind, listen there, load the live version, run uvicorn until SIGTERM / Ctrl-C.

Safe by default: it binds 127.0.0.1; any other address needs a bearer token in ``BCTFLOW_SERVE_TOKEN``. The port is
held before the version loads (:func:`listen`), so a port another process holds — another replica's — is refused in
one line at once, not after the load, and the start line names a port the service holds. The service only reads the
workspace, so any number of them (replicas, each on its own port) serve one workspace side by side
(docs/serving.md, "Replicas"). On SIGTERM or Ctrl-C uvicorn stops accepting, lets in-flight requests finish and
exits within 5 s.
"""

from __future__ import annotations

import errno
import gc
import ipaddress
import logging
import os
import socket
from collections.abc import Callable

from components.errors import ConfigError
from flows.params import Params
from flows.runtime.workspace import Workspace
from flows.serving.metrics import ServeMetrics
from flows.serving.swap import SwapManager

__all__ = ["TOKEN_ENV", "check_bind", "listen", "serve"]

TOKEN_ENV = "BCTFLOW_SERVE_TOKEN"
#: seconds SIGTERM / Ctrl-C gives in-flight requests
DRAIN_S = 4


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """A non-loopback ``host`` needs a token (ConfigError otherwise)."""
    if not _loopback(host) and not token:
        raise ConfigError(
            f"binding {host} exposes the service beyond this machine; set {TOKEN_ENV}=<secret> (clients send "
            "Authorization: Bearer <secret>) or bind 127.0.0.1"
        )


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host``:``port``, for uvicorn to serve on once the version is loaded (a connection
    made meanwhile waits in its backlog). Listening, not only bound: with SO_REUSEADDR two sockets that do not listen
    may bind one port, so two replicas started together on it would both load and the second fail only at the end.
    ConfigError in one line when the address cannot be had: a port in use (another replica on the same port), an
    address this machine does not have, a port it may not use."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn binds a host
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port left in TIME_WAIT is free
    try:
        sock.bind((host, port))
        sock.listen()
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"{host}:{port} is already in use (another `bctflow serve` replica, or another program); give each "
                "replica its own --port"
            ) from None
        raise ConfigError(
            f"cannot bind {host}:{port} ({err.strerror or err}); pick a --host this machine has (127.0.0.1, or an "
            "address of one of its interfaces) and a --port it may use (1024 or above unless root)"
        ) from None
    sock.set_inheritable(True)
    return sock


def serve(ws: Workspace, params: Params, host: str, port: int, announce: Callable[[str], None] = print) -> None:
    """Serve the workspace's live gallery on ``host``:``port`` until stopped (``announce``: the start line)."""
    token = os.environ.get(TOKEN_ENV) or None
    check_bind(host, token)
    sock = listen(host, port)  # before the load: a port in use is refused at once
    try:
        _serve_on(sock, ws, params, token, announce=announce)
    finally:
        sock.close()


def _serve_on(
    sock: socket.socket, ws: Workspace, params: Params, token: str | None, *, announce: Callable[[str], None]
) -> None:
    """Load the live version, then serve it on the listening ``sock`` until stopped."""
    import uvicorn

    from components.training.device import select_device
    from flows.serving.app import create_app

    log = logging.getLogger("bctflow.serve")
    log.setLevel(logging.INFO)
    if not log.handlers:  # the swaps and releases (INFO) on stderr, each with its time; without one only warnings
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s bctflow.serve %(levelname)s %(message)s"))
        log.addHandler(handler)
    device = str(select_device(params.serve.device))
    manager = SwapManager(ws, params, ServeMetrics(), device=device)
    manager.reload(force=True)  # the first version; a failure here stops the command with its message
    app = create_app(manager, token=token)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=DRAIN_S, access_log=False
    )
    gc.freeze()  # see SwapManager.reload: the collector never walks what the service started with
    server = uvicorn.Server(config)
    v = manager.current
    assert v is not None
    where = f"[{host}]" if ":" in host else host
    announce(
        f"serving {ws.home}: version {v.number}, gallery generation {v.facts.generation} ({v.index.ntotal} items), "
        f"image queries embedded by generation {v.query_generation}, on http://{where}:{port}"
    )
    server.run(sockets=[sock])  # uvicorn serves on the socket that listens since before the load
