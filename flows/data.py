"""The data of a run: the dataset's splits (loaded once per process), the generation's training selection and the
gallery corpus the live index serves (params ``gallery:``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from components.data import DataManifest, resolve_class_order, select_training_data
from components.data.catalog import DatasetRequest
from components.data.prepare import prepared_splits
from components.data.sources import ImageSource, open_source
from components.data.sources.split import DatasetSplits
from components.errors import DataError
from flows.params import Params
from flows.workspace import Workspace

__all__ = ["dataset_splits", "load_splits", "open_corpus", "select_generation_data"]


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


def open_corpus(p: Params, ws: Workspace) -> ImageSource | None:
    """The gallery corpus of params ``gallery:`` (None: the evaluation split serves), checked against the training
    images' channels."""
    g = p.gallery
    if g.source == "eval_split":
        return None
    assert g.path is not None  # the params schema requires it
    source = open_source(g.source, Path(g.path))
    train = load_splits(p, ws).train
    if source.channels != train.image_shape[2]:
        raise DataError(
            f"the gallery corpus {g.path} has {source.channels}-channel images but the models are trained on "
            f"{train.image_shape[2]}-channel {p.data.dataset} images; convert the corpus or train on matching data"
        )
    return source
