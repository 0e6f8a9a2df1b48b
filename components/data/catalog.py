"""Dataset catalog: one loader per name (``@register_dataset("digits")``) in ``components/data/sets/``.

A loader takes one :class:`DatasetRequest` and returns the dataset's
:class:`~components.data.sources.split.DatasetSplits`. ``root`` is the dataset cache
folder (each dataset keeps its files in ``root/<name>/``). Datasets with an
official split ignore ``test_fraction`` / ``split_seed``. Fixed-size datasets
ignore ``image_size`` (the caller resizes); datasets of images of mixed sizes
(``image_folder``) resize to it themselves. ``path`` points a dataset at user
data (``image_folder``). The catalog's face is :class:`components.plugins.Catalog`'s: ``register_dataset``,
``create_dataset(name, root, **options)``, ``list_datasets()``, ``check_dataset_options(name, options)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from components.data.sources.split import DatasetSplits
from components.errors import DataError
from components.plugins import Catalog

__all__ = [
    "DATASETS",
    "DatasetRequest",
    "check_dataset_options",
    "create_dataset",
    "list_datasets",
    "register_dataset",
]


@dataclass(frozen=True)
class DatasetRequest:
    """Where and how to load a dataset (hashable: prepared datasets are cached per request)."""

    root: Path
    download: bool = True
    test_fraction: float = 0.3
    split_seed: int = 0
    image_size: int | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))


DatasetLoader = Callable[[DatasetRequest], DatasetSplits]


def _load(loader: DatasetLoader, *args: Any, **options: Any) -> DatasetSplits:
    return loader(DatasetRequest(*args, **options))


DATASETS: Catalog[DatasetLoader] = Catalog(
    "dataset",
    "components.data.sets",
    DataError,
    "set data.dataset in params.yaml to one of them",
    options=lambda loader: [f.name for f in fields(DatasetRequest)],
    make=_load,
    bad_options="dataset {name!r} has no option(s) {unknown}; its options are {known} (a DatasetRequest's fields)",
)

#: the catalog's face (components/plugins.py): ``@register_dataset("name")`` on a loader (one DatasetRequest → the
#: splits), ``list_datasets()``, ``create_dataset(name, root, **options)`` (the splits, downloaded if allowed and
#: needed; options: DatasetRequest's other fields) and ``check_dataset_options(name, options)``
register_dataset, list_datasets = DATASETS.register, DATASETS.names
create_dataset, check_dataset_options = DATASETS.create, DATASETS.check_options
