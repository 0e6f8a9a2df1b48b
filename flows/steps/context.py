"""The dataset every step of a run reads (loaded once per process, then cached)."""

from __future__ import annotations

from pathlib import Path

from components.data.catalog import DatasetRequest
from components.data.prepare import prepared_splits
from components.data.sources.split import DatasetSplits
from flows.params import Params
from flows.workspace import Workspace

__all__ = ["dataset_splits", "load_splits"]


def load_splits(p: Params, ws: Workspace) -> DatasetSplits:
    """The dataset of params.data, from the workspace's dataset cache (or data.root)."""
    return dataset_splits(p, ws.datasets_dir(p))


def dataset_splits(p: Params, root: Path) -> DatasetSplits:
    """The dataset of params.data: loaded from ``root``, subsampled and resized as configured (cached per process)."""
    d = p.data
    request = DatasetRequest(Path(root), d.download, d.test_fraction, d.split_seed, d.image_size, d.path)
    return prepared_splits(d.dataset, request, d.max_train_per_class, d.max_test_per_class)
