"""Dataset registry: one loader per name (``@register_dataset("digits")``).

A loader has the signature ``load(root: Path, *, download: bool, test_fraction:
float, split_seed: int) -> DatasetSplits``. Datasets with an official split
ignore ``test_fraction`` / ``split_seed``.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Callable, Protocol

from components.data.base import DatasetSplits
from components.errors import DataError

__all__ = ["register_dataset", "get_dataset_loader", "available_datasets", "load_dataset"]


class DatasetLoader(Protocol):
    def __call__(self, root: Path, *, download: bool, test_fraction: float, split_seed: int) -> DatasetSplits: ...


_DATASETS: dict[str, DatasetLoader] = {}
_discovered = False


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    def deco(fn: DatasetLoader) -> DatasetLoader:
        if name in _DATASETS and _DATASETS[name] is not fn:
            raise ValueError(f"dataset {name!r} registered twice")
        _DATASETS[name] = fn
        return fn

    return deco


def _discover() -> None:
    """Import every module of components.data.sets so their loaders register."""
    global _discovered
    if _discovered:
        return
    import components.data.sets as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")
    _discovered = True


def available_datasets() -> list[str]:
    _discover()
    return sorted(_DATASETS)


def get_dataset_loader(name: str) -> DatasetLoader:
    _discover()
    try:
        return _DATASETS[name]
    except KeyError:
        raise DataError(
            f"unknown dataset {name!r}; available: {', '.join(available_datasets())} "
            "(set data.dataset in params.yaml to one of them)"
        ) from None


def load_dataset(name: str, root: Path, *, download: bool = True, test_fraction: float = 0.3, split_seed: int = 0) -> DatasetSplits:
    """Load (downloading if allowed and needed) the named dataset's splits."""
    loader = get_dataset_loader(name)
    return loader(Path(root), download=download, test_fraction=test_fraction, split_seed=split_seed)
