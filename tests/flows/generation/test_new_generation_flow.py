"""End to end under prefect_test_harness: real Prefect, MLflow (temp SQLite), SQLAlchemy, FAISS, DVC.

Two generations (g0 base-only on classes 0–4, g1 HBCT on all classes with an
independent reference), then a third whose lineage commit fails inside the
database: the run must leave the lineage, the registry and the live index as
they were.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import mlflow
import numpy as np
import pytest
import yaml

from components.indexing.parts import GalleryParts
from components.indexing.stores.faiss import GalleryIndex
from components.indexing.version import GalleryVersion
from components.io import file_sha256
from flows.runtime.transient import is_transient
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from tests.helpers import run_generation, write_params


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def lineage_run(prefect_harness, tmp_path_factory):
    """Run g0 and g1 once for every test in this module."""
    tmp = tmp_path_factory.mktemp("flow")
    params = tmp / "params.yaml"
    write_params(params)
    home = tmp / "ws"
    s0 = run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    s1 = run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": True})
    return home, params, s0, s1


def test_lineage_records_the_chain(lineage_run):
    home, _, _s0, s1 = lineage_run
    store = LineageDB(f"sqlite:///{home / 'lineage.db'}")
    doc = store.to_json()
    assert [g["name"] for g in doc] == ["g0", "g1"]
    g0, g1 = doc
    assert g0["alignment"] == "independent" and g1["alignment"] == "hbct" and g1["parent"] == 0
    assert g0["zeta"] == pytest.approx(1.0) and g1["zeta"] == pytest.approx(g0["zeta"] + 0.2)
    assert g0["live"] and not g1["live"]
    for g in doc:  # every committed model is pinned by its bytes
        assert g["checkpoint_sha256"] == file_sha256(g["checkpoint"])
    assert store.live_pointer().model_sha256 == g0["checkpoint_sha256"]
    assert g1["class_order"][:5] == [0, 1, 2, 3, 4] and sorted(g1["class_order"]) == list(range(10))
    m = g1["metrics"]
    for block in ("self", "cross", "parent_self"):
        assert set(m[block]) == {"cmc@1", "cmc@5", "map"}
        assert all(0.0 <= v <= 1.0 for v in m[block].values())
    assert m["parent_self"] == g0["metrics"]["self"]
    assert set(m["p_com"]) == {"cmc@1", "map"} and set(m["p_up"]) == {"cmc@1", "map"}
    ref_self, ref_cross = m["reference"]["self"], m["reference"]["cross"]
    # P_com / P_up are exactly the docs/design.md §6 formulas of the stored numbers
    for k in ("cmc@1", "map"):
        den = ref_self[k] - m["parent_self"][k]
        assert m["p_com_denominator"][k] == pytest.approx(den)
        assert m["p_com"][k] == pytest.approx((m["cross"][k] - m["parent_self"][k]) / den)
        assert m["p_up"][k] == pytest.approx((m["self"][k] - ref_self[k]) / ref_self[k])
    assert ref_cross is not None
    assert g1["backfill_required"] in (True, False) and isinstance(g1["backfill_reasons"], list)
    assert {c["rule"] for c in g1["backfill_checks"]} >= {"compatibility", "zeta_ceiling"}
    for key in (
        "clip_fraction_gallery",
        "clip_fraction_train",
        "in_cone_fraction",
        "uncertainty_parent_seen",
        "uncertainty_parent_unseen",
    ):
        assert g1["diagnostics"][key] is not None
    assert s1["generation"] == 1 and s1["mlflow_version"] == "2"


def test_mlflow_has_a_tagged_version_per_generation(lineage_run):
    home, _, _, _ = lineage_run
    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri, uri)
    versions = sorted(client.search_model_versions("name='bctflow-embedder'"), key=lambda v: int(v.version))
    assert [int(v.version) for v in versions] == [1, 2]
    v1 = versions[1]
    store = LineageDB(f"sqlite:///{home / 'lineage.db'}")
    g1 = store.to_json()[1]
    assert v1.tags["bctflow.generation"] == "1" and v1.tags["bctflow.parent_generation"] == "0"
    assert v1.tags["bctflow.alignment"] == "hbct" and v1.tags["bctflow.geometry"] == "lorentz"
    assert v1.tags["bctflow.zeta"] == "1.2" and v1.tags["bctflow.curvature"] == "1"
    assert v1.tags["bctflow.data_hash"] == g1["data_hash"]
    assert "g0 [independent" in v1.description and "g1 [hbct" in v1.description
    assert str(client.get_model_version_by_alias("bctflow-embedder", "gallery").version) == "1"
    arts = {a.path for a in client.list_artifacts(v1.run_id)}
    assert {"metrics.json", "uncertainty.png", "training.png", "data", "index"} <= arts
    assert {a.path for a in client.list_artifacts(v1.run_id, "data")} == {
        "data/manifest.json",
        "data/manifest.json.dvc",
    }
    assert {a.path for a in client.list_artifacts(v1.run_id, "index")} == {"index/manifest.json"}


def test_outputs_are_in_place_and_consistent(lineage_run):
    home, _, _, _ = lineage_run
    ws = Workspace(home)
    store = LineageDB(f"sqlite:///{home / 'lineage.db'}")
    g1 = store.to_json()[1]
    gdir = ws.generation_dir(1)
    assert (gdir / "model.pt").exists() and (gdir / "reference" / "model.pt").exists()
    assert not ws.staging(1).exists()
    # the DVC snapshot's md5 is the data hash
    dvc_meta = yaml.safe_load((ws.data_dir / "snapshots" / "gen_001" / "manifest.json.dvc").read_text())
    assert dvc_meta["outs"][0]["md5"] == g1["data_hash"]
    # the FAISS index serves the stored gallery: each item is its own nearest neighbour, up to an exact tie
    # (two items whose embeddings coincide, e.g. both clipped to ζ along one direction, score the same)
    index = GalleryIndex.load(Path(g1["index"]))
    gal = GalleryParts(GalleryVersion(gdir).evaluation_store).embeddings()
    scores, ids = index.search(gal.vectors()[:20].astype(np.float32), 2, query_generation=1)
    own = gal.ids[:20]
    first, tied = ids[:, 0] == own, (ids[:, 1] == own) & np.isclose(scores[:, 1], scores[:, 0], rtol=1e-5, atol=1e-6)
    assert (first | tied).all(), (ids[:, :2].tolist(), scores.tolist())
    assert first.mean() >= 0.9
    metrics = json.loads((gdir / "metrics.json").read_text())
    assert metrics["self"] == g1["metrics"]["self"]


def test_failed_lineage_commit_leaves_everything_as_it_was(lineage_run):
    home, params, _, _ = lineage_run
    ws = Workspace(home)
    live_index = Path(LineageDB(f"sqlite:///{home / 'lineage.db'}").to_json()[0]["index"])
    before_index = sha(live_index / "index.faiss")
    before_db = LineageDB(f"sqlite:///{home / 'lineage.db'}").to_json()
    # a real database-side failure: a trigger that aborts any new generation row
    con = sqlite3.connect(home / "lineage.db")
    con.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON generations BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
    )
    con.commit()
    try:
        with pytest.raises(Exception, match="injected failure"):
            run_generation(home, params, {"name": "g2", "classes": "all", "alignment": "hbct", "reference": False})
    finally:
        con.execute("DROP TRIGGER refuse")
        con.commit()
        con.close()
    assert LineageDB(f"sqlite:///{home / 'lineage.db'}").to_json() == before_db
    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri, uri)
    assert sorted(int(v.version) for v in client.search_model_versions("name='bctflow-embedder'")) == [1, 2]
    exp = client.get_experiment_by_name("bctflow").experiment_id
    (attempt,) = client.search_runs([exp], "tags.`bctflow.generation` = '2'")  # the attempt's record stays, FAILED
    assert attempt.info.status == "FAILED"
    assert list(client.search_logged_models([exp], f"source_run_id = '{attempt.info.run_id}'")) == []
    assert sha(live_index / "index.faiss") == before_index
    assert not ws.generation_dir(2).exists()
    assert (ws.staging(2) / "model.pt").exists()  # kept: a rerun resumes instead of retraining


def test_transient_failures_are_retried_bad_input_is_not():
    from sqlalchemy.exc import IntegrityError, OperationalError

    from components.errors import ConfigError, LineageError

    locked = OperationalError("INSERT ...", {}, Exception("database is locked"))
    assert is_transient(locked)
    wrapped = LineageError("lineage update failed")
    wrapped.__cause__ = locked
    assert is_transient(wrapped)
    assert not is_transient(IntegrityError("INSERT ...", {}, Exception("UNIQUE constraint failed")))
    assert not is_transient(ConfigError("bad"))
