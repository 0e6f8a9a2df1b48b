"""MLflow registration against a real temp SQLite tracking store: tags, aliases, rollback."""

from __future__ import annotations

import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.exceptions import MlflowException

from components.models import build_model, save_model
from registry.tracking import MlflowStore, RegistrationRequest, metric_key
from tests.helpers import tiny_spec


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt"
    save_model(build_model(tiny_spec(embed_dim=8, num_classes=2, class_order=(0, 1))), path)
    return path


def request(ckpt: Path, gen: int, **kw) -> RegistrationRequest:
    base = dict(
        generation_id=gen,
        name=f"g{gen}",
        parent_id=gen - 1 if gen else None,
        parent_version=str(gen) if gen else None,
        alignment="hbct" if gen else "independent",
        geometry="lorentz",
        zeta=1.0 + 0.2 * gen,
        curvature=1.0,
        data_hash=f"md5-{gen}",
        checkpoint=ckpt,
        image_shape=(8, 8, 1),
        vector_dim=9,
        description=f"Chain: g0 → g{gen}",
        params={"alignment": {"method": "hbct", "tau": 0.5}},
        metrics={"self/cmc@1": 0.9, "p_com/map": None},
        history=[{"epoch": 1.0, "loss": 1.5}, {"epoch": 2.0, "loss": 1.0}],
        backfill_required=False,
        aliases=[f"gen-{gen}"],
    )
    base.update(kw)
    return RegistrationRequest(**base)


def test_versions_tags_aliases_and_a_loadable_model(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowStore(uri, "exp", "embedder", tmp_path / "artifacts")
    r0 = reg.register(request(checkpoint, 0))
    r1 = reg.register(request(checkpoint, 1, backfill_required=True, backfill_reasons=["clip saturated"]))
    assert (r0.version, r1.version) == ("1", "2") and r0.created_model and not r1.created_model
    client = mlflow.MlflowClient(uri, uri)
    v1 = client.get_model_version("embedder", "2")
    assert v1.tags["bctflow.generation"] == "1"
    assert v1.tags["bctflow.parent_generation"] == "0"
    assert v1.tags["bctflow.parent_version"] == "1"
    assert v1.tags["bctflow.zeta"] == "1.2"
    assert v1.tags["bctflow.curvature"] == "1"
    assert v1.tags["bctflow.alignment"] == "hbct" and v1.tags["bctflow.geometry"] == "lorentz"
    assert v1.tags["bctflow.data_hash"] == "md5-1"
    assert v1.tags["bctflow.backfill_required"] == "true" and v1.tags["bctflow.backfill_reasons"] == "clip saturated"
    assert v1.description == "Chain: g0 → g1"
    assert str(client.get_model_version_by_alias("embedder", "gen-1").version) == "2"
    run = client.get_run(r1.run_id)
    assert run.data.metrics[metric_key("self/cmc@1")] == 0.9
    assert "p_com/map" not in run.data.metrics  # None is not logged as a number
    assert [m.value for m in client.get_metric_history(r1.run_id, "train/loss")] == [1.5, 1.0]
    assert run.data.params["alignment.tau"] == "0.5"
    model = mlflow.pyfunc.load_model("models:/embedder@gen-1")
    out = model.predict(np.zeros((3, 8, 8, 1), dtype=np.uint8))
    assert out.shape == (3, 9) and np.isfinite(out).all()
    assert np.allclose(out[:, 1:] ** 2 @ np.ones(8) - out[:, 0] ** 2, -1.0, atol=1e-4)  # on the hyperboloid


def test_failed_registration_leaves_the_registry_as_it_was(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowStore(uri, "exp", "embedder", tmp_path / "artifacts")
    reg.register(request(checkpoint, 0))
    with pytest.raises(MlflowException, match="latest"):  # a reserved alias: fails after the version exists
        reg.register(request(checkpoint, 1, aliases=["latest"]))
    client = mlflow.MlflowClient(uri, uri)
    assert [str(v.version) for v in client.search_model_versions("name='embedder'")] == ["1"]
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert len(runs) == 1  # the failed run is deleted (hidden from active runs)


def test_rollback_of_a_first_registration_removes_the_model(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowStore(uri, "exp", "embedder", tmp_path / "artifacts")
    r0 = reg.register(request(checkpoint, 0))
    reg.rollback(r0)
    client = mlflow.MlflowClient(uri, uri)
    assert client.search_registered_models() == []
    assert client.get_run(r0.run_id).info.lifecycle_stage == "deleted"


def test_a_copied_workspace_store_moves_its_artifact_uris_to_the_copy(tmp_path: Path, checkpoint: Path):
    ws, copy = tmp_path / "ws", tmp_path / "copy"
    MlflowStore(f"sqlite:///{ws / 'mlflow.db'}", "exp", "embedder", ws / "mlartifacts").register(request(checkpoint, 0))
    shutil.copytree(ws, copy)
    shutil.move(ws, tmp_path / "away")  # the original is gone: anything still pointing at it fails
    uri = f"sqlite:///{copy / 'mlflow.db'}"
    reg = MlflowStore(uri, "exp", "embedder", copy / "mlartifacts")
    r1 = reg.register(request(checkpoint, 1))
    client = mlflow.MlflowClient(uri, uri)
    root = (copy / "mlartifacts").resolve().as_uri()
    assert client.get_experiment_by_name("exp").artifact_location == root
    for v in ("1", "2"):
        version = client.get_model_version("embedder", v)
        assert client.get_run(version.run_id).info.artifact_uri.startswith(root + "/")
    model = mlflow.pyfunc.load_model("models:/embedder@gen-0")  # the copy's artifacts of the version made before
    assert model.predict(np.zeros((2, 8, 8, 1), dtype=np.uint8)).shape == (2, 9)
    assert r1.version == "2" and not (tmp_path / "ws").exists()


def test_a_shared_tracking_store_is_never_rewritten(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"  # not inside the workspace whose artifacts go elsewhere
    (tmp_path / "shared").mkdir()
    MlflowStore(uri, "exp", "embedder", tmp_path / "a" / "mlartifacts").register(request(checkpoint, 0))
    MlflowStore(uri, "exp", "embedder", tmp_path / "b" / "mlartifacts").register(request(checkpoint, 1))
    client = mlflow.MlflowClient(uri, uri)
    assert client.get_experiment_by_name("exp").artifact_location == (tmp_path / "a" / "mlartifacts").resolve().as_uri()
