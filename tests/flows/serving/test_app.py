"""Bad input to the running service: each gets a 4xx with one line, and the service answers the next good query."""

from __future__ import annotations

import base64
import io
import json
import socket
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from flows.params import load_params
from flows.runtime.workspace import Workspace
from flows.serving.queries import ImageQuery, QueryError, VectorQuery, answer_vectors, embed_images, search_images
from flows.serving.version import load_version
from tests.flows.serving.conftest import gallery_vectors, running

LIMITS = ["serve.max_k=50", "serve.max_pixels=1024", "serve.max_body_bytes=200000", "serve.max_queries=4"]


@pytest.fixture(scope="module")
def service(served_ws):
    home, params = served_ws
    with running(home, params, LIMITS) as url:
        yield url, gallery_vectors(home, 1)[0]


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w), np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _vec(v, **kw) -> dict:
    return {"json": {"vector": v, "generation": 0, **kw}}


def _raw(text: str) -> dict:
    """A JSON body sent as written (numbers httpx's encoder would not write)."""
    return {"content": text, "headers": {"content-type": "application/json"}}


def _far_point(width: int) -> list[float]:
    """A point of the K=1 hyperboloid (in float64) whose coordinates (1e39) are past float32's largest (3.4e38)."""
    space = [1e39] * (width - 1)
    return [float(np.sqrt(1.0 + np.dot(space, space))), *space]


def _png_b64() -> str:
    return base64.b64encode(_png(8, 8)).decode()


