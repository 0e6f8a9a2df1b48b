"""A bridge registered in a real MLflow store (registry/tracking/bridge_model.py): its own run holding the file,
a version of ``<model>-bridges`` per fit, tagged with its generations, role, kind and sha256; the file MLflow serves
back is the one the lineage pinned."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np

from components.bridges import Bridge
from components.io import file_sha256
from registry.tracking.bridge_model import BridgeRegistration, bridge_model_name, register_bridge
from registry.tracking.registered_model import MlflowRegistry
from tests.components.bridges.test_bridges import _gallery, _rotation


def test_each_fit_is_a_version_of_the_bridges_model_with_its_file_and_tags(tmp_path: Path):
    x = np.random.default_rng(3).normal(size=(120, 6)) * 0.3
    bridge = Bridge.fit("procrustes", 1, 0, _gallery(x), _gallery(x @ _rotation(6)))
    sha = bridge.save(tmp_path / "g1_g0.npz")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = MlflowRegistry(uri, "exp", "embedder", tmp_path / "artifacts")
    req = BridgeRegistration(tmp_path / "g1_g0.npz", sha, 1, 0, "adapter", "procrustes", 120, bridge.fit_error, "r1")
    assert (register_bridge(store, req), register_bridge(store, req)) == ("1", "2")
    client = mlflow.MlflowClient(uri, uri)
    v = client.get_model_version(bridge_model_name(store), "2")
    assert v.tags["bctflow.bridge.from_generation"] == "1" and v.tags["bctflow.bridge.to_generation"] == "0"
    assert v.tags["bctflow.bridge.role"] == "adapter" and v.tags["bctflow.bridge.kind"] == "procrustes"
    assert v.tags["bctflow.bridge.sha256"] == sha and v.tags["bctflow.generation_run_id"] == "r1"
    got = Path(mlflow.artifacts.download_artifacts(artifact_uri=v.source, dst_path=str(tmp_path / "back")))
    assert file_sha256(got) == sha
    back = Bridge.load(got, sha256=sha, source=1, target=0)
    np.testing.assert_allclose(back.map_vectors(x), bridge.map_vectors(x))
    assert client.get_run(v.run_id).data.tags["mlflow.runName"] == "adapter bridge g1→g0"
