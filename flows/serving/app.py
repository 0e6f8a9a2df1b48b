"""The HTTP app (FastAPI): ``POST /search``, ``POST /search/batch``, ``GET /health``, ``GET /generations``,
``GET /metrics``, ``POST /admin/reload``. docs/serving.md documents every route.

A request takes the serving version once, when it starts, and answers from it alone; the response names it
(``answered_by``). Bad input gets a 4xx with ``{"error": "<one line>"}`` and the service keeps serving. With a
bearer token (``BCTFLOW_SERVE_TOKEN``) every route but ``/health`` needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flows.serving.batching import DynamicBatcher
from flows.serving.metrics import ServeMetrics
from flows.serving.queries import (
    ImageQuery,
    QueryError,
    answer_vectors,
    check_k,
    check_vector_query,
    embed_images,
    search_images,
)
from flows.serving.swap import SwapManager

__all__ = ["create_app"]

_JSON = "application/json"
#: the routes (the metrics' endpoint label; any other path counts as "other")
_ROUTES = frozenset({"/search", "/search/batch", "/health", "/generations", "/metrics", "/admin/reload"})


def _json_response(body: Any, status: int = 200) -> Response:
    """A JSON response encoded by orjson (several times faster than the standard library's encoder)."""
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON)


class _Guard:
    """Pure ASGI middleware around every route: the bearer token, request counts by status, latency — and the query
    routes (``queries``: ``POST /search`` and ``POST /search/batch``) answered here, as plain ASGI endpoints, instead
    of through the router: Starlette's exception middleware, routing, request and query-string objects cost 30% of
    the event loop's Python per query (py-spy, image queries at concurrency 32); another method on their paths gets
    405 with ``Allow: POST`` here (the router, which never sees them, would say 404). Any other path goes on to the
    FastAPI app.

    (``@app.middleware("http")`` would wrap each request in a task and a memory stream of its own, per-request work
    a small query does not need.)
    """

    def __init__(
        self, app: ASGIApp, *, metrics: ServeMetrics, token: str | None, queries: dict[str, ASGIApp] | None = None
    ) -> None:
        self.app, self.metrics, self.queries = app, metrics, queries or {}
        self.bearer = None if token is None else f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0, path = time.perf_counter(), scope["path"]
        endpoint = path if path in _ROUTES else "other"  # a bounded label set whatever paths clients send
        status = 500
        if self.bearer is not None and path != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.bearer):
                why = "missing or wrong bearer token; send Authorization: Bearer <token>"
                await _send_json(send, {"error": why}, 401)
                self.metrics.answered(endpoint, 401, time.perf_counter() - t0)
                return

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        method = scope["method"]
        if path in self.queries and method != "POST":  # the router never sees these paths: its 405, here
            why = f"{method} is not allowed on {path}; send the query with POST"
            await _send_json(send, {"error": why}, 405, [(b"allow", b"POST")])
            self.metrics.answered(endpoint, 405, time.perf_counter() - t0)
            return
        app = self.queries.get(path, self.app) if method == "POST" else self.app
        try:
            await app(scope, receive, send_status)
        except _Disconnected:
            status = 499
        finally:
            self.metrics.answered(endpoint, status, time.perf_counter() - t0)


class _Disconnected(Exception):
    """The client went away before its request's body arrived."""


async def _body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, read within ``limit`` bytes (a declared or actual larger body: 413 before reading on)."""
    declared = _header(scope, b"content-length")
    if declared.isdigit() and int(declared) > limit:
        raise QueryError(413, f"the request body is {declared} bytes, more than serve.max_body_bytes ({limit})")
    data = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected  # no one to answer: counted as 499 (nginx's "client closed request")
        data += message.get("body", b"")
        if len(data) > limit:
            raise QueryError(413, f"the request body is more than serve.max_body_bytes ({limit}) bytes")
        if not message.get("more_body", False):
            return bytes(data)


def _header(scope: Scope, name: bytes) -> str:
    """A request header's value ('' when absent); ``name`` lower case, as ASGI servers pass header names."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