#: (case, route, request keyword arguments (a callable of the good vector), status, words of the one-line error)
CASES = [
    (
        "malformed JSON",
        "/search",
        lambda v: {"content": b"{not json", "headers": {"content-type": "application/json"}},
        400,
        "not valid JSON",
    ),
    ("a JSON array", "/search", lambda v: {"json": [1, 2]}, 422, "must be an object"),
    (
        "NaN in the vector",
        "/search",
        lambda v: {
            "content": json.dumps({"vector": [float("nan")] * len(v), "generation": 0}),
            "headers": {"content-type": "application/json"},
        },
        422,
        "NaN or infinite",
    ),
    (
        "inf in the vector",
        "/search",
        lambda v: {
            "content": json.dumps({"vector": [float("inf"), *v.tolist()[1:]], "generation": 0}),
            "headers": {"content-type": "application/json"},
        },
        422,
        "NaN or infinite",
    ),
    ("a vector whose norm overflows float64", "/search", lambda v: _vec([1e300] * len(v)), 422, "too large"),
    ("a vector whose norm is above float32's", "/search", lambda v: _vec([1e20] * len(v)), 422, "too large"),
    ("a hyperboloid point past float32's range", "/search", lambda v: _vec(_far_point(len(v))), 422, "too large"),
    (
        "a JSON integer past float64's range in the vector",
        "/search",
        lambda v: _raw(f'{{"vector": [1{"0" * 400}{", 1" * (len(v) - 1)}], "generation": 0}}'),
        422,
        "too large",
    ),
    ("an all-zero vector", "/search", lambda v: _vec([0.0] * len(v)), 422, "all zeros"),
    ("a vector of tiny values", "/search", lambda v: _vec([1e-160] * len(v)), 422, "too small"),
    ("a vector off the hyperboloid", "/search", lambda v: _vec([1.0] * len(v)), 422, "hyperboloid"),
    ("a point with a negative time", "/search", lambda v: _vec((-v).tolist()), 422, "hyperboloid"),
    (
        "a batch holding one vector whose norm overflows",
        "/search/batch",
        lambda v: {
            "json": {
                "queries": [{"vector": v.tolist(), "generation": 0}, {"vector": [1e300] * len(v), "generation": 0}]
            }
        },
        422,
        "too large",
    ),
    (
        "a batch holding one vector off the hyperboloid",
        "/search/batch",
        lambda v: {
            "json": {"queries": [{"vector": v.tolist(), "generation": 0}, {"vector": [1.0] * len(v), "generation": 0}]}
        },
        422,
        "hyperboloid",
    ),
    (
        "a query with both vector and image",
        "/search",
        lambda v: {"json": {"vector": v.tolist(), "generation": 0, "image": _png_b64()}},
        422,
        "not both",
    ),
    (
        "a batch entry with both vector and image",
        "/search/batch",
        lambda v: {
            "json": {"queries": [{"image": _png_b64()}, {"vector": v.tolist(), "generation": 0, "image": _png_b64()}]}
        },
        422,
        "not both",
    ),
    ("an integer of 5000 digits", "/search", lambda v: _raw(f'{{"k": {"1" * 5000}}}'), 400, "not valid JSON"),
    ("JSON nested 100000 deep", "/search", lambda v: _raw("[" * 100000 + "]" * 100000), 400, "not valid JSON"),
    ("a vector of the wrong width", "/search", lambda v: _vec(v.tolist()[:-1]), 422, "-wide vectors"),
    ("a vector of strings", "/search", lambda v: _vec(["a"] * len(v)), 422, "list of numbers"),
    (
        "an unknown generation",
        "/search",
        lambda v: {"json": {"vector": v.tolist(), "generation": 99}},
        422,
        "not in the lineage",
    ),
    (
        "a vector without its generation",
        "/search",
        lambda v: {"json": {"vector": v.tolist()}},
        422,
        "needs `generation`",
    ),
    ("k = 0", "/search", lambda v: _vec(v.tolist(), k=0), 422, "out of range"),
    ("k above serve.max_k", "/search", lambda v: _vec(v.tolist(), k=51), 422, "out of range"),
    ("k not a number", "/search", lambda v: _vec(v.tolist(), k="ten"), 422, "whole number"),
    (
        "bytes that are not an image",
        "/search",
        lambda v: {"content": b"GIF89a-not-really", "headers": {"content-type": "image/png"}},
        415,
        "cannot decode image",
    ),
    (
        "an empty body",
        "/search",
        lambda v: {"content": b"", "headers": {"content-type": "image/png"}},
        422,
        "body is empty",
    ),
    (
        "a uint8 array with 4 channels",
        "/search",
        lambda v: {"content": _npy(np.zeros((8, 8, 4), np.uint8))},
        415,
        "not uint8 (H, W[, 1|3])",
    ),
    (
        "an RGB array for a grey model",
        "/search",
        lambda v: {"content": _npy(np.zeros((8, 8, 3), np.uint8))},
        422,
        "channel(s) but the model takes 1",
    ),
    ("an image above serve.max_pixels", "/search", lambda v: {"content": _png(64, 64)}, 413, "serve.max_pixels"),
    ("a body above serve.max_body_bytes", "/search", lambda v: {"content": b"0" * 200001}, 413, "serve.max_body_bytes"),
    (
        "more queries than serve.max_queries",
        "/search/batch",
        lambda v: {"json": {"queries": [{"vector": v.tolist(), "generation": 0}] * 5}},
        413,
        "serve.max_queries",
    ),
    ("a batch without queries", "/search/batch", lambda v: {"json": {"queries": []}}, 422, "non-empty list"),
    ("an image that is not base64", "/search", lambda v: {"json": {"image": "%%%"}}, 422, "not valid base64"),
    ("JSON with neither vector nor image", "/search", lambda v: {"json": {"k": 3}}, 422, "send `vector`"),
    ("a multipart upload without a file", "/search", lambda v: {"files": {"k": (None, "3")}}, 422, "holds no file"),
    (
        "a multipart body without its boundary",
        "/search",
        lambda v: {"content": b"--x\r\n", "headers": {"content-type": "multipart/form-data"}},
        400,
        "multipart upload is malformed",
    ),
]


