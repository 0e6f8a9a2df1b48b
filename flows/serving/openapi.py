"""The service's OpenAPI document: the routers' operations, as FastAPI describes them, and the query routes'.

The query routes (``POST /search``, ``POST /search/batch``) are answered by the app's outermost middleware as plain
ASGI (flows/serving/guard.py), so the router never sees them and FastAPI cannot describe them: :data:`QUERY_OPERATIONS`
describes them with routes that are never mounted — their bodies, the image bytes and multipart uploads ``/search``
also takes, their answers and refusals (flows/serving/schemas.py) — and :func:`openapi_schema` adds them to the app's.
The committed document is docs/openapi.json (flows/serving/openapi_doc.py).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Query
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from flows.serving.auth import require_token
from flows.serving.schemas import BatchHits, BatchSearch, Error, Hits, ImageSearch, VectorSearch

__all__ = ["QUERY_OPERATIONS", "openapi_schema", "operation_id"]

DESCRIPTION = (
    "Image and vector queries over a bctflow workspace's live gallery (docs/serving.md). Bad input gets a 4xx with "
    '`{"error": "<one line>"}`; a fault of the service a 500 of the same shape. With a bearer token '
    "(BCTFLOW_SERVE_TOKEN) every route but /health needs `Authorization: Bearer <token>`."
)

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_IMAGE_BODIES = {
    "image/*": _BINARY,  # PNG, JPEG, BMP, WebP
    "application/octet-stream": _BINARY,  # a uint8 .npy array, or an image without its type
    "multipart/form-data": {
        "schema": {
            "type": "object",
            "properties": {
                "image": {"type": "string", "format": "binary", "description": "the one file part: the image"},
                "k": {"type": "integer", "minimum": 1, "description": "overrides the query string's k"},
            },
            "required": ["image"],
        }
    },
}


def operation_id(route: APIRoute) -> str:
    """An operation's id in the document: its route's name (``search``, ``get_health``, …)."""
    return route.name


def _refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    why = {
        400: "the body does not parse (JSON, multipart)",
        401: "missing or wrong bearer token (when the service has one)",
        409: "a generation whose queries the live gallery cannot serve and no query adapter carries",
        413: "a body, image or batch above its serve: limit",
        415: "a file that is not an image",
        422: "any other bad query (its one line says what and how to fix it)",
        500: "a fault of the service, not of the request; the traceback is in the server's log",
    }
    return {s: {"model": Error, "description": why[s]} for s in statuses}


async def _search(
    body: Annotated[VectorSearch | ImageSearch, Body()],
    k: Annotated[
        int, Query(ge=1, description="how many neighbours for image bytes or an upload: 1 to serve.max_k")
    ] = 10,
) -> Hits:
    """One query: a vector of a generation, or an image — JSON with its base64 bytes, the image file's bytes as the
    body, or a multipart upload of one file part. Another method than POST gets 405 with `Allow: POST`."""
    raise NotImplementedError  # described only: flows/serving/search.py answers it


async def _search_batch(body: BatchSearch) -> BatchHits:
    """Up to serve.max_queries queries, each answered as `POST /search` answers it, all from one version; a bad vector
    fails the batch with its own status. Another method than POST gets 405 with `Allow: POST`."""
    raise NotImplementedError  # described only: flows/serving/search.py answers it


def _operation(path: str, endpoint: Any, **extra: Any) -> APIRoute:
    """A query route's operation, behind the token, with every refusal it may answer."""
    return APIRoute(
        path,
        endpoint,
        methods=["POST"],
        name=endpoint.__name__.lstrip("_"),
        tags=["queries"],
        dependencies=[Depends(require_token)],
        responses=_refusals(400, 401, 409, 413, 415, 422, 500),
        generate_unique_id_function=operation_id,
        **extra,
    )


QUERY_OPERATIONS = (
    _operation("/search", _search, openapi_extra={"requestBody": {"content": _IMAGE_BODIES}}),
    _operation("/search/batch", _search_batch),
)


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """``app``'s OpenAPI document (built once): :data:`QUERY_OPERATIONS`, then the routes the app mounts."""
    if app.openapi_schema is None:
        app.openapi_schema = get_openapi(
            title=app.title,
            version=version("bctflow"),
            description=DESCRIPTION,
            routes=[*QUERY_OPERATIONS, *app.routes],
        )
    return app.openapi_schema
