"""The HTTP app (FastAPI), wired from its parts: the query routes answered as plain ASGI by the outermost middleware
(flows/serving/guard.py, flows/serving/search.py), the batched answers (flows/serving/answers.py), the routers off
the query path (flows/serving/routes.py), the bearer token (flows/serving/auth.py) and the OpenAPI document
(flows/serving/openapi.py). docs/serving.md documents every route; docs/openapi.json is the document.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import partial

import orjson
from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException

from flows.serving.answers import Answers
from flows.serving.auth import BearerToken, answer_http_error
from flows.serving.guard import Guard
from flows.serving.openapi import openapi_schema, operation_id
from flows.serving.routes import ROUTERS
from flows.serving.search import QueryRoutes
from flows.serving.swap import SwapManager

__all__ = ["create_app"]

#: FastAPI's native OpenTelemetry off: with it on, every request looks up the tracer and meter providers (6% of the
#: service's CPU on a vector query, measured by py-spy); the service's metrics are its own Prometheus ones
_NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False}


def create_app(manager: SwapManager, *, token: str | None = None) -> FastAPI:
    """The app over ``manager``'s live version (loaded before it serves; the app itself reads nothing until a
    request comes); ``token``: the bearer token every route but ``/health`` requires (None: none)."""
    app = FastAPI(
        title="bctflow serve",
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # the document is docs/openapi.json: the service does not serve it
        telemetry=_NO_TELEMETRY,
        generate_unique_id_function=operation_id,
    )
    app.state.manager, app.state.token = manager, BearerToken(token)
    app.state.answers = Answers(manager.params.serve, manager.metrics)
    for router in ROUTERS:
        app.include_router(router)
    app.add_exception_handler(HTTPException, answer_http_error)
    app.add_exception_handler(Exception, _internal_error)
    queries = QueryRoutes(manager, app.state.answers).endpoints
    app.add_middleware(Guard, metrics=manager.metrics, token=app.state.token, queries=queries)
    app.openapi = partial(openapi_schema, app)  # type: ignore[method-assign]
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """While the app serves: the batchers' loops, and the watch that swaps in a new live version."""
    answers, manager = app.state.answers, app.state.manager
    answers.start()
    watcher = asyncio.get_running_loop().create_task(manager.watch())
    yield
    watcher.cancel()
    await answers.stop()
    manager.close()


async def _internal_error(_: Request, err: Exception) -> Response:
    """A fault of the service, not of the request (no input should get here): Starlette's outermost middleware answers
    this one-line JSON 500 instead of its plain-text page, then re-raises, so uvicorn logs the traceback."""
    why = f"internal error ({err.__class__.__name__}); the service keeps serving: report it with the server's log"
    return Response(orjson.dumps({"error": why}), 500, media_type="application/json")