@pytest.mark.parametrize(("case", "route", "request_kw", "status", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_4xx_with_one_line_and_the_service_keeps_serving(
    service, case, route, request_kw, status, words
):
    url, good = service
    r = httpx.post(f"{url}{route}", **request_kw(good), timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error and "\n" not in error
    ok = httpx.post(f"{url}/search", json={"vector": good.tolist(), "generation": 0, "k": 2}, timeout=30)
    assert ok.status_code == 200 and len(ok.json()["ids"]) == 2


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("route", ["/search", "/search/batch"])
def test_a_query_route_asked_with_another_method_than_post_is_405_with_allow_post(service, method, route):
    url, good = service
    r = httpx.request(method, f"{url}{route}", timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "POST", r.text
    assert r.json() == {"error": f"{method} is not allowed on {route}; send the query with POST"}
    ok = httpx.post(f"{url}{route}", json={"vector": good.tolist(), "generation": 0, "k": 2}, timeout=30)
    assert ok.status_code == (200 if route == "/search" else 422)  # the batch route wants `queries`
    metrics = httpx.get(f"{url}/metrics").text
    assert f'bctflow_serve_requests_total{{endpoint="{route}",status="405"}}' in metrics


def test_a_bad_vector_fails_alone_and_the_others_of_its_batch_are_answered(served_ws):
    """Vectors are searched in one FAISS call per batch: one off the hyperboloid, or past float32's range, gets its
    own 422 and the queries batched with it their hits (the index's own check would have failed them all)."""
    home, params_file = served_ws
    version = load_version(Workspace(home), load_params(params_file), device="cpu", merge="none")
    good = gallery_vectors(home, 2)
    queries = [
        VectorQuery(good[0], 0, 3),
        VectorQuery(np.ones_like(good[0]), 0, 3),
        VectorQuery(np.asarray(_far_point(len(good[0]))), 0, 3),
        VectorQuery(good[1], 0, 2),
    ]
    answers = answer_vectors(version, queries)
    for bad, words in zip(answers[1:3], ["not a point on generation 0's hyperboloid", "values are too large"]):
        assert isinstance(bad, QueryError) and bad.status == 422 and words in bad.message, bad
    alone = answer_vectors(version, queries[::3])  # the good two without the bad: the same hits
    assert [a["ids"] for a in (answers[0], answers[3])] == [a["ids"] for a in alone]  # type: ignore[index]
    assert [len(a["ids"]) for a in alone] == [3, 2]  # type: ignore[index]


def test_a_base64_image_in_json_or_a_multipart_upload_is_answered_like_its_bytes(service):
    url, _ = service
    png = _png(8, 8)
    raw = httpx.post(f"{url}/search?k=3", content=png, headers={"content-type": "image/png"}).json()
    wrapped = httpx.post(f"{url}/search", json={"image": base64.b64encode(png).decode(), "k": 3}).json()
    uploaded = httpx.post(f"{url}/search", files={"image": ("q.png", png, "image/png")}, data={"k": "3"}).json()
    assert raw["ids"] == wrapped["ids"] == uploaded["ids"] and len(raw["ids"]) == 3
    refused = httpx.get(f"{url}/metrics").text
    assert 'bctflow_serve_refused_queries_total{status="422"}' in refused


def test_a_client_that_leaves_in_the_middle_of_its_body_is_counted_499_and_the_service_keeps_serving(service):
    """The query routes read the body themselves (plain ASGI endpoints): a client that closes its connection before
    the body it declared has arrived gets no answer (there is no one to answer) and is counted as 499."""
    url, good = service
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 900\r\n\r\n{")
    deadline = time.time() + 20
    while 'bctflow_serve_requests_total{endpoint="/search",status="499"} 1.0' not in httpx.get(f"{url}/metrics").text:
        assert time.time() < deadline, "the abandoned request was never counted"
        time.sleep(0.1)
    ok = httpx.post(f"{url}/search", json={"vector": good.tolist(), "generation": 0, "k": 2}, timeout=30)
    assert ok.status_code == 200 and len(ok.json()["ids"]) == 2


def test_an_image_that_does_not_decode_fails_alone_and_its_batch_is_answered(served_ws):
    """Images are decoded in their batch's first stage: a bad one gets its error, the others in that batch their
    hits."""
    home, params_file = served_ws
    version = load_version(Workspace(home), load_params(params_file), device="cpu", merge="none")
    noise = [Image.fromarray(np.random.default_rng(s).integers(0, 255, (8, 8), dtype=np.uint8)) for s in (0, 1)]
    pngs = []
    for img in noise:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        pngs.append(buf.getvalue())
    queries = [ImageQuery(pngs[0], 5), ImageQuery(b"not an image", 5), ImageQuery(pngs[1], 3)]
    answers = search_images(version, embed_images(version, queries, "none", max_pixels=1024))
    assert isinstance(answers[1], QueryError) and answers[1].status == 415
    assert [len(a["ids"]) for a in (answers[0], answers[2])] == [5, 3]  # type: ignore[index]
    assert answers[0]["answered_by"]["version"] == version.number  # type: ignore[index]
