"""What the training loop reads: batches of (images, model labels), from memory or streamed from disk.

Both kinds implement :class:`TrainData`. ``batches(read)`` (an :class:`EpochRead`) yields ``(x float32 (B, C, H, W) in
[0, 1] on device, y int64 (B,) model labels on device)``:

:func:`training_data` picks the kind from the split itself (:meth:`SourceDataset.resident`):

* :class:`TensorData` — the selection held as one uint8 tensor (registered datasets decoded in memory):
  batches gathered by index from a permutation drawn from the epoch's generator, exactly as
  :func:`~components.data.batches.iterate_batches` always did (same numbers as before);
* :class:`StreamData` — a split on disk (:class:`~components.data.sources.split.SourceDataset`)
  read through its source's torch DataLoader (worker processes, pinned memory on CUDA,
  decoding on the fly); shuffling is seeded by (seed, epoch) inside the source, so a
  resumed run sees the same epochs; memory does not grow with the split.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from components.data.batches import ImageTensor, iterate_batches
from components.data.sources.split import SourceDataset
from components.errors import DataError

__all__ = ["EpochRead", "StreamData", "TensorData", "TrainData", "as_train_data", "training_data"]


@dataclass(frozen=True)
class EpochRead:
    """How one epoch reads a training selection: global batches of ``batch_size`` on ``device``, shuffled or not
    (seeded by ``seed`` and ``epoch``; ``generator``: the epoch's, for a selection in memory), the last short batch
    dropped or not.

    ``shard = (rank, world)``: batches of ``batch_size`` are the global ones, the same on every rank; this rank reads
    and yields only its contiguous part of each (:func:`~components.data.batches.shard_bounds`).
    """

    batch_size: int
    device: torch.device
    shuffle: bool
    seed: int
    epoch: int = 0
    generator: torch.Generator | None = None
    drop_last: bool = False
    shard: tuple[int, int] = (0, 1)


class TrainData(Protocol):
    """A training selection the loop can iterate epoch by epoch."""

    def __len__(self) -> int: ...

    def batches(self, read: EpochRead) -> Iterator[tuple[Tensor, Tensor]]:
        """(x float (B, C, H, W) in [0, 1], y int64 (B,)) on ``read.device``, one epoch read as ``read`` says."""
        ...


#: on CUDA, a selection up to this many bytes is copied to the GPU once and its batches are gathered there: no
#: host-to-device copy per step (docs/design.md §7.12)
RESIDENT_MAX_BYTES = 2 << 30


@dataclass
class TensorData:
    """A selection held in memory as one :class:`ImageTensor` (labels already model labels); on CUDA, when it is at
    most :data:`RESIDENT_MAX_BYTES`, a copy is kept resident on the GPU."""

    data: ImageTensor
    _resident: ImageTensor | None = field(default=None, init=False, repr=False)

    def __len__(self) -> int:
        return len(self.data)

    def _on(self, device: torch.device) -> ImageTensor:
        if device.type != "cuda" or self.data.images.nbytes > RESIDENT_MAX_BYTES:
            return self.data
        if self._resident is None or self._resident.images.device != device:
            self._resident = ImageTensor(self.data.images.to(device), self.data.labels.to(device))
        return self._resident

    def batches(self, read: EpochRead) -> Iterator[tuple[Tensor, Tensor]]:
        return iterate_batches(
            self._on(read.device),
            read.batch_size,
            read.device,
            shuffle=read.shuffle,
            generator=read.generator,
            drop_last=read.drop_last,
            shard=read.shard,
        )


def _label_lut(split: SourceDataset, class_order: Sequence[int]) -> Tensor:
    """(L,) int64: the model label of each original class index (-1: not a class of the model); DataError when the
    split holds a class outside ``class_order``."""
    lut = np.full(max(split.num_classes, max(class_order, default=-1) + 1), -1, dtype=np.int64)
    lut[np.asarray(class_order, dtype=np.int64)] = np.arange(len(class_order))
    missing = np.setdiff1d(np.unique(split.labels), np.flatnonzero(lut >= 0))
    if missing.size:
        raise DataError(
            f"the training split holds classes {missing[:5].tolist()} that are not in the model's class order; "
            "select the split with the generation's classes (DataManifest.take)"
        )
    return torch.from_numpy(lut)


@dataclass
class StreamData:
    """A split on disk; its source labels become model labels through ``class_order``.

    ``class_order``: original class indices in model-label order (every label of the split must be among them).
    ``workers``: DataLoader worker processes decoding images (0: in this process).
    """

    split: SourceDataset
    class_order: Sequence[int]
    workers: int = 0

    def __post_init__(self) -> None:
        self._lut = _label_lut(self.split, self.class_order)

    def __len__(self) -> int:
        return len(self.split)

    def batches(self, read: EpochRead) -> Iterator[tuple[Tensor, Tensor]]:
        device, cuda = read.device, read.device.type == "cuda"
        loader = self.split.loader(
            batch_size=read.batch_size,
            shuffle=read.shuffle,
            seed=read.seed,
            epoch=read.epoch,
            workers=self.workers,
            pin_memory=cuda,
            drop_last=read.drop_last,
            shard=read.shard,
        )
        for images, labels, _ in loader:
            x = images.to(device, non_blocking=cuda).float().div_(255.0)
            yield x, self._lut.index_select(0, labels).to(device, non_blocking=cuda)


def training_data(
    split: SourceDataset, class_order: Sequence[int], *, workers: int = 0, pin: bool = False
) -> TrainData:
    """What the loop reads of ``split``, labels mapped to model labels by ``class_order`` (original class indices in
    model-label order): :class:`TensorData` when its images already sit in memory (``pin``: page-locked, for CUDA),
    else :class:`StreamData` over its DataLoader with ``workers`` decoding processes."""
    resident = split.resident()
    if resident is None:
        return StreamData(split, class_order, workers=workers)
    images, labels, _ = resident
    labels = _label_lut(split, class_order).index_select(0, labels)
    if pin:
        images, labels = images.pin_memory(), labels.pin_memory()
    return TensorData(ImageTensor(images, labels, pin))


def as_train_data(data: TrainData | ImageTensor) -> TrainData:
    """An :class:`ImageTensor` wrapped as :class:`TensorData`; any other :class:`TrainData` as is."""
    return TensorData(data) if isinstance(data, ImageTensor) else data
