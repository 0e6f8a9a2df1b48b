"""Small real corpora on disk for the source tests, and a helper that drains a loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from components.data.sources.base import ImageSource


def images(n: int, size: tuple[int, int] = (6, 5), channels: int = 1, seed: int = 0) -> np.ndarray:
    """(n, H, W, C) uint8 random images, every one different."""
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 256, (n, *size, channels), dtype=np.uint8)
    out[:, 0, 0, 0] = np.arange(n) % 256  # distinct even if the generator repeated
    return out


def save_png(path: Path, img: np.ndarray) -> Path:
    """Write (H, W, C) uint8 as a PNG (grey for C = 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img[:, :, 0] if img.shape[2] == 1 else img).save(path)
    return path


def chw(img: np.ndarray) -> torch.Tensor:
    """(H, W, C) numpy → (C, H, W) tensor."""
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))


def drain(source: ImageSource, positions=None, **loader_kw) -> tuple[list[int], dict[int, tuple[torch.Tensor, int]]]:
    """(ids in yielded order, {id: (image (C, H, W), label)}) of one pass; checks the batch dtypes and shapes."""
    loader_kw.setdefault("batch_size", 4)
    order: list[int] = []
    items: dict[int, tuple[torch.Tensor, int]] = {}
    for x, y, i in source.loader(positions, **loader_kw):
        assert x.dtype == torch.uint8 and x.ndim == 4 and y.dtype == torch.int64 and i.dtype == torch.int64
        assert len(x) == len(y) == len(i) and x.shape[1] == source.channels
        for img, label, sid in zip(x, y.tolist(), i.tolist()):
            order.append(sid)
            items[sid] = (img, label)
    return order, items
