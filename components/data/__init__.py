"""Data: dataset registry, deterministic selections (manifests), DVC snapshots, batching."""

from components.data.base import ArrayDataset, DatasetSplits, array_fingerprint
from components.data.registry import (
    available_datasets,
    get_dataset_loader,
    load_dataset,
    register_dataset,
)
from components.data.selection import (
    DataManifest,
    resolve_class_order,
    select_training_data,
)
from components.data.versioning import DataSnapshotStore, SnapshotInfo

__all__ = [
    "ArrayDataset",
    "DataManifest",
    "DataSnapshotStore",
    "DatasetSplits",
    "SnapshotInfo",
    "array_fingerprint",
    "available_datasets",
    "get_dataset_loader",
    "load_dataset",
    "register_dataset",
    "resolve_class_order",
    "select_training_data",
]
