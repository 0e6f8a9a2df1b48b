"""An in-memory :class:`~components.data.base.ArrayDataset` behind the :class:`ImageSource` interface.

The images become one uint8 tensor (N, C, H, W) (no copy for grey images; one copy for RGB, made once).
Batches are gathered with one ``index_select`` per tensor: the DataLoader gets a
:class:`~components.data.sources.base.BatchIndexSampler` that yields whole index tensors (``batch_size=None``),
and the dataset returns the batch for an index tensor — no per-sample Python work. The dataset also defines
``__getitems__``, so a plain ``DataLoader(dataset, batch_size=...)`` fetches whole batches too.
Batches come in the order of ``positions``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from components.data.base import ArrayDataset, array_fingerprint
from components.data.sources.base import ImageSource, LoaderOptions
from components.data.sources.decode import resize_uint8

__all__ = ["ArraySource", "InlineLoader", "TensorBatches"]

Batch = tuple[Tensor, Tensor, Tensor]


class TensorBatches(Dataset[Batch]):
    """Map-style dataset over uint8 images (N, C, H, W) with labels (N,) and ids (N,) (int64 tensors).

    ``dataset[i]`` is one item ``(image (C, H, W), label, id)``; ``dataset[index_tensor]`` and
    ``dataset.__getitems__(indices)`` are a batch ``(images (B, C, H', W'), labels (B,), ids (B,))``, resized to
    ``image_size`` when set.
    """

    def __init__(self, images: Tensor, labels: Tensor, ids: Tensor, image_size: int | None = None) -> None:
        self.images, self.labels, self.ids, self.image_size = images, labels, ids, image_size

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitems__(self, indices: Sequence[int] | Tensor) -> Batch:
        idx = indices if isinstance(indices, Tensor) else torch.as_tensor(indices, dtype=torch.int64)
        x = self.images.index_select(0, idx)
        if self.image_size is not None:
            x = resize_uint8(x, self.image_size)
        return x, self.labels.index_select(0, idx), self.ids.index_select(0, idx)

    def __getitem__(self, index: int | Tensor) -> Batch:  # type: ignore[override]
        if isinstance(index, Tensor) and index.ndim == 1:
            return self.__getitems__(index)
        x = self.images[index]
        if self.image_size is not None:
            x = resize_uint8(x[None], self.image_size)[0]
        return x, self.labels[index], self.ids[index]


class InlineLoader(DataLoader):
    """A DataLoader whose single-process iteration is a plain loop over the sampler's index tensors.

    torch's single-process iterator adds ~10 µs of bookkeeping per batch (profiler annotations, fetcher
    dispatch), as much as gathering a batch of 512 small images; with ``num_workers=0`` this loop does the same
    fetch (``dataset[index]``, ``collate_fn``, pinning) without it. With workers, torch's iterator runs.
    """

    def __iter__(self) -> Iterator[Batch]:
        if self.num_workers > 0:
            return super().__iter__()
        return self._inline()

    def _inline(self) -> Iterator[Batch]:
        pin = self.pin_memory and torch.cuda.is_available()
        for index in self.sampler:
            batch = self.collate_fn(self.dataset[index])
            yield tuple(t.pin_memory() for t in batch) if pin else batch


class ArraySource(ImageSource):
    """An :class:`ArrayDataset` (images (N, H, W, C) uint8 in memory) as an :class:`ImageSource`.

    Images asked for at another size are resized once and kept for every later batch. ``fingerprint`` defaults to
    the array fingerprint of images, labels and ids (computed once); pass the dataset's own to skip the hashing.
    Batches are always gathered in the calling process (no DataLoader workers).
    """

    def __init__(self, dataset: ArrayDataset, name: str = "array", *, fingerprint: str | None = None) -> None:
        self.dataset = dataset
        self.name = name
        self._fingerprint = fingerprint
        self._resized: dict[int, Tensor] = {}

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def ids(self) -> np.ndarray:
        return np.asarray(self.dataset.ids, dtype=np.int64)

    @property
    def labels(self) -> np.ndarray:
        return np.asarray(self.dataset.labels, dtype=np.int64)

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self.dataset.class_names)

    @property
    def channels(self) -> int:
        return int(self.dataset.images.shape[3])

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            d = self.dataset
            self._fingerprint = array_fingerprint(d.images, self.labels, self.ids, extra="|".join(d.class_names))
        return self._fingerprint

    @functools.cached_property
    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        """(images uint8 (N, C, H, W), labels int64 (N,), ids int64 (N,)), sharing memory with the arrays."""
        with warnings.catch_warnings():  # read-only arrays (np.load mmap) are only ever read
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            images = torch.from_numpy(self.dataset.images).permute(0, 3, 1, 2).contiguous()
            labels = torch.from_numpy(np.ascontiguousarray(self.labels))
            ids = torch.from_numpy(np.ascontiguousarray(self.ids))
        return images, labels, ids

    def images_at(self, image_size: int | None) -> Tensor:
        """All images (N, C, S, S) uint8 at ``image_size`` (None: native), resized once and kept (bilinear,
        antialiased, rounded: :func:`~components.data.sources.decode.resize_uint8`)."""
        native = self.tensors[0]
        if image_size is None or tuple(native.shape[-2:]) == (image_size, image_size):
            return native
        if image_size not in self._resized:  # in chunks: the float copy of a large array would not fit
            self._resized[image_size] = torch.cat([resize_uint8(c, image_size) for c in native.split(4096)])
        return self._resized[image_size]

    def resident(self, selection: np.ndarray, image_size: int | None) -> tuple[Tensor, Tensor, Tensor]:
        """The selected items ``(images uint8 (K, C, S, S), labels (K,), ids (K,))``, gathered from memory."""
        _, labels, ids = self.tensors
        idx = torch.from_numpy(np.asarray(selection, dtype=np.int64))
        return self.images_at(image_size).index_select(0, idx), labels.index_select(0, idx), ids.index_select(0, idx)

    def _loader(self, selection: np.ndarray, opts: LoaderOptions) -> DataLoader:
        """Batches ``(images uint8 (B, C, H, W), labels (B,), ids (B,))`` in ``positions`` order (or shuffled),
        gathered in this process whatever ``workers`` asks: nothing is decoded, and shipping batches from worker
        processes only costs (each would start a Python with torch)."""
        _, labels, ids = self.tensors
        opts = dataclasses.replace(opts, workers=0)
        return opts.batched(TensorBatches(self.images_at(opts.size), labels, ids), selection, InlineLoader)
