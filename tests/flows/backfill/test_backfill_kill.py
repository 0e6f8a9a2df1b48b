"""SIGKILL a backfill half-way, rerun it, and the live index answers correctly throughout.

A real `bctflow backfill` subprocess (on the test's Prefect server; a temporary server killed with its command is
tests/flows/runtime/test_prefect_api.py's), a throttle so the kill lands between parts, and queries against the live
gallery
from this process the whole time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from prefect.settings import PREFECT_API_URL

from components.errors import IncompatibleQueryError
from components.indexing.live import LivePointer
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from tests.helpers import run_generation, write_params

BIN = Path(sys.executable).parent


def test_killed_backfill_resumes_and_the_live_index_serves_throughout(prefect_harness, tmp_path: Path):
    params = tmp_path / "params.yaml"
    write_params(params, ["backfill.chunk_size=40", "backfill.throttle_seconds=0.4"])
    home = tmp_path / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    ws = Workspace(home)
    live = LivePointer(ws.live_dir)
    g0 = GalleryParts(GalleryVersion(ws.generation_dir(0)).evaluation_gallery()).embeddings()
    queries = g0.vectors()[:25].astype(np.float32)
    _, expected = live.search(queries, 5, query_generation=0)
    assert expected.shape == (25, 5) and np.isin(expected, g0.ids).all()

    def check_live() -> str:
        """The live gallery answers: old answers while generation 0 serves, generation 1's after the switch."""
        ptr = live.pointer()
        if ptr["generation"] == 0:
            _, got = live.search(queries, 5, query_generation=0)
            assert np.array_equal(got, expected)
            return "old"
        try:
            live.search(queries, 5, query_generation=0)
        except IncompatibleQueryError:
            return "new"
        raise AssertionError("generation 0 queries were accepted after the switch to generation 1")

    parts = GalleryVersion(ws.backfills_dir / "in_progress").evaluation_store / "parts"
    cmd = [str(BIN / "bctflow"), "backfill", "--home", str(home), "--params", str(params), "--generation", "1"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PREFECT_API_URL": PREFECT_API_URL.value()}
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 240
    while (not parts.exists() or len(list(parts.glob("part-*.npz"))) < 3) and time.time() < deadline:
        assert first.poll() is None, first.stdout.read().decode()[-3000:]
        assert check_live() == "old"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    done_at_kill = len(list(parts.glob("part-*.npz")))
    assert 3 <= done_at_kill < 14  # 539 items / 40 per part = 14 parts: killed half-way
    assert check_live() == "old" and live.pointer()["generation"] == 0
    assert LineageDB(f"sqlite:///{home / 'lineage.db'}").backfills() == []

    second = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    seen = set()
    while second.poll() is None and time.time() < deadline + 240:
        seen.add(check_live())
        time.sleep(0.1)
    out = second.stdout.read().decode()
    assert second.returncode == 0, out[-3000:]
    assert f"{done_at_kill}/14 parts resumed" in " ".join(out.split())
    assert check_live() == "new"
    events = LineageDB(f"sqlite:///{home / 'lineage.db'}").backfills()
    assert len(events) == 1 and events[0].reembedded == events[0].total == 539 and events[0].to_generation_id == 1
    # generation 1 queries now search the new, verified index of generation 1's (rescaled) embeddings
    from components.indexing.stores.faiss import GalleryIndex

    new_dir = Path(live.pointer()["index"])
    index = GalleryIndex.load(new_dir)
    assert index.ntotal == 539 and index.manifest.generation == 1
    served = GalleryParts(GalleryVersion.of_index(new_dir).evaluation_gallery()).embeddings()
    q1 = served.vectors()[:25].astype(np.float32)
    assert np.array_equal(live.search(q1, 5, query_generation=1)[1], index.search(q1, 5, query_generation=1)[1])
