"""Swaps: a backfill's new live version is loaded beside the serving one and swapped in — by one service, and by
two `bctflow serve` processes (replicas) over one workspace; a corrupt or checksum-mismatched one never replaces it;
a live/CURRENT that lags the lineage is waited for; a mixed gallery is served with or without `serve.merge: rank`."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from prefect.settings import PREFECT_API_URL

from components.faults import KILL_ENV
from components.indexing.live import LivePointer
from components.indexing.stores.faiss.gallery_index import INDEX_FILE, MANIFEST_FILE
from flows.params import load_params
from flows.recovery.reconcile import roll_forward
from flows.runtime.workspace import Workspace
from flows.serving.swap import _low_priority
from tests.flows.serving.conftest import child_env, gallery_vectors, replicas, running, serve_command, wait_for
from tests.helpers import run_backfill


def _png() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (8, 8), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _vector_query(url: str, v: np.ndarray, gen: int) -> httpx.Response:
    return httpx.post(f"{url}/search", json={"vector": v.tolist(), "generation": gen, "k": 3}, timeout=30)


def test_a_corrupt_or_unpinned_new_index_never_replaces_the_serving_one(ws_copy):
    home, params = ws_copy
    v0 = gallery_vectors(home, 1)[0]
    with running(home, params, ["serve.watch_interval_s=3600"]) as url:  # reloads only when asked
        before = _vector_query(url, v0, 0).json()["answered_by"]
        run_backfill(home, params, target=1, fraction=0.5, order="random", force=True)
        new_index = LivePointer(home / "live").serving_index()
        good = (new_index / INDEX_FILE).read_bytes()
        (new_index / INDEX_FILE).write_bytes(good[:-64] + b"\0" * 64)  # corrupt: the manifest's sha256 no longer holds
        r = httpx.post(f"{url}/admin/reload", timeout=60)
        assert r.status_code == 409 and "keeps serving" in r.json()["error"]
        health = httpx.get(f"{url}/health").json()
        assert health["version"] == before and "sha256" in health["last_reload_error"]
        assert _vector_query(url, v0, 0).json()["answered_by"] == before

        (new_index / INDEX_FILE).write_bytes(good)
        pinned = (new_index / MANIFEST_FILE).read_bytes()
        manifest = json.loads(pinned)
        (new_index / MANIFEST_FILE).write_text(json.dumps({**manifest, "recall_at_10": 0.5}))  # not the pinned one
        r = httpx.post(f"{url}/admin/reload", timeout=60)
        assert r.status_code == 409 and "pinned" in r.json()["error"]
        assert _vector_query(url, v0, 0).json()["answered_by"] == before

        (new_index / MANIFEST_FILE).write_bytes(pinned)  # the bytes the lineage pinned: the new version loads
        r = httpx.post(f"{url}/admin/reload", timeout=60)
        assert r.status_code == 200, r.text
        after = r.json()["version"]
        assert after["version"] == before["version"] + 1 and after["gallery_generation"] == 1


def test_a_backfill_switch_is_noticed_and_swapped_in_and_a_mixed_gallery_is_served_both_ways(ws_copy):
    home, params = ws_copy
    v0 = gallery_vectors(home, 1)[0]
    with running(home, params) as url:
        first = _vector_query(url, v0, 0).json()["answered_by"]
        run_backfill(home, params, target=1, fraction=0.5, order="random", force=True)
        wait_for(f"{url}/health", lambda h: h["version"]["version"] == first["version"] + 1)
        refused = _vector_query(url, v0, 0)  # the partial backfill serves generation 1's queries only
        assert refused.status_code == 409 and "backfill the gallery with generation 0" not in refused.text
        assert "query with generation 1's model" in refused.json()["error"]
        gens = httpx.get(f"{url}/generations").json()
        assert set(gens["live_gallery"]["generation_mix"]) == {"0", "1"} and gens["image_queries_embedded_by"] == 1
        with Workspace(home).lineage(load_params(params), readonly=True) as lineage:
            ptr = lineage.live_pointer()
        assert (ptr.store, ptr.collection, ptr.index_params["index_type"]) == ("faiss", None, "flat")
        assert ptr.rows_by_generation == gens["live_gallery"]["generation_mix"]  # the lineage records the mix served
        plain = httpx.post(f"{url}/search?k=20", content=_png(), headers={"content-type": "image/png"}).json()
        assert plain["query_generation"] == 1 and plain["answered_by"]["gallery_generation"] == 1
    with running(home, params, ["serve.merge=rank"]) as url:
        merged = httpx.post(f"{url}/search?k=20", content=_png(), headers={"content-type": "image/png"}).json()
        assert merged["query_generation"] == [0, 1]
        assert set(merged["generations"]) == {0, 1}  # each generation's vectors found by its own query
        assert len(merged["ids"]) == 20 == len(set(merged["ids"]))


def _metric(url: str, name: str) -> float:
    """One unlabelled metric of the service at ``url``."""
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return float(next(line.split()[1] for line in lines if line.startswith(f"{name} ")))


def _files(home: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``home``: (size, mtime in ns) by relative path."""
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*") if p.is_file()}


