"""docs/openapi.json is generated (flows/serving/openapi_doc.py) and cannot drift: the committed file is what the app
built without a workspace documents, and it describes exactly the routes the app answers — the routers' and the query
routes the outermost middleware answers as plain ASGI."""

from __future__ import annotations

import json
import re

from fastapi.routing import APIRoute
from starlette.testclient import TestClient

from flows.serving.guard import ROUTES, Guard
from flows.serving.openapi_doc import DOC, offline_app, openapi_json
from flows.serving.routes import ROUTERS
from tests.conftest import REPO

REGENERATE = "run `python -m flows.serving.openapi_doc` from the repository root"


def test_the_committed_openapi_document_is_what_the_app_generates():
    assert (REPO / DOC).read_text() == openapi_json(), f"docs/openapi.json is out of date: {REGENERATE}"


def test_the_document_describes_exactly_the_routes_the_app_answers():
    """The routers' operations and the query routes the middleware answers are the document's, and the app answers
    each documented operation (its router's or the middleware's answer, never 404 or 405)."""
    app = offline_app(token="s3cret")
    (guard,) = [m for m in app.user_middleware if m.cls is Guard]
    routed = {(r.path, m) for router in ROUTERS for r in router.routes if isinstance(r, APIRoute) for m in r.methods}
    answered = routed | {(path, "POST") for path in guard.kwargs["queries"]}
    document = json.loads((REPO / DOC).read_text())
    described = {(path, method.upper()) for path, item in document["paths"].items() for method in item}
    assert described == answered
    assert set(document["paths"]) == ROUTES  # the metrics' route labels: every documented path, no other
    client = TestClient(app, raise_server_exceptions=False)  # no lifespan, no version: 4xx or 5xx, but the route's
    for path, method in sorted(described):
        r = client.request(method, path, headers={"authorization": "Bearer s3cret"}, json={})
        assert r.status_code not in (404, 405), (path, method, r.status_code, r.text)


def test_every_query_route_says_what_it_takes_answers_and_refuses():
    paths = json.loads((REPO / DOC).read_text())["paths"]
    search = paths["/search"]["post"]
    assert set(search["requestBody"]["content"]) == {
        "application/json",
        "image/*",
        "application/octet-stream",
        "multipart/form-data",
    }
    for route in ("/search", "/search/batch"):
        op = paths[route]["post"]
        assert {"200", "400", "401", "409", "413", "415", "422", "500"} <= set(op["responses"])
        assert op["security"] == [{"bearer": []}]
    assert "security" not in paths["/health"]["get"]  # the one open route
    assert all(paths[p][m]["security"] == [{"bearer": []}] for p in paths for m in paths[p] if p != "/health")


def test_serving_md_links_the_document():
    assert "(openapi.json)" in (REPO / "docs" / "serving.md").read_text()


def test_every_schema_the_document_refers_to_is_in_it():
    text = (REPO / DOC).read_text()
    schemas = json.loads(text)["components"]["schemas"]
    refs = set(re.findall(r'"\$ref": "#/components/schemas/(\w+)"', text))
    assert refs and refs <= set(schemas)
