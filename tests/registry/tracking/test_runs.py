"""The generation's MLflow run (registry/tracking/runs.py) in a real SQLite tracking store: found again by run key and
params, stale runs ended, epochs logged once, datasets, the active run's end status."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from registry.tracking.registered_model import MlflowRegistry
from registry.tracking.runs import DatasetInput, RunSpec

MD5 = "5d93f621e3d5a1b2c3d4e5f60718293a"


@pytest.fixture
def store(tmp_path: Path) -> MlflowRegistry:
    return MlflowRegistry(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp", "embedder", tmp_path / "artifacts")


def _client(store: MlflowRegistry) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(store.tracking_uri, store.tracking_uri)


def test_a_run_is_resumed_by_run_key_and_params_else_a_new_one_starts(store: MlflowRegistry, tmp_path: Path):
    params_file = tmp_path / "params.yaml"
    params_file.write_text("train:\n  epochs: 3\n")
    spec = RunSpec("k1", "gen-1", {"train": {"epochs": 3}, "list": [1, 2]}, {"bctflow.generation": "1"})
    first = store.runs.open(RunSpec(**{**vars(spec), "files": {"params": [params_file]}}))
    assert store.runs.open(spec) == first  # the same key and params: resumed
    run = _client(store).get_run(first)
    assert run.data.params == {"train.epochs": "3", "list": "[1, 2]"} and run.info.status == "RUNNING"
    assert [a.path for a in _client(store).list_artifacts(first, "params")] == ["params/params.yaml"]
    changed = store.runs.open(RunSpec("k1", "gen-1", {"train": {"epochs": 3}, "list": [1, 2, 3]}))
    assert changed != first  # params cannot change in MLflow: a new run, and the stale RUNNING one is ended
    assert _client(store).get_run(first).info.status == "KILLED"
    assert store.runs.open(RunSpec("k2", "gen-1", {"train": {"epochs": 3}, "list": [1, 2]})) not in (first, changed)


def test_epochs_are_logged_once_whatever_logs_them(store: MlflowRegistry):
    run_id = store.runs.open(RunSpec("k", "g", {}))
    assert store.runs.log_epochs(run_id, [{"epoch": 1.0, "loss": 2.0, "acc": 0.1}]) == 1  # live, as it ends
    history = [{"epoch": 1.0, "loss": 2.0, "acc": 0.1}, {"epoch": 2.0, "loss": 1.5, "acc": float("nan")}]
    assert store.runs.log_epochs(run_id, history) == 1  # at the end: only epoch 2 is new
    assert store.runs.log_epochs(run_id, history) == 0
    client = _client(store)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")] == [(1, 2.0), (2, 1.5)]
    assert [m.step for m in client.get_metric_history(run_id, "train/acc")] == [1]  # NaN is not logged


def test_a_child_run_and_dataset_inputs(store: MlflowRegistry):
    parent = store.runs.open(RunSpec("k", "gen-1", {}))
    child = store.runs.open(RunSpec("k:reference", "gen-1-reference", {"role": "reference"}, parent_run_id=parent))
    client = _client(store)
    assert client.get_run(child).data.tags["mlflow.parentRunId"] == parent
    store.runs.log_datasets(
        parent,
        [
            DatasetInput(
                "digits-gen_001",
                "5d93f621e3d5a1b2c3d4e5f60718293a",
                "/ws/m.json",
                "training",
                {"num_rows": 9},
                (8, 8, 1),
            ),
            DatasetInput("digits-test", "0" * 40, "digits", "evaluation"),
        ],
    )
    inputs = client.get_run(parent).inputs.dataset_inputs
    by_context = {next(t.value for t in i.tags if t.key == "mlflow.data.context"): i.dataset for i in inputs}
    assert by_context["training"].digest == MD5
    assert json.loads(by_context["training"].source) == {"uri": "/ws/m.json"}
    assert json.loads(by_context["training"].profile) == {"num_rows": 9}
    assert by_context["evaluation"].digest == "0" * 36 and by_context["evaluation"].schema in (None, "")


@pytest.mark.parametrize(
    ("raised", "status"), [(None, "FINISHED"), (RuntimeError, "FAILED"), (KeyboardInterrupt, "KILLED")]
)
def test_the_active_run_ends_with_what_happened(store: MlflowRegistry, raised, status):
    run_id = store.runs.open(RunSpec("k", "g", {}))
    if raised is None:
        with store.runs.active(run_id):
            assert mlflow.active_run().info.run_id == run_id
    else:
        with pytest.raises(raised), store.runs.active(run_id):
            raise raised()
    assert mlflow.active_run() is None and _client(store).get_run(run_id).info.status == status
