"""Training data that stays on disk: ``data.dataset: webdataset`` or ``manifest`` with ``data.path``.

Layouts (``data.path``):

- ``webdataset``: ``path/train/`` and ``path/test/``, each a folder of WebDataset ``*.tar`` shards
  (:class:`~components.data.sources.WebDatasetSource`; :func:`~components.data.sources.write_webdataset` writes them);
- ``manifest``: ``path/train.parquet`` and ``path/test.parquet`` (or ``.csv``), each a table of image files with
  ``path``, ``id`` and ``label`` columns (:class:`~components.data.sources.ManifestSource`).

The training split is a :class:`~components.data.sources.split.SourceDataset`: selected by
position, never decoded as a whole, streamed through the source's DataLoader while a
generation trains (docs/design.md §7.11). The test split is the labelled evaluation split
every generation is measured on (P_com, P_up, the compatibility matrix): it is decoded
once into memory (:meth:`SourceDataset.decode`), as every generation and backfill embeds it.
Both splits must be labelled with the same class names, and ``data.image_size`` fixes the side
length every image is resized to.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from components.data.catalog import DatasetRequest, register_dataset
from components.data.sources import ImageSource, create_source
from components.data.sources.split import DatasetSplits, SourceDataset
from components.errors import DataError

__all__ = ["streamed_splits"]

_LAYOUT = {
    "webdataset": "train/ and test/ folders of WebDataset .tar shards",
    "manifest": "train.parquet and test.parquet (or .csv) manifests of image files",
}


def _split_path(kind: str, top: Path, split: str) -> Path:
    if kind == "webdataset":
        return top / split
    for ext in (".parquet", ".csv"):
        if (top / f"{split}{ext}").is_file():
            return top / f"{split}{ext}"
    return top / f"{split}.parquet"


def _open(kind: str, req: DatasetRequest) -> tuple[ImageSource, ImageSource, int]:
    if not req.path:
        raise DataError(f"dataset {kind} needs data.path: the folder holding {_LAYOUT[kind]}; set it in params.yaml")
    if req.image_size is None:
        raise DataError(
            f"dataset {kind} needs data.image_size: its images are streamed and resized to image_size×image_size; "
            "set data.image_size in params.yaml (e.g. 32)"
        )
    top = Path(req.path).expanduser()
    train, test = (create_source(kind, _split_path(kind, top, s), name=f"{top.name}/{s}") for s in ("train", "test"))
    for split, src in (("train", train), ("test", test)):
        if not src.labelled or len(src) == 0:
            raise DataError(
                f"the {split} split of {top} must be non-empty and labelled (every item a class), "
                f"got {len(src)} items with {int((src.labels < 0).sum())} unlabelled; label it or use it as the "
                "gallery corpus (gallery.source) instead"
            )
    if train.class_names != test.class_names:
        raise DataError(
            f"the train and test splits of {top} name different classes ({list(train.class_names)[:5]}… vs "
            f"{list(test.class_names)[:5]}…); write both with the same class names"
        )
    if train.channels != test.channels:
        raise DataError(f"the train and test splits of {top} have {train.channels}- and {test.channels}-channel images")
    return train, test, int(req.image_size)


def streamed_splits(kind: str, req: DatasetRequest) -> DatasetSplits:
    """The on-disk dataset of ``kind`` at ``req.path``: a streamed train split and an in-memory test split."""
    train, test, size = _open(kind, req)
    fingerprint = hashlib.sha256(f"{kind}|{train.fingerprint()}|{test.fingerprint()}|{size}".encode()).hexdigest()
    return DatasetSplits(
        f"{kind}:{Path(req.path or '').name}",
        SourceDataset(train, size),
        SourceDataset.in_memory(SourceDataset(test, size).decode(), f"{Path(req.path or '').name}/test"),
        fingerprint,
        {"streamed": True, "train_source": repr(train)},
    )


@register_dataset("webdataset")
def load_webdataset(req: DatasetRequest) -> DatasetSplits:
    return streamed_splits("webdataset", req)


@register_dataset("manifest")
def load_manifest(req: DatasetRequest) -> DatasetSplits:
    return streamed_splits("manifest", req)
