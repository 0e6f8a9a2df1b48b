"""The data of a run: the dataset's splits (loaded once per process), the generation's training selection and the
gallery sources — the labelled evaluation split, and the serving corpus params ``gallery:`` name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from components.data import DataManifest, resolve_class_order, select_training_data
from components.data.catalog import DatasetRequest
from components.data.prepare import prepared_splits
from components.data.sources import ImageSource, create_source
from components.data.sources.split import DatasetSplits, SourceDataset
from components.errors import DataError
from components.indexing.version import EVAL_SPLIT
from flows.params import Params
from flows.runtime.workspace import Workspace

__all__ = [
    "GallerySource",
    "dataset_splits",
    "evaluation_source",
    "load_splits",
    "open_corpus",
    "select_generation_data",
]


@dataclass(frozen=True)
class GallerySource:
    """Items a gallery embeds (docs/design.md §7.10): ``kind`` (params ``gallery.source``: ``eval_split`` for the
    labelled evaluation split, else the corpus's format), ``split`` (its items, read through its loader) and the
    DataLoader ``workers`` that decode them."""

    kind: str
    split: SourceDataset
    workers: int

    def __len__(self) -> int:
        return len(self.split)

    @property
    def corpus(self) -> bool:
        """True for a serving corpus of its own (not the evaluation split)."""
        return self.kind != EVAL_SPLIT


def load_splits(p: Params, ws: Workspace) -> DatasetSplits:
    """The dataset of params.data, from the workspace's dataset cache (or data.root)."""
    return dataset_splits(p, ws.datasets_dir(p))


def dataset_splits(p: Params, root: Path) -> DatasetSplits:
    """The dataset of params.data: loaded from ``root``, subsampled and resized as configured (cached per process)."""
    d = p.data
    request = DatasetRequest(Path(root), d.download, d.test_fraction, d.split_seed, d.image_size, d.path)
    return prepared_splits(d.dataset, request, d.max_train_per_class, d.max_test_per_class)


def select_generation_data(
    params: Params,
    splits: DatasetSplits,
    gen_id: int,
    classes: Sequence[int] | Literal["all"],
    fraction: float,
    parent_order: Sequence[int] | None,
) -> DataManifest:
    """Generation ``gen_id``'s training data: its classes (the parent's first, in its order) and a seeded fraction.

    Made once per process for the same dataset and request: the plan selects it, the snapshot step writes that very
    manifest."""
    order = tuple(resolve_class_order(classes, splits.train.num_classes, parent_order))
    key = (splits.name, splits.fingerprint, order, float(fraction), params.data.split_seed + gen_id)
    if key not in _SELECTIONS:
        while len(_SELECTIONS) >= _KEEP:
            _SELECTIONS.pop(next(iter(_SELECTIONS)))
        _SELECTIONS[key] = select_training_data(
            splits.train, dataset=key[0], fingerprint=key[1], class_order=order, fraction=key[3], seed=key[4]
        )
    return _SELECTIONS[key]


#: the selections made in this process, by (dataset, fingerprint, class order, fraction, seed): the newest few
_SELECTIONS: dict[tuple, DataManifest] = {}
_KEEP = 8


def evaluation_source(p: Params, ws: Workspace) -> GallerySource:
    """The labelled evaluation split every generation is measured on, as a gallery source (read in this process,
    without DataLoader workers, as every generation has embedded it)."""
    return GallerySource(EVAL_SPLIT, load_splits(p, ws).test, 0)


def open_corpus(p: Params, ws: Workspace) -> GallerySource | None:
    """The serving corpus of params ``gallery:`` (None: the evaluation split serves), yielded at the training images'
    size and checked against their channels."""
    g = p.gallery
    if g.source == EVAL_SPLIT:
        return None
    assert g.path is not None  # the params schema requires it
    source: ImageSource = create_source(g.source, Path(g.path))
    train = load_splits(p, ws).train
    if source.channels != train.image_shape[2]:
        raise DataError(
            f"the gallery corpus {g.path} has {source.channels}-channel images but the models are trained on "
            f"{train.image_shape[2]}-channel {p.data.dataset} images; convert the corpus or train on matching data"
        )
    size = p.data.image_size or int(train.image_shape[0])
    return GallerySource(g.source, SourceDataset(source, size), g.workers)
