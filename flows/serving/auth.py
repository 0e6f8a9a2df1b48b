"""The bearer token: with one set (``BCTFLOW_SERVE_TOKEN``) every request but ``/health``'s needs
``Authorization: Bearer <token>``, else 401 with one line.

One check, :meth:`BearerToken.allows`, on the request's ASGI scope: the query routes' fast path
(flows/serving/guard.py) asks it before reading a body; the routers ask it through the FastAPI dependency
:func:`require_token` (which also puts the scheme in the OpenAPI document); and a request no route answers (404, 405)
asks it in :func:`answer_http_error`, so without the token every path but ``/health`` answers 401 alike.
"""

from __future__ import annotations

import hmac
from typing import Annotated

import orjson
from fastapi import Request, Response, Security
from fastapi.exception_handlers import http_exception_handler
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.types import Scope

__all__ = ["OPEN_PATHS", "UNAUTHORIZED", "BearerToken", "answer_http_error", "bearer_scheme", "require_token"]

UNAUTHORIZED = "missing or wrong bearer token; send Authorization: Bearer <token>"
#: the paths any client may ask
OPEN_PATHS = frozenset({"/health"})

#: the scheme as the OpenAPI document names it (the check is :meth:`BearerToken.allows`, not this parser)
bearer_scheme = HTTPBearer(
    scheme_name="bearer",
    description="required on every route but /health when the service runs with BCTFLOW_SERVE_TOKEN set",
    auto_error=False,
)


class BearerToken:
    """The token every request but ``/health``'s must carry (None: none)."""

    def __init__(self, token: str | None) -> None:
        self.expected = None if token is None else f"Bearer {token}".encode()

    def allows(self, scope: Scope) -> bool:
        """Whether the request of ``scope`` may be answered: no token is set, its path is open, or its
        ``Authorization`` header is the token (compared in constant time)."""
        if self.expected is None or scope["path"] in OPEN_PATHS:
            return True
        given = dict(scope["headers"]).get(b"authorization", b"")
        return hmac.compare_digest(given, self.expected)


async def require_token(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]
) -> None:
    """The routers' dependency: 401 (:data:`UNAUTHORIZED`) unless the app's :class:`BearerToken` allows the request."""
    if not request.app.state.token.allows(request.scope):
        raise HTTPException(401, UNAUTHORIZED)


async def answer_http_error(request: Request, err: Exception) -> Response:
    """The answer to an HTTPException (a 404 or 405 of the router, a 401 of :func:`require_token`): 401 with one line
    to a request without the token, whatever its path; else FastAPI's own answer."""
    assert isinstance(err, HTTPException)
    if err.status_code == 401 or not request.app.state.token.allows(request.scope):
        return Response(orjson.dumps({"error": UNAUTHORIZED}), 401, media_type="application/json")
    return await http_exception_handler(request, err)
