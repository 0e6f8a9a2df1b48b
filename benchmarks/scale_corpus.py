"""A synthetic labelled corpus of any size as WebDataset shards, for the scale benchmark (``bench scale``).

Item ``i`` is base image ``perm[i mod M]`` (``perm``: a permutation of the M base images drawn from ``seed``),
resized to ``image_size``, shifted by up to ±2 px (zero fill), flipped horizontally with probability 1/2, and
given gaussian noise (σ = 8 grey levels); its id is ``i`` and its label the base image's. Generated in batches,
vectorised in torch, each batch from its own generator seeded by ``(seed, batch)``, and written with
:func:`components.data.sources.write_webdataset`. Built once: a folder whose ``index.parquet`` holds ``items``
rows and whose ``corpus.json`` records the same parameters is returned as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from components.data.base import array_fingerprint
from components.data.batches import augment_batch
from components.data.sources import WebDatasetSource, write_webdataset
from components.data.sources.decode import resize_uint8
from components.data.sources.shard_index import INDEX_NAME
from components.errors import DataError

__all__ = ["CORPUS_FILE", "build_scale_corpus"]

CORPUS_FILE = "corpus.json"
VERSION = 1
_BATCH = 4096
_NOISE_SIGMA = 8.0
_SHIFT = 2


def _corpus_params(
    items: int, base_images: np.ndarray, base_labels: np.ndarray, image_size: int, shard_size: int, seed: int, fmt: str
) -> dict:
    return {
        "version": VERSION,
        "items": int(items),
        "image_size": int(image_size),
        "shard_size": int(shard_size),
        "seed": int(seed),
        "image_format": fmt,
        "base": array_fingerprint(base_images, np.asarray(base_labels, dtype=np.int64)),
    }


def _cached(out_dir: Path, params: dict) -> WebDatasetSource | None:
    meta = out_dir / CORPUS_FILE
    if not (out_dir / INDEX_NAME).is_file() or not meta.is_file():
        return None
    try:
        if json.loads(meta.read_text()) != params:
            return None
        source = WebDatasetSource(out_dir)
    except (ValueError, DataError):
        return None
    return source if len(source) == params["items"] else None


def _batches(
    items: int, base: torch.Tensor, labels: np.ndarray, perm: np.ndarray, seed: int, on_progress: Callable | None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(images uint8 (B, S, S, C), labels (B,), ids (B,)) batches of the corpus; ``base``: (M, C, S, S) uint8."""
    m = len(perm)
    for b, start in enumerate(range(0, items, _BATCH)):
        ids = np.arange(start, min(items, start + _BATCH), dtype=np.int64)
        src = perm[ids % m]
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, b]).generate_state(1)[0]))
        x = base.index_select(0, torch.from_numpy(src)).float()
        x = augment_batch(x, crop_padding=_SHIFT, hflip=True, generator=g)
        x = x + _NOISE_SIGMA * torch.randn(x.shape, generator=g)
        images = x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
        yield images, labels[src], ids
        if on_progress is not None:
            on_progress(int(ids[-1]) + 1, items)


def build_scale_corpus(
    out_dir: Path,
    items: int,
    *,
    base_images: np.ndarray,
    base_labels: np.ndarray,
    image_size: int = 16,
    shard_size: int = 10000,
    seed: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
    image_format: str = "png",
) -> WebDatasetSource:
    """The corpus of ``items`` augmented copies of ``base_images`` (M, H, W, C) uint8 with ``base_labels`` (M,).

    Shards of ``shard_size`` samples in ``out_dir`` (ids 0..items-1); reused when ``out_dir`` already holds the
    same corpus. ``on_progress(done, items)`` is called after every generated batch.
    """
    base_images = np.asarray(base_images)
    base_labels = np.asarray(base_labels, dtype=np.int64)
    if base_images.dtype != np.uint8 or base_images.ndim != 4 or len(base_images) == 0:
        raise DataError(
            f"base_images must be a non-empty uint8 (M, H, W, C) array, got {base_images.dtype} {base_images.shape}"
        )
    if base_labels.shape != (len(base_images),):
        raise DataError(f"base_labels must have shape ({len(base_images)},), got {base_labels.shape}")
    if items < 1 or image_size < 1:
        raise DataError(f"items and image_size must be positive, got {items} and {image_size}")
    out_dir = Path(out_dir)
    params = _corpus_params(items, base_images, base_labels, image_size, shard_size, seed, image_format)
    cached = _cached(out_dir, params)
    if cached is not None:
        return cached
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CORPUS_FILE).unlink(missing_ok=True)  # written last: a half-built corpus is never reused
    base = resize_uint8(torch.from_numpy(base_images).permute(0, 3, 1, 2).contiguous(), image_size)
    perm = np.random.default_rng(seed).permutation(len(base_images))
    batches = _batches(items, base, base_labels, perm, seed, on_progress)
    source = write_webdataset(out_dir, batches, shard_size=shard_size, image_format=image_format)
    (out_dir / CORPUS_FILE).write_text(json.dumps(params, indent=1))
    return source
