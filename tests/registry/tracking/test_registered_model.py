"""MLflow registration against a real temp SQLite tracking store: the run, the exported model, the version linked to
it, tags, aliases, rollback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow.exceptions import MlflowException

from components.geometry import create_space
from components.models import build_model, load_model, save_model
from components.training.embed import embed_images, retrieval_vectors
from registry.tracking.common import metric_key
from registry.tracking.logged_model import log_embedder
from registry.tracking.registered_model import MlflowRegistry, RegistrationRequest
from registry.tracking.runs import RunSpec
from tests.helpers import tiny_spec


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt"
    save_model(build_model(tiny_spec(embed_dim=8, num_classes=2, class_order=(0, 1))), path)
    return path


EXAMPLE = np.random.default_rng(0).integers(0, 256, (2, 8, 8, 1), dtype=np.uint8)


def request(reg: MlflowRegistry, ckpt: Path, gen: int, **kw) -> RegistrationRequest:
    """Generation ``gen``'s registration, into a run opened for it (as the flow opens it before training)."""
    run_key = kw.pop("run_key", f"key-{gen}")
    run_id = reg.runs.open(RunSpec(run_key, f"g{gen}", {"train": {"epochs": 2}}))
    reg.runs.log_epochs(run_id, [{"epoch": 1.0, "loss": 1.5}, {"epoch": 2.0, "loss": 1.0}])
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
        example=EXAMPLE,
        description=f"Chain: g0 → g{gen}",
        run_id=run_id,
        run_key=run_key,
        params={"alignment": {"method": "hbct", "tau": 0.5}},
        metrics={"self/cmc@1": 0.9, "p_com/map": None},
        backfill_required=False,
        aliases=[f"gen-{gen}"],
    )
    base.update(kw)
    return RegistrationRequest(**base)


