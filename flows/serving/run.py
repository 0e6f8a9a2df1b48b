"""Start the service: check where it may bind, load the live version, run uvicorn until SIGTERM / Ctrl-C.

Safe by default: it binds 127.0.0.1; any other address needs a bearer token in ``BCTFLOW_SERVE_TOKEN``. The
service only reads the workspace. On SIGTERM or Ctrl-C uvicorn stops accepting, lets in-flight requests finish
and exits within 5 s.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os
from collections.abc import Callable

from components.errors import ConfigError
from flows.params import Params
from flows.runtime.workspace import Workspace
from flows.serving.metrics import ServeMetrics
from flows.serving.swap import SwapManager

__all__ = ["TOKEN_ENV", "check_bind", "serve"]

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


def serve(ws: Workspace, params: Params, host: str, port: int, announce: Callable[[str], None] = print) -> None:
    """Serve the workspace's live gallery on ``host``:``port`` until stopped (``announce``: the start line)."""
    import uvicorn

    from components.training.device import select_device
    from flows.serving.app import create_app

    token = os.environ.get(TOKEN_ENV) or None
    check_bind(host, token)
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
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=DRAIN_S, access_log=False
    )
    gc.freeze()  # see SwapManager.reload: the collector never walks what the service started with
    server = uvicorn.Server(config)
    v = manager.current
    assert v is not None
    announce(
        f"serving {ws.home}: version {v.number}, gallery generation {v.facts.generation} ({v.index.ntotal} items), "
        f"image queries embedded by generation {v.query_generation}, on http://{host}:{port}"
    )
    server.run()
