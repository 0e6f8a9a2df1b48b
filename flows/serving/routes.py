"""The routes off the query path, as FastAPI routers: ``GET /health`` (open), ``GET /generations``, ``GET /metrics``
and ``POST /admin/reload`` (behind the bearer token, :func:`~flows.serving.auth.require_token`). Each reads the
app's :class:`~flows.serving.swap.SwapManager` (``app.state.manager``) and answers a typed body
(flows/serving/schemas.py). The query routes are not here: flows/serving/search.py answers them as plain ASGI.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from flows.serving.auth import require_token
from flows.serving.schemas import Error, Generations, Health, Reload
from flows.serving.swap import SwapManager

__all__ = ["ROUTERS", "PrometheusText", "admin", "generations", "health", "metrics"]


class PrometheusText(Response):
    """The Prometheus text format's response."""

    media_type = "text/plain; version=0.0.4; charset=utf-8"


def _manager(request: Request) -> SwapManager:
    return request.app.state.manager


Manager = Annotated[SwapManager, Depends(_manager)]
#: what the routers behind the token share: the dependency and its answer in the OpenAPI document (JSON whatever the
#: route's own answers are: the schema named, not a model, which FastAPI would give the route's media type)
_GUARDED: dict[str, Any] = {
    "dependencies": [Depends(require_token)],
    "responses": {
        401: {
            "description": "missing or wrong bearer token (when the service has one)",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{Error.__name__}"}}},
        }
    },
}

health = APIRouter(tags=["operations"])
generations = APIRouter(tags=["operations"], **_GUARDED)
metrics = APIRouter(tags=["operations"], **_GUARDED)
admin = APIRouter(prefix="/admin", tags=["admin"], **_GUARDED)
ROUTERS = (health, generations, metrics, admin)


@health.get("/health", responses={503: {"model": Health, "description": "not ready: no version loaded yet"}})
async def get_health(manager: Manager, response: Response) -> Health:
    """Liveness and readiness: the version loaded, whether the lineage is reachable, the last failed reload, a switch
    the service waits for CURRENT to complete."""
    ready = manager.current is not None
    response.status_code = 200 if ready else 503
    return Health(
        live=True,
        ready=ready,
        version=manager.describe(),
        lineage_reachable=manager.lineage_reachable,
        last_reload_error=manager.last_error,
        switch_pending=manager.switch_pending(),
    )


@generations.get("/generations")
async def get_generations(manager: Manager) -> Generations:
    """The live gallery (version, generation mix), the production generation, which generation embeds image
    queries, the compatible and the adapted generations."""
    v = manager.current
    f = v.facts
    return Generations(
        live_gallery={**v.describe(), "generation_mix": {str(g): n for g, n in v.mix.items()}},
        production_generation=f.production,
        image_queries_embedded_by=v.query_generation,
        compatible_generations=list(f.compatible),
        adapted_generations={str(g): v.route(g) for g in sorted(v.adapters)},
        lineage_generations=list(f.known),
        merge=manager.params.serve.merge,
    )


@metrics.get("/metrics", response_class=PrometheusText, responses={200: {"description": "the Prometheus text format"}})
async def get_metrics(manager: Manager) -> PrometheusText:
    """Requests by route and status, latency and batch-size histograms, swaps, failed swaps, refused queries."""
    return PrometheusText(manager.metrics.text())


@admin.post("/reload", responses={409: {"model": Reload, "description": "the new version failed; the old one serves"}})
async def reload(manager: Manager, response: Response) -> Reload:
    """Load the live version now: 200 swapped (or unchanged), 409 it failed and the old version keeps serving."""
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(manager.loader, lambda: manager.reload(force=True))
    response.status_code = 200 if result["error"] is None else 409
    return Reload(**result)
