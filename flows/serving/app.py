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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from flows.serving.batching import DynamicBatcher
from flows.serving.queries import (
    ImageQuery,
    QueryError,
    answer_images,
    answer_vectors,
    check_k,
    check_vector_query,
    decode_query,
)
from flows.serving.swap import SwapManager

__all__ = ["create_app"]

_JSON = "application/json"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise QueryError(413, f"the request body is {declared} bytes, more than serve.max_body_bytes ({limit})")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise QueryError(413, f"the request body is more than serve.max_body_bytes ({limit}) bytes")
    return bytes(data)


def _json(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise QueryError(400, f"the body is not valid JSON ({err.__class__.__name__}: {err}); fix the JSON") from None
    if not isinstance(body, dict):
        raise QueryError(422, 'the JSON body must be an object such as {"vector": [...], "generation": 0, "k": 10}')
    return body


def create_app(manager: SwapManager, *, token: str | None = None) -> FastAPI:
    """The app over ``manager``'s live version (loaded already); ``token``: the bearer token every route but
    ``/health`` requires (None: none)."""
    params, metrics = manager.params.serve, manager.metrics
    images = DynamicBatcher(
        lambda v, qs: answer_images(v, qs, params.merge),
        max_batch=params.max_batch,
        max_wait_ms=params.max_wait_ms,
        on_batch=metrics.batch.labels("image").observe,
    )
    vectors = DynamicBatcher(
        answer_vectors,
        max_batch=params.max_batch,
        max_wait_ms=params.max_wait_ms,
        on_batch=metrics.batch.labels("vector").observe,
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

    app = FastAPI(title="bctflow serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.perf_counter()
        path = request.url.path
        if token is not None and path != "/health":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                response: Response = _error(401, "missing or wrong bearer token; send Authorization: Bearer <token>")
                metrics.requests.labels(path, "401").inc()
                return response
        try:
            response = await call_next(request)
        except QueryError as err:
            response = _error(err.status, err.message)
        if 400 <= response.status_code < 500:
            metrics.refused.labels(str(response.status_code)).inc()
        metrics.requests.labels(path, str(response.status_code)).inc()
        metrics.latency.labels(path).observe(time.perf_counter() - t0)
        return response

    async def one_query(version: Any, body: dict[str, Any] | None, data: bytes, k: Any) -> Any:
        if body is None:  # image bytes
            image = await asyncio.to_thread(decode_query, data, version, params.max_pixels)
            return await images.submit(version, ImageQuery(image, check_k(k, params.max_k)))
        kk = check_k(body.get("k", 10), params.max_k)
        if "image" in body:
            raw = _b64(body["image"])
            image = await asyncio.to_thread(decode_query, raw, version, params.max_pixels)
            return await images.submit(version, ImageQuery(image, kk))
        if "vector" not in body:
            raise QueryError(422, "send `vector` + `generation` (a query vector) or `image` (base64), or image bytes")
        return await vectors.submit(version, check_vector_query(version, body["vector"], body.get("generation"), kk))

    @app.post("/search")
    async def search(request: Request) -> Response:
        version = manager.current  # this request answers from this version alone
        try:
            data = await _body(request, params.max_body_bytes)
            is_json = request.headers.get("content-type", "").split(";")[0].strip() == _JSON
            body = _json(data) if is_json else None
            return JSONResponse(await one_query(version, body, data, request.query_params.get("k", 10)))
        except QueryError as err:
            return _error(err.status, err.message)

    @app.post("/search/batch")
    async def search_batch(request: Request) -> Response:
        version = manager.current
        try:
            body = _json(await _body(request, params.max_body_bytes))
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
            return JSONResponse({"results": list(results), "answered_by": version.describe()})
        except QueryError as err:
            return _error(err.status, err.message)

    @app.get("/health")
    async def health() -> Response:
        v = manager.current
        body = {
            "live": True,
            "ready": v is not None,
            "version": manager.describe(),
            "lineage_reachable": manager.lineage_reachable,
            "last_reload_error": manager.last_error,
        }
        return JSONResponse(body, status_code=200 if v is not None else 503)

    @app.get("/generations")
    async def generations() -> Response:
        v = manager.current
        f = v.facts
        return JSONResponse(
            {
                "live_gallery": {**v.describe(), "generation_mix": {str(g): n for g, n in v.mix.items()}},
                "production_generation": f.production,
                "image_queries_embedded_by": v.query_generation,
                "compatible_generations": list(f.compatible),
                "lineage_generations": list(f.known),
                "merge": params.merge,
            }
        )

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/admin/reload")
    async def reload() -> Response:
        result = await asyncio.get_running_loop().run_in_executor(manager.loader, lambda: manager.reload(force=True))
        return JSONResponse(result, status_code=200 if result["error"] is None else 409)

    return app


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise QueryError(422, "`image` must be the image's bytes as a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise QueryError(422, "`image` is not valid base64; encode the image's bytes with base64") from None
