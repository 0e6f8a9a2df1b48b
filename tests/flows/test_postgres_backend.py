"""The lifecycle on server databases: lineage and MLflow tracking on a real PostgreSQL (tests/pg.py), a chain of two
generations and a backfill, read back through the same stores."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from components.io import file_sha256
from registry.lineage import LineageStore
from tests.helpers import run_backfill, run_generation, write_params


@pytest.fixture(scope="module")
def pg_run(pg_cluster, tmp_path_factory, prefect_harness):
    tmp = tmp_path_factory.mktemp("pg-run")
    lineage, tracking = pg_cluster.new_database(), pg_cluster.new_database()
    params = tmp / "params.yaml"
    write_params(params, [f"lineage.db_url={lineage}", f"tracking.mlflow_uri={tracking}"])
    home = tmp / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    run_backfill(home, params, target=1)
    return home, lineage, tracking


def test_the_chain_and_the_backfill_live_in_postgresql(pg_run):
    home, lineage, tracking = pg_run
    assert not (home / "lineage.db").exists() and not (home / "mlflow.db").exists()  # nothing fell back to SQLite
    store = LineageStore(lineage, readonly=True, root=home)  # paths are stored relative to the workspace
    doc = store.to_json()
    assert [g["name"] for g in doc] == ["g0", "g1"] and doc[1]["parent"] == 0
    ptr = store.live_pointer()
    assert ptr.generation_id == 1  # the full backfill re-embedded the gallery with g1
    assert ptr.model_sha256 == file_sha256(ptr.model_checkpoint)  # the gallery's model, pinned by its bytes
    assert [(b.from_generation_id, b.to_generation_id, b.kind) for b in store.backfills()] == [(0, 1, "full")]
    store.close()
    client = MlflowClient(tracking_uri=tracking)
    versions = client.search_model_versions("name='bctflow-embedder'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    assert int(client.get_model_version_by_alias("bctflow-embedder", "production").version) == 2
