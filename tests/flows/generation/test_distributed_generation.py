"""A generation trained on 2 gloo ranks through the real flow (``train.nproc: 2``, what ``bctflow run --nproc 2``
sets): recorded in the lineage and the registry exactly once, and the model one process trains from the same
workspace (a copy of it: workspaces are relocatable)."""

from __future__ import annotations

import json
import shutil

import mlflow
import pytest
import torch

from components.models import load_model
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from tests.helpers import run_generation, write_params

G1 = {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False}


@pytest.fixture(scope="module")
def runs(prefect_harness, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    params = tmp / "params.yaml"
    write_params(params)
    one, two = tmp / "one", tmp / "two"
    run_generation(one, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    shutil.copytree(one, two)
    run_generation(one, params, G1)
    s2 = run_generation(two, params, G1, overrides=["train.nproc=2"])
    return one, two, s2


def _g1(home):
    doc = LineageDB(f"sqlite:///{home / 'lineage.db'}").to_json()
    assert [g["name"] for g in doc] == ["g0", "g1"]  # exactly one row for the generation
    return doc[1]


def test_two_ranks_record_the_generation_once(runs):
    _, two, _ = runs
    _g1(two)
    uri = f"sqlite:///{two / 'mlflow.db'}"
    versions = mlflow.MlflowClient(uri, uri).search_model_versions("name='bctflow-embedder'")
    assert sorted(int(v.version) for v in versions) == [1, 2]  # g0 and g1, once each
    summary = json.loads((Workspace(two).generation_dir(1) / "metrics.json").read_text())
    assert summary["device"] == "cpu x2 (gloo)"


def test_two_ranks_train_the_model_one_process_trains(runs):
    one, two, _ = runs
    a, b = _g1(one), _g1(two)
    wa = load_model(Workspace(one).generation_dir(1) / "model.pt").state_dict()
    wb = load_model(Workspace(two).generation_dir(1) / "model.pt").state_dict()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-3, atol=1e-3, msg=k)
    assert b["zeta"] == a["zeta"]
    for block in ("self", "cross"):
        for k, v in a["metrics"][block].items():
            assert b["metrics"][block][k] == pytest.approx(v, abs=0.02), (block, k)
