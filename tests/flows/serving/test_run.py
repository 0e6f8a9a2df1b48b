"""`bctflow serve` as a real process on a free loopback port, queried over HTTP; binding rules; SIGTERM."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from components.errors import ConfigError
from flows.serving.run import check_bind, listen
from tests.flows.serving.conftest import free_port, gallery_vectors, running


def _png(seed: int = 0) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, size=(8, 8), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_bctflow_serve_answers_image_and_vector_queries_and_stops_on_sigterm(served_ws):
    home, params = served_ws
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bctflow.cli",
            "serve",
            "--home",
            str(home),
            "--params",
            str(params),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"{url}/health", timeout=2).json()["ready"]:
                    break
            except httpx.TransportError:
                pass
            assert time.time() < deadline, "the service never became ready"
            time.sleep(0.3)
        health = httpx.get(f"{url}/health").json()
        assert health["version"]["gallery_generation"] == 0 and health["lineage_reachable"]

        image = httpx.post(f"{url}/search?k=5", content=_png(), headers={"content-type": "image/png"}).json()
        assert len(image["ids"]) == 5 and image["generations"] == [0] * 5
        assert image["query_generation"] == 0 and image["answered_by"]["gallery_generation"] == 0

        q = gallery_vectors(home, 3)
        vec = httpx.post(f"{url}/search", json={"vector": q[0].tolist(), "generation": 0, "k": 3}).json()
        assert len(vec["ids"]) == 3 and vec["scores"][0] >= vec["scores"][-1]
        batch = httpx.post(
            f"{url}/search/batch", json={"queries": [{"vector": v.tolist(), "generation": 0} for v in q], "k": 1}
        ).json()
        assert len(batch["results"]) == 3 and batch["results"][0]["ids"] == vec["ids"][:1]

        gens = httpx.get(f"{url}/generations").json()
        assert list(gens["live_gallery"]["generation_mix"]) == ["0"] and gens["compatible_generations"][0] == 0
        assert "bctflow_serve_requests_total" in httpx.get(f"{url}/metrics").text

        # SIGTERM stops it cleanly: with no request in flight nothing holds it for the drain. How fast a process exits
        # depends on the machine's load (5.3 s once on 2 loaded cores), so the bound is a hang guard, not a timing
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM  # bctflow.interrupt: 128 + the signal
        assert "Traceback" not in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_binding_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "secret")
    with pytest.raises(ConfigError, match="BCTFLOW_SERVE_TOKEN"):
        check_bind("0.0.0.0", None)


def test_a_port_in_use_or_an_address_this_machine_lacks_is_refused_in_one_line():
    """The service holds its port before it loads anything: a port another process listens on (another replica's) and
    an address of no interface here are refused in one line; a held port is listened on (a connection waits)."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        with pytest.raises(
            ConfigError, match=rf"^127\.0\.0\.1:{port} is already in use \(another `bctflow serve` replica"
        ):
            listen("127.0.0.1", port)
        with pytest.raises(ConfigError, match=r"give each replica its own --port$"):
            listen("localhost", port)
    with pytest.raises(ConfigError, match=r"^cannot bind 192\.0\.2\.1:8000 \(.*\); pick a --host this machine has"):
        listen("192.0.2.1", 8000)  # TEST-NET-1: no interface of this machine has it
    held = listen("127.0.0.1", port)  # free again
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # accepted into the backlog before anything serves
        with pytest.raises(ConfigError, match="already in use"):
            listen("127.0.0.1", port)  # a second replica started beside one still loading
    finally:
        held.close()


def test_a_token_guards_every_route_but_health(served_ws):
    home, params = served_ws
    with running(home, params, token="s3cret") as url:
        assert httpx.get(f"{url}/health").status_code == 200
        refused = httpx.get(f"{url}/generations")
        assert refused.status_code == 401 and "bearer token" in refused.json()["error"]
        ok = httpx.get(f"{url}/generations", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200
    assert os.environ.get("BCTFLOW_SERVE_TOKEN") is None
