"""Shared access for the steps: the prepared dataset, the lineage store, the MLflow registry."""

from __future__ import annotations

from pathlib import Path

from flows.params import Params
from flows.plan import GenerationPlan
from flows.workspace import Workspace
from components.data.base import DatasetSplits
from components.data.prepare import prepared_splits
from registry.lineage import LineageStore
from registry.tracking import MlflowRegistry

__all__ = ["DERIVED", "METRICS", "dataset_splits", "load_splits", "registry_for", "store_for"]

METRICS = ("cmc@1", "cmc@5", "map")
DERIVED = ("cmc@1", "map")


def load_splits(p: Params, ws: Workspace) -> DatasetSplits:
    """The dataset of params.data, from the workspace's dataset cache (or data.root)."""
    return dataset_splits(p, ws.datasets_dir(p))


def dataset_splits(p: Params, root: Path) -> DatasetSplits:
    """The dataset of params.data: loaded from ``root``, subsampled and resized as configured (cached per process)."""
    d = p.data
    return prepared_splits(
        d.dataset, str(root), download=d.download, test_fraction=d.test_fraction, split_seed=d.split_seed,
        image_size=d.image_size, path=d.path, max_train_per_class=d.max_train_per_class, max_test_per_class=d.max_test_per_class,
    )


def store_for(plan_or_params: GenerationPlan | Params, ws: Workspace | None = None) -> LineageStore:
    if isinstance(plan_or_params, GenerationPlan):
        return LineageStore(plan_or_params.workspace.lineage_url(plan_or_params.p))
    assert ws is not None
    return LineageStore(ws.lineage_url(plan_or_params))


def registry_for(p: Params, ws: Workspace) -> MlflowRegistry:
    return MlflowRegistry(ws.mlflow_uri(p), p.tracking.experiment, p.tracking.registered_model, ws.mlflow_artifacts)
