"""Swaps: a backfill's new live version is loaded beside the serving one and swapped in; a corrupt or
checksum-mismatched one never replaces it; a mixed gallery is served with or without `serve.merge: rank`."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from components.indexing.live import LivePointer
from components.indexing.stores.faiss.gallery_index import INDEX_FILE, MANIFEST_FILE
from flows.params import load_params
from flows.runtime.workspace import Workspace
from flows.serving.swap import _low_priority
from tests.flows.serving.conftest import gallery_vectors, running, wait_for
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
