"""A gallery transform through the backfill machinery (flows/backfill/transform.py): ``bctflow backfill --transform``
carries the live gallery's stored vectors into a new generation's space by the lineage's transform bridge — chunked,
killed half-way and resumed, every row stamped with the generation and the bridge, each hit the query service returns
naming the map behind it — beside an adapter on the same chain (g1's queries → g0's gallery; g0's gallery → g2's
space); and the refusals, one line each before any work."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from prefect.settings import PREFECT_API_URL

from components.bridges.base import Bridge
from components.errors import ConfigError, IndexIntegrityError
from components.faults import KILL_ENV
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.backfill.make import plan_backfill
from flows.params import load_params
from flows.runtime.workspace import Workspace
from flows.serving.queries import answer_vectors, check_vector_query
from flows.serving.version import load_version
from flows.upgrade.bridge import fit_route
from registry.records import BridgeRecord
from tests.helpers import first_generation, run_backfill, run_generation

CHUNK = 64  # the ~540-row evaluation gallery in 9 parts: a kill half-way leaves some finished


@pytest.fixture(scope="module")
def chain(prefect_harness, tmp_path_factory) -> tuple[Path, Path, dict]:
    """(home, params, fitted routes): g0 live on digits 0–4; g1 and g2 free models on every class; an adapter
    g1 → g0 and a transform g0 → g2 fitted and recorded."""
    home, params = first_generation(
        tmp_path_factory.mktemp("transform"), ["upgrade.paired_fraction=0.25", f"backfill.chunk_size={CHUNK}"]
    )
    for name in ("g1", "g2"):
        run_generation(home, params, {"name": name, "classes": "all", "alignment": "independent", "reference": False})
    p, ws = load_params(params), Workspace(home)
    routes = {
        "adapter": fit_route(p, ws, generation=1, role="adapter"),
        "transform": fit_route(p, ws, generation=2, role="transform", parent=0),
    }
    return home, params, routes


def _cli(home: Path, params: Path, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    cmd = [sys.executable, "-m", "bctflow.cli", "backfill", *args, "--home", str(home), "--params", str(params)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _plan(home: Path, params: Path, **kw):
    return plan_backfill(load_params(params), Workspace(home), **kw)


def test_refusals_are_one_line_before_any_work(chain, tmp_path):
    home, params, routes = chain
    with pytest.raises(ConfigError, match=r"^a gallery transform carries every stored vector; drop --fraction 0\.5"):
        _plan(home, params, target=2, fraction=0.5, transform=True)
    fix = "bctflow upgrade --generation 1 --route transform --from 0"
    with pytest.raises(
        ConfigError, match=rf"no transform bridge from generation 0 \(the live gallery's\) to 1; fit one: {fix}"
    ):
        _plan(home, params, target=1, transform=True)
    path = Path(routes["transform"].path)
    kept = tmp_path / "kept.npz"
    shutil.copy2(path, kept)
    try:
        data = bytearray(path.read_bytes())
        data[-40] ^= 0xFF  # one flipped bit: not the file the lineage recorded
        path.write_bytes(bytes(data))
        with pytest.raises(IndexIntegrityError, match=r"is not the file the lineage recorded \(sha256 differs\)"):
            _plan(home, params, target=2, transform=True)
    finally:
        shutil.copy2(kept, path)
    assert not (Workspace(home).backfills_dir / "in_progress").exists()  # nothing started


def test_a_bridge_of_another_width_is_refused(chain, tmp_path):
    """A transform bridge g0 → g2 recorded for 17-wide vectors (the gallery's are 16-wide), on a copy of the
    workspace: refused at plan time, naming both widths and the fix."""
    home, params, routes = chain
    copy = tmp_path / "ws"
    subprocess.run(["cp", "-a", str(home), str(copy)], check=True)
    real = Bridge.load(Path(routes["transform"].path))
    assert real.kind == "procrustes"
    wide = type(real.map).from_arrays({"w": np.eye(17), "scale": np.array(1.0)})
    other = Bridge(0, 2, wide, real.geometry, real.source_curvature, real.target_curvature, 17, 17, 40, 0.1)
    path = copy / "bridges" / "wide.npz"
    sha = other.save(path)
    p = load_params(params)
    with Workspace(copy).lineage(p) as store:
        store.record_bridge(BridgeRecord(0, 2, "transform", "procrustes", str(path), sha, 40, 0.1))
    with pytest.raises(ConfigError, match=r"maps 17-wide vectors; the live gallery's are 16-wide — fit the bridge"):
        _plan(copy, params, target=2, transform=True)


def test_a_mixed_live_gallery_is_refused(chain, tmp_path):
    """After a forced partial backfill with g1 (on a copy), the live gallery holds g0's and g1's vectors: a transform
    bridge g1 → g2 carries g1's only."""
    home, params, _ = chain
    copy = tmp_path / "ws"
    subprocess.run(["cp", "-a", str(home), str(copy)], check=True)
    run_backfill(copy, params, target=1, fraction=0.2, force=True)
    fit_route(load_params(params), Workspace(copy), generation=2, role="transform", parent=1)
    with pytest.raises(ConfigError, match=r"the live gallery holds vectors of generations \[0, 1\]; a transform bridge "
                                          r"g1→g2 carries generation 1's only — re-embed instead"):  # fmt: skip
        _plan(copy, params, target=2, transform=True)


def test_the_transform_backfill_is_killed_half_way_resumed_and_stamps_every_row_with_the_generation_and_bridge(chain):
    home, params, routes = chain
    t = routes["transform"]
    ws, p = Workspace(home), load_params(params)
    with ws.lineage(p, readonly=True) as store:
        old = GalleryParts(GalleryVersion.of_index(store.live_pointer().index_path).evaluation_gallery()).embeddings()
    killed = _cli(home, params, "--generation", "2", "--transform", kill_at="embed.half_parts")
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert "transform by bridge v1 (procrustes)" in killed.stdout
    again = _cli(home, params, "--generation", "2", "--transform")
    out = " ".join(again.stdout.split())
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "5/9 parts resumed" in out and "items carried by the bridge" in out, out[-2000:]
    with ws.lineage(p, readonly=True) as store:
        (event,) = store.backfills()
        bridge_row = next(b for b in store.bridges() if b.role == "transform")
        ptr = store.live_pointer()
        assert (event.kind, event.from_generation_id, event.to_generation_id) == ("transform", 0, 2)
        assert event.metrics["bridge_id"] == bridge_row.id and event.metrics["bridge_sha256"] == t.sha256
        assert ptr.generation_id == 2 and "gallery transform into generation 2 by bridge v1" in ptr.reason
        roles = sorted((b.role, b.from_generation_id, b.to_generation_id, b.version) for b in store.bridges())
        assert roles == [("adapter", 1, 0, 1), ("transform", 0, 2, 1)]  # the chain's maps, each versioned
    new = GalleryParts(GalleryVersion.of_index(ptr.index_path).evaluation_gallery())
    assert set(new.column("stamps").tolist()) == {2} and set(new.column("bridges").tolist()) == {bridge_row.id}
    carried = Bridge.load(Path(t.path)).map_gallery(old)  # the stored vectors, not a model's re-embedding
    got = new.embeddings()
    np.testing.assert_array_equal(got.ids, old.ids)
    np.testing.assert_allclose(got.emb, carried.emb, rtol=1e-5, atol=1e-6)
    assert event.metrics["map"] == pytest.approx(t.served["map"], abs=1e-6)  # what `bctflow upgrade` measured
    # the query service answers g2's vector queries from the carried gallery, naming the map behind every hit
    version = load_version(ws, p, device="cpu", merge="none")
    query = got.vectors()[:1]
    (answer,) = answer_vectors(version, [check_vector_query(version, query[0].tolist(), 2, 5)])
    assert answer["generations"] == [2] * 5 and answer["ids"] == version.index.search(query, 5)[1][0].tolist()
    assert answer["carried_by"] == [{"from": 0, "to": 2, "kind": "procrustes", "version": 1, "sha256": t.sha256}] * 5
    rerun = _cli(home, params, "--generation", "2", "--transform")
    assert rerun.returncode == 0 and "is already done" in " ".join(rerun.stdout.split())
