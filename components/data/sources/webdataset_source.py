"""Images in WebDataset tar shards, streamed with the ``webdataset`` package.

A sample is a group of tar members sharing a key: an image (``png`` / ``jpg`` / ``jpeg`` / ``webp``, or ``npy``:
a uint8 (H, W[, C]) array), ``id`` (text integer) and optionally ``cls`` (text integer; absent → -1).
``len`` / ``ids`` / ``labels`` come from ``index.parquet`` (:mod:`~components.data.sources.shard_index`);
positions are index rows (shard order, then order within the shard).

``loader(positions)`` reads only the shards holding a selected item, keeps only the selected ids and decodes
only those. Shards are split across DataLoader workers (``wds.split_by_worker``; at most one worker per shard
read): with ``workers > 1`` batches from different workers interleave, so the order differs from ``positions``
(every selected item still comes exactly once — use the ids), and each worker ends with its own partial batch
(``drop_last`` drops each).
``shuffle``: shard order permuted by ``(seed, epoch)`` plus a sample shuffle buffer of ``shuffle_buffer`` encoded
samples seeded by ``(seed, epoch, worker)`` — deterministic for a given number of workers. Memory stays
bounded: tars are streamed member by member, never a whole shard decoded.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from components.data.sources.base import ImageSource, LoaderOptions, check_unique_ids, epoch_seed, worker_context
from components.data.sources.decode import check_channels, decode_image, fit_image
from components.data.sources.shard_index import IMAGE_KEYS, load_or_build_index
from components.errors import DataError

__all__ = ["ShardStream", "WebDatasetSource", "collate_items"]

Item = tuple[Tensor, int, int]
_HINT = "rewrite the shard (write_webdataset) or remove it and delete index.parquet to re-index"


def collate_items(items: list[Item]) -> tuple[Tensor, Tensor, Tensor]:
    """[(image uint8 (C, H, W), label, id)] → (images (B, C, H, W), labels (B,) int64, ids (B,) int64)."""
    images = torch.stack([it[0] for it in items])
    return images, torch.tensor([it[1] for it in items], dtype=torch.int64), torch.tensor([it[2] for it in items])


def _tar_error(exn: Exception) -> bool:
    """WebDataset error handler: a broken tar stream becomes a DataError naming the shard."""
    if isinstance(exn, DataError):
        raise exn
    raise DataError(f"cannot read WebDataset shard data ({type(exn).__name__}: {exn}); {_HINT}") from exn


def _sample_id(sample: dict) -> int:
    try:
        return int(bytes(sample["id"]).decode("ascii").strip())
    except (KeyError, UnicodeDecodeError, ValueError) as e:
        raise DataError(
            f"sample {sample.get('__key__')!r} of {sample.get('__url__')} has no integer .id; {_HINT}"
        ) from e


def _select_ids(samples: Iterator[dict], wanted: np.ndarray | None) -> Iterator[dict]:
    """Keep the samples whose id is in the sorted array ``wanted`` (all when None); sets ``sample["__id__"]``."""
    for sample in samples:
        sid = _sample_id(sample)
        if wanted is not None:
            i = int(np.searchsorted(wanted, sid))
            if i == len(wanted) or wanted[i] != sid:
                continue
        sample["__id__"] = sid
        yield sample


def _decode_samples(
    samples: Iterator[dict], channels: int, image_size: int | None, native_hw: tuple[int, int] | None
) -> Iterator[Item]:
    for sample in samples:
        name = f"{sample.get('__url__')}:{sample.get('__key__')}"
        key = next((k for k in IMAGE_KEYS if k in sample), None)
        if key is None:
            raise DataError(f"sample {name} has no image member ({', '.join(IMAGE_KEYS)}); {_HINT}")
        img = decode_image(sample[key], channels=channels, name=f"{name}.{key}", hint=_HINT)
        img = fit_image(img, image_size=image_size, native_hw=native_hw, name=f"{name}.{key}")
        label = int(bytes(sample["cls"]).decode("ascii").strip()) if "cls" in sample else -1
        yield img, label, sample["__id__"]


class ShardStream(IterableDataset[Item]):
    """The selected samples of ``urls`` (tar paths, in reading order) as ``(image (C, H, W), label, id)``.

    ``wanted``: sorted selected ids (None = every sample); ``length``: how many that is. ``shuffle_buffer`` > 0
    shuffles samples in a buffer seeded by ``(seed, epoch, worker)``.
    """

    def __init__(
        self,
        urls: list[str],
        wanted: np.ndarray | None,
        length: int,
        *,
        channels: int,
        image_size: int | None,
        native_hw: tuple[int, int] | None,
        shuffle_buffer: int = 0,
        seed: int = 0,
        epoch: int = 0,
    ) -> None:
        self.urls, self.wanted, self.length = urls, wanted, length
        self.channels, self.image_size, self.native_hw = channels, image_size, native_hw
        self.shuffle_buffer, self.seed, self.epoch = shuffle_buffer, seed, epoch

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[Item]:
        info = get_worker_info()
        worker = 0 if info is None else info.id
        shuffle = None
        if self.shuffle_buffer > 0:
            seed = epoch_seed(self.seed, self.epoch, worker)
            shuffle = wds.shuffle(self.shuffle_buffer, min(self.shuffle_buffer, 100), seed=seed)
        pipeline = wds.DataPipeline(
            wds.SimpleShardList(self.urls),
            wds.split_by_worker,
            wds.tarfile_to_samples(handler=_tar_error),
            functools.partial(_select_ids, wanted=self.wanted),
            shuffle,
            functools.partial(
                _decode_samples, channels=self.channels, image_size=self.image_size, native_hw=self.native_hw
            ),
        )
        return iter(pipeline)


class WebDatasetSource(ImageSource):
    """The samples of the ``*.tar`` shards in the folder ``path`` (see the module docstring).

    ``channels`` (1 or 3): None takes the first image's (from the index). ``class_names``: default the names the
    writer recorded, else ``"0".."K-1"``. ``shuffle_buffer``: samples held by the shuffle buffer of each worker.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        channels: int | None = None,
        class_names: Sequence[str] | None = None,
        shuffle_buffer: int = 2000,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.name = name or self.path.name
        self.index = load_or_build_index(self.path)
        self._channels = check_channels(channels)
        self.shuffle_buffer = int(shuffle_buffer)
        check_unique_ids(self.index.ids, f"WebDataset {self.path}", "rewrite the shards with one id per sample")
        recorded = self.index.meta.get("class_names")
        if class_names is not None:
            self._class_names = tuple(class_names)
        elif recorded is not None:
            self._class_names = tuple(recorded)
        else:
            self._class_names = tuple(str(i) for i in range(int(self.index.labels.max(initial=-1)) + 1))
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def ids(self) -> np.ndarray:
        return self.index.ids

    @property
    def labels(self) -> np.ndarray:
        return self.index.labels

    @property
    def class_names(self) -> tuple[str, ...]:
        return self._class_names

    @property
    def channels(self) -> int:
        if self._channels is not None:
            return self._channels
        return int(self.index.meta.get("channels", 3))

    @property
    def native_hw(self) -> tuple[int, int] | None:
        """(H, W) of the first image (from the index), or None for an empty corpus."""
        meta = self.index.meta
        return (int(meta["height"]), int(meta["width"])) if "height" in meta else None

    @property
    def shard_paths(self) -> list[Path]:
        """The shard files, in shard order."""
        return [self.path / s for s in self.index.shards]

    def fingerprint(self) -> str:
        """sha256 over the index rows and the shards' names, sizes and mtimes."""
        if self._fingerprint is None:
            h = hashlib.sha256(b"webdataset")
            for a in (self.index.shard, self.index.position, self.index.ids, self.index.labels):
                h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
            stats = self.index.meta.get("stats", {})
            h.update(repr([(s, stats.get(s)) for s in self.index.shards]).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def _loader(self, selection: np.ndarray, opts: LoaderOptions) -> DataLoader:
        """Batches ``(images uint8 (B, C, H, W), labels (B,), ids (B,))`` of the selected items, read shard by
        shard (order: see the module docstring). A stream has no per-rank batches: ``shard`` must be ``(0, 1)``."""
        if opts.shard[1] > 1:
            raise DataError(
                f"source {self.name!r} is a WebDataset stream, which distributed training (train.nproc > 1) cannot "
                "cut into per-rank batches yet; train it with train.nproc 1, or list its images in a manifest source"
            )
        everything = len(selection) == len(self)
        shards = np.unique(self.index.shard[selection])  # sorted: shard order
        if opts.shuffle:
            shards = np.random.default_rng(epoch_seed(opts.seed, opts.epoch)).permutation(shards)
        urls = [str(self.path / self.index.shards[s]) for s in shards]
        stream = ShardStream(
            urls,
            None if everything else np.sort(self.index.ids[selection]),
            len(selection),
            channels=self.channels,
            image_size=opts.size,
            native_hw=self.native_hw if opts.size is None else None,
            shuffle_buffer=self.shuffle_buffer if opts.shuffle else 0,
            seed=opts.seed,
            epoch=opts.epoch,
        )
        n_workers = min(int(opts.workers), len(urls))
        return DataLoader(
            stream,
            batch_size=opts.batch_size,
            collate_fn=collate_items,
            num_workers=n_workers,
            pin_memory=opts.pin_memory,
            multiprocessing_context=worker_context(n_workers),
            drop_last=opts.drop_last,
        )

    def __repr__(self) -> str:
        return f"WebDatasetSource({str(self.path)!r}, items={len(self)}, shards={len(self.index.shards)})"
