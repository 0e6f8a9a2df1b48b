"""The lifecycle on server databases: lineage and MLflow tracking on a real PostgreSQL (tests/pg.py), a chain of two
generations through `bctflow chain` and a backfill, read back through the same stores and `bctflow lineage --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from mlflow import MlflowClient
from prefect.settings import PREFECT_API_URL

from components.indexing.stores.faiss import MANIFEST_FILE
from components.io import file_sha256
from registry.lineage import LineageDB
from tests.helpers import run_backfill, write_params


@pytest.fixture(scope="module")
def pg_run(pg_cluster, tmp_path_factory, prefect_harness):
    tmp = tmp_path_factory.mktemp("pg-run")
    lineage, tracking = pg_cluster.new_database(), pg_cluster.new_database()
    params = tmp / "params.yaml"
    chain = "[{name: g0, classes: [0, 1, 2, 3, 4]}, {name: g1, classes: all, alignment: hbct, reference: false}]"
    write_params(params, [f"lineage.db_url={lineage}", f"tracking.mlflow_uri={tracking}", f"generations={chain}"])
    home = tmp / "ws"
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}  # the test's Prefect server: no start-up

    def bctflow(*args: str) -> str:
        cmd = [sys.executable, "-m", "bctflow.cli", *args, "--home", str(home), "--params", str(params)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return res.stdout

    bctflow("chain")
    run_backfill(home, params, target=1)
    return home, lineage, tracking, json.loads(bctflow("lineage", "--json"))


def test_the_chain_and_the_backfill_live_in_postgresql(pg_run):
    home, lineage, tracking, shown = pg_run
    assert not (home / "lineage.db").exists() and not (home / "mlflow.db").exists()  # nothing fell back to SQLite
    store = LineageDB(lineage, readonly=True, root=home)  # paths are stored relative to the workspace
    doc = store.to_json()
    assert [g["name"] for g in doc] == ["g0", "g1"] and doc[1]["parent"] == 0
    assert shown == json.loads(json.dumps(doc, default=str))  # `bctflow lineage --json` reads the same rows
    ptr = store.live_pointer()
    assert ptr.generation_id == 1  # the full backfill re-embedded the gallery with g1
    assert ptr.model_sha256 == file_sha256(ptr.model_checkpoint)  # the gallery's model, pinned by its bytes
    assert ptr.index_sha256 == file_sha256(f"{ptr.index_path}/{MANIFEST_FILE}")  # and its index, by its manifest
    assert [(b.from_generation_id, b.to_generation_id, b.kind) for b in store.backfills()] == [(0, 1, "full")]
    store.close()
    client = MlflowClient(tracking_uri=tracking)
    versions = client.search_model_versions("name='bctflow-embedder'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    assert int(client.get_model_version_by_alias("bctflow-embedder", "production").version) == 2