class _Queries(threading.Thread):
    """Image queries to one service, one after another, until stopped: the version and gallery generation that
    answered each, and every query that failed (a status other than 200, or no answer)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.answered: list[tuple[int, int]] = []
        self.failures: list[str] = []

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                try:
                    r = client.post(f"{self.url}/search?k=5", content=_png(), headers={"content-type": "image/png"})
                except httpx.HTTPError as err:
                    self.failures.append(repr(err))
                    continue
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text}")
                    continue
                by = r.json()["answered_by"]
                self.answered.append((by["version"], by["gallery_generation"]))
                time.sleep(0.02)

    def wait_for(self, count: int, version: int, timeout: float = 60.0) -> None:
        """Until ``count`` answers came from ``version`` (AssertionError after ``timeout`` s)."""
        deadline = time.time() + timeout
        while sum(v == version for v, _ in self.answered) < count:
            assert self.is_alive() and time.time() < deadline, (self.url, self.answered[-5:], self.failures[:5])
            time.sleep(0.05)


def test_two_replicas_over_one_workspace_both_swap_on_a_backfill_and_neither_drops_a_query(ws_copy, tmp_path):
    """Two `bctflow serve` processes (replicas) on two loopback ports over one workspace: both start, answer alike and
    write nothing in it; a third on a port one of them holds is refused in one line before it loads anything. A full
    backfill's switch, run here while both are queried without pause, is swapped in by both — their answers, /health
    and /generations name the new version and generation — with no query failed on either and none answered by the
    old version once one was answered by the new; both keep serving after."""
    home, params = ws_copy
    files = _files(home)
    with replicas(home, params, tmp_path, 2) as (a, b):
        before = [httpx.get(f"{r.url}/health").json()["version"] for r in (a, b)]
        assert before[0] == before[1] and before[0]["gallery_generation"] == 0
        v0 = gallery_vectors(home, 1)[0]
        assert _vector_query(a.url, v0, 0).json()["ids"] == _vector_query(b.url, v0, 0).json()["ids"]

        taken = a.url.removeprefix("http://")
        clash = subprocess.run(
            serve_command(home, params, int(taken.rsplit(":", 1)[1])),
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = clash.stdout + clash.stderr
        assert clash.returncode == 2 and f"{taken} is already in use" in said, said
        assert "give each replica its own --port" in said and "loaded in" not in said and "on http://" not in said
        assert _files(home) == files  # the replicas only read the workspace

        streams = [_Queries(r.url) for r in (a, b)]
        for s in streams:
            s.start()
        try:
            for s in streams:
                s.wait_for(1, before[0]["version"])
            run_backfill(home, params, target=1, fraction=1.0, force=True)
            new = before[0]["version"] + 1
            for s in streams:
                s.wait_for(5, new)  # each replica swapped in the new version, and keeps answering from it
        finally:
            for s in streams:
                s.stop.set()
            for s in streams:
                s.join(60)
        for s in streams:
            assert s.failures == [], (s.url, s.failures[:5])
            assert s.answered[0] == (new - 1, 0) and s.answered[-1] == (new, 1)
            assert s.answered == sorted(s.answered)  # never the old version again once the new one answered

        after = [httpx.get(f"{r.url}/health").json() for r in (a, b)]
        assert after[0] == after[1]
        assert after[0]["version"] == {
            **before[0],
            "version": new,
            "gallery_generation": 1,
            "compatible_generations": [1],
            "index": "live/index-v001/index",
        }
        assert after[0]["last_reload_error"] is None and after[0]["switch_pending"] is None
        gens = [httpx.get(f"{r.url}/generations").json() for r in (a, b)]
        assert gens[0] == gens[1] and gens[0]["image_queries_embedded_by"] == 1
        assert list(gens[0]["live_gallery"]["generation_mix"]) == ["1"]
        v1 = gallery_vectors(home, 1)[0]  # a vector of the new live gallery
        answers = [_vector_query(r.url, v1, 1) for r in (a, b)]
        assert [x.status_code for x in answers] == [200, 200] and answers[0].json() == answers[1].json()
        for r in (a, b):
            assert _metric(r.url, "bctflow_serve_swap_failures_total") == 0
            assert _metric(r.url, "bctflow_serve_version") == new


def _killed_backfill(home: Path, params: Path, point: str) -> subprocess.CompletedProcess:
    """`bctflow backfill --generation 1` as a child process that SIGKILLs itself at the crash point ``point``."""
    env = {**child_env(), "PREFECT_API_URL": PREFECT_API_URL.value(), KILL_ENV: point}  # the test's Prefect server
    cmd = [sys.executable, "-m", "bctflow.cli", "backfill", "--generation", "1"]
    return subprocess.run(
        [*cmd, "--home", str(home), "--params", str(params)], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_current_lagging_the_lineage_is_waited_for_then_reported_and_swapped_in_once_rolled_forward(ws_copy):
    """A backfill killed between its lineage commit and the rewrite of live/CURRENT (``backfill.after_sql``) leaves
    CURRENT lagging the lineage — what every switch shows a reader for a few milliseconds. The service keeps
    answering from the old version and says what it waits for in /health (``switch_pending``), no failure counted;
    after ``serve.switch_grace_s`` it reports the lag as a failed reload; once the roll-forward (the next command, or
    `bctflow doctor --repair`) rewrites CURRENT it swaps in the new version."""
    home, params = ws_copy
    v0 = gallery_vectors(home, 1)[0]
    with running(home, params, ["serve.switch_grace_s=4"]) as url:
        before = _vector_query(url, v0, 0).json()["answered_by"]
        killed = _killed_backfill(home, params, "backfill.after_sql")
        assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
        waiting = wait_for(f"{url}/health", lambda h: h["switch_pending"] is not None)
        assert waiting["version"] == before and waiting["last_reload_error"] is None
        assert "serve.switch_grace_s 4 s" in waiting["switch_pending"] and "keeps serving" in waiting["switch_pending"]
        assert _vector_query(url, v0, 0).json()["answered_by"] == before

        failed = wait_for(f"{url}/health", lambda h: h["last_reload_error"] is not None)
        assert failed["version"] == before and failed["switch_pending"] is None
        why = failed["last_reload_error"]
        assert "does not name the live index the lineage records" in why and "doctor --repair" in why
        assert "still after serve.switch_grace_s, 4 s" in why
        assert _metric(url, "bctflow_serve_swap_failures_total") == 1
        assert _vector_query(url, v0, 0).json()["answered_by"] == before

        roll_forward(Workspace(home), load_params(params))  # what the next command does first
        swapped = wait_for(f"{url}/health", lambda h: h["version"]["version"] == before["version"] + 1)
        assert swapped["version"]["gallery_generation"] == 1 and swapped["last_reload_error"] is None
        assert swapped["switch_pending"] is None


def test_a_replaced_version_is_released_in_the_loader_once_the_requests_on_it_answer(tmp_path):
    """The old index and models are let go of in the loader thread, after the last request that started on the old
    version answered — never under a request still using it, never on a request's thread."""
    import time

    from flows.params import params_from_dict
    from flows.runtime.workspace import Workspace
    from flows.serving.metrics import ServeMetrics
    from flows.serving.swap import SwapManager

    class Version:  # the part of a ServedVersion the manager counts and releases
        def __init__(self, number: int) -> None:
            self.number, self.in_flight, self.released_in = number, 0, None

        def release(self) -> None:
            self.released_in = threading.current_thread().name

    manager = SwapManager(Workspace(tmp_path), params_from_dict({}, "test"), ServeMetrics(), device="cpu")
    old = manager.current = Version(1)  # type: ignore[assignment]
    request = manager.acquire()  # a request starts on version 1
    manager.current = Version(2)  # type: ignore[assignment]  # the swap
    loader = threading.Thread(target=manager.retire, args=(old,), name="loader")
    loader.start()
    time.sleep(0.2)
    assert old.released_in is None  # the request still answers from it
    assert manager.acquire() is manager.current  # new requests start on version 2
    manager.release(request)
    loader.join(5)
    assert old.released_in == "loader"
    manager.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
def test_the_loader_thread_runs_at_idle_priority_and_the_request_threads_keep_theirs():
    """The loader runs under SCHED_IDLE (a swap's FAISS read and unpickling take no core a request wants); the thread
    that asked keeps the normal policy."""

    def policy() -> int:
        return os.sched_getscheduler(threading.get_native_id())

    with ThreadPoolExecutor(1, initializer=_low_priority) as loader:
        assert loader.submit(policy).result() == os.SCHED_IDLE
    assert policy() == os.SCHED_OTHER
