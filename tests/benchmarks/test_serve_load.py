"""The serving benchmark's load generator against a real HTTP server on loopback (uvicorn in a thread)."""

from __future__ import annotations

import gc
import threading
import time

import orjson
import uvicorn

from benchmarks.serve_load import Request, percentile_ms, run_load
from tests.flows.serving.conftest import free_port


async def _echo(scope, receive, send) -> None:
    """Answers every POST with its JSON body's ``i`` (200), or 418 when ``i`` is odd."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    i = orjson.loads(body)["i"]
    payload = orjson.dumps({"i": i})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 418 if i % 2 else 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def test_the_load_records_every_answer_within_its_budget_and_leaves_the_collector_as_it_was():
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(_echo, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    seen_enabled = []
    try:
        load = run_load(
            f"http://127.0.0.1:{port}",
            lambda i: Request.json("/q", {"i": i}),
            concurrency=3,
            seconds=10.0,
            max_requests=60,
            during=lambda t0: seen_enabled.append(gc.isenabled()),
        )
    finally:
        server.should_exit = True
        thread.join(10)
    assert len(load.samples) == 60  # the budget, long before the deadline
    assert all(s.body is not None and s.status == (418 if s.body["i"] % 2 else 200) for s in load.samples)
    assert seen_enabled == [False] and gc.isenabled()  # off while it ran, on again after
    ok = [s for s in load.samples if s.status == 200]
    assert 20 <= len(ok) <= 40 and 0 < percentile_ms(ok, 50) <= percentile_ms(ok, 99)  # each client counts its own i
