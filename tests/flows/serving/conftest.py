"""A served workspace, made once per session by the real flows: generation 0 (digits 0–4) and generation 1 (all
classes); a service running in a thread of the test process on a free loopback port; and `bctflow serve` as real
processes (replicas), each on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import REPO
from tests.helpers import copy_workspace, run_generation, write_params


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def served_ws(g0_template, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file): generation 0 live, generation 1 trained on every class (not yet backfilled)."""
    home, params = copy_workspace(g0_template, tmp_path_factory.mktemp("served"))
    write_params(params, ["serve.watch_interval_s=0.2", "serve.max_k=50"])  # the service's settings only
    run_generation(home, params, {"name": "g1"})
    return home, params


@pytest.fixture
def ws_copy(served_ws, tmp_path) -> tuple[Path, Path]:
    """A copy of the served workspace a test may change (the lineage stores paths relative to it)."""
    home, params = served_ws
    copy = tmp_path / "ws"
    shutil.copytree(home, copy, symlinks=True)
    return copy, params


def gallery_vectors(home: Path, n: int = 4) -> np.ndarray:
    """The first ``n`` vectors of the live gallery (queries of its own generation)."""
    from components.indexing.live import LivePointer
    from components.indexing.parts import GalleryParts
    from components.indexing.version import GalleryVersion

    index = LivePointer(home / "live").pointer()["index"]
    part = next(GalleryParts(GalleryVersion.of_index(index).serving().gallery).parts())
    return part.gallery.vectors()[:n]


@contextlib.contextmanager
def running(
    home: Path, params_file: Path, overrides: list[str] | None = None, token: str | None = None
) -> Iterator[str]:
    """The app on a free loopback port, in a thread of this process (uvicorn, real HTTP); yields its base URL."""
    import uvicorn

    from components.training.device import select_device
    from flows.params import load_params
    from flows.runtime.workspace import Workspace
    from flows.serving.app import create_app
    from flows.serving.metrics import ServeMetrics
    from flows.serving.swap import SwapManager

    p = load_params(params_file, overrides)
    manager = SwapManager(Workspace(home), p, ServeMetrics(), device=str(select_device("cpu")))
    manager.reload(force=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(manager, token=token), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_for(url: str, predicate, timeout: float = 30.0) -> dict:
    """GET ``url`` until ``predicate(json)`` holds (AssertionError after ``timeout`` s)."""
    deadline = time.time() + timeout
    body: dict = {}
    while time.time() < deadline:
        body = httpx.get(url, timeout=5).json()
        if predicate(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"{url} never satisfied the condition; last answer {body}")


def serve_command(home: Path, params_file: Path, port: int) -> list[str]:
    """`bctflow serve` over ``home`` on ``port``, run by this interpreter."""
    cli = [sys.executable, "-m", "bctflow.cli", "serve"]
    return [*cli, "--home", str(home), "--params", str(params_file), "--port", str(port)]


def child_env() -> dict[str, str]:
    """The environment of a `bctflow` child process: this checkout's code first (an editable install may name
    another checkout)."""
    return {**os.environ, "PYTHONPATH": str(REPO)}


@dataclass
class Replica:
    """One `bctflow serve` process: its base URL and the file its output goes to."""

    process: subprocess.Popen
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def replicas(home: Path, params_file: Path, logs: Path, count: int, timeout: float = 180.0) -> Iterator[list[Replica]]:
    """``count`` `bctflow serve` processes over ``home``, each on a free loopback port, started together (their
    loads overlap); yields them once every one answers ``/health`` ready (AssertionError with its output if one
    exits or ``timeout`` s pass), and SIGTERMs them at the end (killed if they do not stop in 10 s)."""
    started: list[Replica] = []
    try:
        for i in range(count):
            log = logs / f"serve-{i}.log"
            port = free_port()
            while any(r.url.endswith(f":{port}") for r in started):  # each its own port
                port = free_port()
            with log.open("w") as sink:
                proc = subprocess.Popen(
                    serve_command(home, params_file, port), stdout=sink, stderr=subprocess.STDOUT, env=child_env()
                )
            started.append(Replica(proc, f"http://127.0.0.1:{port}", log))
        deadline = time.time() + timeout
        for r in started:
            while True:
                assert r.process.poll() is None, r.output()
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{r.url}/health", timeout=2).json()["ready"]:
                        break
                assert time.time() < deadline, f"{r.url} never became ready:\n{r.output()}"
                time.sleep(0.2)
        yield started
    finally:
        for r in started:
            if r.process.poll() is None:
                r.process.send_signal(signal.SIGTERM)
        for r in started:
            try:
                r.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                r.process.kill()
                r.process.wait()
