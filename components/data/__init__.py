"""Data: dataset catalog, deterministic selections (manifests), batching."""

from components.data.base import ArrayDataset, array_fingerprint
from components.data.catalog import (
    DatasetRequest,
    check_dataset_options,
    create_dataset,
    list_datasets,
    register_dataset,
)
from components.data.selection import (
    DataManifest,
    resolve_class_order,
    select_training_data,
)
from components.data.sources.split import DatasetSplits, SourceDataset

__all__ = [
    "ArrayDataset",
    "DataManifest",
    "DatasetRequest",
    "DatasetSplits",
    "SourceDataset",
    "array_fingerprint",
    "check_dataset_options",
    "create_dataset",
    "list_datasets",
    "register_dataset",
    "resolve_class_order",
    "select_training_data",
]