def test_versions_tags_aliases_and_a_loadable_model(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    r0 = reg.register(request(reg, checkpoint, 0))
    r1 = reg.register(request(reg, checkpoint, 1, backfill_required=True, backfill_reasons=["clip saturated"]))
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
    assert list(v1.tags)[:3] == ["bctflow.generation", "bctflow.zeta", "bctflow.backfill_required"]  # telling first
    assert v1.description == "Chain: g0 → g1"
    assert str(client.get_model_version_by_alias("embedder", "gen-1").version) == "2"
    assert {a: reg.aliases()[a] for a in ("gen-0", "gen-1")} == {"gen-0": "1", "gen-1": "2"}  # every alias at once
    assert MlflowRegistry(uri, "exp", "no-such-model", tmp_path / "artifacts").aliases() == {}
    run = client.get_run(r1.run_id)
    assert run.data.metrics[metric_key("self/cmc@1")] == 0.9
    assert "p_com/map" not in run.data.metrics  # None is not logged as a number
    assert [m.value for m in client.get_metric_history(r1.run_id, "train/loss")] == [1.5, 1.0]
    assert run.data.params["alignment.tau"] == "0.5" and run.data.params["train.epochs"] == "2"
    model = mlflow.pyfunc.load_model("models:/embedder@gen-1")
    out = model.predict(np.zeros((3, 8, 8, 1), dtype=np.uint8))
    assert out.shape == (3, 9) and np.isfinite(out).all()
    assert np.allclose(out[:, 1:] ** 2 @ np.ones(8) - out[:, 0] ** 2, -1.0, atol=1e-4)  # on the hyperboloid


def test_the_version_is_linked_to_the_model_logged_in_its_run(tmp_path: Path, checkpoint: Path):
    """The logged model page names its version; the version names its logged model and run; the run holds one
    model, with both flavours, its input example, signature and requirements."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    r0 = reg.register(request(reg, checkpoint, 0))
    client = mlflow.MlflowClient(uri, uri)
    mv = client.get_model_version("embedder", r0.version)
    assert mv.source == f"models:/{r0.model_id}" and mv.run_id == r0.run_id
    logged = client.get_logged_model(r0.model_id)
    assert logged.source_run_id == r0.run_id and logged.status == "READY"
    assert json.loads(logged.tags["mlflow.modelVersions"]) == [{"name": "embedder", "version": "1"}]  # "registered"
    assert logged.tags["bctflow.generation"] == "0" and logged.tags["bctflow.zeta"] == "1"
    assert [o.model_id for o in client.get_run(r0.run_id).outputs.model_outputs] == [r0.model_id]
    exp = client.get_experiment_by_name("exp").experiment_id
    assert [m.model_id for m in client.search_logged_models([exp])] == [r0.model_id]
    info = mlflow.models.get_model_info(f"models:/{r0.model_id}")
    assert set(info.flavors) == {"pytorch", "python_function"}
    (images,), (vectors,) = info.signature.inputs.inputs, info.signature.outputs.inputs
    assert (images.type, images.shape) == (np.dtype(np.uint8), (-1, 8, 8, 1))
    assert (vectors.type, vectors.shape) == (np.dtype(np.float32), (-1, 9))
    assert info.saved_input_example_info["type"] == "ndarray"
    assert info.metadata["bctflow_generation"] == 0
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{r0.model_id}", dst_path=str(tmp_path / "m")))
    reqs = (local / "requirements.txt").read_text().split()
    assert sorted(r.split("==")[0] for r in reqs) == ["mlflow", "numpy", "torch"]  # not bctflow, not timm
    assert (local / "data" / "model.pt2").is_file() and not list(local.rglob("*.pkl"))


def test_the_pytorch_flavour_loads_the_same_graph(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    reg.register(request(reg, checkpoint, 0))
    images = np.random.default_rng(3).integers(0, 256, (5, 8, 8, 1), dtype=np.uint8)
    module = mlflow.pytorch.load_model("models:/embedder@gen-0")
    with torch.no_grad():
        from_module = module(torch.from_numpy(images)).numpy()
    from_pyfunc = mlflow.pyfunc.load_model("models:/embedder@gen-0").predict(images)
    assert np.array_equal(from_module, from_pyfunc)
    expected = retrieval_vectors(embed_images(load_model(checkpoint), images), create_space("lorentz", 1.0))
    assert np.abs(from_pyfunc - expected).max() < 1e-5  # the vectors the FAISS index holds, to float32 rounding


def test_failed_registration_leaves_the_registry_as_it_was(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    reg.register(request(reg, checkpoint, 0))
    failing = request(reg, checkpoint, 1, aliases=["latest"])
    with pytest.raises(MlflowException, match="latest"):  # a reserved alias: fails after the version exists
        reg.register(failing)
    client = mlflow.MlflowClient(uri, uri)
    assert [str(v.version) for v in client.search_model_versions("name='embedder'")] == ["1"]
    exp = client.get_experiment_by_name("exp").experiment_id
    assert [m.source_run_id for m in client.search_logged_models([exp])] != [failing.run_id]  # its model is gone
    assert len(client.search_logged_models([exp])) == 1
    assert client.get_run(failing.run_id).info.lifecycle_stage == "active"  # the attempt's record stays


def test_rollback_of_a_first_registration_removes_the_model(tmp_path: Path, checkpoint: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    r0 = reg.register(request(reg, checkpoint, 0))
    reg.undo_registration(r0)
    client = mlflow.MlflowClient(uri, uri)
    assert client.search_registered_models() == []
    assert client.search_logged_models([client.get_experiment_by_name("exp").experiment_id]) == []
    assert client.get_run(r0.run_id).info.lifecycle_stage == "active"


def test_a_retry_in_the_same_run_keeps_one_model(tmp_path: Path, checkpoint: Path):
    """An attempt killed after logging its model and before registering it: the retry (same run key, same run)
    replaces that model instead of leaving an unregistered one beside the registered."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    first = request(reg, checkpoint, 0)
    orphan = log_embedder(
        reg.client(), checkpoint, EXAMPLE, first.run_id, {}, {}
    ).model_id  # what the killed attempt left
    again = request(reg, checkpoint, 0)
    assert again.run_id == first.run_id  # the same run key and params: the run is resumed
    r0 = reg.register(again)
    client = mlflow.MlflowClient(uri, uri)
    exp = client.get_experiment_by_name("exp").experiment_id
    assert [m.model_id for m in client.search_logged_models([exp])] == [r0.model_id] and r0.model_id != orphan


def test_a_copied_workspace_store_moves_its_artifact_uris_to_the_copy(tmp_path: Path, checkpoint: Path):
    ws, copy = tmp_path / "ws", tmp_path / "copy"
    first = MlflowRegistry(f"sqlite:///{ws / 'mlflow.db'}", "exp", "embedder", ws / "mlartifacts")
    first.register(request(first, checkpoint, 0))
    shutil.copytree(ws, copy)
    shutil.move(ws, tmp_path / "away")  # the original is gone: anything still pointing at it fails
    uri = f"sqlite:///{copy / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", copy / "mlartifacts")
    r1 = reg.register(request(reg, checkpoint, 1))
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
    a = MlflowRegistry(uri, "exp", "embedder", tmp_path / "a" / "mlartifacts")
    a.register(request(a, checkpoint, 0))
    b = MlflowRegistry(uri, "exp", "embedder", tmp_path / "b" / "mlartifacts")
    b.register(request(b, checkpoint, 1))
    client = mlflow.MlflowClient(uri, uri)
    assert client.get_experiment_by_name("exp").artifact_location == (tmp_path / "a" / "mlartifacts").resolve().as_uri()


def test_a_reused_registration_rolls_back_with_its_model_and_an_orphan_goes_whole(tmp_path: Path, checkpoint: Path):
    """A version found again by its run key (an attempt killed after registering) carries its logged model, so
    rolling it back removes both; `doctor --repair` deleting an orphan version removes its model and run too."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    reg.register(request(reg, checkpoint, 0))
    first = reg.register(request(reg, checkpoint, 1))
    again = reg.register(request(reg, checkpoint, 1))
    assert (again.version, again.model_id) == (first.version, first.model_id) and not again.created_model
    reg.undo_registration(again)
    client = mlflow.MlflowClient(uri, uri)
    exp = client.get_experiment_by_name("exp").experiment_id
    assert [str(v.version) for v in client.search_model_versions("name='embedder'")] == ["1"]
    assert len(client.search_logged_models([exp])) == 1  # generation 0's only
    orphan = reg.register(request(reg, checkpoint, 2))
    reg.delete_version(orphan.version)
    assert [str(v.version) for v in client.search_model_versions("name='embedder'")] == ["1"]
    assert len(client.search_logged_models([exp])) == 1
    assert client.get_run(orphan.run_id).info.lifecycle_stage == "deleted"
