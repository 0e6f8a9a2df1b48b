"""Dataset catalog: one loader per name (``@register_dataset("digits")``) in ``components/data/sets/``.

A loader has the signature ``load(root: Path, *, download: bool, test_fraction:
float, split_seed: int, image_size: int | None = None, path: str | None = None)
-> DatasetSplits``. ``root`` is the dataset cache folder (each dataset keeps its
files in ``root/<name>/``). Datasets with an official split ignore
``test_fraction`` / ``split_seed``. Fixed-size datasets ignore ``image_size``
(the caller resizes); datasets of images of mixed sizes (``image_folder``)
resize to it themselves. ``path`` points a dataset at user data (``image_folder``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from components.data.base import DatasetSplits
from components.errors import DataError
from components.plugins import Catalog

__all__ = ["DATASETS", "available_datasets", "get_dataset_loader", "load_dataset", "register_dataset"]


class DatasetLoader(Protocol):
    def __call__(
        self,
        root: Path,
        *,
        download: bool,
        test_fraction: float,
        split_seed: int,
        image_size: int | None = None,
        path: str | None = None,
    ) -> DatasetSplits: ...


DATASETS: Catalog[DatasetLoader] = Catalog(
    "dataset", "components.data.sets", DataError, "set data.dataset in params.yaml to one of them"
)


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    return DATASETS.register(name)


def available_datasets() -> list[str]:
    return DATASETS.names()


def get_dataset_loader(name: str) -> DatasetLoader:
    return DATASETS.get(name)


def load_dataset(
    name: str,
    root: Path,
    *,
    download: bool = True,
    test_fraction: float = 0.3,
    split_seed: int = 0,
    image_size: int | None = None,
    path: str | None = None,
) -> DatasetSplits:
    """Load (downloading if allowed and needed) the named dataset's splits."""
    return get_dataset_loader(name)(
        Path(root),
        download=download,
        test_fraction=test_fraction,
        split_seed=split_seed,
        image_size=image_size,
        path=path,
    )
