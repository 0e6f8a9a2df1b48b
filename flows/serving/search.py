"""The query routes, ``POST /search`` and ``POST /search/batch``, as plain ASGI endpoints: the body read within
``serve.max_body_bytes``, parsed (JSON by orjson, a multipart upload, or image bytes), each query checked
(flows/serving/queries.py) and handed to its batched answer (flows/serving/answers.py), the answer written by orjson.

They run past Starlette's exception middleware, routing, request and query-string objects — 30% of the event loop's
Python per query (py-spy, image queries at concurrency 32) — and validate by hand, not with the pydantic models of
flows/serving/schemas.py (which describe them in the OpenAPI document): the checks give each refusal its own status and
one line. A request takes the serving version once, when it starts, and answers from it alone.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import urllib.parse
from typing import Any

import orjson
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from flows.serving.answers import Answers
from flows.serving.queries import ImageQuery, QueryError, check_k, check_vector_query
from flows.serving.swap import SwapManager

__all__ = ["Disconnected", "QueryRoutes", "send_json"]

_JSON = "application/json"


class Disconnected(Exception):
    """The client went away before its request's body arrived."""


class QueryRoutes:
    """The query routes over ``manager``'s serving version: :attr:`endpoints`, path → ASGI endpoint."""

    def __init__(self, manager: SwapManager, answers: Answers) -> None:
        self.manager, self.answers, self.params = manager, answers, manager.params.serve
        self.endpoints = {"/search": self.search, "/search/batch": self.search_batch}

    async def one_query(self, version: Any, body: dict[str, Any] | None, data: bytes, k: Any) -> Any:
        """One query's hits: image bytes (``body`` None: ``data``, ``k`` from the query string or the form) or a JSON
        object (a vector with its generation, or a base64 image)."""
        max_k = self.params.max_k
        if body is None:  # image bytes
            return await self.answers.image(version, ImageQuery(data, check_k(k, max_k)))
        kk = check_k(body.get("k", 10), max_k)
        if "image" in body and "vector" in body:
            why = "the query holds both `vector` and `image`; send either `vector` or `image`, not both"
            raise QueryError(422, why)
        if "image" in body:
            return await self.answers.image(version, ImageQuery(_b64(body["image"]), kk))
        if "vector" not in body:
            raise QueryError(422, "send `vector` + `generation` (a query vector) or `image` (base64), or image bytes")
        return await self.answers.vector(
            version, check_vector_query(version, body["vector"], body.get("generation"), kk)
        )

    async def search(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /search``: one query (image bytes, a multipart upload, or JSON)."""
        manager = self.manager
        version = manager.acquire()  # this request answers from this version alone
        try:
            data = await _body(scope, receive, self.params.max_body_bytes)
            kind = _header(scope, b"content-type").split(";")[0].strip()
            k = _query_k(scope)
            if kind == "multipart/form-data":
                data, k = await _upload(scope, data, k)
            body = _json(data) if kind == _JSON else None
            answer, status = await self.one_query(version, body, data, k), 200
        except QueryError as err:
            answer, status = {"error": err.message}, err.status
        finally:
            manager.release(version)
        await send_json(send, answer, status)

    async def search_batch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /search/batch``: up to ``serve.max_queries`` JSON queries, answered from one version."""
        manager, params = self.manager, self.params
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
            results = await asyncio.gather(*(self.one_query(version, q, b"", None) for q in prepared))
            answer, status = {"results": list(results), "answered_by": version.describe()}, 200
        except QueryError as err:
            answer, status = {"error": err.message}, err.status
        finally:
            manager.release(version)
        await send_json(send, answer, status)


async def send_json(send: Send, body: Any, status: int = 200, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """One JSON response (orjson), sent as the two ASGI messages it is; ``extra``: more headers."""
    payload = orjson.dumps(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, read within ``limit`` bytes (a declared or actual larger body: 413 before reading on)."""
    declared = _header(scope, b"content-length")
    if declared.isdigit() and int(declared) > limit:
        raise QueryError(413, f"the request body is {declared} bytes, more than serve.max_body_bytes ({limit})")
    data = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected  # no one to answer: counted as 499 (nginx's "client closed request")
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
    """The JSON object ``data`` holds (400: not JSON; 422: not an object)."""
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


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise QueryError(422, "`image` must be the image's bytes as a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise QueryError(422, "`image` is not valid base64; encode the image's bytes with base64") from None
