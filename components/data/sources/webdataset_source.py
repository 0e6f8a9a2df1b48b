"""Images in WebDataset tar shards, read by seeking to the selected samples.

A sample is a group of tar members sharing a key: an image (``png`` / ``jpg`` / ``jpeg`` / ``webp``, or ``npy``:
a uint8 (H, W[, C]) array), ``id`` (text integer) and optionally ``cls`` (text integer; absent → -1).
``len`` / ``ids`` / ``labels`` come from ``index.parquet`` (:mod:`~components.data.sources.shard_index`);
positions are index rows (shard order, then order within the shard).

``loader(positions)`` reads the selected items in storage order (shard by shard, and within a shard by byte
offset, whatever the order of ``positions``): only the shards holding a selected item are opened, and in each only
the selected samples' members are read — the reader seeks to each sample's offset from the index and reads its
image member; labels and ids come from the index. So a 10% selection reads ~10% of the bytes, not every shard
through. Shards are split across DataLoader workers (shard ``k`` of the reading order goes to worker
``k mod workers``; at most one worker per shard read): with ``workers > 1`` batches from different workers
interleave, so the order differs from storage order (every selected item still comes exactly once — use the ids),
and each worker ends with its own partial batch (``drop_last`` drops each).
``shuffle``: shard order permuted by ``(seed, epoch)`` plus a sample shuffle buffer of ``shuffle_buffer`` encoded
samples seeded by ``(seed, epoch, worker)`` — deterministic for a given number of workers. Memory stays
bounded: one sample's bytes at a time (plus the shuffle buffer), never a whole shard.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from components.data.sources.base import ImageSource, LoaderOptions, check_unique_ids, epoch_seed, worker_context
from components.data.sources.catalog import register_source
from components.data.sources.decode import check_channels, decode_image, fit_image
from components.data.sources.shard_index import IMAGE_KEYS, INDEX_NAME, load_or_build_index, split_member_name
from components.errors import DataError

__all__ = ["ShardPick", "ShardStream", "WebDatasetSource", "collate_items", "read_samples"]

Item = tuple[Tensor, int, int]
#: an encoded sample: (its name ``shard:member``, the image member's bytes, label, id)
Encoded = tuple[str, bytes, int, int]
_HINT = "rewrite the shard (write_webdataset) or remove it and delete index.parquet to re-index"


def collate_items(items: list[Item]) -> tuple[Tensor, Tensor, Tensor]:
    """[(image uint8 (C, H, W), label, id)] → (images (B, C, H, W), labels (B,) int64, ids (B,) int64)."""
    images = torch.stack([it[0] for it in items])
    return images, torch.tensor([it[1] for it in items], dtype=torch.int64), torch.tensor([it[2] for it in items])


@dataclass(frozen=True)
class ShardPick:
    """The selected samples of one shard, in storage order: their byte ``offsets`` (each sample's first member
    header, from the index), ``labels`` and ``ids`` ((n,) int64 each)."""

    url: str
    offsets: np.ndarray
    labels: np.ndarray
    ids: np.ndarray


def _image_member(tf: tarfile.TarFile, offset: int, where: str) -> tuple[str, bytes]:
    """(member name, bytes) of the image of the sample whose first member header is at ``offset``."""
    key = None
    tf.fileobj.seek(offset)
    while True:
        try:
            ti = tarfile.TarInfo.fromtarfile(tf)
        except tarfile.HeaderError as e:
            raise DataError(f"{where} does not match its {INDEX_NAME} at byte {offset} ({e}); {_HINT}") from e
        parts = split_member_name(ti.name) if ti.isreg() else None
        if parts is None or (key is not None and parts[0] != key):
            raise DataError(
                f"{where} does not match its {INDEX_NAME} at byte {offset} (sample {key!r} has no image); {_HINT}"
            )
        key = parts[0]
        if parts[1] in IMAGE_KEYS:
            tf.fileobj.seek(ti.offset_data)
            data = tf.fileobj.read(ti.size)
            if len(data) != ti.size:
                raise DataError(f"member {ti.name} of {where} is cut short; {_HINT}")
            return ti.name, data
        tf.fileobj.seek(tf.offset)  # past this member's data: the next header


def read_samples(picks: Sequence[ShardPick]) -> Iterator[Encoded]:
    """The selected samples of ``picks``, shard after shard, each read by seeking to its offset (only its image
    member's bytes are read)."""
    for pick in picks:
        try:
            with tarfile.open(pick.url, "r:") as tf:
                for offset, label, sid in zip(pick.offsets.tolist(), pick.labels.tolist(), pick.ids.tolist()):
                    name, data = _image_member(tf, offset, pick.url)
                    yield f"{pick.url}:{name}", data, label, sid
        except (tarfile.TarError, OSError, EOFError) as e:
            raise DataError(f"cannot read WebDataset shard {pick.url} ({type(e).__name__}: {e}); {_HINT}") from e


def _decode_samples(
    samples: Iterator[Encoded], channels: int, image_size: int | None, native_hw: tuple[int, int] | None
) -> Iterator[Item]:
    for name, data, label, sid in samples:
        img = decode_image(data, channels=channels, name=name, hint=_HINT)
        yield fit_image(img, image_size=image_size, native_hw=native_hw, name=name), label, sid


class ShardStream(IterableDataset[Item]):
    """The selected samples of ``picks`` (one per shard, in reading order) as ``(image (C, H, W), label, id)``.

    ``shuffle_buffer`` > 0 shuffles samples in a buffer seeded by ``(seed, epoch, worker)``.
    """

    def __init__(
        self,
        picks: list[ShardPick],
        *,
        channels: int,
        image_size: int | None,
        native_hw: tuple[int, int] | None,
        shuffle_buffer: int = 0,
        seed: int = 0,
        epoch: int = 0,
    ) -> None:
        self.picks, self.length = picks, sum(len(p.ids) for p in picks)
        self.channels, self.image_size, self.native_hw = channels, image_size, native_hw
        self.shuffle_buffer, self.seed, self.epoch = shuffle_buffer, seed, epoch

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[Item]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        samples: Iterator[Encoded] = read_samples(self.picks[worker::workers])
        if self.shuffle_buffer > 0:
            seed = epoch_seed(self.seed, self.epoch, worker)
            samples = wds.shuffle(self.shuffle_buffer, min(self.shuffle_buffer, 100), seed=seed)(samples)
        return _decode_samples(samples, self.channels, self.image_size, self.native_hw)


@register_source("webdataset")
class WebDatasetSource(ImageSource):
    """The samples of the ``*.tar`` shards in the folder ``path`` (see the module docstring).

    ``channels`` (1 or 3): None takes the first image's (from the index). ``class_names``: default the names the
    writer recorded, else ``"0".."K-1"``. ``shuffle_buffer``: samples held by the shuffle buffer of each worker.
    """

    path_form = "a folder of WebDataset .tar shards"

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
        selection = np.asarray(selection, dtype=np.int64)
        selection = selection[np.lexsort((self.index.offset[selection], self.index.shard[selection]))]
        shards, starts = np.unique(self.index.shard[selection], return_index=True)  # sorted: shard order
        picks = []
        for s, rows in zip(shards.tolist(), np.split(selection, starts[1:])):
            url = str(self.path / self.index.shards[s])
            picks.append(ShardPick(url, self.index.offset[rows], self.index.labels[rows], self.index.ids[rows]))
        if opts.shuffle:
            picks = [picks[k] for k in np.random.default_rng(epoch_seed(opts.seed, opts.epoch)).permutation(len(picks))]
        stream = ShardStream(
            picks,
            channels=self.channels,
            image_size=opts.size,
            native_hw=self.native_hw if opts.size is None else None,
            shuffle_buffer=self.shuffle_buffer if opts.shuffle else 0,
            seed=opts.seed,
            epoch=opts.epoch,
        )
        n_workers = min(int(opts.workers), len(picks))
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
