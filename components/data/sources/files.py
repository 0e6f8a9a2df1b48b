"""What the sources of one image file per item (a manifest, a folder) share: the path table, decoding in
DataLoader workers, channels and native size from the first image, the fingerprint of the files.

Batches come in the order of ``positions`` (or of the seeded permutation) for any number of workers: the
sampler draws whole index tensors in the main process and each worker decodes whole batches.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from components.data.sources.base import ImageSource, LoaderOptions, check_unique_ids
from components.data.sources.decode import check_channels, decode_image, fit_image, image_info
from components.errors import DataError

__all__ = ["FileItems", "FileSource", "PathTable"]

Batch = tuple[Tensor, Tensor, Tensor]


class PathTable:
    """N file paths packed in one UTF-8 byte array plus offsets (compact, and no per-path Python objects for
    forked workers to copy); relative paths are taken relative to ``root``."""

    def __init__(self, paths: Sequence[str], root: Path) -> None:
        encoded = [p.encode("utf-8") for p in paths]
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self.offsets[1:])
        self.blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.root = root

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def relative(self, i: int) -> str:
        """The path of item ``i`` as given (relative to ``root`` unless absolute)."""
        return self.blob[self.offsets[i] : self.offsets[i + 1]].tobytes().decode("utf-8")

    def __getitem__(self, i: int) -> Path:
        """The path of item ``i`` (absolute paths unchanged, relative ones under ``root``)."""
        return self.root / self.relative(i)


class FileItems(Dataset[Batch]):
    """Map-style dataset decoding the files of a :class:`PathTable`.

    ``dataset[i]``: ``(image uint8 (C, H, W), label, id)``; ``dataset[index_tensor]`` / ``__getitems__``: a batch
    ``(images uint8 (B, C, H, W), labels int64 (B,), ids int64 (B,))``.
    """

    def __init__(
        self,
        paths: PathTable,
        labels: Tensor,
        ids: Tensor,
        *,
        channels: int,
        image_size: int | None,
        native_hw: tuple[int, int] | None,
        hint: str,
    ) -> None:
        self.paths, self.labels, self.ids = paths, labels, ids
        self.channels, self.image_size, self.native_hw, self.hint = channels, image_size, native_hw, hint

    def __len__(self) -> int:
        return len(self.paths)

    def image(self, i: int) -> Tensor:
        """Item ``i`` decoded: uint8 (C, H, W), resized or checked against the native size."""
        path = self.paths[i]
        img = decode_image(path, channels=self.channels, name=str(path), hint=self.hint)
        return fit_image(img, image_size=self.image_size, native_hw=self.native_hw, name=str(path))

    def __getitems__(self, indices: Sequence[int] | Tensor) -> Batch:
        idx = torch.as_tensor(indices, dtype=torch.int64)
        images = torch.stack([self.image(i) for i in idx.tolist()]) if len(idx) else torch.empty(0, dtype=torch.uint8)
        return images, self.labels.index_select(0, idx), self.ids.index_select(0, idx)

    def __getitem__(self, index: int | Tensor) -> Batch:  # type: ignore[override]
        if isinstance(index, Tensor) and index.ndim == 1:
            return self.__getitems__(index)
        i = int(index)
        return self.image(i), self.labels[i], self.ids[i]


class FileSource(ImageSource):
    """A source of one image file per item. Subclasses build the path list, ids and labels.

    ``channels`` (1 or 3) is given, or decided from the first image (grey modes → 1, others → 3). The native
    size (for ``image_size=None``) is the first image's; every other image must match it. ``hint`` is appended to
    the error of an undecodable file (how to fix it in this kind of source).
    """

    def __init__(
        self,
        name: str,
        paths: PathTable,
        ids: np.ndarray,
        labels: np.ndarray,
        class_names: Sequence[str],
        *,
        channels: int | None,
        hint: str,
        where: str,
    ) -> None:
        self.name = name
        self.paths = paths
        self._ids = np.array(ids, dtype=np.int64)  # own, writable copies (torch shares them with workers)
        self._labels = np.array(labels, dtype=np.int64)
        self._class_names = tuple(class_names)
        self._channels = check_channels(channels)
        self.hint = hint
        self._fingerprint: str | None = None
        check_unique_ids(self._ids, where, "give every row its own id")
        if len(self._ids) == 0:
            raise DataError(f"{where} lists no images; add images to it")

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    @property
    def class_names(self) -> tuple[str, ...]:
        return self._class_names

    @functools.cached_property
    def _first_image(self) -> tuple[int, int, int]:
        path = self.paths[0]
        return image_info(path, name=str(path), hint=self.hint)

    @property
    def channels(self) -> int:
        return self._channels if self._channels is not None else self._first_image[0]

    @property
    def native_hw(self) -> tuple[int, int]:
        """(H, W) of the first image: the size every image must have when ``image_size`` is None."""
        return self._first_image[1], self._first_image[2]

    def fingerprint(self) -> str:
        """sha256 over the index (paths, ids, labels, class names) and every file's size and mtime (once)."""
        if self._fingerprint is None:
            h = hashlib.sha256(type(self).__name__.encode())
            for a in (self.paths.blob, self.paths.offsets, self._ids, self._labels):
                h.update(np.ascontiguousarray(a).tobytes())
            h.update("\0".join(self._class_names).encode())
            stats = np.empty((len(self), 2), dtype=np.int64)
            for i in range(len(self)):
                path = self.paths[i]
                try:
                    st = os.stat(path)
                except OSError as e:
                    raise DataError(f"cannot read image file {path} ({e.strerror}); {self.hint}") from e
                stats[i] = st.st_size, st.st_mtime_ns
            h.update(stats.tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def _loader(self, selection: np.ndarray, opts: LoaderOptions) -> DataLoader:
        """Batches ``(images uint8 (B, C, H, W), labels (B,), ids (B,))`` in ``positions`` order (or shuffled),
        decoded in ``workers`` processes."""
        items = FileItems(
            self.paths,
            torch.from_numpy(self._labels),
            torch.from_numpy(self._ids),
            channels=self.channels,
            image_size=opts.size,
            native_hw=self.native_hw if opts.size is None else None,
            hint=self.hint,
        )
        return opts.batched(items, selection)
