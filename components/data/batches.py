"""Vectorised batching and augmentation on whole uint8 tensors.

The selection lives in memory as one uint8 tensor (N, C, H, W), pinned when
CUDA is used, and batches are gathered by index and copied with
``non_blocking=True``; augmentation runs on the batch on its device. No
per-sample Python work.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["ImageTensor", "augment_batch", "iterate_batches", "resize_images", "shard_bounds", "to_image_tensor"]


@dataclass
class ImageTensor:
    """images: (N, C, H, W) uint8 on CPU (pinned when ``pinned``) or resident on a GPU; labels: (N,) int64, on the
    same device."""

    images: Tensor
    labels: Tensor
    pinned: bool = False

    def __len__(self) -> int:
        return self.images.shape[0]


def shard_bounds(n: int, world: int, rank: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of rank ``rank``'s part of a batch of ``n`` cut into ``world`` contiguous parts whose sizes
    differ by at most one (the first ``n % world`` parts hold one more), as :func:`torch.tensor_split` cuts."""
    q, r = divmod(n, world)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def resize_images(images: np.ndarray, size: int | None) -> np.ndarray:
    """(N, H, W, C) uint8 → (N, size, size, C) uint8 (bilinear), or unchanged if size is None."""
    if size is None or images.shape[1:3] == (size, size):
        return images
    t = torch.from_numpy(images).permute(0, 3, 1, 2).float()
    out = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return out.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


def to_image_tensor(images: np.ndarray, labels: np.ndarray, pin: bool = False) -> ImageTensor:
    """(N, H, W, C) uint8 + (N,) labels → :class:`ImageTensor` (channels first)."""
    t = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous()
    lab = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    if pin:
        t, lab = t.pin_memory(), lab.pin_memory()
    return ImageTensor(t, lab, pin)


def iterate_batches(
    data: ImageTensor,
    batch_size: int,
    device: torch.device,
    *,
    shuffle: bool,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
    shard: tuple[int, int] = (0, 1),
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield (images float32 in [0, 1] (B, C, H, W), labels (B,)) on ``device``.

    Shuffled batches are gathered (a copy, pinned again when the source is pinned); in-order batches are slices,
    views that keep the source's pinned memory. A source resident on the accelerator is gathered there.
    ``shard = (rank, world)``: each batch of ``batch_size`` (the global batch, the same permutation on every rank)
    is cut into ``world`` contiguous parts (:func:`shard_bounds`) and only part ``rank`` is read and yielded.
    """
    n = len(data)
    stop = n - (n % batch_size) if drop_last and n >= batch_size else n
    resident = data.images.device.type != "cpu"  # gathered where it lives, whatever index ``device`` names
    non_blocking = data.pinned and device.type == "cuda"
    if shuffle:
        order = torch.randperm(n, generator=generator)
        order = order.to(data.images.device) if resident else order
    rank, world = shard
    for first in range(0, stop, batch_size):
        lo, hi = shard_bounds(min(batch_size, n - first), world, rank)
        start, stop_here = first + lo, first + hi
        if shuffle:
            idx = order[start:stop_here]
            x, y = data.images.index_select(0, idx), data.labels.index_select(0, idx)
            if non_blocking:
                x, y = x.pin_memory(), y.pin_memory()
        else:
            x, y = data.images[start:stop_here], data.labels[start:stop_here]
        yield x.to(device, non_blocking=non_blocking).float().div_(255.0), y.to(device, non_blocking=non_blocking)


def augment_batch(
    x: Tensor,
    *,
    crop_padding: int,
    hflip: bool,
    generator: torch.Generator | None = None,
    rows: tuple[int, int] | None = None,
) -> Tensor:
    """Random crop with zero padding and optional horizontal flip. ``x``: (B, C, H, W).

    Per-sample offsets are drawn on CPU from ``generator`` (reproducible across
    devices) and applied with one gather. ``rows = (start, total)``: ``x`` is rows
    ``start .. start + B`` of a batch of ``total`` (one rank's part of a global batch): the draws are made for all
    ``total`` rows, as one process would, and this part's are applied.
    """
    b, _, h, w = x.shape
    start, total = rows if rows is not None else (0, b)
    part = slice(start, start + b)
    if crop_padding > 0:
        p = crop_padding
        padded = F.pad(x, (p, p, p, p))
        off = torch.randint(0, 2 * p + 1, (2, total), generator=generator)[:, part].to(x.device)
        iy = off[0][:, None] + torch.arange(h, device=x.device)  # (B, H)
        ix = off[1][:, None] + torch.arange(w, device=x.device)  # (B, W)
        bi = torch.arange(b, device=x.device)[:, None, None]
        x = padded.permute(0, 2, 3, 1)[bi, iy[:, :, None], ix[:, None, :]].permute(0, 3, 1, 2)
    if hflip:
        flip = (torch.rand(total, generator=generator)[part] < 0.5).to(x.device)
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return x.contiguous()
