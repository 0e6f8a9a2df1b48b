"""The lifecycle on server databases: lineage and MLflow tracking on a real PostgreSQL (tests/pg.py), a chain of two
generations through `bctflow chain` and a backfill, read back through the same stores and `bctflow lineage --json`."""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from bctflow.cli import app
from components.io import file_sha256
from registry.lineage import LineageStore
from tests.helpers import run_backfill, write_params


@pytest.fixture(scope="module")
def pg_run(pg_cluster, tmp_path_factory, prefect_harness):
    tmp = tmp_path_factory.mktemp("pg-run")
    lineage, tracking = pg_cluster.new_database(), pg_cluster.new_database()
    params = tmp / "params.yaml"
    chain = "[{name: g0, classes: [0, 1, 2, 3, 4]}, {name: g1, classes: all, alignment: hbct, reference: false}]"
    write_params(params, [f"lineage.db_url={lineage}", f"tracking.mlflow_uri={tracking}", f"generations={chain}"])
    home = tmp / "ws"
    res = CliRunner().invoke(app, ["chain", "--home", str(home), "--params", str(params)])
    assert res.exit_code == 0, res.output[-3000:]
    run_backfill(home, params, target=1)
    shown = CliRunner().invoke(app, ["lineage", "--json", "--home", str(home), "--params", str(params)])
    assert shown.exit_code == 0, shown.output[-3000:]
    return home, lineage, tracking, json.loads(shown.stdout)


def test_the_chain_and_the_backfill_live_in_postgresql(pg_run):
    home, lineage, tracking, shown = pg_run
    assert not (home / "lineage.db").exists() and not (home / "mlflow.db").exists()  # nothing fell back to SQLite
    store = LineageStore(lineage, readonly=True, root=home)  # paths are stored relative to the workspace
    doc = store.to_json()
    assert [g["name"] for g in doc] == ["g0", "g1"] and doc[1]["parent"] == 0
    assert shown == json.loads(json.dumps(doc, default=str))  # `bctflow lineage --json` reads the same rows
    ptr = store.live_pointer()
    assert ptr.generation_id == 1  # the full backfill re-embedded the gallery with g1
    assert ptr.model_sha256 == file_sha256(ptr.model_checkpoint)  # the gallery's model, pinned by its bytes
    assert [(b.from_generation_id, b.to_generation_id, b.kind) for b in store.backfills()] == [(0, 1, "full")]
    store.close()
    client = MlflowClient(tracking_uri=tracking)
    versions = client.search_model_versions("name='bctflow-embedder'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    assert int(client.get_model_version_by_alias("bctflow-embedder", "production").version) == 2
