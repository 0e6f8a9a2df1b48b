"""The app's outermost middleware (pure ASGI): every request counted by route and status with its latency, and the
query routes answered here, as plain ASGI endpoints (flows/serving/search.py), instead of through the router.

(``@app.middleware("http")`` would wrap each request in a task and a memory stream of its own, per-request work a
small query does not need.)
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flows.serving.auth import UNAUTHORIZED, BearerToken
from flows.serving.metrics import ServeMetrics
from flows.serving.search import Disconnected, send_json

__all__ = ["ROUTES", "Guard"]

#: the routes (the metrics' endpoint label; any other path counts as "other")
ROUTES = frozenset({"/search", "/search/batch", "/health", "/generations", "/metrics", "/admin/reload"})


class Guard:
    """Counts every request (``metrics``) and answers the query routes (``queries``: path → ASGI endpoint) itself:
    the bearer token first (:meth:`BearerToken.allows`, 401), then another method than POST (405 with ``Allow: POST``:
    the router, which never sees these paths, would say 404). Any other path goes on to the FastAPI app, whose
    routers check the token themselves."""

    def __init__(self, app: ASGIApp, *, metrics: ServeMetrics, token: BearerToken, queries: dict[str, ASGIApp]) -> None:
        self.app, self.metrics, self.token, self.queries = app, metrics, token, queries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0, path = time.perf_counter(), scope["path"]
        endpoint = path if path in ROUTES else "other"  # a bounded label set whatever paths clients send
        query = self.queries.get(path)
        # a query's checks before its body: only asked when one may refuse (a token set, not a POST)
        if query is not None and (self.token.expected is not None or scope["method"] != "POST"):
            refusal = self._refusal(scope)
            if refusal is not None:
                status, why, extra = refusal
                await send_json(send, {"error": why}, status, extra)
                self.metrics.answered(endpoint, status, time.perf_counter() - t0)
                return
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await (query or self.app)(scope, receive, send_status)
        except Disconnected:
            status = 499
        finally:
            self.metrics.answered(endpoint, status, time.perf_counter() - t0)

    def _refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        """(status, one line, extra headers) of a query request refused before its body is read, else None."""
        if not self.token.allows(scope):
            return 401, UNAUTHORIZED, []
        method = scope["method"]
        if method != "POST":
            return 405, f"{method} is not allowed on {scope['path']}; send the query with POST", [(b"allow", b"POST")]
        return None
