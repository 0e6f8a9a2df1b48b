"""The bearer token, one check on both paths: the query routes' fast path and the routers' dependency; a path no
route answers is refused alike, so without the token every path but /health answers 401 with one line (and is
counted). The app here is built without a workspace: nothing it answers needs a loaded version."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from flows.serving.auth import UNAUTHORIZED
from flows.serving.openapi_doc import offline_app

BEARER = {"authorization": "Bearer s3cret"}


@pytest.fixture
def client() -> TestClient:
    return TestClient(offline_app(token="s3cret"), raise_server_exceptions=False)  # no `with`: no lifespan runs


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/search"),
        ("GET", "/search"),
        ("POST", "/search/batch"),
        ("GET", "/generations"),
        ("GET", "/metrics"),
        ("POST", "/admin/reload"),
        ("GET", "/admin/reload"),
        ("GET", "/no/such/route"),
    ],
)
def test_without_the_token_every_path_but_health_is_401_with_one_line(client, method, path):
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
        r = client.request(method, path, headers=headers)
        assert r.status_code == 401 and r.json() == {"error": UNAUTHORIZED}, (method, path, headers, r.text)


def test_with_the_token_each_path_gets_its_own_answer_and_every_answer_is_counted(client):
    assert client.get("/metrics", headers=BEARER).status_code == 200
    r = client.get("/search", headers=BEARER)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert client.get("/admin/reload", headers=BEARER).status_code == 405  # the router's own answers
    assert client.get("/no/such/route", headers=BEARER).status_code == 404
    assert client.get("/health").status_code == 503  # open, and no version is loaded
    client.get("/no/such/route")
    text = client.get("/metrics", headers=BEARER).text
    for endpoint, status in [("/search", 405), ("/health", 503), ("other", 404), ("other", 401), ("/metrics", 200)]:
        assert f'bctflow_serve_requests_total{{endpoint="{endpoint}",status="{status}"}} 1.0' in text, endpoint