def _query_k(scope: Scope) -> Any:
    """The query string's ``k`` (a string, checked later), 10 when it has none."""
    qs = scope["query_string"]
    if not qs:
        return 10
    return dict(urllib.parse.parse_qsl(qs.decode("latin-1"))).get("k", 10)


async def _send_json(send: Send, body: Any, status: int = 200, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """One JSON response (orjson), sent as the two ASGI messages it is; ``extra``: more headers."""
    payload = orjson.dumps(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _upload(scope: Scope, data: bytes, k: Any) -> tuple[bytes, Any]:
    """(the file's bytes, k) of a multipart/form-data upload: its one file part, and its ``k`` field if it has one
    (else the query string's). ``data``: the body, read within serve.max_body_bytes already."""

    async def replay() -> Message:
        return {"type": "http.request", "body": data, "more_body": False}

    try:
        form = await Request(scope, replay).form(max_files=1, max_fields=16)
    except (HTTPException, MultiPartException) as err:
        why = getattr(err, "detail", None) or getattr(err, "message", None) or str(err)
        raise QueryError(400, f"the multipart upload is malformed ({why}); send one file: -F image=@q.png") from None
    try:
        files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
        if not files:
            raise QueryError(422, "the multipart upload holds no file; send the image as a file part: -F image=@q.png")
        return await files[0].read(), form.get("k", k)
    finally:
        await form.close()


def _json(data: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:  # the standard parser reads NaN / Infinity (refused later with their own line) and names the error
            body = json.loads(data)
        except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, an int of >4300 digits
            why = f"{err.__class__.__name__}: {err}"
            raise QueryError(400, f"the body is not valid JSON ({why}); fix the JSON") from None
    if not isinstance(body, dict):
        raise QueryError(422, 'the JSON body must be an object such as {"vector": [...], "generation": 0, "k": 10}')
    return body


def create_app(manager: SwapManager, *, token: str | None = None) -> FastAPI:
    """The app over ``manager``'s live version (loaded already); ``token``: the bearer token every route but
    ``/health`` requires (None: none)."""
    params, metrics = manager.params.serve, manager.metrics
    images = DynamicBatcher(
        lambda v, qs: embed_images(v, qs, params.merge, params.max_pixels),
        search_images,
        max_batch=params.max_batch,
        max_wait_ms=params.max_wait_ms,
        on_batch=metrics.batch.labels("image").observe,
        name="image",
    )
    # vectors wait on no timer: a batch is whatever arrived while the last search ran (a FAISS call shares too little
    # across queries to pay for a wait: 6,400 q/s at 0 ms against 3,900 at 2 ms measured at concurrency 16)
    vectors = DynamicBatcher(
        answer_vectors,
        max_batch=params.max_batch,
        max_wait_ms=0.0,
        on_batch=metrics.batch.labels("vector").observe,
        name="vector",
    )

    async def watch() -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(params.watch_interval_s)
            with contextlib.suppress(Exception):  # a failed load is reported by the manager, never fatal
                if await loop.run_in_executor(manager.loader, manager.changed):
                    await loop.run_in_executor(manager.loader, manager.reload)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        images.start()
        vectors.start()
        watcher = asyncio.get_running_loop().create_task(watch())
        yield
        watcher.cancel()
        await images.stop()
        await vectors.stop()
        manager.close()

    # FastAPI's native OpenTelemetry off: with it on, every request looks up the tracer and meter providers (6% of the
    # service's CPU on a vector query, measured by py-spy); the service's metrics are its own Prometheus ones
    off = {"tracing": False, "metrics": False, "logs": False}
    app = FastAPI(
        title="bctflow serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None, telemetry=off
    )

    @app.exception_handler(Exception)
    async def internal_error(_: Request, err: Exception) -> Response:
        """A fault of the service, not of the request (no input should get here): Starlette's outermost middleware
        answers this one-line JSON 500 instead of its plain-text page, then re-raises, so uvicorn logs the
        traceback."""
        why = f"internal error ({err.__class__.__name__}); the service keeps serving: report it with the server's log"
        return _json_response({"error": why}, 500)

    def route(path: str, method: str) -> Any:
        """A plain Starlette route (the endpoint takes the Request, returns a Response): FastAPI's own routes would
        solve dependencies and validate for every request, work these hand-checked endpoints do not use (10% of
        the service's CPU on a vector query, measured by py-spy)."""

        def add(endpoint: Any) -> Any:
            app.add_route(path, endpoint, methods=[method], include_in_schema=False)
            return endpoint

        return add

    async def one_query(version: Any, body: dict[str, Any] | None, data: bytes, k: Any) -> Any:
        if body is None:  # image bytes
            return await images.submit(version, ImageQuery(data, check_k(k, params.max_k)))
        kk = check_k(body.get("k", 10), params.max_k)
        if "image" in body and "vector" in body:
            why = "the query holds both `vector` and `image`; send either `vector` or `image`, not both"
            raise QueryError(422, why)
        if "image" in body:
            return await images.submit(version, ImageQuery(_b64(body["image"]), kk))
        if "vector" not in body:
            raise QueryError(422, "send `vector` + `generation` (a query vector) or `image` (base64), or image bytes")
        return await vectors.submit(version, check_vector_query(version, body["vector"], body.get("generation"), kk))

    async def search(scope: Scope, receive: Receive, send: Send) -> None:
        version = manager.acquire()  # this request answers from this version alone
        try:
            data = await _body(scope, receive, params.max_body_bytes)
            kind = _header(scope, b"content-type").split(";")[0].strip()
            k = _query_k(scope)
            if kind == "multipart/form-data":
                data, k = await _upload(scope, data, k)
            body = _json(data) if kind == _JSON else None
            answer, status = await one_query(version, body, data, k), 200
        except QueryError as err:
            answer, status = {"error": err.message}, err.status
        finally:
            manager.release(version)
        await _send_json(send, answer, status)

    async def search_batch(scope: Scope, receive: Receive, send: Send) -> None:
        version = manager.acquire()
        try:
            body = _json(await _body(scope, receive, params.max_body_bytes))
            queries = body.get("queries")
            if not isinstance(queries, list) or not queries:
                raise QueryError(422, '`queries` must be a non-empty list of {"vector", "generation"} or {"image"}')
            if len(queries) > params.max_queries:
                raise QueryError(413, f"{len(queries)} queries in one batch, more than serve.max_queries")
            k = body.get("k", 10)
            for q in queries:
                if not isinstance(q, dict):
                    raise QueryError(422, "every entry of `queries` must be a JSON object")
            prepared = [{"k": k, **q} for q in queries]
            results = await asyncio.gather(*(one_query(version, q, b"", None) for q in prepared))
            answer, status = {"results": list(results), "answered_by": version.describe()}, 200
        except QueryError as err:
            answer, status = {"error": err.message}, err.status
        finally:
            manager.release(version)
        await _send_json(send, answer, status)

    app.add_middleware(_Guard, metrics=metrics, token=token, queries={"/search": search, "/search/batch": search_batch})

    @route("/health", "GET")
    async def health(_: Request) -> Response:
        v = manager.current
        body = {
            "live": True,
            "ready": v is not None,
            "version": manager.describe(),
            "lineage_reachable": manager.lineage_reachable,
            "last_reload_error": manager.last_error,
        }
        return _json_response(body, 200 if v is not None else 503)

    @route("/generations", "GET")
    async def generations(_: Request) -> Response:
        v = manager.current
        f = v.facts
        return _json_response(
            {
                "live_gallery": {**v.describe(), "generation_mix": {str(g): n for g, n in v.mix.items()}},
                "production_generation": f.production,
                "image_queries_embedded_by": v.query_generation,
                "compatible_generations": list(f.compatible),
                "adapted_generations": {str(g): v.route(g) for g in sorted(v.adapters)},
                "lineage_generations": list(f.known),
                "merge": params.merge,
            }
        )

    @route("/metrics", "GET")
    async def prometheus(_: Request) -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @route("/admin/reload", "POST")
    async def reload(_: Request) -> Response:
        result = await asyncio.get_running_loop().run_in_executor(manager.loader, lambda: manager.reload(force=True))
        return _json_response(result, 200 if result["error"] is None else 409)

    return app


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise QueryError(422, "`image` must be the image's bytes as a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise QueryError(422, "`image` is not valid base64; encode the image's bytes with base64") from None
