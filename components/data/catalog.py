"""Dataset catalog: one loader per name (``@register_dataset("digits")``) in ``components/data/sets/``.

A loader takes one :class:`DatasetRequest` and returns the dataset's
:class:`~components.data.sources.split.DatasetSplits`. ``root`` is the dataset cache
folder (each dataset keeps its files in ``root/<name>/``). Datasets with an
official split ignore ``test_fraction`` / ``split_seed``. Fixed-size datasets
ignore ``image_size`` (the caller resizes); datasets of images of mixed sizes
(``image_folder``) resize to it themselves. ``path`` points a dataset at user
data (``image_folder``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.data.sources.split import DatasetSplits
from components.errors import DataError
from components.plugins import Catalog

__all__ = ["DATASETS", "DatasetRequest", "available_datasets", "get_dataset_loader", "load_dataset", "register_dataset"]


@dataclass(frozen=True)
class DatasetRequest:
    """Where and how to load a dataset (hashable: prepared datasets are cached per request)."""

    root: Path
    download: bool = True
    test_fraction: float = 0.3
    split_seed: int = 0
    image_size: int | None = None
    path: str | None = None


DatasetLoader = Callable[[DatasetRequest], DatasetSplits]

DATASETS: Catalog[DatasetLoader] = Catalog(
    "dataset", "components.data.sets", DataError, "set data.dataset in params.yaml to one of them"
)


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    return DATASETS.register(name)


def available_datasets() -> list[str]:
    return DATASETS.names()


def get_dataset_loader(name: str) -> DatasetLoader:
    return DATASETS.get(name)


def load_dataset(name: str, root: str | Path, **options: Any) -> DatasetSplits:
    """Load (downloading if allowed and needed) the named dataset's splits.

    ``options``: the fields of :class:`DatasetRequest`.
    """
    return get_dataset_loader(name)(DatasetRequest(Path(root), **options))
